package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/enidnet/enid/cniinstall"
)

func newInstallCNICmd() *cobra.Command {
	var (
		binDir, confDir  string
		plugin, conflist string
	)
	cmd := &cobra.Command{
		Use:   "install-cni",
		Short: "Install the enid-cni plugin (and optionally its network list) on the host",
		Long: `Install the enid-cni plugin binary into the container runtime's CNI bin dir,
as the DaemonSet's init container does, with no shell in the image.

Each file is written to a hidden temporary file in its destination directory,
fsynced, and renamed into place: the runtime never execs a half-written
binary, and a CNI call running the old binary keeps running. A file that
already holds the right content and mode is left untouched, so running this
again (every agent restart) changes nothing; temporary files of an
interrupted earlier run are removed. Both directories must exist.

The network list is not installed by default: the agent writes it when it
first serves ("enid run --cni-conf-dir"), because the kubelet keeps the node
NotReady until a list exists, and that is the gate that keeps pods off a node
whose agent cannot serve yet. An agent restart leaves the list in place, so
the node does not flap. --conflist FILE installs a list now as well (a node
without the agent, or a test).`,
		Example: `  # the init container (host dirs mounted under /host)
  enid install-cni --bin-dir /host/opt/cni/bin

  # on a node, plugin and list at once
  enid install-cni --plugin ./enid-cni --conflist examples/cni/10-enid.conflist`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if plugin == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find the enid binary to locate enid-cni beside it: %w; pass --plugin", err)
				}
				plugin = filepath.Join(filepath.Dir(exe), cniinstall.PluginName)
			}
			files := []cniinstall.File{cniinstall.Plugin(plugin, binDir)}
			// The binary first: a list must never name a plugin that is
			// not there yet.
			if conflist != "" {
				files = append(files, cniinstall.Conflist(conflist, confDir))
			}
			for _, f := range files {
				ch, err := cniinstall.Ensure(f)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "enid install-cni:", ch)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&binDir, "bin-dir", cniinstall.DefaultBinDir, "the container runtime's CNI bin dir (as mounted here)")
	fl.StringVar(&confDir, "conf-dir", cniinstall.DefaultConfDir, "the container runtime's CNI conf dir (as mounted here), for --conflist")
	fl.StringVar(&plugin, "plugin", "", "the enid-cni binary to install (default: enid-cni beside this enid binary)")
	fl.StringVar(&conflist, "conflist", "", "also install this network list now, after the plugin (the image carries "+cniinstall.ImageConflist+
		"; by default none: the agent writes it once it serves)")
	return cmd
}

package main

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time (-ldflags "-X main.version=v0.1.0").
var version = "dev"

// revision is the commit, set at link time by the image builder (-X
// main.revision=...), which builds with -buildvcs=false: Go stamps no VCS
// information in a git worktree, and whether it does may not decide the
// image's digest. Without it, the Go command's vcs.revision is shown.
var revision = ""

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "enid",
		Short: "enid gives Kubernetes pods VPC addresses from Alibaba Cloud ENIs, declaratively",
		Long: `enid is a node agent that gives Kubernetes pods VPC-native addresses from
Alibaba Cloud elastic network interfaces (ENIs).

Desired state is files on the node (the config and one entry per pod
attachment, written by the enid-cni plugin); observed state comes from the
ECS/VPC API and the kernel. A pure planner diffs the two; one loop applies
the plan and publishes a status per pod. "enid plan" shows what the agent
would do, like "terraform plan".`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newPlanCmd(), newStatusCmd(), newDemoCmd(), newVersionCmd())
	root.AddCommand(newSimCmd(), newSweepCmd(), newInstallCNICmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print enid's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rev := ""
			if revision != "" {
				rev = " (" + revision + ")"
			} else if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = " (" + s.Value + ")"
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enid %s%s %s %s/%s\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

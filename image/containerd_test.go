package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/testbed/ctrtest"
)

// ctrNamespace is the containerd namespace the test imports into: the
// kubelet's is k8s.io; ours cannot meet a real node's images.
const ctrNamespace = "enid-image-test"

// TestImageInContainerd imports the tarball into a real containerd with
// `ctr images import` (as docs/deploy.md tells a user to), runs
// `enid version` from it and wants the tag's version, then runs
// `enid install-cni` from it into a host dir, twice, as the DaemonSet's
// init container does: the plugin there is the image's, executable, and
// the second run changes nothing.
func TestImageInContainerd(t *testing.T) {
	c := ctrtest.Start(t, ctrNamespace)
	res, tarPath := buildOnce(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := res.tag.String()
	out, err := c.Run(ctx, "images", "import", tarPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ctr images import: %s", strings.TrimSpace(out))
	if out, err = c.Run(ctx, "images", "ls", "-q"); err != nil || !strings.Contains(out, ref) {
		t.Fatalf("after the import, ctr images ls says %q (err %v), want %s", out, err, ref)
	}
	runArgs := func(extra ...string) []string {
		return append([]string{"run", "--rm", "--runc-root", c.RuncRoot}, extra...)
	}
	out, err = c.Run(ctx, append(runArgs(), ref, "enid-version", "enid", "version")...)
	if err != nil {
		t.Fatal(err)
	}
	if want := "enid " + res.src.version + " "; !strings.HasPrefix(out, want) {
		t.Errorf("enid version in the image printed %q, want it to start with %q (the tag %s)", out, want, ref)
	}
	if rev := res.src.revision; rev != "" && !strings.Contains(out, "("+rev+")") {
		t.Errorf("enid version in the image printed %q, want the commit %s", out, rev)
	}

	host := t.TempDir()
	bin, conf := filepath.Join(host, "opt-cni-bin"), filepath.Join(host, "etc-cni-net.d")
	for _, d := range []string{bin, conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mounts := []string{
		"--mount", "type=bind,src=" + bin + ",dst=/host/opt/cni/bin,options=rbind:rw",
		"--mount", "type=bind,src=" + conf + ",dst=/host/etc/cni/net.d,options=rbind:rw",
	}
	// The init container's command, as examples/kubernetes/daemonset.yaml
	// has it.
	install := []string{"enid", "install-cni", "--bin-dir=/host/opt/cni/bin"}
	for i, want := range []string{"installed", "unchanged"} {
		out, err := c.Run(ctx, append(append(runArgs(mounts...), ref, fmt.Sprintf("install-cni-%d", i)), install...)...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, want+" /host/opt/cni/bin/enid-cni") {
			t.Errorf("run %d of install-cni: %q, want %s", i+1, out, want)
		}
	}
	got, err := os.ReadFile(filepath.Join(bin, "enid-cni"))
	if err != nil {
		t.Fatal(err)
	}
	var inImage []byte
	for _, f := range layerFiles(t, tarPath) {
		if f.name == "usr/local/bin/enid-cni" {
			inImage = f.data
		}
	}
	if !bytes.Equal(got, inImage) {
		t.Errorf("the installed plugin (%d bytes) is not the image's (%d bytes)", len(got), len(inImage))
	}
	// The plugin runs on the host: with no CNI_COMMAND it prints its
	// version support, as libcni's VERSION does.
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "enid-cni"))
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	cmd.Stdin = strings.NewReader(`{"cniVersion": "1.0.0"}`)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "supportedVersions") {
		t.Errorf("the installed plugin, run as CNI VERSION: %v: %s", err, out)
	}
	if entries, _ := os.ReadDir(conf); len(entries) != 0 {
		t.Errorf("install-cni wrote %d files in the conf dir: the network list is the agent's to write once it serves", len(entries))
	}
	if out, err := c.Run(ctx, "containers", "ls", "-q"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("containers left: %q (err %v)", out, err)
	}
}

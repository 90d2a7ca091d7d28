package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs enid with args and returns its output and error.
func runCLI(args ...string) (string, error) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestInstallCNICommand: the command installs the plugin and, with
// --conflist, the list after it; run again it changes nothing.
func TestInstallCNICommand(t *testing.T) {
	dir := t.TempDir()
	src, bin, conf := filepath.Join(dir, "enid-cni"), filepath.Join(dir, "bin"), filepath.Join(dir, "net.d")
	for _, d := range []string{bin, conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(src, []byte("\x7fELF plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"install-cni", "--plugin", src, "--bin-dir", bin, "--conf-dir", conf, "--conflist", "../../examples/cni/10-enid.conflist"}
	for _, want := range []string{"installed", "unchanged"} {
		out, err := runCLI(args...)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], want+" "+filepath.Join(bin, "enid-cni")) ||
			!strings.Contains(lines[1], want+" "+filepath.Join(conf, "10-enid.conflist")) {
			t.Errorf("got %q, want the plugin then the list %s", out, want)
		}
	}
}

// TestRunRefusesABadCNIConfDir: `enid run --cni-conf-dir` checks the list
// and the dir before anything starts, and names the path.
func TestRunRefusesABadCNIConfDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "net.d")
	_, err := runCLI("run", "--cni-conf-dir", missing, "--cni-conflist", "../../examples/cni/10-enid.conflist")
	if err == nil || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Errorf("got %v, want an error saying %s does not exist", err, missing)
	}
	_, err = runCLI("run", "--cni-conf-dir", t.TempDir(), "--cni-conflist", "/nonexistent/10-enid.conflist")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/10-enid.conflist") {
		t.Errorf("got %v, want an error naming the missing list", err)
	}
}

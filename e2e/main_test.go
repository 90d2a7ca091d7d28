package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binDir holds the enid and enid-cni binaries built once by TestMain; the
// tests run them as subprocesses, as a node would.
var binDir string //nolint:gochecknoglobals // set once by TestMain before any test runs, read-only after

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		// Every test needs root and says so itself (roottest.Need): no
		// point building binaries nobody runs.
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "enid-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, pkg := range []string{"github.com/enidnet/enid/cmd/enid", "github.com/enidnet/enid/cmd/enid-cni"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, filepath.Base(pkg)), pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

// A cluster's cgroup parents are left out of HostState while its directory
// exists (it runs, maybe in another process) and counted once it is gone
// (they were left behind).
func TestClusterRunningFollowsTheDirectory(t *testing.T) {
	dir, err := os.MkdirTemp("", "enidct-")
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Base(dir)
	for _, cg := range []string{base, base + "-n2", base + "-n12"} {
		if !clusterRunning(cg) {
			t.Errorf("clusterRunning(%q) = false while %s exists", cg, dir)
		}
	}
	for _, cg := range []string{base + "-nx", base + "x", base + "-n2-n3", "enidct-gone"} {
		if clusterRunning(cg) {
			t.Errorf("clusterRunning(%q) = true: no cluster directory has that name", cg)
		}
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	for _, cg := range []string{base, base + "-n2"} {
		if clusterRunning(cg) {
			t.Errorf("clusterRunning(%q) = true after %s was removed", cg, dir)
		}
	}
}

package kube_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientGoFence keeps client-go where it belongs: the pure and small
// packages (planner, desired, observed), the CNI plugin and the loop
// itself depend on nothing from k8s.io; only kube and cmd/enid, which wires
// it, do.
func TestClientGoFence(t *testing.T) {
	for _, pkg := range []string{"planner", "desired", "observed", "reconcile", "reconcile/status", "cmd/enid-cni"} {
		out, err := exec.Command("go", "list", "-deps", "github.com/enidnet/enid/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/structured-merge-diff") {
				t.Errorf("%s depends on %s", pkg, dep)
				break
			}
		}
	}
}

package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestImportFence keeps the plugin small: it must never link the cloud SDK,
// netlink, or enid's cloud and linux packages.
func TestImportFence(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"github.com/aliyun/alibaba-cloud-sdk-go",
		"github.com/vishvananda/netlink",
		"github.com/enidnet/enid/cloud",
		"github.com/enidnet/enid/linux",
		"github.com/enidnet/enid/reconcile", // the loop; reconcile/status is allowed below
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps returned %d packages; the check would prove nothing", len(deps))
	}
	for _, d := range deps {
		if d == "github.com/enidnet/enid/reconcile/status" {
			continue
		}
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("enid-cni imports %s (forbidden: %s)", d, f)
			}
		}
	}
}

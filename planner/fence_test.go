package planner_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportFence keeps the planner pure: its own imports never include
// I/O packages, and nothing it depends on, however indirectly, is the
// cloud client, the datapath, the loop, the SDK or netlink.
func TestImportFence(t *testing.T) {
	goList := func(args ...string) []string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %v: %v\n%s", args, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, pkg := range []string{".", "./plannertest"} {
		direct := goList("-f", `{{join .Imports " "}}`, pkg)
		for _, imp := range direct {
			switch imp {
			case "os", "os/exec", "net", "net/http", "math/rand", "math/rand/v2", "syscall", "unsafe", "log", "log/slog":
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
		for _, dep := range goList("-deps", pkg) {
			for _, bad := range []string{
				"github.com/enidnet/enid/cloud", "github.com/enidnet/enid/linux", "github.com/enidnet/enid/reconcile",
				"github.com/aliyun/", "github.com/vishvananda/", "net/http",
			} {
				if dep == bad || strings.HasPrefix(dep, bad+"/") || (strings.HasSuffix(bad, "/") && strings.HasPrefix(dep, bad)) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}

package desired

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", golden, diff)
	}
}

// TestConfigErrorMessagesGolden renders the error for each invalid config
// under testdata/config/invalid, as an operator would read it.
func TestConfigErrorMessagesGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/config/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test configs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseConfig(data, NodeFacts{Zone: "cn-hangzhou-k", InstanceType: "ecs.g7.large"})
			if err == nil {
				t.Fatal("config loaded, want an error")
			}
			checkGolden(t, strings.TrimSuffix(f, ".yaml")+".golden", err.Error()+"\n")
		})
	}
}

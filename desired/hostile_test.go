package desired

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHostileConfigFiles: a FIFO (which blocks a plain open), a symlink to
// /dev/zero (which a plain read never finishes) and an oversized file as
// drop-ins, and /dev/zero as the main file: each is refused at once with a
// problem naming it, never read past the limit. A ConfigMap-style drop-in
// (a symlink into ..data) keeps working.
func TestHostileConfigFiles(t *testing.T) {
	hdr := "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\n"
	base := hdr + "eni: {vSwitches: {cn-hangzhou-k: [vsw-1]}, securityGroups: [sg-1]}\n"
	cases := []struct {
		name string
		make func(t *testing.T, dir string) string // returns the drop-in path
		want string
	}{
		{"fifo", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "70-x.yaml")
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, "not a regular file (a FIFO)"},
		{"dev-zero", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "70-x.yaml")
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "not a regular file (a device)"},
		{"huge", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "70-x.yaml")
			writeFile(t, p, hdr+"#"+strings.Repeat("x", maxConfigSize)+"\n")
			return p
		}, "file too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
			writeFile(t, src.Main, base)
			if err := os.MkdirAll(src.DropInDir, 0o755); err != nil {
				t.Fatal(err)
			}
			c.make(t, src.DropInDir)
			start := time.Now()
			_, err := LoadConfig(src, NodeFacts{})
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("LoadConfig took %s", took)
			}
			ps := strings.Join(problemsOf(t, err), "\n")
			if !strings.Contains(ps, "70-x.yaml") || !strings.Contains(ps, c.want) {
				t.Errorf("problems %q, want one naming 70-x.yaml with %q", ps, c.want)
			}
		})
	}
	t.Run("main-dev-zero", func(t *testing.T) {
		_, err := LoadConfig(ConfigSource{Main: "/dev/zero"}, NodeFacts{})
		if ps := strings.Join(problemsOf(t, err), "\n"); !strings.Contains(ps, "not a regular file") {
			t.Errorf("problems %q", ps)
		}
	})
	t.Run("configmap-symlinks", func(t *testing.T) {
		dir := t.TempDir()
		// kubelet's layout: key -> ..data/key, ..data -> ..2026_01_01...
		writeFile(t, filepath.Join(dir, "..2026_11_30", "config.yaml"), base)
		if err := os.Symlink("..2026_11_30", filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("..data/config.yaml", filepath.Join(dir, "config.yaml")); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(ConfigSource{Main: filepath.Join(dir, "config.yaml")}, NodeFacts{})
		if err != nil {
			t.Fatalf("ConfigMap layout refused: %v", err)
		}
		if cfg.ENI.SecurityGroups[0] != "sg-1" {
			t.Errorf("config not read: %+v", cfg.ENI)
		}
	})
}

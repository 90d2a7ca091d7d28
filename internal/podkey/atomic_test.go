package podkey_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/enidnet/enid/internal/podkey"
)

// TestWriteFileAtomicModeAndLeftovers: the mode asked for is the file's
// whatever the umask, and a write that fails (here its rename, onto a
// directory) leaves no temporary file behind.
func TestWriteFileAtomicModeAndLeftovers(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	path := filepath.Join(dir, "agent.json")
	if err := podkey.WriteFileAtomic(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v under umask 077, want 0644", fi.Mode().Perm())
	}
	if got, _ := os.ReadFile(path); string(got) != "{}\n" {
		t.Errorf("content %q", got)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := podkey.WriteFileAtomic(sub, []byte("x"), 0o600); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	left, err := filepath.Glob(filepath.Join(dir, podkey.TempGlob("sub")))
	if err != nil || len(left) != 0 {
		t.Errorf("temporary files left after a failed write: %v %v", left, err)
	}
}

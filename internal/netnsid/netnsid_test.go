package netnsid_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/enidnet/enid/internal/netnsid"
)

func TestNotNetNS(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, dir, fifo, "/dev/zero", "/proc/self/ns/uts"} {
		_, err := netnsid.Of(p)
		if !errors.Is(err, netnsid.ErrNotNetNS) {
			t.Errorf("Of(%s) = %v, want ErrNotNetNS", p, err)
		}
	}
	if _, err := netnsid.Of(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Of(missing) = %v, want ErrNotExist", err)
	}
}

// TestSelfIsNode reads the process's own namespace (read only, nothing is
// changed): every name for it has one identity, and CheckPod refuses it.
func TestSelfIsNode(t *testing.T) {
	self, err := netnsid.Self()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/proc/self/ns/net", "/proc/thread-self/ns/net"} {
		err := netnsid.CheckPod(p, self)
		if !errors.Is(err, netnsid.ErrNodeNetNS) {
			t.Errorf("CheckPod(%s) = %v, want ErrNodeNetNS", p, err)
		}
	}
	if err := netnsid.CheckPod("/proc/self/ns/net", netnsid.ID{Dev: self.Dev, Ino: self.Ino + 1}); err != nil {
		t.Errorf("CheckPod against another namespace: %v", err)
	}
}

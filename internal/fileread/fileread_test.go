package fileread_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/fileread"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	if err := os.WriteFile(path("ok"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path("big"), []byte(strings.Repeat("x", 101)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path("dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for n, target := range map[string]string{"link": "ok", "zero": "/dev/zero", "fifolink": "fifo"} {
		if err := os.Symlink(target, path(n)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		links fileread.Symlinks
		want  string
		err   error
	}{
		{"ok", fileread.NoFollow, "hello", nil},
		{"link", fileread.Follow, "hello", nil},
		{"link", fileread.NoFollow, "", fileread.ErrSymlink},
		{"big", fileread.Follow, "", fileread.ErrTooLarge},
		{"fifo", fileread.Follow, "", fileread.ErrNotRegular},
		{"fifolink", fileread.Follow, "", fileread.ErrNotRegular},
		{"zero", fileread.Follow, "", fileread.ErrNotRegular},
		{"dir", fileread.Follow, "", fileread.ErrNotRegular},
		{"missing", fileread.Follow, "", fs.ErrNotExist},
	}
	for _, c := range cases {
		start := time.Now()
		got, err := fileread.Read(path(c.name), 100, c.links)
		if time.Since(start) > time.Second {
			t.Errorf("%s: took %s", c.name, time.Since(start))
		}
		if c.err == nil && (err != nil || string(got) != c.want) {
			t.Errorf("Read(%s) = %q, %v; want %q", c.name, got, err, c.want)
		}
		if c.err != nil && !errors.Is(err, c.err) {
			t.Errorf("Read(%s) error = %v, want %v", c.name, err, c.err)
		}
	}
}

// TestReadSizes: the buffer is sized from fstat, so a file exactly at the
// limit, an empty one, one past 512 bytes and one whose size the kernel
// does not know (procfs says 0) must all read whole.
func TestReadSizes(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{0, 1, 100, 511, 512, 513, 5000} {
		p := filepath.Join(dir, "f")
		want := strings.Repeat("y", n)
		if err := os.WriteFile(p, []byte(want), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := fileread.Read(p, 5000, fileread.NoFollow)
		if err != nil || string(got) != want {
			t.Errorf("%d bytes, limit 5000: got %d bytes, %v", n, len(got), err)
		}
		if n > 0 {
			if _, err := fileread.Read(p, int64(n-1), fileread.NoFollow); !errors.Is(err, fileread.ErrTooLarge) {
				t.Errorf("%d bytes, limit %d: error %v, want ErrTooLarge", n, n-1, err)
			}
		}
	}
	got, err := fileread.Read("/proc/self/status", 1<<20, fileread.Follow)
	if err != nil || !strings.Contains(string(got), "\nPid:") {
		t.Errorf("/proc/self/status (size 0 in its stat): %d bytes, %v", len(got), err)
	}
	if _, err := fileread.Read("/proc/self/status", 10, fileread.Follow); !errors.Is(err, fileread.ErrTooLarge) {
		t.Errorf("/proc/self/status with limit 10: error %v, want ErrTooLarge", err)
	}
}

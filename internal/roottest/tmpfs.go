package roottest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of the given size in bytes, with at most inodes
// inodes, on a new directory under t's temp dir and returns its path: a
// small /run to fill. It needs root (Need). The mount is private to this
// test: it is removed at cleanup, before the temp dir is, lazily if it is
// still busy, so no mount outlives the test.
func Tmpfs(t testing.TB, size, inodes int) string {
	t.Helper()
	Need(t)
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", size, inodes)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		t.Fatalf("mount tmpfs on %s (%s): %v", dir, opts, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", dir, err)
			}
		}
	})
	return dir
}

// Fill fills the file system of dir to its last byte with files under
// dir/fill (and, when inodes is set, to its last inode with empty files
// there), and returns the function that frees it all again. A file system
// is full when one more byte cannot be written to a new file: writes go on
// with ever smaller pieces until a single byte fails.
func Fill(t testing.TB, dir string, inodes bool) (free func()) {
	t.Helper()
	fill := filepath.Join(dir, "fill")
	if err := os.MkdirAll(fill, 0o755); err != nil {
		t.Fatal(err)
	}
	free = func() {
		t.Helper()
		if err := os.RemoveAll(fill); err != nil {
			t.Fatalf("free %s: %v", fill, err)
		}
	}
	f, err := os.Create(filepath.Join(fill, "bytes"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for n := len(buf); n > 0; n /= 2 {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill %s: %v", fill, err)
				}
				break
			}
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	// The last page may have room left in another file's tail; a new file
	// needs a page of its own, so one byte in one proves the bytes full.
	if err := os.WriteFile(filepath.Join(fill, "probe"), []byte{0}, 0o644); err == nil {
		t.Fatalf("fill %s: a new file still takes a byte", dir)
	}
	if inodes {
		for i := 0; ; i++ {
			f, err := os.Create(filepath.Join(fill, fmt.Sprintf("inode-%d", i)))
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return free
}

package podkey

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// WriteFileAtomic replaces path with data so that a reader sees either the
// old content or the new, never a mix, and the new content survives a crash
// once the call returns: it writes a temporary file in the same directory,
// fsyncs it, renames it over path and fsyncs the directory. The temporary
// file's name starts with a dot and ends in ".tmp" so directory readers can
// skip it. perm is applied to the file whatever the umask.
//
// It works on raw descriptors, not os.File: an os.File of a regular file
// costs two more system calls per open on Linux (the runtime sets it
// non-blocking and tries to add it to the poller, which refuses it) and a
// cleanup to register, and the agent writes a status, the heartbeat or its
// memory several times a minute (a fleet of simulated nodes, thousands of
// times a second: docs/simulation.md, "Cost").
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	fd, tmp, err := createTemp(dir, base)
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	ok := false
	defer func() {
		if !ok {
			// Best effort: the temporary file is garbage either way, and the
			// write error already returned says what went wrong.
			if fd >= 0 {
				_ = syscall.Close(fd)
			}
			_ = syscall.Unlink(tmp)
		}
	}()
	if err := writeAll(fd, data); err != nil {
		return &os.PathError{Op: "write", Path: tmp, Err: err}
	}
	if err := retry(func() error { return syscall.Fchmod(fd, uint32(perm.Perm())) }); err != nil {
		return &os.PathError{Op: "chmod", Path: tmp, Err: err}
	}
	if err := retry(func() error { return syscall.Fsync(fd) }); err != nil {
		return &os.PathError{Op: "fsync", Path: tmp, Err: err}
	}
	err = syscall.Close(fd)
	fd = -1
	if err != nil {
		return &os.PathError{Op: "close", Path: tmp, Err: err}
	}
	if err := syscall.Rename(tmp, path); err != nil {
		return &os.LinkError{Op: "rename", Old: tmp, New: path, Err: err}
	}
	ok = true
	return SyncDir(dir)
}

// WriteFileAtomicMkdir is WriteFileAtomic into a directory it creates
// (mode dirPerm, with its parents) when it is missing. The directory is
// looked at only when the write finds it missing, not before every write.
func WriteFileAtomicMkdir(path string, data []byte, perm, dirPerm os.FileMode) error {
	err := WriteFileAtomic(path, data, perm)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return WriteFileAtomic(path, data, perm)
}

// createTemp creates a new file named after TempGlob(base) in dir, mode
// 0600 as os.CreateTemp, and returns its descriptor and path.
func createTemp(dir, base string) (int, string, error) {
	prefix := filepath.Join(dir, "."+base+".")
	for try := 0; ; try++ {
		name := prefix + strconv.FormatUint(uint64(rand.Uint32()), 10) + ".tmp"
		var fd int
		err := retry(func() (err error) {
			fd, err = syscall.Open(name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
			return err
		})
		if err == nil {
			return fd, name, nil
		}
		if !errors.Is(err, syscall.EEXIST) || try == 100 {
			return -1, "", err
		}
	}
}

func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return syscall.EIO // a regular file took nothing: the disk says no more
		}
		data = data[n:]
	}
	return nil
}

// retry runs a system call again while it is interrupted by a signal.
func retry(call func() error) error {
	for {
		if err := call(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// TempGlob is the name pattern of WriteFileAtomic's temporary files for a
// file named base: a dot, base, a random part, ".tmp". The "*" stands for
// the random part, and filepath.Glob matches the leftovers of writes that
// were killed before their rename.
func TempGlob(base string) string { return "." + base + ".*.tmp" }

// SyncDir makes a rename or removal in dir durable (fsync of the directory).
func SyncDir(dir string) error {
	var fd int
	err := retry(func() (err error) {
		fd, err = syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return &os.PathError{Op: "open dir", Path: dir, Err: err}
	}
	serr := retry(func() error { return syscall.Fsync(fd) })
	cerr := syscall.Close(fd)
	if serr != nil {
		return &os.PathError{Op: "fsync dir", Path: dir, Err: serr}
	}
	if cerr != nil {
		return &os.PathError{Op: "close dir", Path: dir, Err: cerr}
	}
	return nil
}

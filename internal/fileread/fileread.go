// Package fileread is the one way enid reads a file it did not just write:
// the config and its drop-ins, pod entries, statuses, the heartbeat, the
// planner's memory, and the kubelet's and runtime's records. A file there
// may be anything a careless or hostile hand put in its place: a FIFO (a
// plain open blocks until a writer comes), /dev/zero (a plain read never
// ends), a directory, a gigabyte. Read opens without blocking, requires a
// regular file after the open (fstat, so the check and the read see the
// same file), and reads at most the caller's bound. It sits beside the
// desired -> observed -> plan -> execute chain, a leaf on stdlib alone.
package fileread

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular reports a path that names something other than a regular
// file (a FIFO, a device, a directory, a socket).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge reports a file larger than the caller's bound.
var ErrTooLarge = errors.New("file too large")

// ErrSymlink reports a symlink where NoFollow forbids one.
var ErrSymlink = errors.New("is a symlink")

// Symlinks says whether the last element of a path may be a symlink.
type Symlinks bool

// The symlink rules. Config files follow symlinks (a Kubernetes ConfigMap
// volume is made of them: config.yaml -> ..data/config.yaml), and so do
// the kubelet's records; files only enid writes (entries, statuses,
// memory) are never symlinks, and one there is refused.
const (
	Follow   Symlinks = true
	NoFollow Symlinks = false
)

// Read returns the content of the regular file at path, at most limit
// bytes: a larger file is an error wrapping ErrTooLarge, anything but a
// regular file one wrapping ErrNotRegular. A missing file wraps
// fs.ErrNotExist. It never blocks on a FIFO or reads past limit+1 bytes.
func Read(path string, limit int64, links Symlinks) ([]byte, error) {
	f, err := Open(path, links)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read-only: nothing to flush
	return ReadFrom(f, limit)
}

// Open opens path for reading without blocking and returns it only when it
// is a regular file (checked on the open descriptor).
func Open(path string, links Symlinks) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if links == NoFollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		if links == NoFollow && errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s %w; want a regular file", path, ErrSymlink)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // the stat error is the one to report
		return nil, err
	}
	if !st.Mode().IsRegular() {
		_ = f.Close() // read-only; the refusal is what matters
		return nil, fmt.Errorf("%s is %w (%s)", path, ErrNotRegular, kind(st.Mode()))
	}
	return f, nil
}

// ReadFrom reads f to its end, at most limit bytes.
func ReadFrom(f *os.File, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", f.Name(), ErrTooLarge, limit)
	}
	return data, nil
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

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
	"slices"
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
//
// It reads through a raw descriptor into a buffer sized from fstat: an
// os.File of a regular file costs a poller registration the kernel refuses
// and a cleanup, and io.ReadAll grows its buffer from 512 bytes; the agent
// reads statuses, entries and config files on every pass.
func Read(path string, limit int64, links Symlinks) ([]byte, error) {
	var fd int
	err := retry(func() (err error) {
		fd, err = syscall.Open(path, openFlags(links), 0)
		return err
	})
	if err != nil {
		return nil, openError(path, links, err)
	}
	defer syscall.Close(fd) //nolint:errcheck // read-only: nothing to flush
	var st syscall.Stat_t
	if err := retry(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, fmt.Errorf("%s is %w (%s)", path, ErrNotRegular, kind(modeOf(st.Mode)))
	}
	// One byte past the size (or the limit) sees the end, or a file that
	// grew since the fstat, in the same read.
	size := min(max(st.Size, 0), limit) + 1
	data := make([]byte, 0, max(size, 512))
	for int64(len(data)) <= limit {
		if len(data) == cap(data) {
			data = slices.Grow(data, min(cap(data), int(limit+1)-len(data)))
		}
		n, err := syscall.Read(fd, data[len(data):min(cap(data), int(limit+1))])
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return data, nil
		}
		data = data[:len(data)+n]
	}
	return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, limit)
}

func openFlags(links Symlinks) int {
	flags := syscall.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if links == NoFollow {
		flags |= syscall.O_NOFOLLOW
	}
	return flags
}

// openError is the error of a failed open of path: ErrSymlink for a
// symlink NoFollow refused, else a *os.PathError.
func openError(path string, links Symlinks, err error) error {
	if links == NoFollow && errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%s %w; want a regular file", path, ErrSymlink)
	}
	if pe := (*os.PathError)(nil); errors.As(err, &pe) {
		return err
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// retry runs a system call again while it is interrupted by a signal.
func retry(call func() error) error {
	for {
		if err := call(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// modeOf is the os.FileMode type bits of a stat mode.
func modeOf(m uint32) os.FileMode {
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return os.ModeDir
	case syscall.S_IFIFO:
		return os.ModeNamedPipe
	case syscall.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case syscall.S_IFBLK:
		return os.ModeDevice
	case syscall.S_IFSOCK:
		return os.ModeSocket
	case syscall.S_IFLNK:
		return os.ModeSymlink
	}
	return 0
}

// Open opens path for reading without blocking and returns it only when it
// is a regular file (checked on the open descriptor).
func Open(path string, links Symlinks) (*os.File, error) {
	f, err := os.OpenFile(path, openFlags(links), 0)
	if err != nil {
		return nil, openError(path, links, err)
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

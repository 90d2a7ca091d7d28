// Package netnsid identifies network namespaces by what they are (the
// device and inode of their nsfs file), never by the path that names them:
// /proc/1/ns/net, /proc/self/ns/net and a bind mount under /run/netns can
// all name the node's own namespace. Both the CNI plugin (refusing an ADD
// at once) and the datapath (refusing to set a pod up) use it to keep
// enid out of the node's namespace (DESIGN.md invariant 7). It sits below
// desired -> observed -> plan -> execute: a leaf on stdlib alone.
package netnsid

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// ErrNotNetNS reports a path that names no network namespace: a regular
// file, a directory, a FIFO, or another kind of namespace.
var ErrNotNetNS = errors.New("not a network namespace")

// ErrNodeNetNS reports a pod namespace that is the node's own.
var ErrNodeNetNS = errors.New("the node's own network namespace")

// ID is a namespace's identity: the device and inode of its nsfs file.
type ID struct {
	Dev, Ino uint64
}

// String renders the identity as `ip netns identify`-like text.
func (id ID) String() string { return fmt.Sprintf("net:[%d] dev %d", id.Ino, id.Dev) }

// Kernel constants (linux/magic.h, linux/nsfs.h, linux/sched.h); the
// syscall package does not carry them.
const (
	nsfsMagic   = 0x6e736673
	nsGetNSType = 0xb703 // _IO(0xb7, 0x3)
	cloneNewNet = 0x40000000
)

// Open opens path without blocking (a FIFO put where a namespace should be
// would hang a plain open), checks that it is a network namespace, and
// returns the descriptor (the caller closes it) and the namespace's
// identity. Symlinks are followed: /proc/<pid>/ns/net is one.
func Open(path string) (int, ID, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, ID{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	id, err := OfFD(fd)
	if err != nil {
		_ = syscall.Close(fd) // a read-only descriptor; the check's error is the one to report
		return -1, ID{}, fmt.Errorf("%s: %w", path, err)
	}
	return fd, id, nil
}

// Of returns the identity of the network namespace at path.
func Of(path string) (ID, error) {
	fd, id, err := Open(path)
	if err != nil {
		return ID{}, err
	}
	_ = syscall.Close(fd) // read-only descriptor, nothing to report
	return id, nil
}

// OfFD returns the identity of the network namespace open at fd.
func OfFD(fd int) (ID, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return ID{}, fmt.Errorf("fstat: %w", err)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Fstatfs(fd, &sfs); err != nil {
		return ID{}, fmt.Errorf("fstatfs: %w", err)
	}
	if sfs.Type != nsfsMagic {
		return ID{}, fmt.Errorf("%w (a %s)", ErrNotNetNS, kind(st.Mode))
	}
	t, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), nsGetNSType, 0)
	// Kernels before 4.11 answer ENOTTY: any nsfs file is then taken as
	// the network namespace it is named for.
	if errno == 0 && t != cloneNewNet {
		return ID{}, fmt.Errorf("%w (another kind of namespace)", ErrNotNetNS)
	}
	return ID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}

func kind(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "regular file"
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFIFO:
		return "FIFO"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return "device"
	}
	return "file"
}

// Self returns the identity of the calling thread's network namespace.
// /proc/thread-self names the thread's, not the main thread's, which may
// differ in a process that moves locked threads between namespaces.
func Self() (ID, error) { return Of("/proc/thread-self/ns/net") }

// CheckPod returns nil when path is a network namespace other than node,
// ErrNotNetNS or ErrNodeNetNS (wrapped, with the path) otherwise.
func CheckPod(path string, node ID) error {
	id, err := Of(path)
	if err != nil {
		return err
	}
	if id == node {
		return fmt.Errorf("netns %s is %w (%s)", path, ErrNodeNetNS, id)
	}
	return nil
}

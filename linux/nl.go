package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/enidnet/enid/internal/netnsid"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNotFound reports that a link, namespace, route or rule does not exist.
// Netlink's "no such device", ENOENT and ESRCH answers are mapped to it.
var ErrNotFound = errors.New("not found")

// ErrConflict reports that something enid would create already exists and
// is not enid's (an interface of the same name in the pod, a device that
// is not the veth peer it should be).
var ErrConflict = errors.New("conflict")

// maxDumpRetries bounds how often a dump interrupted by a concurrent change
// (NLM_F_DUMP_INTR) is started again.
const maxDumpRetries = 10

// mapErr maps netlink and errno "does not exist" answers to ErrNotFound and
// "already exists" to unix.EEXIST, keeping the original error in the chain.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var lnf netlink.LinkNotFoundError
	if errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) ||
		errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrNotExist) {
		if errors.Is(err, ErrNotFound) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// dumpsMade counts the dumps started, by what they list (string ->
// *atomic.Int64): the tests that hold a setup's and a teardown's number of
// listings read it (a dump grows with the pods on the node).
var dumpsMade sync.Map

// dump runs a netlink dump, starting it again while the kernel reports it
// was interrupted by a concurrent change, so callers never act on a partial
// listing.
func dump[T any](what string, f func() ([]T, error)) ([]T, error) {
	if n, ok := dumpsMade.Load(what); ok {
		n.(*atomic.Int64).Add(1)
	} else {
		n, _ := dumpsMade.LoadOrStore(what, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	for i := 0; ; i++ {
		r, err := f()
		if err == nil {
			return r, nil
		}
		if errors.Is(err, netlink.ErrDumpInterrupted) && i < maxDumpRetries {
			continue
		}
		return nil, fmt.Errorf("%s: %w", what, mapErr(err))
	}
}

// nsRef is an open network namespace plus a netlink handle inside it. The
// handle's sockets were created in the namespace, so using it needs no
// thread switching and is safe from any goroutine.
type nsRef struct {
	path string
	fd   netns.NsHandle
	h    *netlink.Handle
}

// openNS opens the namespace at path and a route netlink handle in it.
// "" means the calling thread's namespace: the process's own, since only
// locked threads ever leave it (not /proc/self/ns/net, which names the
// main thread's, and the Go runtime parks a main thread that a locked
// goroutine left behind in another namespace). A missing namespace yields
// ErrNotFound.
func openNS(path string) (*nsRef, error) {
	var fd netns.NsHandle
	var err error
	if path == "" {
		fd, err = netns.Get()
	} else {
		fd, err = netns.GetFromPath(path)
	}
	if err != nil {
		return nil, fmt.Errorf("open netns %q: %w", path, mapErr(err))
	}
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		_ = fd.Close() // the handle error is the one worth reporting
		return nil, fmt.Errorf("netlink handle in netns %q: %w", path, mapErr(err))
	}
	return &nsRef{path: path, fd: fd, h: h}, nil
}

// ErrNotNetNS reports a pod netns path that names no network namespace (a
// regular file, a FIFO, a directory).
var ErrNotNetNS = netnsid.ErrNotNetNS

// ErrNodeNetNS reports a pod netns that is the node's own namespace.
var ErrNodeNetNS = netnsid.ErrNodeNetNS

// openPod opens a pod's namespace: without blocking (a FIFO put in its
// place would hang the open), only if it is a network namespace, and never
// the node's own, whatever path names it (identity is compared, not
// paths). A missing namespace yields ErrNotFound.
func (d *Datapath) openPod(path string) (*nsRef, error) {
	if path == "" {
		return nil, fmt.Errorf("empty pod netns path: %w", ErrNotNetNS)
	}
	fd, id, err := netnsid.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open netns %q: %w", path, mapErr(err))
	}
	if id == d.nodeID {
		_ = unix.Close(fd) // read-only descriptor; the refusal is what matters
		return nil, fmt.Errorf("netns %s is %w (%s): refused", path, ErrNodeNetNS, id)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(fd), unix.NETLINK_ROUTE)
	if err != nil {
		_ = unix.Close(fd) // the handle error is the one worth reporting
		return nil, fmt.Errorf("netlink handle in netns %q: %w", path, mapErr(err))
	}
	return &nsRef{path: path, fd: netns.NsHandle(fd), h: h}, nil
}

// CheckNetNS reports whether path may serve as a pod's namespace: nil, or
// ErrNotFound, ErrNotNetNS or ErrNodeNetNS (wrapped). The agent asks it
// before planning an attachment, so a refused one fails at once.
func (d *Datapath) CheckNetNS(path string) error {
	pod, err := d.openPod(path)
	if err != nil {
		return err
	}
	return pod.Close()
}

// Close releases the handle and the namespace descriptor.
func (n *nsRef) Close() error {
	n.h.Close()
	return n.fd.Close()
}

// do runs fn with the calling OS thread inside the namespace. fn runs on a
// fresh goroutine locked to its thread; if the thread cannot be switched
// back it stays locked and dies with the goroutine, so no other goroutine
// ever runs in the wrong namespace. fn must not start goroutines (they
// would not inherit the namespace).
func (n *nsRef) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer func() { _ = orig.Close() }() // read-only descriptor, nothing to report
		if err := netns.Set(n.fd); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", n.path, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it exits with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("return from netns %s: %w", n.path, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// sysctl is one /proc/sys/net setting: path components below /proc/sys and
// the wanted value.
type sysctl struct {
	path  []string
	value string
	// optional settings are skipped when their file does not exist (IPv6
	// disabled on the node).
	optional bool
}

func (s sysctl) String() string { return strings.Join(s.path, ".") + "=" + s.value }

// ensureSysctls writes each setting that differs, from inside the
// namespace (net sysctls are per namespace), and reports what it changed.
// A setting whose file does not exist (a device gone, IPv6 disabled) is an
// error wrapping ErrNotFound.
func (n *nsRef) ensureSysctls(set []sysctl) ([]string, error) {
	var changed []string
	err := n.do(func() error {
		for _, s := range set {
			p := filepath.Join(append([]string{"/proc/sys"}, s.path...)...)
			b, err := os.ReadFile(p)
			if err != nil && s.optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("read sysctl %s: %w", strings.Join(s.path, "."), mapErr(err))
			}
			if strings.TrimSpace(string(b)) == s.value {
				continue
			}
			if err := os.WriteFile(p, []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("set sysctl %s: %w", s, mapErr(err))
			}
			changed = append(changed, "set sysctl "+s.String())
		}
		return nil
	})
	return changed, err
}

// isExist reports an "already exists" answer.
func isExist(err error) bool { return errors.Is(err, syscall.EEXIST) }

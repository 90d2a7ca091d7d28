// Package simvpc builds throwaway network topologies for the demo, the
// simulated node (testbed/simnode), benchmarks and tests: a "vpc"
// namespace playing the VPC router, a "node" namespace playing the host,
// ENIs plugged between them as veth pairs, pod namespaces, and an ICMP echo
// helper. Everything lives in namespaces it creates under /run/netns and
// removes again. It needs root. It is linked into the enid binary (enid
// demo), so it imports no test package: the testing.TB helpers are in
// linux/linuxtest.
package simvpc

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsDir is where named namespaces are bind-mounted (as `ip netns` does).
const nsDir = "/run/netns"

// createNS creates a new network namespace bind-mounted at
// /run/netns/<prefix>-<random> with lo up, and returns its path.
func createNS(prefix string) (string, error) {
	if err := ensureNSDir(); err != nil {
		return "", err
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random netns name: %w", err)
	}
	path := filepath.Join(nsDir, prefix+"-"+hex.EncodeToString(b))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return "", fmt.Errorf("create netns mount point: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("create netns mount point: %w", err)
	}
	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		return nil
	}, func() error {
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount netns: %w", err)
		}
		return nil
	})
	if err != nil {
		_ = os.Remove(path) // best effort: the mount failed, the file is ours
		return "", fmt.Errorf("create netns %s: %w", path, err)
	}
	if err := withHandle(path, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	}); err != nil {
		return "", errors.Join(fmt.Errorf("set lo up in %s: %w", path, err), deleteNS(path))
	}
	return path, nil
}

// ensureNSDir makes nsDir a mount point shared with its peers, as `ip netns
// add` does on its first use on a machine, once per process. A namespace
// bind-mounted on a file of nsDir before something else (ip, a container
// runtime) turns nsDir into a mount point ends up hidden beneath that
// mount: unmounting the path then reaches the upper mount, and removing the
// file fails with EBUSY (seen on a fresh machine, an e2e test's cleanup
// racing an `ip netns add`).
var ensureNSDir = sync.OnceValue(mountNSDir)

func mountNSDir() error {
	if err := os.MkdirAll(nsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", nsDir, err)
	}
	for made := false; ; made = true {
		err := unix.Mount("", nsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || made {
			return fmt.Errorf("make %s a shared mount: %w", nsDir, err)
		}
		// Not a mount point yet: bind it onto itself, then share it.
		if err := unix.Mount(nsDir, nsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", nsDir, err)
		}
	}
}

// deleteNS unmounts and removes a namespace created by createNS. A
// namespace already gone is fine.
func deleteNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// withHandle runs fn with a route netlink handle inside the namespace.
func withHandle(path string, fn func(h *netlink.Handle) error) error {
	fd, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer func() { _ = fd.Close() }() // read-only descriptor
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", path, err)
	}
	defer h.Close()
	return fn(h)
}

// InNS runs fn on a locked thread inside the namespace. fn must not start
// goroutines. If the thread cannot return, it stays locked and dies.
func InNS(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer func() { _ = target.Close() }() // read-only descriptor
	return onThread(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter netns %s: %w", path, err)
		}
		return nil
	}, fn)
}

// onThread runs enter, then fn, on a fresh goroutine locked to its OS
// thread, and returns the thread to the namespace it started in. If enter
// fails the thread is unlocked unchanged; if the thread cannot return, it
// stays locked and dies with the goroutine, so no other goroutine ever runs
// in the wrong namespace. fn must not start goroutines.
func onThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer func() { _ = orig.Close() }() // read-only descriptor
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to original netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// writeSysctls sets /proc/sys entries (paths below /proc/sys) in the
// namespace.
func writeSysctls(path string, kv map[string]string) error {
	return InNS(path, func() error {
		for k, v := range kv {
			if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s: %w", k, err)
			}
		}
		return nil
	})
}

// Sysctl reads /proc/sys/<key> (key with slashes, e.g.
// "net/ipv4/conf/eth1/rp_filter") inside the namespace.
func Sysctl(nsPath, key string) (string, error) {
	var v string
	err := InNS(nsPath, func() error {
		b, err := os.ReadFile(filepath.Join("/proc/sys", key))
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

// SetSysctl writes /proc/sys/<key> inside the namespace.
func SetSysctl(nsPath, key, value string) error {
	return writeSysctls(nsPath, map[string]string{key: value})
}

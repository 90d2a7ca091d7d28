// Package ctrtest cleans up after a containerd of a test's own (its root,
// state and socket in a temporary directory): the shims and the mounts a
// failed test can leave behind. The e2e CRI suite and the image test run
// such a containerd; each reports what it finds as it sees fit.
package ctrtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// KillShims kills the containerd shims of the containerd listening on
// sock (found by the socket in their command line) and returns their pids.
// A shim gone meanwhile is not an error.
func KillShims(sock string) ([]int, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var killed []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte("containerd-shim")) || !bytes.Contains(cmdline, []byte(sock)) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL) // gone already is fine
		killed = append(killed, pid)
	}
	return killed, nil
}

// UnmountUnder detaches every mount below dir (rootfs overlays, shm),
// deepest first, and returns the mount points it found; err joins the
// unmounts that failed (one already gone is not a failure).
func UnmountUnder(dir string) (found []string, err error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			found = append(found, f[4])
		}
	}
	var errs []error
	for i := len(found) - 1; i >= 0; i-- {
		if err := unix.Unmount(found[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", found[i], err))
		}
	}
	return found, errors.Join(errs...)
}

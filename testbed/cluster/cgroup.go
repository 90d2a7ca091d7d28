package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/enidnet/enid/testbed/ctrtest"
)

const cgroupFS = "/sys/fs/cgroup"

// hierarchies are the mounted cgroup hierarchies (v1 controllers, named
// ones and the unified one): the directories of /sys/fs/cgroup with a
// cgroup.procs file.
func hierarchies() []string {
	ents, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil
	}
	var hs []string
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.procs")); err == nil {
		return []string{cgroupFS} // cgroup v2 only
	}
	for _, e := range ents {
		h := filepath.Join(cgroupFS, e.Name())
		if st, err := os.Lstat(h); err != nil || !st.IsDir() {
			continue // cpu, cpuacct: symlinks to a joint hierarchy
		}
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			hs = append(hs, h)
		}
	}
	return hs
}

// nodeCgroup names the cgroup parent of node i (from 1) of the cluster
// whose directory is named dirName: the directory's name for the first,
// "<name>-n<i>" for the others. clusterDirName reverses it.
func nodeCgroup(dirName string, i int) string {
	if i == 1 {
		return dirName
	}
	return fmt.Sprintf("%s-n%d", dirName, i)
}

// clusterDirName returns the name of the cluster directory a node's cgroup
// parent was named after (nodeCgroup).
func clusterDirName(cgroup string) string {
	if i := strings.LastIndex(cgroup, "-n"); i > 0 {
		if _, err := strconv.Atoi(cgroup[i+2:]); err == nil {
			return cgroup[:i]
		}
	}
	return cgroup
}

// makeCgroups makes the cluster's cgroup parent in every hierarchy (the
// kubelet's cgroupRoot must exist), with the cpuset of its parent (a new
// v1 cpuset is empty, and nothing can join it).
func makeCgroups(name string) error {
	for _, h := range hierarchies() {
		d := filepath.Join(h, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %s: %w", d, f, err)
			}
		}
	}
	return nil
}

// cgroupDirs lists the cluster's cgroup directories in every hierarchy,
// deepest first.
func cgroupDirs(name string) []string {
	var dirs []string
	for _, h := range hierarchies() {
		root := filepath.Join(h, name)
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error { //nolint:errcheck // a tree half gone is walked as far as it goes
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// killCgroups kills every process in the cluster's cgroups (the pods'
// containers, whatever state containerd left them in) and waits for them
// to go.
func killCgroups(name string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		var pids []int
		for _, d := range cgroupDirs(name) {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")) // a cgroup gone has none
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in the cluster's cgroups", pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // it may be gone already
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroups removes the cluster's cgroups, deepest first.
func removeCgroups(name string) error {
	var errs []error
	for _, d := range cgroupDirs(name) {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// killShims kills the shims whose command line names the cluster's
// containerd socket (they outlive containerd by design).
func killShims(sock string) error {
	_, err := ctrtest.KillShims(sock)
	return err
}

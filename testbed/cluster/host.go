package cluster

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// HostState is what the cluster must leave as it found it on the host:
// its routes, rules and links, its iptables, the sysctls the kubelet and
// enid write, its mounts and its cgroups. Other tests run beside the
// cluster's (go test runs packages in parallel) and make network
// namespaces and containers of their own: mounts under /run/netns and
// temp dirs, cgroups other than the kubelet's and clusters', and the
// cgroups of clusters still running (another process's), are left out.
type HostState map[string][]string

// hostSysctls are read on the host: the kubelet's tunables and what a CNI
// agent could be tempted to write.
var hostSysctls = []string{
	"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/rp_filter",
	"net/ipv4/conf/all/arp_ignore", "net/ipv4/conf/all/arp_announce", "net/ipv4/conf/all/proxy_arp",
}

// Host reads the host's state.
func Host() HostState {
	s := HostState{}
	for _, cmd := range [][]string{
		{"ip", "-d", "link", "show"}, {"ip", "-4", "route", "show", "table", "all"}, {"ip", "-6", "route", "show", "table", "all"},
		{"ip", "-4", "rule"}, {"ip", "-6", "rule"}, {"iptables-save"}, {"ip6tables-save"},
	} {
		if _, err := exec.LookPath(cmd[0]); err != nil {
			continue
		}
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		lines := strings.Split(string(out), "\n")
		if err != nil {
			lines = append(lines, "error: "+err.Error())
		}
		s[strings.Join(cmd, " ")] = stable(lines)
	}
	var sys []string
	for _, k := range append(slices.Sorted(maps.Keys(kubeletSysctls)), hostSysctls...) {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		sys = append(sys, fmt.Sprintf("%s=%s %v", k, strings.TrimSpace(string(b)), err))
	}
	s["sysctls"] = sys
	s["mounts"] = hostMounts()
	s["cgroups"] = hostCgroups()
	return s
}

// stable drops what changes by itself: iptables-save's comments and
// counters, link statistics, empty lines.
func stable(lines []string) []string {
	var out []string
	for _, l := range lines {
		l = strings.TrimRight(l, " ")
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, ":") { // chain line: ":INPUT ACCEPT [12:345]"
			if i := strings.LastIndex(l, " ["); i > 0 {
				l = l[:i]
			}
		}
		out = append(out, l)
	}
	return out
}

// hostMounts lists the host's mount points with their types and sources,
// without those of namespaces and temp dirs (other tests').
func hostMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		mp := fields[4]
		if strings.HasPrefix(mp, "/run/netns/") || strings.HasPrefix(mp, os.TempDir()+"/") || strings.HasPrefix(mp, "/var/run/netns/") {
			continue
		}
		ms = append(ms, mp+" "+fields[sep+1]+" "+fields[sep+2])
	}
	slices.Sort(ms)
	return ms
}

// hostCgroups lists, in every hierarchy, the top-level cgroups the
// kubelet or this harness would make (kubepods*, the clusters' parents),
// without those of clusters that are running: another process's cluster
// may run beside this one (Kubernetes' own network tests, -upstream,
// beside `go test ./...`). A cluster's parents are named after its
// directory, made before them and removed after them (Start, Close), so a
// parent whose directory is gone is one a cluster left behind.
func hostCgroups() []string {
	var cs []string
	for _, h := range hierarchies() {
		ents, _ := os.ReadDir(h) // a hierarchy gone has none
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			if strings.HasPrefix(e.Name(), "kubepods") || (strings.HasPrefix(e.Name(), "enidct") && !clusterRunning(e.Name())) {
				cs = append(cs, filepath.Join(h, e.Name()))
			}
		}
	}
	return cs
}

// clusterRunning reports whether the cluster whose node's cgroup parent is
// cgroup (nodeCgroup) still has its directory.
func clusterRunning(cgroup string) bool {
	st, err := os.Stat(filepath.Join(os.TempDir(), clusterDirName(cgroup)))
	return err == nil && st.IsDir()
}

// Diff says what changed from s to after, one line per difference.
func (s HostState) Diff(after HostState) []string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		before, now := s[k], after[k]
		for _, l := range now {
			if !slices.Contains(before, l) {
				d = append(d, fmt.Sprintf("%s: new %q", k, l))
			}
		}
		for _, l := range before {
			if !slices.Contains(now, l) {
				d = append(d, fmt.Sprintf("%s: gone %q", k, l))
			}
		}
	}
	return d
}

// Leftovers lists processes whose command line names the cluster's dir
// (its programs and shims), which must be none once it is closed.
func Leftovers(dir string) []string {
	ents, _ := os.ReadDir("/proc") // /proc is always there
	var left []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		if strings.Contains(cmd, dir) {
			left = append(left, e.Name()+": "+cmd)
		}
	}
	return left
}

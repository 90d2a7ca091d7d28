package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// heartbeatFresh waits until agent.json was written within the last age
// and returns it.
func (w *world) heartbeatFresh(age time.Duration) status.Agent {
	w.t.Helper()
	var a status.Agent
	w.waitFor("a fresh heartbeat", 10*time.Second, func() bool {
		var err error
		a, err = status.ReadAgent(w.paths.AgentFile)
		return err == nil && time.Since(a.Heartbeat) < age
	})
	return a
}

func (w *world) waitReady(k desired.Key) {
	w.t.Helper()
	w.waitFor(k.String()+" ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
}

// TestHostileDropIns: a FIFO (which blocks a plain open) and a symlink to
// /dev/zero (which a plain read never finishes) put in config.d while the
// agent runs: the config is refused, the last good one stays in force, the
// heartbeat stays fresh and new pods are served.
func TestHostileDropIns(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 2\n  maxIdle: 8\n")
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	w.waitReady(w.addPod(0))
	if err := os.MkdirAll(w.paths.Config.DropInDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(w.paths.Config.DropInDir, "70-x.yaml")
	for i, make := range []func() error{
		func() error { return syscall.Mkfifo(bad, 0o644) },
		func() error { return os.Symlink("/dev/zero", bad) },
	} {
		if err := make(); err != nil {
			t.Fatal(err)
		}
		w.agent.Wake()
		w.waitFor("the config refused", 10*time.Second, func() bool {
			a, err := status.ReadAgent(w.paths.AgentFile)
			return err == nil && strings.Contains(a.Reason, "70-x.yaml")
		})
		w.waitReady(w.addPod(i + 1))
		if a := w.heartbeatFresh(time.Second); !a.Ready {
			t.Errorf("agent not ready: %s", a.Reason)
		}
		if err := os.Remove(bad); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDamagedMemory: memory.json as a directory, a FIFO, a file larger
// than the bound, or not JSON: the agent starts afresh, says so in
// agent.json's lastErrors, serves pods, and persists its memory again.
func TestDamagedMemory(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"dir", func(p string) error { return os.Mkdir(p, 0o700) }, "a directory"},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "a FIFO"},
		{"huge", func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(maxMemoryFile + 1) // sparse: no disk used
		}, "file too large"},
		{"garbage", func(p string) error { return os.WriteFile(p, []byte("{not json"), 0o600) }, "parse"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
			if err := os.MkdirAll(w.paths.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			mem := filepath.Join(w.paths.StateDir, "memory.json")
			if err := c.make(mem); err != nil {
				t.Fatal(err)
			}
			stop := w.start(NewNoDatapathMust(t))
			defer stop()
			w.waitReady(w.addPod(0))
			a := w.heartbeatFresh(time.Second)
			if msg := strings.Join(a.LastErrors, "\n"); !strings.Contains(msg, "planner memory unreadable") || !strings.Contains(msg, c.want) {
				t.Errorf("lastErrors %q do not say the memory was damaged (%s)", msg, c.want)
			}
			w.waitFor("memory persisted again", 10*time.Second, func() bool {
				_, err := ReadMemory(w.paths.StateDir)
				st, serr := os.Lstat(mem)
				return err == nil && serr == nil && st.Mode().IsRegular()
			})
		})
	}
}

// TestBadStatusWithoutEntryRemoved: an unreadable status file that no
// entry names is removed by the next full observation; one whose entry
// lives is rewritten.
func TestBadStatusWithoutEntryRemoved(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
	if err := os.MkdirAll(w.paths.Statuses, 0o755); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(w.paths.Statuses, fmt.Sprintf("%064x_eth0.json", 999))
	if err := os.WriteFile(orphan, []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	k := w.addPod(0)
	if err := os.WriteFile(filepath.Join(w.paths.Statuses, k.String()+".json"), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.waitReady(k)
	w.waitFor("the orphaned garbage removed", 10*time.Second, func() bool {
		_, err := os.Lstat(orphan)
		return os.IsNotExist(err)
	})
}

// TestRetryOfDeletedPodForgotten: a pod whose setup keeps failing backs
// off (the planner's memory, persisted, holds the back-off); once its
// entry is gone, its back-off goes too.
func TestRetryOfDeletedPodForgotten(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
	dp := &failingPods{NoDatapath: NewNoDatapathMust(t)}
	stop := w.start(dp)
	defer stop()
	k := w.addPod(0)
	w.waitFor("the setup to fail", 10*time.Second, func() bool {
		return w.statuses()[k.String()].ReasonCode == "setup-failed"
	})
	key := planner.RetryKey{Scope: planner.RetryNode, Kind: planner.SetupPod, ID: k.String()}
	backingOff := func() bool {
		m, err := ReadMemory(w.paths.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := m.Backoffs[key]
		return ok
	}
	if !backingOff() {
		t.Fatal("no back-off recorded for the failing setup")
	}
	if err := desired.NewEntryStore(w.paths.Entries).Remove(k); err != nil {
		t.Fatal(err)
	}
	w.agent.Wake()
	w.waitFor("the back-off forgotten", 10*time.Second, func() bool {
		if backingOff() {
			w.agent.Wake()
			return false
		}
		return true
	})
}

// failingPods is a NoDatapath whose pod setups fail.
type failingPods struct{ *NoDatapath }

func (f *failingPods) EnsurePod(_ context.Context, s linux.PodSpec) (linux.PodResult, linux.Changes, error) {
	return linux.PodResult{}, nil, fmt.Errorf("set up %s: injected failure", s.Key)
}

// TestNodeNetNSRefusedByAgent: entries naming the node's namespace (the
// namespace playing the node, by its path) or a regular file fail at once
// with netns-refused, and the node namespace is left as it was.
func TestNodeNetNSRefusedByAgent(t *testing.T) {
	roottest.Need(t)
	tp := linuxtest.NewTopology(t)
	dp, err := linux.New(slog.New(slog.DiscardHandler), tp.NodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	before := nodeRoutes(t, tp.NodeNS)
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 0\n  maxIdle: 0\n")
	stop := w.start(dp)
	defer stop()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var keys []desired.Key
	for i, ns := range []string{tp.NodeNS, file} {
		e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: fmt.Sprintf("%064x", i+1), IfName: "eth0",
			NetNS: ns, PodNamespace: "default", PodName: fmt.Sprintf("pod-%d", i), Created: time.Now()}
		if _, err := desired.NewEntryStore(w.paths.Entries).Write(e); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, e.Key())
	}
	for i, k := range keys {
		w.waitFor(k.String()+" failed", 10*time.Second, func() bool {
			st := w.statuses()[k.String()]
			return st.Phase == status.Failed && st.ReasonCode == string(planner.ReasonNetNSRefused)
		})
		want := []string{"the node's own network namespace", "not a network namespace"}[i]
		if r := w.statuses()[k.String()].Reason; !strings.Contains(r, want) {
			t.Errorf("%s: reason %q, want it to say %q", k, r, want)
		}
	}
	if after := nodeRoutes(t, tp.NodeNS); after != before {
		t.Errorf("node namespace changed:\nbefore %s\nafter  %s", before, after)
	}
}

// nodeRoutes renders the links, addresses and routes of the namespace.
func nodeRoutes(t *testing.T, path string) string {
	t.Helper()
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	h, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var b strings.Builder
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		fmt.Fprintf(&b, "link %s; ", l.Attrs().Name)
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		fmt.Fprintf(&b, "addr %s; ", a.IPNet)
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		fmt.Fprintf(&b, "route %s; ", r)
	}
	return b.String()
}

// TestHeartbeatWhileCloudHangs: every cloud call hangs (the simulator's
// latency is a minute; the client gives up after its 10 s timeout and
// retries), and a resync is due every second: a warm ADD is served at once
// and agent.json stays under 5 s old throughout.
func TestHeartbeatWhileCloudHangs(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 2\n  maxIdle: 8\nresyncPeriod: 1s\n")
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	w.waitReady(w.addPod(0))
	w.sim.SetSettings(ecssim.Settings{Latency: ecssim.Latency{Fixed: time.Minute}})
	defer w.sim.SetSettings(ecssim.Settings{})
	w.agent.Wake()
	// A resync is in flight and hangs: a warm ADD is served from the pool
	// meanwhile, not after the resync.
	time.Sleep(1500 * time.Millisecond)
	k := w.addPod(1)
	start := time.Now()
	w.waitFor("a warm pod ready while the cloud hangs", 3*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
	t.Logf("warm pod ready in %s while the cloud hung", time.Since(start).Round(time.Millisecond))
	var worst time.Duration
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		a, err := status.ReadAgent(w.paths.AgentFile)
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(a.Heartbeat))
	}
	t.Logf("oldest heartbeat seen while the cloud hung: %s", worst)
	if worst >= 5*time.Second {
		t.Errorf("heartbeat %s old while the cloud hung, want under 5s", worst)
	}
}

// TestRunDirModes: the entry directory is 0700, the status directory 0755
// as docs/status-files.md says, even where an older agent left it 0700.
func TestRunDirModes(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "")
	if err := os.MkdirAll(w.paths.Statuses, 0o700); err != nil {
		t.Fatal(err)
	}
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	w.heartbeatFresh(time.Second)
	for dir, want := range map[string]os.FileMode{w.paths.Entries: 0o700, w.paths.Statuses: 0o755} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s is %o, want %o", dir, st.Mode().Perm(), want)
		}
	}
}

// TestSetupRefusedNetNSFails: a netns that turns into the node's own after
// the agent checked it is refused again by the datapath at setup; the pod
// then fails at once with netns-refused instead of waiting as Pending.
func TestSetupRefusedNetNSFails(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
	stop := w.start(&refusingPods{NoDatapath: NewNoDatapathMust(t)})
	defer stop()
	k := w.addPod(0)
	w.waitFor("the pod failed with netns-refused", 10*time.Second, func() bool {
		st := w.statuses()[k.String()]
		return st.Phase == status.Failed && st.ReasonCode == string(planner.ReasonNetNSRefused)
	})
}

// refusingPods is a NoDatapath whose setups find the node's namespace.
type refusingPods struct{ *NoDatapath }

func (f *refusingPods) EnsurePod(_ context.Context, s linux.PodSpec) (linux.PodResult, linux.Changes, error) {
	return linux.PodResult{}, nil, fmt.Errorf("ensure pod %s: netns %s is %w: refused", s.Key, s.NetNS, linux.ErrNodeNetNS)
}

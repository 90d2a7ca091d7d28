package reconcile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/reconcile/status"
	"github.com/enidnet/enid/testbed/cnirun"
)

// A CNI DEL through libcni, with the runtime's result cache in place and
// the agent reading it, returns with the attachment torn down: its status
// gone and its address cooling down, although libcni's record names the
// attachment until DEL returns. An entry that vanished without a DEL is
// kept while that record lasts, and torn down when the record goes.
func TestDelThroughLibcniIsImmediate(t *testing.T) {
	pluginDir, err := cnirun.Plugin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond}},
		"pool:\n  minIdle: 2\n  maxIdle: 6\n  batch: 5\n  cooldown: 1m\n")
	cacheDir := filepath.Join(w.dir, "cni-cache")
	w.paths.Hints = desired.HintSources{CNIResultsDir: filepath.Join(cacheDir, "results")}
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	// The plugin's default delTimeout (2s): DEL returns by then, torn down
	// or not.
	rt, err := cnirun.New(pluginDir, cacheDir, cnirun.Conflist(filepath.Dir(w.paths.Entries), time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// No datapath, but the plugin and the agent refuse a path that is not
	// a network namespace: a throwaway one (root).
	roottest.Need(t)
	ns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ns.Close()
		testutils.UnmountNS(ns)
	}()
	netns := ns.Path()
	pod := func(id string) cnirun.Pod {
		return cnirun.Pod{ContainerID: id, NetNS: netns, IfName: "eth0", Namespace: "default", Name: "p-" + id, UID: "uid-" + id}
	}
	add := func(id string) string {
		t.Helper()
		res, err := rt.Add(ctx, pod(id))
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		records, _ := filepath.Glob(filepath.Join(cacheDir, "results", "*-"+id+"-eth0"))
		if len(records) != 1 {
			t.Fatalf("libcni cache records of %s: %v, want one", id, records)
		}
		// The test is about decisions, not about how soon the agent reads
		// the runtime's new record: wait until it has.
		w.waitFor("the agent reads the runtime's record of "+id, 5*time.Second, func() bool {
			all, _ := filepath.Glob(filepath.Join(cacheDir, "results", "*"))
			return gauge(t, w.agent.metrics, "enid_runtime_attachments") == float64(len(all))
		})
		return res.IPs[0].Address.IP.String()
	}

	ip1 := add("c1")
	if err := rt.Del(ctx, pod("c1")); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	// Checked when DEL returns, not after a wait.
	if st, ok := w.statuses()["c1_eth0"]; ok {
		t.Fatalf("DEL returned and the status is still there: %+v", st)
	}
	mem, err := ReadMemory(w.paths.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	cooling := false
	for a := range mem.Cooldowns {
		cooling = cooling || a.String() == ip1
	}
	if !cooling {
		t.Fatalf("DEL returned and %s is not cooling down (cooldowns %v)", ip1, mem.Cooldowns)
	}
	w.waitFor("the deletion record forgotten", 5*time.Second, func() bool {
		l, err := desired.NewEntryStore(w.paths.Entries).Scan()
		return err == nil && len(l.Deleted) == 0
	})

	// c2's entry vanishes without a DEL: the runtime's record keeps it.
	add("c2")
	if err := desired.NewEntryStore(w.paths.Entries).Remove(desired.Key{ContainerID: "c2", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	add("c3") // served by a pass that saw c2's entry gone
	if _, ok := w.statuses()["c2_eth0"]; !ok {
		t.Fatal("an entry that vanished without a DEL was torn down while the runtime's record names it")
	}
	// The runtime's record goes (without a DEL): that wakes the agent, which
	// tears c2 down.
	records, _ := filepath.Glob(filepath.Join(cacheDir, "results", "*-c2-eth0"))
	for _, r := range records {
		if err := os.Remove(r); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	w.waitFor("c2 torn down after its runtime record went", 5*time.Second, func() bool {
		_, ok := w.statuses()["c2_eth0"]
		return !ok
	})
	if _, ok := w.statuses()["c3_eth0"]; !ok {
		t.Fatal("c3 lost its status")
	}
}

// gauge reads an unlabelled gauge or counter from the agent's registry.
func gauge(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue() // the other is nil: 0
		}
	}
	t.Fatalf("no gauge or counter %s", name)
	return 0
}

// A CNI DEL on a full /run (a tmpfs filled to its last byte, and in two
// cases to its last inode too) succeeds, removes the entry, and the agent
// tears the attachment down and removes its status; once space is back the
// agent forgets the deletion record and writes its heartbeat again. Where
// a record fits (an empty one, or one written in the room the entry's
// removal freed) the teardown is done when DEL returns; where none fits
// (the entry was already gone and nothing is left to free) DEL succeeds
// all the same and the teardown follows libcni's removal of its record.
func TestDelOnFullRunDir(t *testing.T) {
	pluginDir, err := cnirun.Plugin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// inodes: fill the inodes too, not only the bytes.
		inodes bool
		// entryGone: the entry is removed (without a record) before the
		// disk fills, as by an earlier DEL that the runtime retries.
		entryGone bool
		// atOnce: the status is gone when DEL returns (a record was written).
		atOnce bool
	}{
		{name: "bytes full: empty record", atOnce: true},
		{name: "bytes and inodes full: record after the removal", inodes: true},
		{name: "no room for a record", inodes: true, entryGone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := roottest.Tmpfs(t, 1<<20, 64)
			w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond}},
				"pool:\n  minIdle: 2\n  maxIdle: 6\n  batch: 5\n  cooldown: 1m\n")
			w.paths.Entries, w.paths.Statuses, w.paths.AgentFile = filepath.Join(run, "pods"), filepath.Join(run, "status"), filepath.Join(run, "agent.json")
			cacheDir := filepath.Join(w.dir, "cni-cache")
			w.paths.Hints = desired.HintSources{CNIResultsDir: filepath.Join(cacheDir, "results")}
			stop := w.start(NewNoDatapathMust(t))
			defer stop()
			rt, err := cnirun.New(pluginDir, cacheDir, cnirun.Conflist(run, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ns, err := testutils.NewNS()
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				ns.Close()
				testutils.UnmountNS(ns)
			}()
			ctx := context.Background()
			pod := cnirun.Pod{ContainerID: "c1", NetNS: ns.Path(), IfName: "eth0", Namespace: "default", Name: "p-c1", UID: "uid-c1"}
			if _, err := rt.Add(ctx, pod); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			w.waitFor("the agent reads the runtime's record", 5*time.Second, func() bool {
				return gauge(t, w.agent.metrics, "enid_runtime_attachments") == 1
			})
			key := desired.Key{ContainerID: "c1", IfName: "eth0"}
			store := desired.NewEntryStore(w.paths.Entries)
			if tc.entryGone {
				if err := store.Remove(key); err != nil {
					t.Fatal(err)
				}
			}
			free := roottest.Fill(t, run, tc.inodes)
			freed := false
			defer func() {
				if !freed {
					free()
				}
			}()

			if err := rt.Del(ctx, pod); err != nil {
				t.Fatalf("DEL on a full run dir: %v (code %d)", err, cnirun.Code(err))
			}
			if _, err := store.Read(key); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("entry after DEL: %v, want fs.ErrNotExist", err)
			}
			if _, ok := w.statuses()["c1_eth0"]; ok && tc.atOnce {
				t.Fatal("DEL returned with a deletion record written and the status is still there")
			}
			w.waitFor("c1 torn down on the full disk", 5*time.Second, func() bool {
				_, ok := w.statuses()["c1_eth0"]
				return !ok
			})

			free()
			freed = true
			w.waitFor("the deletion record forgotten and the heartbeat written again", 5*time.Second, func() bool {
				l, err := store.Scan()
				a, aerr := status.ReadAgent(w.paths.AgentFile)
				return err == nil && len(l.Deleted) == 0 && aerr == nil && time.Since(a.Heartbeat) < time.Second
			})
		})
	}
}

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
	"github.com/enidnet/enid/internal/cnirun"
	"github.com/enidnet/enid/internal/roottest"
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

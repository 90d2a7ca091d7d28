package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// BenchmarkPodCycle measures the agent's own cost of one pod's ADD and DEL
// on a node that already serves many pods: the passes the loop runs for
// them (the watcher's after the entry is written, and the one after the
// actions it started complete; the same for the deletion), with the
// actions themselves (no datapath: a status file written and removed). The
// loop is driven by hand, one pass at a time, so the figure is the
// agent's CPU and file I/O, not its wake-up latency. One op = ADD + DEL.
//
//	go test -run XXX -bench PodCycle -benchtime 200x ./reconcile/
func BenchmarkPodCycle(b *testing.B) {
	for _, pods := range []int{10, 250} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) { benchPodCycle(b, pods) })
	}
}

func benchPodCycle(b *testing.B, pods int) {
	w, _, pass := newHandDriven(b, "pool:\n  minIdle: 4\n  maxIdle: 400\n  batch: 10\n  cooldown: 1ms\n  releaseDelay: 1h\n", pods)
	store := desired.NewEntryStore(w.paths.Entries)
	// Top the pool up once more, so no cycle waits for the cloud.
	pass()
	b.ResetTimer()
	i := pods
	for b.Loop() {
		k := w.addPod(i)
		i++
		pass()
		if st, err := status.NewStore(w.paths.Statuses).Read(k.ContainerID, k.IfName); err != nil || st.Phase != status.Ready {
			b.Fatalf("pod %s not ready after its passes: %+v, %v", k, st, err)
		}
		if err := store.MarkDeleted(k, time.Now()); err != nil {
			b.Fatal(err)
		}
		if err := store.Remove(k); err != nil {
			b.Fatal(err)
		}
		pass()
	}
}

// newHandDriven returns a world, an agent in it (no datapath, no watcher)
// whose loop the caller drives by hand, and pass, which runs one pass
// after the entries changed (as the watcher's signal does), waits for the
// actions it started (and a full observation's cloud read, which the
// loop would take from fetchC) and runs the pass their completion asks
// for. The node first serves pods pods, every one Ready.
func newHandDriven(tb testing.TB, pool string, pods int) (*world, *Agent, func()) {
	tb.Helper()
	simCfg := ecssim.Config{
		Delays:    ecssim.Delays{Attach: ecssim.NoDelay, Detach: ecssim.NoDelay, Delete: ecssim.NoDelay},
		Zones:     []string{"cn-hangzhou-h"},
		VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-bench", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.16.0/20")}},
	}
	w := newWorldOf(tb, simCfg, pool, ecssim.InstanceSpec{InstanceType: "ecs.sim.dense"})
	a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl, Datapath: NewNoDatapathMust(tb), NoWatch: true})
	if err != nil {
		tb.Fatal(err)
	}
	for _, dir := range []string{w.paths.Entries, w.paths.Statuses, w.paths.StateDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			tb.Fatal(err)
		}
	}
	a.loadMemory()
	ctx := context.Background()
	pass := func() {
		a.Wake()
		<-a.trigger // Wake marked desired state changed; the loop would take the signal
		a.pass(ctx)
		a.exec.wg.Wait()
		if a.fetch != nil { // a full observation's cloud read: the loop takes its result
			a.fetch, a.fetched = nil, <-a.fetchC
		}
		a.pass(ctx)
		a.exec.wg.Wait()
	}
	for i := range pods {
		w.addPod(i)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		pass()
		ready := 0
		for _, st := range w.statuses() {
			if st.Phase == status.Ready {
				ready++
			}
		}
		if ready == pods {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d pods ready after a minute", ready, pods)
		}
		time.Sleep(time.Millisecond) // the pool's growth: attach and assign in the simulator
	}
	return w, a, pass
}

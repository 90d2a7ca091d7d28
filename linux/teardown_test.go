package linux_test

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// TestTeardownNetnsGone: the runtime deleted the pod's netns first (which
// takes the veth with it); teardown still succeeds, twice, and leaves the
// node as before, leaked rules included.
func TestTeardownNetnsGone(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	before := dumpNS(t, e.tp.NodeNS)
	s := e.podSpec(t, 0, 14)
	if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
		t.Fatalf("ensure: %v", err)
	}
	if err := e.tp.DeletePodNS(s.NetNS); err != nil {
		t.Fatal(err)
	}
	for i, ns := range []string{s.NetNS, ""} {
		if _, err := e.dp.TeardownPod(ctx, s.Key, ns); err != nil {
			t.Fatalf("teardown %d: %v", i, err)
		}
	}
	// The kernel destroys a dead namespace's veth asynchronously; a third
	// call after it is surely gone must find nothing left.
	waitGone(t, e, s)
	if ch, err := e.dp.TeardownPod(ctx, s.Key, ""); err != nil || len(ch) != 0 {
		t.Errorf("teardown after all is gone: %v %v", ch, err)
	}
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node after teardown (-before +after):\n%s", diff)
	}
	checkThreadsHome(t)
}

// checkThreadsHome fails unless every thread of the process is back in the
// process's own network namespace: no goroutine was left running in a pod
// or node namespace. Threads deliberately left locked exit shortly after
// their goroutine, so a few retries are allowed.
func checkThreadsHome(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	home, err := os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	var stray []string
	for range 50 {
		stray = stray[:0]
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			ns, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net")
			if err == nil && ns != home {
				stray = append(stray, task.Name()+" in "+ns)
			}
		}
		if len(stray) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("threads outside %s: %v", home, stray)
}

// TestSweepLeakedRules: a pod whose veth vanished without teardown leaves
// rules; the next teardown of any attachment removes them.
func TestSweepLeakedRules(t *testing.T) {
	e := newEnv(t, 1)
	ctx := ctxT(t)
	before := dumpNS(t, e.tp.NodeNS)
	s := e.podSpec(t, 0, 15)
	if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := e.tp.DeletePodNS(s.NetNS); err != nil {
		t.Fatal(err)
	}
	waitGone(t, e, s)
	other := e.podSpec(t, 0, 16)
	ch, err := e.dp.TeardownPod(ctx, other.Key, other.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	want := linux.Changes{
		"delete rule prio 512 to 10.0.1.15 lookup main",
		"delete rule prio 2048 from 10.0.1.15 lookup 1001",
		"delete rule prio 512 to fd00:1::15 lookup main",
		"delete rule prio 2048 from fd00:1::15 lookup 1001",
	}
	if diff := cmp.Diff(want, ch); diff != "" {
		t.Errorf("sweep (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node (-before +after):\n%s", diff)
	}
}

// waitGone waits until the attachment's host veth has disappeared.
func waitGone(t testing.TB, e *env, s linux.PodSpec) {
	t.Helper()
	ctx := ctxT(t)
	for {
		n, err := e.dp.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range n.Pods {
			found = found || p.Key == s.Key
		}
		if !found {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("veth never went away")
		}
	}
}

// TestManyPodsConcurrently: 50 pods on 3 ENIs set up at once are all
// healthy, each namespace holds its own address, rules point at the right
// ENI, and concurrent teardown leaves the node as before.
func TestManyPodsConcurrently(t *testing.T) {
	const pods = 50
	e := newEnv(t, 3)
	ctx := ctxT(t)
	before := dumpNS(t, e.tp.NodeNS)
	specs := make([]linux.PodSpec, pods)
	for i := range specs {
		specs[i] = e.podSpec(t, i%3, 20+i)
	}
	errs := make([]error, pods)
	var wg sync.WaitGroup
	for i := range specs {
		wg.Go(func() { _, _, errs[i] = e.dp.EnsurePod(ctx, specs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("pod %d: %v", i, err)
		}
	}
	n, err := e.dp.Observe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		NetNS, ENIMAC, IPv4, IPv6 string
		Healthy                   bool
		Problems                  []string
	}
	want, got := map[string]view{}, map[string]view{}
	for _, s := range specs {
		want[s.Key.String()] = view{s.NetNS, s.ENIMAC, s.IPv4.String(), s.IPv6.String(), true, nil}
	}
	for _, p := range n.Pods {
		got[p.Key.String()] = view{p.NetNS, p.ENIMAC, p.IPv4.String(), p.IPv6.String(), p.Healthy, p.Problems}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("observed pods (-want +got):\n%s", diff)
	}
	// Each namespace holds exactly its own address (no crossed namespaces).
	for _, s := range specs {
		d := dumpNS(t, s.NetNS)
		if c := countLines(d, "addr 10.0."); c != 1 || !contains(d, fmt.Sprintf("addr %s/32 dev eth0", s.IPv4)) {
			t.Errorf("pod %s holds:\n%s", s.Key, d)
		}
	}
	// A few pings across ENIs.
	for _, p := range [][2]int{{0, 1}, {1, 2}, {2, 49}} {
		if err := linuxtest.Ping(ctx, specs[p[0]].NetNS, specs[p[1]].IPv4); err != nil {
			t.Error(err)
		}
	}
	for i := range specs {
		wg.Go(func() { _, errs[i] = e.dp.TeardownPod(ctx, specs[i].Key, specs[i].NetNS) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("teardown %d: %v", i, err)
		}
	}
	if diff := cmp.Diff(before, dumpNS(t, e.tp.NodeNS)); diff != "" {
		t.Errorf("node after teardown (-before +after):\n%s", diff)
	}
	checkThreadsHome(t)
}

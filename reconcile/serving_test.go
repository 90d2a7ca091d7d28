package reconcile

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/reconcile/status"
)

// TestServingHookOnceReady: Config.Serving (how cmd/enid writes the CNI
// network list) runs only once agent.json says ready, once per start of
// serving: a failed call is made again after the next ready pass, a
// successful one is not repeated by later passes, and a restarted agent
// calls it again (the hook is idempotent; the agent never undoes it).
func TestServingHookOnceReady(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
	var (
		mu       sync.Mutex
		calls    int
		notReady int // calls made while agent.json did not say ready
	)
	w.serving = func() error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if h, err := status.ReadAgent(w.paths.AgentFile); err != nil || !h.Ready {
			notReady++
		}
		if calls == 1 {
			return errors.New("conf dir not writable yet")
		}
		return nil
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return calls
	}
	stop := w.start(NewNoDatapathMust(t))
	w.waitFor("the first, failing call", 10*time.Second, func() bool { return count() >= 1 })
	w.addPod(0) // a pass: the failed call is made again
	w.waitFor("the second call", 10*time.Second, func() bool { return count() >= 2 })
	for i := 1; i <= 3; i++ {
		w.addPod(i)
	}
	w.waitFor("pods served", 10*time.Second, func() bool {
		n := 0
		for _, st := range w.statuses() {
			if st.Phase == status.Ready {
				n++
			}
		}
		return n == 4
	})
	time.Sleep(200 * time.Millisecond)
	if got := count(); got != 2 {
		t.Errorf("%d calls after the pods' passes, want 2 (one failed, one succeeded, none after)", got)
	}
	stop()
	stop = w.start(NewNoDatapathMust(t))
	defer stop()
	w.waitFor("the restarted agent's call", 10*time.Second, func() bool { return count() >= 3 })
	mu.Lock()
	defer mu.Unlock()
	if notReady > 0 {
		t.Errorf("%d of %d calls came before agent.json said ready", notReady, calls)
	}
}

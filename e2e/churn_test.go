package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestChurnWithCrash: eight workers create and delete pods without pause
// for 12 seconds (each pod lives 0-500ms), and the agent is SIGKILLed and
// restarted in the middle. No ADD may return an address another live pod
// holds, and no address may come back before the cooldown (300ms) after
// the DEL that freed it began (invariant 2, across the crash too). After
// the churn, the pool settles without a leak.
func TestChurnWithCrash(t *testing.T) {
	const cooldown = 300 * time.Millisecond // testPool's
	n := newNode(t, nodeOptions{extraConfig: testPool, addTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)

	var mu sync.Mutex // guards the fields below
	live := map[netip.Addr]string{}
	freed := map[netip.Addr]time.Time{} // when the DEL that freed it began
	adds, fails, reused := 0, 0, 0
	// The churn runs 12 s, and on until it has proved something (50 ADDs
	// that succeeded, one of them on a freed address), for at most a
	// minute: on a loaded machine, or on the realistic profile's slower
	// cloud, 12 s may hold too few.
	start := time.Now()
	more := func() bool {
		mu.Lock()
		defer mu.Unlock()
		el := time.Since(start)
		return ctx.Err() == nil && (el < 12*time.Second || (el < time.Minute && (adds-fails < 50 || reused == 0)))
	}
	var wg sync.WaitGroup
	for w := range 8 {
		rng := rand.New(rand.NewPCG(uint64(w), 0x636875726e))
		wg.Go(func() {
			for i := 0; more(); i++ {
				p, err := n.makePod(fmt.Sprintf("w%d-%d", w, i))
				if err != nil {
					t.Error(err)
					return
				}
				ip, err := n.add(ctx, p)
				now := time.Now()
				mu.Lock()
				adds++
				switch {
				case err != nil:
					fails++ // the crash window; kubelet would retry
				case live[ip] != "":
					t.Errorf("ADD %s returned %s, which live pod %s holds", p.Name, ip, live[ip])
				default:
					live[ip] = p.Name
					if f, ok := freed[ip]; ok {
						reused++
						if gap := now.Sub(f); gap < cooldown {
							t.Errorf("ADD %s returned %s %s after the DEL that freed it began, within the cooldown %s", p.Name, ip, gap, cooldown)
						}
					}
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
				// The pod stops holding its address when its DEL begins: DEL is
				// authoritative, and the agent may tear it down and start the
				// cooldown before the plugin's DEL has returned (under load, a
				// plugin's exit can take longer than the cooldown). An address
				// handed out again within the cooldown of that moment is still
				// an error (below), and so is one two pods hold without a DEL.
				delStart := time.Now()
				if ip.IsValid() {
					mu.Lock()
					if live[ip] == p.Name {
						delete(live, ip)
						freed[ip] = delStart
					}
					mu.Unlock()
				}
				if err := n.rt.Del(ctx, p.Pod); err != nil {
					t.Errorf("DEL %s: %v", p.Name, err)
				}
				n.removePod(p)
			}
		})
	}
	time.Sleep(5 * time.Second)
	n.agent.kill()
	time.Sleep(500 * time.Millisecond)
	n.startAgent()
	wg.Wait()
	t.Logf("%d ADDs (%d failed around the crash), %d returned a freed address again", adds, fails, reused)
	if adds-fails < 50 || reused == 0 {
		t.Errorf("too little churn to prove anything: %d ADDs succeeded, %d reused an address", adds-fails, reused)
	}
	n.waitReady(30 * time.Second)
	n.waitSettled(2, 6, 60*time.Second)
}

package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// TestAddLatency measures what polling costs ADD: for each ADD, the time
// from the agent publishing Ready to the runtime holding the result (poll
// delay plus the plugin printing and exiting), beside the bare cost of
// running the plugin (VERSION). Run with -v to see the figures.
func TestAddLatency(t *testing.T) {
	pod := newNetNS(t)
	n := newNode(t)
	n.heartbeat(time.Now(), true, "")
	var mu sync.Mutex
	published := map[string]time.Time{} // revision -> when Ready was written
	ready := readyIn(t, "192.168.1.20/32", "169.254.1.1", false)
	n.startAgent(func(e desired.Entry) *status.Attachment {
		// Publish in the agent loop ourselves to know the time exactly.
		st := ready(e)
		if err := n.statuses.Write(*st); err != nil {
			t.Error(err)
		}
		mu.Lock()
		published[e.Revision] = time.Now()
		mu.Unlock()
		return nil
	}, true)
	list := n.list("1.0.0", nil)
	ctx := context.Background()
	const rounds = 15
	var adds, afterPublish, execs []time.Duration
	for range rounds {
		rt := runtimeConf("lat", pod.Path())
		start := time.Now()
		if _, err := n.cni.AddNetworkList(ctx, list, rt); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		done := time.Now()
		adds = append(adds, done.Sub(start))
		e, err := n.entries.Read(desired.Key{ContainerID: "lat", IfName: "eth0"})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		afterPublish = append(afterPublish, done.Sub(published[e.Revision]))
		mu.Unlock()
		if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
			t.Fatalf("DEL: %v", err)
		}
		start = time.Now()
		if _, err := n.cni.GetVersionInfo(ctx, "enid-cni"); err != nil {
			t.Fatal(err)
		}
		execs = append(execs, time.Since(start))
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	t.Logf("ADD median %s; Ready-published -> result median %s (max %s); plugin exec floor (VERSION) median %s; %d rounds",
		med(adds), med(afterPublish), slices.Max(afterPublish), med(execs), rounds)
	// Polling starts at pollFirst: the answer must not wait much past one
	// interval plus the exec, or polling is broken.
	if m := med(afterPublish); m > pollFirst+4*med(execs)+50*time.Millisecond {
		t.Errorf("ADD returned a median %s after Ready was published; polling looks broken", m)
	}
}

package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// BenchmarkAddLatency measures what polling costs ADD: for each ADD, the
// time from the agent publishing Ready to the runtime holding the result
// (poll delay plus the plugin printing and exiting), beside the bare cost of
// running the plugin (VERSION). A benchmark, not a timed test: the figures
// depend on the machine, so they are reported (as medians), never asserted.
// Every ADD must still return the published address.
//
//	go test -run '^$' -bench AddLatency -benchtime 15x ./cmd/enid-cni/
func BenchmarkAddLatency(b *testing.B) {
	pod := newNetNS(b)
	n := newNode(b)
	n.heartbeat(time.Now(), true, "")
	var mu sync.Mutex
	published := map[string]time.Time{} // revision -> when Ready was written
	ready := readyIn(b, "192.168.1.20/32", "169.254.1.1", false)
	n.startAgent(func(e desired.Entry) *status.Attachment {
		// Publish in the agent loop ourselves to know the time exactly.
		st := ready(e)
		if err := n.statuses.Write(*st); err != nil {
			b.Error(err)
		}
		mu.Lock()
		published[e.Revision] = time.Now()
		mu.Unlock()
		return nil
	}, true)
	list := n.list("1.0.0", nil)
	ctx := context.Background()
	var adds, afterPublish, execs []time.Duration
	b.ResetTimer()
	for range b.N {
		rt := runtimeConf("lat", pod.Path())
		start := time.Now()
		res, err := n.cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			b.Fatalf("ADD: %v", err)
		}
		done := time.Now()
		got, err := current.NewResultFromResult(res)
		if err != nil {
			b.Fatal(err)
		}
		if len(got.IPs) != 1 || got.IPs[0].Address.String() != "192.168.1.20/32" {
			b.Fatalf("ADD result IPs %v, want the published 192.168.1.20/32", got.IPs)
		}
		adds = append(adds, done.Sub(start))
		e, err := n.entries.Read(desired.Key{ContainerID: "lat", IfName: "eth0"})
		if err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		afterPublish = append(afterPublish, done.Sub(published[e.Revision]))
		mu.Unlock()
		if err := n.cni.DelNetworkList(ctx, list, rt); err != nil {
			b.Fatalf("DEL: %v", err)
		}
		start = time.Now()
		if _, err := n.cni.GetVersionInfo(ctx, "enid-cni"); err != nil {
			b.Fatal(err)
		}
		execs = append(execs, time.Since(start))
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2]) / 1e6 }
	b.ReportMetric(med(adds), "add-ms")
	b.ReportMetric(med(afterPublish), "ready-to-result-ms")
	b.ReportMetric(float64(slices.Max(afterPublish))/1e6, "ready-to-result-max-ms")
	b.ReportMetric(med(execs), "exec-floor-ms")
}

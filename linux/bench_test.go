package linux_test

import (
	"context"
	"testing"
	"time"

	"github.com/enidnet/enid/linux"
)

// BenchmarkPodSetupTeardown measures one shared-mode EnsurePod plus
// TeardownPod on a configured ENI (the netlink floor under CNI ADD and
// DEL); the pod namespace is made once, as the runtime makes it.
func BenchmarkPodSetupTeardown(b *testing.B) {
	e := newEnv(b, 1)
	ctx := ctxT(b)
	s := e.podSpec(b, 0, 30)
	setupTeardown(ctx, b, e, s)
}

// BenchmarkPodEnsureConverged measures EnsurePod on an attachment that is
// already correct (the cost of a reconcile pass per pod).
func BenchmarkPodEnsureConverged(b *testing.B) {
	e := newEnv(b, 1)
	ctx := ctxT(b)
	s := e.podSpec(b, 0, 31)
	if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, ch, err := e.dp.EnsurePod(ctx, s); err != nil || len(ch) != 0 {
			b.Fatal(ch, err)
		}
	}
}

// BenchmarkObserve reads a node with 80 pods set up, in full (every pod's
// namespace) and the node namespace alone (what the agent reads after a
// netlink change).
func BenchmarkObserve(b *testing.B) {
	e := newEnv(b, 1)
	ctx := ctxT(b)
	const pods = 80
	for h := 10; h < 10+pods; h++ {
		if _, _, err := e.dp.EnsurePod(ctx, e.podSpec(b, 0, h)); err != nil {
			b.Fatal(err)
		}
	}
	for _, full := range []bool{true, false} {
		name, read := "node-only", e.dp.ObserveNode
		if full {
			name, read = "full", e.dp.Observe
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				n, err := read(ctx)
				if err != nil || len(n.Pods) != pods {
					b.Fatalf("%d pods, %v", len(n.Pods), err)
				}
			}
		})
	}
}

// BenchmarkPodSetupTeardownFull is BenchmarkPodSetupTeardown on a node that
// already holds 80 pods: what grows with the pods is the netlink dumps.
func BenchmarkPodSetupTeardownFull(b *testing.B) {
	e := newEnv(b, 1)
	ctx := ctxT(b)
	for h := 10; h < 90; h++ {
		if _, _, err := e.dp.EnsurePod(ctx, e.podSpec(b, 0, h)); err != nil {
			b.Fatal(err)
		}
	}
	s := e.podSpec(b, 0, 95)
	setupTeardown(ctx, b, e, s)
}

// setupTeardown sets s up and tears it down once per iteration, and
// reports the two halves' mean times.
func setupTeardown(ctx context.Context, b *testing.B, e *env, s linux.PodSpec) {
	var setup, teardown time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, _, err := e.dp.EnsurePod(ctx, s); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := e.dp.TeardownPod(ctx, s.Key, s.NetNS); err != nil {
			b.Fatal(err)
		}
		setup, teardown = setup+t1.Sub(t0), teardown+time.Since(t1)
	}
	b.ReportMetric(float64(setup.Nanoseconds())/float64(b.N), "setup-ns/op")
	b.ReportMetric(float64(teardown.Nanoseconds())/float64(b.N), "teardown-ns/op")
}

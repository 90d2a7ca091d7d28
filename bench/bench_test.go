package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

func TestParsePlannerBench(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkMake/warm/pods=10-2         	     200	     25402 ns/op	   30072 B/op	      45 allocs/op
BenchmarkMake/burst/pods=1000-2      	     200	   2617580.5 ns/op	 2139340 B/op	    5541 allocs/op
BenchmarkOther-2  1  1 ns/op  1 B/op  1 allocs/op
PASS
`)
	want := []planBench{
		{kind: "warm", pods: 10, ns: 25402, b: 30072, allocs: 45},
		{kind: "burst", pods: 1000, ns: 2617580.5, b: 2139340, allocs: 5541},
	}
	if diff := cmp.Diff(want, parsePlannerBench(out), cmp.AllowUnexported(planBench{})); diff != "" {
		t.Errorf("parsePlannerBench (-want +got):\n%s", diff)
	}
}

func TestPct(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i))
	}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 100}, {90, 180}, {99, 198}, {100, 200}} {
		if got := pct(ds, c.p); got != c.want {
			t.Errorf("pct(1..200, %d) = %d, want %d", c.p, got, c.want)
		}
	}
	if got := pct(nil, 99); got != 0 {
		t.Errorf("pct(nil) = %d, want 0", got)
	}
}

// The churn trace must be the same for every run and every pool setting,
// and every stop must follow its start.
func TestChurnTraceDeterministic(t *testing.T) {
	a, na := churnTrace(30 * time.Second)
	b, nb := churnTrace(30 * time.Second)
	if diff := cmp.Diff(a, b, cmp.AllowUnexported(churnEvent{})); diff != "" || na != nb {
		t.Fatalf("two traces differ (-first +second):\n%s", diff)
	}
	if na < 60 || na > 120 {
		t.Errorf("%d starts in 30s at %.0f/s: the arrival process is off", na, churnRate)
	}
	started := map[int]bool{}
	for i, ev := range a {
		if i > 0 && ev.at < a[i-1].at {
			t.Fatalf("event %d at %s before event %d at %s", i, ev.at, i-1, a[i-1].at)
		}
		if ev.start {
			started[ev.pod] = true
		} else if !started[ev.pod] {
			t.Fatalf("pod %d stops before it starts", ev.pod)
		}
	}
}

func TestNecessaryCalls(t *testing.T) {
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	before := ecssim.State{ENIs: []ecssim.ENIState{
		{ID: "eni-1", Type: "Secondary", InstanceID: "i-1", IPv4: []netip.Addr{ip("10.0.0.1")}},
		{ID: "eni-2", Type: "Secondary", InstanceID: "i-2", IPv4: []netip.Addr{ip("10.0.0.2")}},
	}}
	after := ecssim.State{ENIs: []ecssim.ENIState{
		{ID: "eni-1", Type: "Secondary", InstanceID: "i-1", IPv4: []netip.Addr{ip("10.0.0.1"), ip("10.0.0.3")}},
		{ID: "eni-2", Type: "Secondary", InstanceID: "i-2", IPv4: []netip.Addr{ip("10.0.0.2")}},
		{ID: "eni-3", Type: "Secondary", InstanceID: "i-2"},
		{ID: "eni-4", Type: "Primary", InstanceID: "i-3"},
		{ID: "eni-5", Type: "Secondary", InstanceID: "i-other"},
	}}
	n, _ := necessaryCalls(before, after, []string{"i-1", "i-2", "i-3"})
	if n != 1+3 {
		t.Errorf("necessaryCalls = %d, want 4 (one assign, one new ENI)", n)
	}
}

func TestBurstBound(t *testing.T) {
	st := ecssim.State{
		Instances: []ecssim.InstanceState{{ID: "i-1", InstanceType: burstType}},
		ENIs:      []ecssim.ENIState{{ID: "eni-1", Type: "Secondary", InstanceID: "i-1", IPv4: make([]netip.Addr, 5)}},
	}
	// ecs.g7.4xlarge: 30 IPv4 per ENI, the primary one included: room 24.
	for _, c := range []struct {
		need, idle int
		want       time.Duration
	}{
		{need: 5, idle: 5, want: time.Millisecond},
		{need: 20, idle: 5, want: realistic().mutation},
		{need: 64, idle: 5, want: 2*realistic().mutation + realistic().attach},
	} {
		if got, why := burstBound(realistic(), st, "i-1", c.need, c.idle, 1); got != c.want {
			t.Errorf("burstBound(need %d, idle %d) = %s (%s), want %s", c.need, c.idle, got, why, c.want)
		}
	}
}

func TestTableSaysMissedAndBroken(t *testing.T) {
	met, missed := Result{Scenario: "a"}, Result{Scenario: "b"}
	met.judge("t", true)
	missed.judge("t", false)
	broken := Result{Scenario: "c"}
	broken.broken("ip %s bound twice", "10.0.0.1")
	skipped := Result{Scenario: "d", Skipped: "needs root"}
	var b bytes.Buffer
	renderTable(&b, []Result{met, missed, broken, skipped})
	for _, want := range []string{"| a | - | - | t | met |", "| b | - | - | t | **missed** |",
		"**BROKEN**: ip 10.0.0.1 bound twice", "skipped: needs root"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

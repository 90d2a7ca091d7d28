package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile"
	"github.com/enidnet/enid/reconcile/status"
)

// prefixPool is testPool without the spread of pool work after a change
// of the pool's knobs (docs/config.md pool.spreadWindow): a one-node test
// has no fleet to spread, and `enid plan --config` previews the switch
// itself rather than the wait for the node's turn.
const prefixPool = testPool + "  spreadWindow: 0s\n"

// allocation returns the eni.ipv4Allocation line for the node's config:
// n.Config ends inside the eni: block, so the line goes first in extra.
func allocation(mode string) string { return "  ipv4Allocation: " + mode + "\n" }

// addrKind says what the simulator holds ip as on the owned ENIs in st:
// "secondary", "prefix" (inside a /28 prefix) or "" (not held), and on
// which ENI.
func (n *node) addrKind(st ecssim.State, ip netip.Addr) (kind, eni string) {
	for _, e := range n.owned(st) {
		if slices.Contains(e.IPv4, ip) {
			return "secondary", e.ID
		}
		for _, q := range e.IPv4Prefixes {
			if q.Contains(ip) {
				return "prefix", e.ID
			}
		}
	}
	return "", ""
}

// ownedKinds counts the secondary addresses and the prefixes on owned ENIs.
func (n *node) ownedKinds() (secondary, prefixes int) {
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		secondary += len(e.IPv4)
		prefixes += len(e.IPv4Prefixes)
	}
	return secondary, prefixes
}

// churnAdd is one ADD of the churn: when it began, the address and what
// the simulator held it as right after the ADD returned.
type churnAdd struct {
	began time.Time
	pod   string
	ip    netip.Addr
	kind  string
}

// churn adds and deletes short-lived pods on a node from a few workers
// until stop. Every address it gets must be free among the live pods, be
// held by an owned ENI when the ADD returns and still be when its DEL
// begins.
type churn struct {
	n    *node
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex // guards the fields below
	live map[netip.Addr]string
	adds []churnAdd
	fail int
}

// startChurn starts workers that each keep one pod at a time, alive for
// 0-300ms. The test calls end.
func (n *node) startChurn(ctx context.Context, workers int) *churn {
	c := &churn{n: n, stop: make(chan struct{}), live: map[netip.Addr]string{}}
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(w), 0x707265666978))
		c.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				select {
				case <-c.stop:
					return
				default:
				}
				if !c.one(ctx, fmt.Sprintf("c%d-%d", w, i), time.Duration(rng.IntN(300))*time.Millisecond) {
					return
				}
			}
		})
	}
	return c
}

// one runs one churn pod's life; false means stop (the test has failed).
func (c *churn) one(ctx context.Context, name string, life time.Duration) bool {
	n, t := c.n, c.n.t
	p, err := n.makePod(name)
	if err != nil {
		t.Error(err)
		return false
	}
	began := time.Now()
	ip, err := n.add(ctx, p)
	kind, eni := "", ""
	if err == nil {
		kind, eni = n.addrKind(n.sn.Sim.Dump(), ip)
	}
	c.mu.Lock()
	switch {
	case err != nil:
		c.fail++
		t.Errorf("churn ADD %s: %v", name, err)
	case c.live[ip] != "":
		t.Errorf("churn ADD %s returned %s, which live pod %s holds", name, ip, c.live[ip])
	case kind == "":
		t.Errorf("churn ADD %s returned %s, which no owned ENI holds", name, ip)
	default:
		c.live[ip] = name
		c.adds = append(c.adds, churnAdd{began: began, pod: name, ip: ip, kind: kind})
	}
	c.mu.Unlock()
	time.Sleep(life)
	if err == nil {
		// The pod has its address until its DEL begins: the ENI must still
		// hold it, as the kind it had (a prefix is never released, nor an
		// address taken out of it, while a pod is bound in it).
		if k, e := n.addrKind(n.sn.Sim.Dump(), ip); k != kind || e != eni {
			t.Errorf("churn pod %s: %s was a %s address of %s, now %q of %q before its DEL", name, ip, kind, eni, k, e)
		}
		c.mu.Lock()
		if c.live[ip] == name {
			delete(c.live, ip)
		}
		c.mu.Unlock()
	}
	if err := n.rt.Del(ctx, p.Pod); err != nil {
		t.Errorf("churn DEL %s: %v", name, err)
	}
	n.removePod(p)
	return true
}

// since returns the ADDs that began at or after t.
func (c *churn) since(t time.Time) []churnAdd {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []churnAdd
	for _, a := range c.adds {
		if !a.began.Before(t) {
			out = append(out, a)
		}
	}
	return out
}

// end stops the workers and waits for them (their last pods deleted).
func (c *churn) end() {
	close(c.stop)
	c.wg.Wait()
}

// kept is a long-lived pod and what it must keep: its address and ENI.
type kept struct {
	p   *pod
	ip  netip.Addr
	eni string
}

// addKept adds pods named name0..k-1 and records their addresses and ENIs
// (from their statuses), checking the simulator holds each on that ENI, as
// kind unless kind is "".
func (n *node) addKept(ctx context.Context, name string, k int, kind string) []kept {
	n.t.Helper()
	pods := make([]*pod, k)
	for i := range pods {
		pods[i] = n.newPod(fmt.Sprintf("%s%d", name, i))
	}
	ips := n.addAll(ctx, pods)
	st := n.sn.Sim.Dump()
	out := make([]kept, k)
	for i, p := range pods {
		s, err := n.statusOf(p)
		if err != nil {
			n.t.Fatalf("status of %s: %v", p.Name, err)
		}
		if got, eni := n.addrKind(st, ips[i]); (got != kind && kind != "") || got == "" || eni != s.ENIID {
			n.t.Errorf("pod %s: %s is held as %q on %q, want a %s address of %s (its status)", p.Name, ips[i], got, eni, kind, s.ENIID)
		}
		out[i] = kept{p: p, ip: ips[i], eni: s.ENIID}
	}
	return out
}

// checkKept checks that long-lived pods still have what they had: Ready
// status with the same address and ENI, that address (only) in their
// netns, the host route to it via their veth only, the simulator holding
// it on that ENI, the VPC reaching it, and CNI CHECK passing.
func (n *node) checkKept(ctx context.Context, pods []kept) {
	n.t.Helper()
	st := n.sn.Sim.Dump()
	for _, k := range pods {
		s, err := n.statusOf(k.p)
		if err != nil || s.Phase != status.Ready || len(s.IPs) == 0 || s.IPs[0].Address.Addr() != k.ip || s.ENIID != k.eni {
			n.t.Errorf("pod %s: status %+v (err %v), want Ready with %s on %s", k.p.Name, s, err, k.ip, k.eni)
		}
		if got := n.podAddrs(k.p.NetNS); !slices.Equal(got, []netip.Addr{k.ip}) {
			n.t.Errorf("pod %s: addresses in its netns %v, want [%s]", k.p.Name, got, k.ip)
		}
		veth := linux.HostVethName(observed.AttachmentKey{ContainerID: k.p.ContainerID, IfName: k.p.IfName})
		if got := n.hostRouteLinks(k.ip); !slices.Equal(got, []string{veth}) {
			n.t.Errorf("pod %s (%s): host routes via %v, want exactly [%s]", k.p.Name, k.ip, got, veth)
		}
		if kind, eni := n.addrKind(st, k.ip); kind == "" || eni != k.eni {
			n.t.Errorf("pod %s: %s is held as %q on %q in the simulator, want on %s", k.p.Name, k.ip, kind, eni, k.eni)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := linuxtest.Ping(pctx, n.sn.Topology.VPCNS, k.ip); err != nil {
			n.t.Errorf("vpc -> %s: %v", k.p.Name, err)
		}
		cancel()
		if err := n.rt.Check(ctx, k.p.Pod); err != nil {
			n.t.Errorf("CHECK %s: %v", k.p.Name, err)
		}
	}
}

// hostRouteLinks lists the links of enid's main-table routes to ip in the
// node namespace; unlike nodeKernel it reads only those, and again when
// the dump is interrupted by the churn changing routes meanwhile.
func (n *node) hostRouteLinks(ip netip.Addr) []string {
	n.t.Helper()
	h := nsHandle(n.t, n.sn.NodeNS())
	defer h.Close()
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: linux.Proto}
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	for try := 0; errors.Is(err, netlink.ErrDumpInterrupted) && try < 5; try++ {
		routes, err = h.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	}
	if err != nil {
		n.t.Fatalf("list routes: %v", err)
	}
	var out []string
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if a, ok := netip.AddrFromSlice(r.Dst.IP); ok && a.Unmap() == ip {
			l, err := h.LinkByIndex(r.LinkIndex)
			if err != nil {
				n.t.Fatalf("link %d: %v", r.LinkIndex, err)
			}
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// watchKept checks every 100ms until the returned stop (idempotent) is
// called that the
// simulator still holds each long-lived pod's address on its ENI: no pod
// loses its address at any moment of a switch, not only at the checks.
// The pods are read through get, as the test removes them when it
// deletes them.
func (n *node) watchKept(get func() []kept) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			pods := get()
			st := n.sn.Sim.Dump()
			for _, k := range pods {
				if kind, eni := n.addrKind(st, k.ip); kind == "" || eni != k.eni {
					n.t.Errorf("pod %s lost its address: %s is held as %q on %q, was on %s", k.p.Name, k.ip, kind, eni, k.eni)
				}
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// previewPlan runs `enid plan --config` with cfg as the candidate config
// until its output has every one of want (the churn moves the pool, and
// a cooling or bound address is not released), and returns that output.
func (n *node) previewPlan(ctx context.Context, cfg string, want ...string) string {
	n.t.Helper()
	path := filepath.Join(n.dir, "candidate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		n.t.Fatal(err)
	}
	var out string
	waitFor(n.t, 15*time.Second, "enid plan --config <candidate> shows the switch", func() (bool, string) {
		code, o, stderr := n.plan(ctx, "--config", path)
		out = o
		if code != 0 && code != 2 {
			return false, fmt.Sprintf("exit %d:\n%s%s", code, o, stderr)
		}
		for _, w := range want {
			if !strings.Contains(o, w) {
				return false, fmt.Sprintf("no %q in:\n%s", w, o)
			}
		}
		return true, ""
	})
	return out
}

// TestPrefixSwitchUnderChurn is issue 15's acceptance: a node in secondary
// mode with running pods is switched to `eni.ipv4Allocation: prefix` and
// back by ConfigMap edits while pods keep coming and going. `enid plan`
// with the candidate config shows each migration; no pod loses its
// address (watched every 100ms, and status, netns, route, VPC reach and
// CHECK after each switch); pods added after a switch takes effect get
// the new kind; a burst's prefixes go back whole after it while the churn
// binds addresses in them; the old kind drains as its pods go (prefixes
// whole); no cloud call is refused (an address unassigned out of a prefix
// would be). Finally the pool settles in secondary mode with no prefix
// left, and once more, without pods, in prefix mode within its documented
// bounds.
func TestPrefixSwitchUnderChurn(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: allocation("secondary") + prefixPool, configMap: true, addTimeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)

	var mu sync.Mutex // guards longLived
	var longLived []kept
	setKept := func(k []kept) { mu.Lock(); longLived = k; mu.Unlock() }
	stopWatch := n.watchKept(func() []kept { mu.Lock(); defer mu.Unlock(); return slices.Clone(longLived) })
	defer stopWatch()

	old := n.addKept(ctx, "a", 6, "secondary")
	setKept(old)
	c := n.startChurn(ctx, 3)
	churnEnded := false
	defer func() {
		if !churnEnded {
			c.end()
		}
	}()
	time.Sleep(time.Second)

	// Secondary -> prefix. The preview shows the migration: a prefix asked
	// for, and idle secondary addresses given back for the switch.
	prefixCfg := n.Config(allocation("prefix") + prefixPool)
	out := n.previewPlan(ctx, prefixCfg, "/28 prefix", "allocation-mode-changed")
	t.Logf("enid plan --config <prefix>:\n%s", out)
	n.swapConfigMap(prefixCfg)
	n.prefixMode = true
	waitFor(t, 20*time.Second, "a prefix on an owned ENI", func() (bool, string) {
		s, p := n.ownedKinds()
		return p > 0, fmt.Sprintf("%d secondary addresses, %d prefixes", s, p)
	})
	// From here on the agent runs in prefix mode: every new pod gets an
	// address of a prefix.
	switched := time.Now()
	n.checkKept(ctx, old)
	time.Sleep(2 * time.Second)
	newer := n.addKept(ctx, "b", 6, "prefix")
	setKept(append(slices.Clone(old), newer...))
	n.checkKept(ctx, old)
	// A pod on a secondary address and one in a prefix reach each other.
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	if err := linuxtest.Ping(pctx, old[0].p.NetNS, newer[0].ip); err != nil {
		t.Errorf("%s -> %s (%s): %v", old[0].p.Name, newer[0].p.Name, newer[0].ip, err)
	}
	pcancel()

	// A burst and its end: prefixes grow for it and go back whole once
	// idle stays at or above maxIdle without them (idle-16 >= 6), while the
	// churn keeps binding addresses in them.
	burst := n.addKept(ctx, "x", 24, "prefix")
	_, peak := n.ownedKinds()
	n.delAll(ctx, podsOf(burst))
	waitFor(t, 20*time.Second, "a prefix released after the burst", func() (bool, string) {
		s, p := n.ownedKinds()
		return p < peak, fmt.Sprintf("%d secondary addresses, %d prefixes (peak %d)", s, p, peak)
	})
	_, after := n.ownedKinds()
	t.Logf("prefixes: %d for the burst, %d after it", peak, after)

	// The old pods go; their addresses go back, and with them the last
	// secondary address (churn pods that began before the switch are long
	// gone too).
	setKept(newer) // before their DELs: a deleted pod's address may go
	n.delAll(ctx, podsOf(old))
	waitFor(t, 20*time.Second, "no secondary address left", func() (bool, string) {
		s, p := n.ownedKinds()
		return s == 0, fmt.Sprintf("%d secondary addresses, %d prefixes", s, p)
	})
	adds := c.since(switched)
	for _, a := range adds {
		if a.kind != "prefix" {
			t.Errorf("churn pod %s (ADD began %s after the switch) got %s, a %s address", a.pod, a.began.Sub(switched).Round(time.Millisecond), a.ip, a.kind)
		}
	}
	t.Logf("prefix mode: %d churn ADDs after the switch", len(adds))
	if len(adds) < 10 {
		t.Errorf("only %d churn ADDs in prefix mode: too little churn to prove anything", len(adds))
	}

	// Prefix -> secondary. The free addresses of prefixes become surplus
	// (not idle), so the preview grows single addresses (for the pool's
	// minimum, or for churn pods that wait).
	secondaryCfg := n.Config(allocation("secondary") + prefixPool)
	out = n.previewPlan(ctx, secondaryCfg, "surplus ", "AssignIPs ")
	t.Logf("enid plan --config <secondary>:\n%s", out)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "AssignIPs") && (strings.Contains(l, "/28") || !strings.Contains(l, " ipv4 +")) {
			t.Errorf("back to secondary, the preview asks for something else than single addresses: %s", l)
		}
	}
	n.swapConfigMap(secondaryCfg)
	n.prefixMode = false
	waitFor(t, 20*time.Second, "a secondary address on an owned ENI", func() (bool, string) {
		s, p := n.ownedKinds()
		return s > 0, fmt.Sprintf("%d secondary addresses, %d prefixes", s, p)
	})
	switched = time.Now()
	n.checkKept(ctx, newer)
	time.Sleep(2 * time.Second)
	n.checkKept(ctx, newer)

	// The prefix pods go; prefixes go back whole once empty (the watch and
	// the churn's checks catch any taken while a pod is bound in one).
	setKept(nil)
	n.delAll(ctx, podsOf(newer))
	waitFor(t, 20*time.Second, "no prefix left", func() (bool, string) {
		s, p := n.ownedKinds()
		return p == 0, fmt.Sprintf("%d secondary addresses, %d prefixes", s, p)
	})
	c.end()
	churnEnded = true
	adds = c.since(switched)
	for _, a := range adds {
		if a.kind != "secondary" {
			t.Errorf("churn pod %s (ADD began %s after the switch back) got %s, a %s address", a.pod, a.began.Sub(switched).Round(time.Millisecond), a.ip, a.kind)
		}
	}
	c.mu.Lock()
	t.Logf("secondary mode again: %d churn ADDs after the switch back; %d in all, %d failed", len(adds), len(c.adds), c.fail)
	c.mu.Unlock()
	if len(adds) < 10 {
		t.Errorf("only %d churn ADDs after the switch back: too little churn to prove anything", len(adds))
	}
	stopWatch()
	n.waitSettled(2, 6, 30*time.Second)
	// Every call succeeds but for OperationConflict (injected by the
	// realistic profile): a refused one would be a request the model
	// rejects (an address unassigned out of a prefix, a prefix on a full
	// ENI...).
	calls, _, summary := countCalls(n.sn.Sim.Counters())
	t.Logf("%d cloud calls: %s", calls, summary)
	for action, outcomes := range n.sn.Sim.Counters() {
		for outcome, k := range outcomes {
			if outcome != "ok" && outcome != "OperationConflict" {
				t.Errorf("%s failed %d times with %s", action, k, outcome)
			}
		}
	}

	// Once more to prefix mode, without pods: the pool settles within the
	// bounds prefix mode documents, all in prefixes.
	n.swapConfigMap(prefixCfg)
	n.prefixMode = true
	n.waitSettled(2, 6, 30*time.Second)
}

// podsOf returns the pods of kept.
func podsOf(k []kept) []*pod {
	out := make([]*pod, len(k))
	for i := range k {
		out[i] = k[i].p
	}
	return out
}

// TestPrefixFragmentedFallback: with `prefer-prefix` on a vSwitch that has
// no aligned /28 free (fragmented before the agent starts), pods are served
// with single addresses, none fails, and the agent marks the vSwitch
// fragmented. The mark lasts planner.DefaultFragmentedFor (5 minutes, no
// knob), so within the test the vSwitch, defragmented, still gets no
// prefix request; a switch to strict `prefix` makes a new pod wait with
// `vswitch-fragmented` (status and `enid plan`) while the running pods keep
// their addresses, and the switch back to `prefer-prefix` serves it. The
// expiry itself is played as an agent stopped past it (the mark moved into
// the past in its memory.json while it is down): restarted, it takes
// prefixes again, and the pool settles all in prefixes.
func TestPrefixFragmentedFallback(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: allocation("prefer-prefix") + prefixPool, configMap: true, addTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vsw := n.sn.Instance.VSwitchID
	for _, v := range n.sn.Sim.Dump().VSwitches {
		if _, err := n.sn.Sim.FragmentVSwitch(v.ID); err != nil {
			t.Fatal(err)
		}
		if v, _ := n.vswitch(v.ID); v.FreePrefixes != 0 || v.AvailableIPs < 100 {
			t.Fatalf("fragmented %s: %d free /28s, %d free addresses; want none and many", v.ID, v.FreePrefixes, v.AvailableIPs)
		}
	}
	n.startAgent()
	n.waitReady(30 * time.Second)

	pods := n.addKept(ctx, "f", 8, "secondary")
	if _, p := n.ownedKinds(); p != 0 {
		t.Errorf("%d prefixes on owned ENIs of a fragmented vSwitch", p)
	}
	refused := 0
	for action, outcomes := range n.sn.Sim.Counters() {
		if action == "AssignPrivateIpAddresses" || action == "CreateNetworkInterface" {
			refused += outcomes["InvalidVSwitchId.IpNotEnough"]
		}
	}
	if refused == 0 {
		t.Error("no prefix request was refused: the test proves nothing")
	}
	waitFor(t, 10*time.Second, "the vSwitch marked fragmented in the agent's memory", func() (bool, string) {
		m, err := reconcile.ReadMemory(n.stateDir)
		if err != nil {
			return false, err.Error()
		}
		until := m.Fragmented[vsw]
		return time.Until(until) > time.Minute, fmt.Sprintf("fragmented %v", m.Fragmented)
	})

	// Defragmented, but the mark holds: prefer-prefix asks no prefix of it
	// until the mark expires (5 minutes, longer than a test).
	if _, err := n.sn.Sim.DefragmentVSwitch(vsw); err != nil {
		t.Fatal(err)
	}
	pods = append(pods, n.addKept(ctx, "g", 2, "secondary")...)

	// Strict prefix: free single addresses are of the wrong kind and go
	// back; a new pod waits, as the vSwitch is marked. Growth in flight
	// when the config changes could bring single addresses after that, and
	// they would serve the new pod (surplus serves a pod no growth can), so
	// the pool converges first; the switch is in force once the agent's
	// memory records it.
	n.waitConverged(30 * time.Second)
	n.swapConfigMap(n.Config(allocation("prefix") + prefixPool))
	n.waitKnobs("ipv4Allocation=prefix", 10*time.Second)
	waitFor(t, 10*time.Second, "only bound secondary addresses left", func() (bool, string) {
		s, p := n.ownedKinds()
		return s == len(pods) && p == 0, fmt.Sprintf("%d secondary addresses (%d pods), %d prefixes", s, len(pods), p)
	})
	w := n.newPod("w")
	added := make(chan error, 1)
	go func() {
		_, err := n.add(ctx, w)
		added <- err
	}()
	waitFor(t, 10*time.Second, "the new pod waiting with vswitch-fragmented", func() (bool, string) {
		s, err := n.statusOf(w)
		if err != nil {
			return false, err.Error()
		}
		return s.Phase == status.Pending && s.ReasonCode == "vswitch-fragmented", fmt.Sprintf("%s %s: %s", s.Phase, s.ReasonCode, s.Reason)
	})
	// The plan's statuses say so too (the text shows only changes), once
	// its own view of the cloud is current (the realistic profile's stale
	// describes can still show the addresses just given back).
	waitFor(t, 15*time.Second, "enid plan --output json shows the pod waiting with vswitch-fragmented", func() (bool, string) {
		code, out, stderr := n.plan(ctx, "--output", "json")
		return code == 0 && strings.Contains(out, `"reasonCode": "vswitch-fragmented"`), fmt.Sprintf("exit %d:\n%s%s", code, out, stderr)
	})
	select {
	case err := <-added:
		t.Fatalf("ADD returned while the pod should wait: %v", err)
	default:
	}
	n.checkBindings(podsOf(pods))

	// prefer-prefix again: the waiting pod gets a single address.
	n.swapConfigMap(n.Config(allocation("prefer-prefix") + prefixPool))
	select {
	case err := <-added:
		if err != nil {
			t.Fatalf("ADD after the switch back to prefer-prefix: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ADD not served within 20s of the switch back to prefer-prefix")
	}
	all := append(podsOf(pods), w)
	n.checkBindings(all)
	for _, k := range pods {
		if s, err := n.statusOf(k.p); err != nil || s.IPs[0].Address.Addr() != k.ip {
			t.Errorf("pod %s: status %+v (err %v), want its address %s", k.p.Name, s, err, k.ip)
		}
	}
	if kind, _ := n.addrKind(n.sn.Sim.Dump(), mustStatusIP(t, n, w)); kind != "secondary" {
		t.Errorf("the waiting pod got a %q address, want a secondary one", kind)
	}
	n.delAll(ctx, all)
	n.waitSettled(2, 6, 30*time.Second)

	// The mark's expiry, without waiting 5 minutes: the agent stopped for
	// that long (its memory keeps the mark across restarts, so the test
	// moves the mark into the past while it is down). prefer-prefix then
	// asks the defragmented vSwitch for a prefix again.
	n.agent.stop(t)
	m, err := reconcile.ReadMemory(n.stateDir)
	if err != nil || m.Fragmented[vsw].IsZero() {
		t.Fatalf("memory after the stop: fragmented %v (err %v), want %s marked", m.Fragmented, err, vsw)
	}
	m.Fragmented[vsw] = time.Now().Add(-time.Second)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.stateDir, "memory.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	n.startAgent()
	n.waitReady(30 * time.Second)
	pods = n.addKept(ctx, "h", 8, "")
	kinds := map[string]int{}
	st := n.sn.Sim.Dump()
	for _, k := range pods {
		kind, _ := n.addrKind(st, k.ip)
		kinds[kind]++
	}
	t.Logf("after the mark's expiry, 8 pods got addresses of kinds %v", kinds)
	if kinds["prefix"] == 0 {
		t.Errorf("after the mark expired, 8 pods got addresses of kinds %v, want some inside a prefix", kinds)
	}
	n.checkBindings(podsOf(pods))
	n.delAll(ctx, podsOf(pods))
	// Single addresses go first (docs/config.md), so prefer-prefix settles
	// like prefix mode: all in prefixes, within maxIdle+15.
	n.prefixMode = true
	n.waitSettled(2, 6, 30*time.Second)
}

// vswitch returns the simulator's vSwitch id.
func (n *node) vswitch(id string) (ecssim.VSwitchState, bool) {
	for _, v := range n.sn.Sim.Dump().VSwitches {
		if v.ID == id {
			return v, true
		}
	}
	return ecssim.VSwitchState{}, false
}

// mustStatusIP returns the IPv4 address of p's status.
func mustStatusIP(t *testing.T, n *node, p *pod) netip.Addr {
	t.Helper()
	s, err := n.statusOf(p)
	if err != nil || len(s.IPs) == 0 {
		t.Fatalf("status of %s: %+v (err %v)", p.Name, s, err)
	}
	return s.IPs[0].Address.Addr()
}

// waitConverged waits until `enid plan --detailed-exitcode` exits 0: the
// agent would do nothing more (nothing in flight either, as the cloud
// shows it).
func (n *node) waitConverged(timeout time.Duration) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	waitFor(n.t, timeout, "enid plan --detailed-exitcode exits 0", func() (bool, string) {
		code, out, stderr := n.plan(ctx, "--detailed-exitcode")
		return code == 0, fmt.Sprintf("exit %d:\n%s%s", code, out, stderr)
	})
}

// waitKnobs waits until the agent's persisted memory records pool knobs
// containing want: it has planned with the config that sets them.
func (n *node) waitKnobs(want string, timeout time.Duration) {
	n.t.Helper()
	waitFor(n.t, timeout, "the agent's memory records "+want, func() (bool, string) {
		m, err := reconcile.ReadMemory(n.stateDir)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(m.PoolKnobs, want), "pool knobs " + m.PoolKnobs
	})
}

// TestCrashMidPrefixSwitch: the agent is SIGKILLed 0-400ms after each
// ConfigMap switch (secondary -> prefix -> secondary; API latency keeps the
// switch's calls in flight) and restarted. Pods running through it keep
// their addresses, pods added after it get the new kind, the old kind
// drains as its pods go, and the pool settles without a leak.
func TestCrashMidPrefixSwitch(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x737769746368))
			n := newNode(t, nodeOptions{extraConfig: allocation("secondary") + prefixPool, configMap: true, addTimeout: 20 * time.Second,
				sim: ecssim.Config{Latency: ecssim.Latency{Fixed: 10 * time.Millisecond, Uniform: 40 * time.Millisecond}}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n.startAgent()
			n.waitReady(30 * time.Second)
			switchAndKill := func(mode string) {
				t.Helper()
				mutations := func() int {
					c := n.sn.Sim.Counters()
					return sum(c["AssignPrivateIpAddresses"]) + sum(c["UnassignPrivateIpAddresses"])
				}
				before := mutations()
				n.swapConfigMap(n.Config(allocation(mode) + prefixPool))
				n.prefixMode = mode == "prefix"
				d := time.Duration(rng.IntN(300)) * time.Millisecond
				time.Sleep(d)
				n.agent.kill()
				t.Logf("SIGKILL %s after the switch to %s, %d assign/unassign calls after the switch", d, mode, mutations()-before)
				n.startAgent()
				n.waitReady(30 * time.Second)
			}
			old := n.addKept(ctx, "a", 6, "secondary")
			switchAndKill("prefix")
			newer := n.addKept(ctx, "b", 6, "prefix")
			n.checkKept(ctx, old)
			n.delAll(ctx, podsOf(old))
			waitFor(t, 20*time.Second, "no secondary address left", func() (bool, string) {
				s, p := n.ownedKinds()
				return s == 0, fmt.Sprintf("%d secondary addresses, %d prefixes", s, p)
			})
			switchAndKill("secondary")
			last := n.addKept(ctx, "c", 4, "secondary")
			n.checkKept(ctx, newer)
			n.delAll(ctx, podsOf(newer))
			waitFor(t, 20*time.Second, "no prefix left", func() (bool, string) {
				s, p := n.ownedKinds()
				return p == 0, fmt.Sprintf("%d secondary addresses, %d prefixes", s, p)
			})
			n.checkBindings(podsOf(last))
			n.delAll(ctx, podsOf(last))
			n.waitSettled(2, 6, 30*time.Second)
		})
	}
}

// sum adds up a counter's outcomes.
func sum(outcomes map[string]int) int {
	k := 0
	for _, v := range outcomes {
		k += v
	}
	return k
}

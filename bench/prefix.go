package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// The eni: lines of the IPv4 allocation modes the prefix scenario compares.
const (
	allocSecondary = "  ipv4Allocation: secondary\n"
	allocPrefix    = "  ipv4Allocation: prefix\n"
	allocPrefer    = "  ipv4Allocation: prefer-prefix\n"
)

// prefixChurnTime is the length of the prefix scenario's churn trace in
// the full run: two default resync periods and a bit.
const prefixChurnTime = 250 * time.Second

// prefixChurnTarget is issue 15's bound on cloud calls per pod start in
// prefix mode at the default pool.
var prefixChurnTarget = callTarget{text: "<= 0.05 calls/pod start", max: 0.05}

// runPrefix compares /28 prefix mode with secondary addresses: the churn
// trace in both modes and on a fragmented vSwitch (prefer-prefix falls
// back to addresses), a cold burst in prefix mode against its API bound,
// and the pods per node each mode allows on the simulator's real instance
// types.
func runPrefix(ctx context.Context, e env) []Result {
	// Compressing the resync (as the churn scenario does) would charge a
	// full re-read every 12 s to 36 pod starts: ten times its share on a
	// node at this rate, and alone above the prefix target. These rows
	// keep the default resync and play a trace long enough to hold two.
	length, resync := e.sizes.churnTime, time.Duration(0)
	if !e.quick {
		length, resync = prefixChurnTime, desired.DefaultResyncPeriod
	}
	events, starts := churnTrace(length)
	def := churnSettings()[1]
	def.resync = resync
	secondary, prefix, fragmented := def, def, def
	secondary.scenario, secondary.eni = "prefix: churn, secondary addresses", allocSecondary
	prefix.scenario, prefix.eni, prefix.target = "prefix: churn, /28 prefixes", allocPrefix, &prefixChurnTarget
	fragmented.scenario, fragmented.eni = "prefix: churn, fragmented vSwitch (prefer-prefix)", allocPrefer
	fragmented.prepare = fragmentAll
	fragmented.inspect = countByKind
	out := churnCases(ctx, e, []poolSetting{secondary, prefix, fragmented}, events, starts)
	out = append(out, burstRoundsOf(ctx, e, burstCase{scenario: "prefix: cold burst", eni: allocPrefix, perSlot: 16})...)
	return append(out, runDensity(ctx, e))
}

// fragmentAll fragments every vSwitch of the simulator: no aligned /28 is
// free, while most single addresses are.
func fragmentAll(sim *ecssim.Server) error {
	for _, v := range sim.Dump().VSwitches {
		if _, err := sim.FragmentVSwitch(v.ID); err != nil {
			return err
		}
	}
	return nil
}

// countByKind adds how many of the node's pod addresses, and of the live
// pods' addresses, are secondary addresses and how many lie in prefixes;
// it fails the row when a prefix was given on a fragmented vSwitch.
func countByKind(r *Result, sim *ecssim.Server, a *agent) {
	st := sim.Dump()
	var secondary, inPrefixes int
	var prefixes []netip.Prefix
	for _, en := range st.ENIs {
		if en.Type != "Secondary" {
			continue
		}
		secondary += len(en.IPv4)
		inPrefixes += 16 * len(en.IPv4Prefixes)
		prefixes = append(prefixes, en.IPv4Prefixes...)
	}
	sts, _, err := a.status.ReadAll()
	if err != nil {
		r.broken("read statuses: %v", err)
		return
	}
	var podsSecondary, podsPrefix int
	for _, s := range sts {
		if s.Phase != status.Ready {
			continue
		}
		for _, ip := range s.IPs {
			if !ip.Address.Addr().Is4() {
				continue
			}
			if inAny(prefixes, ip.Address.Addr()) {
				podsPrefix++
			} else {
				podsSecondary++
			}
		}
	}
	r.add("held as addresses", float64(secondary), "IPs")
	r.add("held in prefixes", float64(inPrefixes), "IPs")
	r.add("live pods on addresses", float64(podsSecondary), "pods")
	r.add("live pods in prefixes", float64(podsPrefix), "pods")
	r.judge("0 pods failed", len(r.Broken) == 0)
	if inPrefixes > 0 {
		r.note("a fragmented vSwitch gave %d addresses in prefixes: the fragmentation control did not hold", inPrefixes)
	}
}

func inAny(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// densityVSwitch is the vSwitch of the density run: large enough that
// only the instance's limits bound the pods.
var densityVSwitch = netip.MustParsePrefix("192.168.128.0/17")

// densityZone is the simulator's first default zone.
const densityZone = ecssim.DefaultRegion + "-h"

// runDensity measures how many pod addresses a node of each real instance
// type of the simulator holds in each mode: an agent whose pool asks for
// more than the instance can hold grows to its limit, and the row reports
// what it holds then (and the capacity the agent computes).
func runDensity(ctx context.Context, e env) Result {
	r := Result{Scenario: "prefix: pods per node", Setup: fmt.Sprintf("one agent per instance type and mode, pool minTotal above the instance's limits, a %s vSwitch; the fictional ecs.sim.dense is left out", densityVSwitch)}
	for _, t := range ecssim.InstanceTypes() {
		if t.Family == "ecs.sim" {
			continue
		}
		for _, m := range []struct{ name, eni string }{{"secondary", allocSecondary}, {"prefix", allocPrefix}} {
			held, capacity, err := densityOne(ctx, e, t, m.eni)
			if err != nil {
				r.broken("%s, %s: %v", t.ID, m.name, err)
				continue
			}
			r.add(t.ID+" "+m.name, float64(held), "pods")
			if held != capacity {
				r.note("%s in %s mode holds %d addresses, but the agent reports a capacity of %d", t.ID, m.name, held, capacity)
			}
		}
	}
	return r
}

// densityOne fills one node of type t and returns the pod addresses it
// holds once growth stops, and the capacity its heartbeat reports.
func densityOne(ctx context.Context, e env, t ecssim.InstanceType, eni string) (held, capacity int, err error) {
	cfg := ecssim.Config{VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-density", Zone: densityZone, CIDR: densityVSwitch}}}
	sim, err := ecssim.New(cfg)
	if err != nil {
		return 0, 0, err
	}
	defer sim.Close()
	inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: t.ID})
	if err == nil {
		err = sim.Start("127.0.0.1:0", "127.0.0.1:0")
	}
	if err != nil {
		return 0, 0, err
	}
	most := (t.ENIs - 1) * (t.IPv4PerENI - 1) * 16
	pool := fmt.Sprintf("  minIdle: 0\n  maxIdle: %d\n  minTotal: %d\n  batch: %d\n", most, most, desired.DefaultBatch)
	a, err := startAgent(ctx, agentOptions{dir: filepath.Join(e.workDir, "density-"+t.ID+"-"+fmt.Sprint(len(eni))), sim: sim, instanceID: inst.ID,
		nodeName: "density", config: configYAMLENI(sim, inst.Zone, eni, pool, ""), log: e.log})
	if err != nil {
		return 0, 0, err
	}
	defer a.Stop()
	// Growth has stopped when the total stays the same for a second.
	last, since := -1, time.Now()
	werr := a.waitPool(ctx, 120*time.Second, func(h status.Agent) bool {
		if h.Pool.Total != last {
			last, since = h.Pool.Total, time.Now()
		}
		return h.Ready && h.Pool.Total > 0 && (h.Pool.Total >= h.Pool.Capacity || time.Since(since) > time.Second)
	})
	if werr != nil {
		return 0, 0, fmt.Errorf("the pool never stopped growing: %w", werr)
	}
	h, _ := a.heartbeat()
	return h.Pool.Total, h.Pool.Capacity, nil
}

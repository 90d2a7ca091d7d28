package cloud_test

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
)

var prefixCmp = cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })

// bigVSwitch is a simulator config whose first vSwitch (where newSimEnv's
// instance lands) is a /20: 254 usable /28s.
func bigVSwitch() ecssim.Config {
	return ecssim.Config{Zones: []string{"cn-hangzhou-h"}, VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-big", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.16.0/20")},
		{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/24")},
	}}
}

func TestContractPrefixes(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "ecs.g7.xlarge", nil) // 15 private IPv4 slots per ENI
	tags := ownerTags(e.inst.ID)
	// Addresses and prefixes in one create: refused before any call.
	mixed := cloud.CreateENIRequest{VSwitchID: e.inst.VSwitchID, SecurityGroups: []string{ecssim.DefaultSecurityGroup},
		Tags: tags, IPv4Count: 1, IPv4PrefixCount: 2, ClientToken: cloud.ClientToken(e.inst.ID, "prefix-eni")}
	if _, err := e.c.CreateENI(e.ctx, mixed); !errors.Is(err, cloud.ErrInvalidRequest) {
		t.Errorf("create with addresses and prefixes: %v, want ErrInvalidRequest", err)
	}
	if n := len(e.sim.Counters()["CreateNetworkInterface"]); n != 0 {
		t.Errorf("a refused create was sent: %v", e.sim.Counters()["CreateNetworkInterface"])
	}
	eni := e.create(t, cloud.CreateENIRequest{Tags: tags, IPv4PrefixCount: 2, ClientToken: cloud.ClientToken(e.inst.ID, "prefix-eni")})
	if len(eni.IPv4Prefixes) != 2 || len(eni.IPv4) != 0 {
		t.Fatalf("created with prefixes %v and addresses %v; want 2 and none", eni.IPv4Prefixes, eni.IPv4)
	}
	for _, q := range eni.IPv4Prefixes {
		if q.Bits() != observed.IPv4PrefixBits || q.Masked() != q {
			t.Errorf("prefix %s is not an aligned /%d", q, observed.IPv4PrefixBits)
		}
	}
	if !slices.IsSortedFunc(eni.IPv4Prefixes, netip.Prefix.Compare) {
		t.Errorf("prefixes %v not sorted", eni.IPv4Prefixes)
	}
	if d := cmp.Diff(eni, describe(t, e, eni.ID), addrCmp, prefixCmp, cmpopts.IgnoreFields(observed.ENI{}, "CreatedAt")); d != "" {
		t.Errorf("described vs created (-create +describe):\n%s", d)
	}
	e.attach(t, eni.ID)

	tok := cloud.ClientToken(e.inst.ID, "prefixes", "1")
	got, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 3, tok)
	if err != nil || len(got) != 3 {
		t.Fatalf("AssignIPv4Prefixes 3: %v, %v", got, err)
	}
	again, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 3, tok)
	if err != nil || !cmp.Equal(got, again, prefixCmp) {
		t.Errorf("replayed prefix assign: %v, %v; first %v", again, err, got)
	}
	now := describe(t, e, eni.ID)
	want := append(slices.Clone(eni.IPv4Prefixes), got...)
	slices.SortFunc(want, netip.Prefix.Compare)
	if d := cmp.Diff(want, now.IPv4Prefixes, prefixCmp); d != "" {
		t.Errorf("prefixes after a replayed assign (-want +got):\n%s", d)
	}
	inside := got[0].Addr().Next().Next()
	if !now.HasIP(inside) {
		t.Errorf("HasIP(%s) false with prefix %s", inside, got[0])
	}
	if q, ok := now.PrefixOf(inside); !ok || q != got[0] {
		t.Errorf("PrefixOf(%s) = %s, %v", inside, q, ok)
	}
	if _, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 4, tok); !errors.Is(err, cloud.ErrIdempotencyMismatch) {
		t.Errorf("token reused with another count: %v, want ErrIdempotencyMismatch", err)
	}

	// 15 slots: primary + 5 prefixes = 6; 9 more fit, 10 do not.
	if _, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 10, ""); !errors.Is(err, cloud.ErrLimitExceeded) {
		t.Errorf("prefixes beyond the type's slots: %v, want ErrLimitExceeded", err)
	}

	// Released whole; again (already gone) and on a gone ENI: success.
	if err := e.c.UnassignIPv4Prefixes(e.ctx, eni.ID, got[:2]); err != nil {
		t.Fatal(err)
	}
	if err := e.c.UnassignIPv4Prefixes(e.ctx, eni.ID, got); err != nil {
		t.Errorf("unassign with two prefixes already gone: %v", err)
	}
	if d := cmp.Diff(eni.IPv4Prefixes, describe(t, e, eni.ID).IPv4Prefixes, prefixCmp); d != "" {
		t.Errorf("prefixes after unassign (-want +got):\n%s", d)
	}
	if err := e.c.UnassignIPv4Prefixes(e.ctx, "eni-nosuch", got); err != nil {
		t.Errorf("unassign from a gone ENI: %v", err)
	}
	if _, err := e.c.AssignIPv4Prefixes(e.ctx, "eni-nosuch", 1, ""); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("assign to a gone ENI: %v, want ErrNotFound", err)
	}
	if err := e.sim.Check(); err != nil {
		t.Error(err)
	}
}

// TestContractPrefixBatches asks for more than 10 prefixes: split into
// calls of 10, and a replay of the whole request is idempotent.
func TestContractPrefixBatches(t *testing.T) {
	e := newSimEnv(t, bigVSwitch(), "ecs.g7.4xlarge", nil) // 30 slots per ENI
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID)})
	e.attach(t, eni.ID)
	e.sim.ResetCounters()
	tok := cloud.ClientToken(e.inst.ID, "many")
	got, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 23, tok)
	if err != nil || len(got) != 23 {
		t.Fatalf("AssignIPv4Prefixes 23: %d, %v", len(got), err)
	}
	if n := e.calls("AssignPrivateIpAddresses", "ok"); n != 3 {
		t.Errorf("%d calls for 23 prefixes, want 3", n)
	}
	again, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 23, tok)
	if err != nil || !cmp.Equal(got, again, prefixCmp) {
		t.Errorf("replay of 23: %d prefixes, %v", len(again), err)
	}
	if n := len(describe(t, e, eni.ID).IPv4Prefixes); n != 23 {
		t.Errorf("%d prefixes after a replay, want 23", n)
	}
	if err := e.c.UnassignIPv4Prefixes(e.ctx, eni.ID, got); err != nil {
		t.Fatal(err)
	}
	if n := e.calls("UnassignPrivateIpAddresses", "ok"); n != 3 {
		t.Errorf("%d unassign calls for 23 prefixes, want 3", n)
	}
	if n := len(describe(t, e, eni.ID).IPv4Prefixes); n != 0 {
		t.Errorf("%d prefixes left after unassigning all", n)
	}
}

// A fragmented vSwitch refuses prefixes with ErrVSwitchExhausted and still
// gives single addresses.
func TestContractPrefixFragmented(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "", nil)
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID)})
	if _, err := e.sim.FragmentVSwitch(e.inst.VSwitchID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 1, cloud.ClientToken(e.inst.ID, "frag")); !errors.Is(err, cloud.ErrVSwitchExhausted) || !cloud.Definite(err) {
		t.Errorf("prefix from a fragmented vSwitch: %v, want a definite ErrVSwitchExhausted", err)
	}
	if _, err := e.c.CreateENI(e.ctx, cloud.CreateENIRequest{VSwitchID: e.inst.VSwitchID, SecurityGroups: []string{ecssim.DefaultSecurityGroup},
		IPv4PrefixCount: 1, ClientToken: cloud.ClientToken(e.inst.ID, "frag-eni")}); !errors.Is(err, cloud.ErrVSwitchExhausted) {
		t.Errorf("create with a prefix in a fragmented vSwitch: %v, want ErrVSwitchExhausted", err)
	}
	if ips, err := e.c.AssignIPv4(e.ctx, eni.ID, 5, nil, cloud.ClientToken(e.inst.ID, "singles")); err != nil || len(ips) != 5 {
		t.Errorf("single addresses from the fragmented vSwitch: %v, %v", ips, err)
	}
	if _, err := e.sim.DefragmentVSwitch(e.inst.VSwitchID); err != nil {
		t.Fatal(err)
	}
	if got, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 1, cloud.ClientToken(e.inst.ID, "frag", "2")); err != nil || len(got) != 1 {
		t.Errorf("prefix once defragmented: %v, %v", got, err)
	}
}

func TestContractSetENISecurityGroups(t *testing.T) {
	slow := ecssim.Latency{PerAction: map[string]ecssim.LatencyDist{"AssignPrivateIpAddresses": {Fixed: 200 * time.Millisecond}}}
	// Patient retries: a conflict lasts as long as the 200 ms assign.
	e := newSimEnv(t, ecssim.Config{SecurityGroups: []string{ecssim.DefaultSecurityGroup, "sg-a", "sg-b"}}, "", func(c *cloud.Config) {
		c.Retry = cloud.RetryPolicy{MaxAttempts: 40, BaseDelay: 10 * time.Millisecond, MaxDelay: 40 * time.Millisecond, Budget: 5 * time.Second}
	})
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID), IPv4Count: 2})
	e.attach(t, eni.ID)
	if err := e.c.SetENISecurityGroups(e.ctx, eni.ID, []string{"sg-b", "sg-a"}); err != nil {
		t.Fatal(err)
	}
	got := describe(t, e, eni.ID)
	if !cmp.Equal([]string{"sg-b", "sg-a"}, got.SecurityGroups) || !cmp.Equal(eni.IPv4, got.IPv4, addrCmp) || got.Status != observed.ENIInUse {
		t.Errorf("after the change: groups %v, addresses %v (were %v), status %s", got.SecurityGroups, got.IPv4, eni.IPv4, got.Status)
	}
	if err := e.c.SetENISecurityGroups(e.ctx, eni.ID, []string{"sg-a", "sg-nosuch"}); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("an unknown group: %v, want ErrNotFound", err)
	}
	if err := e.c.SetENISecurityGroups(e.ctx, "eni-nosuch", []string{"sg-a"}); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("an unknown ENI: %v, want ErrNotFound", err)
	}
	e.sim.ResetCounters()
	for _, bad := range [][]string{nil, {"sg-a", "sg-a"}, {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}} {
		if err := e.c.SetENISecurityGroups(e.ctx, eni.ID, bad); err == nil {
			t.Errorf("groups %v accepted", bad)
		}
	}
	if n := len(e.sim.Counters()["ModifyNetworkInterfaceAttribute"]); n != 0 {
		t.Errorf("invalid sets reached the API: %v", e.sim.Counters()["ModifyNetworkInterfaceAttribute"])
	}

	// Another operation on the ENI meanwhile: OperationConflict, retried.
	e.sim.SetSettings(ecssim.Settings{Conflicts: true, Latency: slow})
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := e.c.AssignIPv4(e.ctx, eni.ID, 1, nil, cloud.ClientToken(e.inst.ID, "during")); err != nil {
			t.Errorf("assign during the change: %v", err)
		}
	})
	time.Sleep(50 * time.Millisecond)
	err := e.c.SetENISecurityGroups(e.ctx, eni.ID, []string{ecssim.DefaultSecurityGroup})
	wg.Wait()
	if err != nil {
		t.Fatalf("change during an assign: %v", err)
	}
	c := e.sim.Counters()["ModifyNetworkInterfaceAttribute"]
	if c["OperationConflict"] < 1 || c["ok"] != 1 {
		t.Errorf("counters %v: want OperationConflict retried, then ok once", c)
	}
	if g := describe(t, e, eni.ID).SecurityGroups; !cmp.Equal([]string{ecssim.DefaultSecurityGroup}, g) {
		t.Errorf("groups %v after the retried change", g)
	}
}

// A split request whose later call fails returns what the earlier calls
// got with the error: a /24 has 14 /28s, so of 23 asked 10 come.
func TestContractPrefixPartial(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "ecs.g7.4xlarge", nil) // 30 slots, a /24
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID)})
	e.attach(t, eni.ID)
	got, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 23, cloud.ClientToken(e.inst.ID, "partial"))
	if !errors.Is(err, cloud.ErrVSwitchExhausted) || len(got) != 10 {
		t.Fatalf("23 prefixes of a /24: %d, %v; want the first call's 10 and ErrVSwitchExhausted", len(got), err)
	}
	if d := cmp.Diff(got, describe(t, e, eni.ID).IPv4Prefixes, prefixCmp); d != "" {
		t.Errorf("returned vs described (-returned +described):\n%s", d)
	}
	if _, err := e.c.AssignIPv4Prefixes(e.ctx, eni.ID, 0, ""); err == nil {
		t.Error("a count of 0 was accepted")
	}
}

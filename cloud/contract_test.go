package cloud_test

// The contract suite: the real SDK, through cloud.Client, against the
// ecssim simulator over HTTP on 127.0.0.1.

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

type simEnv struct {
	sim  *ecssim.Server
	inst ecssim.InstanceInfo
	c    *cloud.Client
	cfg  cloud.Config
	ctx  context.Context
}

// newSimEnv starts a simulator with one instance of instanceType (default
// ecssim.DefaultInstanceType) and a client for it with small delays.
func newSimEnv(t testing.TB, scfg ecssim.Config, instanceType string, tweak func(*cloud.Config)) *simEnv {
	t.Helper()
	if scfg.Delays == (ecssim.Delays{}) {
		scfg.Delays = ecssim.Delays{Attach: 20 * time.Millisecond, Detach: 20 * time.Millisecond, Delete: 10 * time.Millisecond}
	}
	sim, err := ecssim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sim.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := sim.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	inst, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: instanceType})
	if err != nil {
		t.Fatal(err)
	}
	cfg := cloud.Config{
		Endpoint:    sim.Endpoint(),
		Region:      ecssim.DefaultRegion,
		Credentials: credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret),
		Retry:       cloud.RetryPolicy{MaxAttempts: 4, BaseDelay: 2 * time.Millisecond, MaxDelay: 10 * time.Millisecond, Budget: 5 * time.Second},
		CallTimeout: 5 * time.Second,
		Wait:        cloud.WaitPolicy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Timeout: 10 * time.Second, Settle: 50 * time.Millisecond},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := cloud.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &simEnv{sim: sim, inst: inst, c: c, cfg: cfg, ctx: ctx}
}

// vswitch returns the first vSwitch of the instance's zone.
func (e *simEnv) vswitch(t *testing.T) string {
	t.Helper()
	return e.inst.VSwitchID
}

func (e *simEnv) create(t *testing.T, r cloud.CreateENIRequest) observed.ENI {
	t.Helper()
	if r.VSwitchID == "" {
		r.VSwitchID = e.vswitch(t)
	}
	if r.SecurityGroups == nil {
		r.SecurityGroups = []string{ecssim.DefaultSecurityGroup}
	}
	eni, err := e.c.CreateENI(e.ctx, r)
	if err != nil {
		t.Fatalf("CreateENI: %v", err)
	}
	return eni
}

func (e *simEnv) attach(t *testing.T, eniID string) observed.ENI {
	t.Helper()
	if err := e.c.AttachENI(e.ctx, eniID, e.inst.ID); err != nil {
		t.Fatalf("AttachENI: %v", err)
	}
	got, err := e.c.WaitENI(e.ctx, eniID, observed.ENIInUse)
	if err != nil {
		t.Fatalf("WaitENI InUse: %v", err)
	}
	return got
}

func (e *simEnv) calls(action, outcome string) int {
	return e.sim.Counters()[action][outcome]
}

func ownerTags(inst string) map[string]string {
	return map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: inst}
}

var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestContractInstanceAndLimits(t *testing.T) {
	for _, it := range ecssim.InstanceTypes() {
		t.Run(it.ID, func(t *testing.T) {
			e := newSimEnv(t, ecssim.Config{}, it.ID, nil)
			got, err := e.c.Instance(e.ctx, e.inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			want := observed.Instance{
				ID: e.inst.ID, RegionID: ecssim.DefaultRegion, ZoneID: e.inst.Zone, InstanceType: it.ID,
				VPCID: ecssim.DefaultVPCID, PrimaryENI: e.inst.PrimaryENI,
				Limits: observed.Limits{ENIs: it.ENIs, IPv4PerENI: it.IPv4PerENI, IPv6PerENI: it.IPv6PerENI},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Instance (-want +got):\n%s", diff)
			}
			// The type's limits are cached: a second look asks no more.
			if _, err := e.c.Instance(e.ctx, e.inst.ID); err != nil {
				t.Fatal(err)
			}
			if n := e.calls("DescribeInstanceTypes", "ok"); n != 1 {
				t.Errorf("DescribeInstanceTypes called %d times for two lookups, want 1", n)
			}
		})
	}
	e := newSimEnv(t, ecssim.Config{}, "", nil)
	if _, err := e.c.Instance(e.ctx, "i-nosuch"); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("unknown instance: got %v, want ErrNotFound", err)
	}
	if _, err := e.c.Limits(e.ctx, "ecs.nosuch.large"); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("unknown type: got %v, want ErrNotFound", err)
	}
}

func TestContractVSwitches(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "", nil)
	st := e.sim.Dump()
	var ids []string
	var want []observed.VSwitch
	for _, v := range st.VSwitches {
		ids = append(ids, v.ID)
	}
	slices.Reverse(ids) // order of the request does not matter
	got, err := e.c.VSwitches(e.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range st.VSwitches {
		want = append(want, observed.VSwitch{ID: v.ID, ZoneID: v.ZoneID, VPCID: v.VPCID, CIDR: v.CIDR, IPv6CIDR: v.IPv6CIDR, AvailableIPs: v.AvailableIPs})
	}
	slices.SortFunc(want, func(a, b observed.VSwitch) int { return cmpString(a.ID, b.ID) })
	if diff := cmp.Diff(want, got, addrCmp, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("VSwitches (-want +got):\n%s", diff)
	}
	got, err = e.c.VSwitches(e.ctx, []string{ids[0], "vsw-nosuch"})
	if !errors.Is(err, cloud.ErrNotFound) || len(got) != 1 || got[0].ID != ids[0] {
		t.Errorf("with a missing vswitch: got %v, %v; want the found one and ErrNotFound", got, err)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestContractENILifecycle(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "ecs.g7.xlarge", nil)
	tags := ownerTags(e.inst.ID)
	eni := e.create(t, cloud.CreateENIRequest{Tags: tags, IPv4Count: 3, IPv6Count: 2, ClientToken: cloud.ClientToken(e.inst.ID, "lifecycle"), Description: "enid test"})
	if eni.Status != observed.ENIAvailable || eni.Type != observed.ENITypeSecondary || eni.VSwitchID != e.inst.VSwitchID ||
		!eni.PrimaryIP.IsValid() || len(eni.IPv4) != 3 || len(eni.IPv6) != 2 || eni.MAC == "" ||
		!cmp.Equal(tags, eni.Tags) || !cmp.Equal([]string{ecssim.DefaultSecurityGroup}, eni.SecurityGroups) {
		t.Fatalf("created ENI: %+v", eni)
	}
	if slices.Contains(eni.IPv4, eni.PrimaryIP) {
		t.Errorf("IPv4 %v holds the primary IP %v", eni.IPv4, eni.PrimaryIP)
	}

	// Listing by owner tags finds exactly it, described as created.
	list, err := e.c.ListENIs(e.ctx, cloud.ENIFilter{Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("ListENIs by tags: %d ENIs, want 1: %+v", len(list), list)
	}
	if diff := cmp.Diff(eni, list[0], addrCmp, cmpopts.IgnoreFields(observed.ENI{}, "CreatedAt")); diff != "" {
		t.Errorf("described vs created (-create +describe):\n%s", diff)
	}
	if list[0].CreatedAt.IsZero() {
		t.Error("CreatedAt not parsed")
	}

	// Attach is asynchronous: Attaching first, InUse after the wait.
	if err := e.c.AttachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Fatal(err)
	}
	list, err = e.c.ListENIs(e.ctx, cloud.ENIFilter{IDs: []string{eni.ID}})
	if err != nil || len(list) != 1 || list[0].Status != observed.ENIAttaching {
		t.Fatalf("right after AttachENI: %+v, %v; want Attaching", list, err)
	}
	// Attaching again while it attaches is "already done".
	if err := e.c.AttachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Errorf("second AttachENI while attaching: %v", err)
	}
	inUse, err := e.c.WaitENI(e.ctx, eni.ID, observed.ENIInUse)
	if err != nil {
		t.Fatal(err)
	}
	if inUse.InstanceID != e.inst.ID || inUse.DeviceIndex < 1 {
		t.Errorf("in use: instance %q device index %d", inUse.InstanceID, inUse.DeviceIndex)
	}
	onNode, err := e.c.ListENIs(e.ctx, cloud.ENIFilter{InstanceID: e.inst.ID})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range onNode {
		ids = append(ids, x.ID)
	}
	wantIDs := []string{e.inst.PrimaryENI, eni.ID}
	slices.Sort(wantIDs)
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Errorf("ENIs of the instance (-want +got):\n%s", diff)
	}

	// Metadata shows the ENI, its addresses and gateway.
	md := cloud.NewMetadata(e.sim.MetadataURL(e.inst.ID), nil)
	var mi cloud.MetadataInterface
	for {
		mi, err = md.Interface(e.ctx, inUse.MAC)
		if !errors.Is(err, cloud.ErrNotFound) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if mi.ENIID != eni.ID || mi.PrimaryIP != eni.PrimaryIP || !cmp.Equal(eni.IPv4, mi.IPv4, addrCmp) ||
		!cmp.Equal(eni.IPv6, mi.IPv6, addrCmp) || !mi.Gateway.IsValid() || mi.VSwitchID != eni.VSwitchID {
		t.Errorf("metadata %+v does not match ENI %+v", mi, eni)
	}
	if id, err := md.InstanceID(e.ctx); err != nil || id != e.inst.ID {
		t.Errorf("metadata instance id %q, %v", id, err)
	}

	// Addresses: by count, explicit, IPv6; then unassign, twice.
	got4, err := e.c.AssignIPv4(e.ctx, eni.ID, 2, nil, cloud.ClientToken(e.inst.ID, "ips-1"))
	if err != nil || len(got4) != 2 {
		t.Fatalf("AssignIPv4 count 2: %v, %v", got4, err)
	}
	explicit := nextFree(t, e, eni)
	got, err := e.c.AssignIPv4(e.ctx, eni.ID, 0, []netip.Addr{explicit}, "")
	if err != nil || !cmp.Equal([]netip.Addr{explicit}, got, addrCmp) {
		t.Fatalf("AssignIPv4 explicit %v: %v, %v", explicit, got, err)
	}
	got6, err := e.c.AssignIPv6(e.ctx, eni.ID, 1, nil, cloud.ClientToken(e.inst.ID, "ip6-1"))
	if err != nil || len(got6) != 1 || !got6[0].Is6() {
		t.Fatalf("AssignIPv6: %v, %v", got6, err)
	}
	now := describe(t, e, eni.ID)
	for _, a := range append(append(got4, explicit), got6...) {
		if !now.HasIP(a) {
			t.Errorf("assigned %v missing from %v / %v", a, now.IPv4, now.IPv6)
		}
	}
	drop := append(slices.Clone(got4), explicit)
	if err := e.c.UnassignIPv4(e.ctx, eni.ID, drop); err != nil {
		t.Fatalf("UnassignIPv4: %v", err)
	}
	// Unassigning them again, with one still-assigned address among them,
	// succeeds and removes that one too.
	drop = append(drop, eni.IPv4[0])
	if err := e.c.UnassignIPv4(e.ctx, eni.ID, drop); err != nil {
		t.Fatalf("UnassignIPv4 again: %v", err)
	}
	if err := e.c.UnassignIPv6(e.ctx, eni.ID, got6); err != nil {
		t.Fatalf("UnassignIPv6: %v", err)
	}
	if err := e.c.UnassignIPv6(e.ctx, eni.ID, got6); err != nil {
		t.Fatalf("UnassignIPv6 again: %v", err)
	}
	now = describe(t, e, eni.ID)
	if diff := cmp.Diff(eni.IPv4[1:], now.IPv4, addrCmp); diff != "" {
		t.Errorf("IPv4 after unassign (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(eni.IPv6, now.IPv6, addrCmp); diff != "" {
		t.Errorf("IPv6 after unassign (-want +got):\n%s", diff)
	}

	// Detach, wait, detach again (already done), delete, wait gone, and
	// every "already gone" repeat succeeds.
	if err := e.c.DetachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitENI(e.ctx, eni.ID, observed.ENIAvailable); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DetachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Errorf("DetachENI of an Available ENI: %v", err)
	}
	if err := e.c.DeleteENI(e.ctx, eni.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.WaitENIGone(e.ctx, eni.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteENI(e.ctx, eni.ID); err != nil {
		t.Errorf("DeleteENI of a gone ENI: %v", err)
	}
	if err := e.c.DetachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Errorf("DetachENI of a gone ENI: %v", err)
	}
	if err := e.c.UnassignIPv4(e.ctx, eni.ID, eni.IPv4[1:]); err != nil {
		t.Errorf("UnassignIPv4 on a gone ENI: %v", err)
	}
	if _, err := e.c.WaitENI(e.ctx, eni.ID, observed.ENIInUse); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("WaitENI of a gone ENI: %v, want ErrNotFound", err)
	}
}

func describe(t *testing.T, e *simEnv, id string) observed.ENI {
	t.Helper()
	l, err := e.c.ListENIs(e.ctx, cloud.ENIFilter{IDs: []string{id}})
	if err != nil || len(l) != 1 {
		t.Fatalf("describe %s: %v, %v", id, l, err)
	}
	return l[0]
}

// nextFree picks an address of the ENI's vSwitch that nothing holds.
func nextFree(t *testing.T, e *simEnv, eni observed.ENI) netip.Addr {
	t.Helper()
	held := map[netip.Addr]bool{}
	for _, x := range e.sim.Dump().ENIs {
		held[x.PrimaryIP] = true
		for _, a := range x.IPv4 {
			held[a] = true
		}
	}
	vs, err := e.c.VSwitches(e.ctx, []string{eni.VSwitchID})
	if err != nil {
		t.Fatal(err)
	}
	for a := vs[0].CIDR.Addr().Next().Next().Next().Next().Next(); vs[0].CIDR.Contains(a); a = a.Next() {
		if !held[a] && a != vs[0].Gateway() {
			return a
		}
	}
	t.Fatal("no free address")
	return netip.Addr{}
}

func TestContractPagination(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "", func(c *cloud.Config) { c.PageSize = 10 })
	tags := ownerTags(e.inst.ID)
	var want []string
	for range 23 {
		want = append(want, e.create(t, cloud.CreateENIRequest{Tags: tags}).ID)
	}
	e.create(t, cloud.CreateENIRequest{Tags: map[string]string{"other": "x"}}) // not ours
	slices.Sort(want)
	e.sim.ResetCounters()
	got, err := e.c.ListENIs(e.ctx, cloud.ENIFilter{Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range got {
		ids = append(ids, x.ID)
	}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("ENIs over pages of 10 (-want +got):\n%s", diff)
	}
	if n := e.calls("DescribeNetworkInterfaces", "ok"); n != 3 {
		t.Errorf("%d pages for 23 ENIs at 10 a page, want 3", n)
	}
	// By IDs, more than fit one call (sent 100 at a time), unknown ones absent.
	ids = append(ids, "eni-nosuch")
	got, err = e.c.ListENIs(e.ctx, cloud.ENIFilter{IDs: ids})
	if err != nil || len(got) != 23 {
		t.Errorf("by IDs: %d ENIs, %v; want 23", len(got), err)
	}
}

func TestContractClientToken(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "", nil)
	tok := cloud.ClientToken(e.inst.ID, "eni", "slot-1")
	r := cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID), IPv4Count: 2, ClientToken: tok}
	a := e.create(t, r)
	b := e.create(t, r) // replay: the same ENI, no second one
	if a.ID != b.ID || !cmp.Equal(a.IPv4, b.IPv4, addrCmp) {
		t.Errorf("replayed create: %s %v, first %s %v", b.ID, b.IPv4, a.ID, a.IPv4)
	}
	if n := len(e.sim.Dump().ENIs); n != 2 { // the primary and one
		t.Errorf("%d ENIs after a replayed create, want 2", n)
	}
	r.IPv4Count = 3
	r.VSwitchID = e.vswitch(t)
	r.SecurityGroups = []string{ecssim.DefaultSecurityGroup}
	if _, err := e.c.CreateENI(e.ctx, r); !errors.Is(err, cloud.ErrIdempotencyMismatch) {
		t.Errorf("same token, other params: %v, want ErrIdempotencyMismatch", err)
	}
	if e.calls("CreateNetworkInterface", "IdempotentParameterMismatch") != 1 {
		t.Errorf("mismatch was retried: %v", e.sim.Counters()["CreateNetworkInterface"])
	}

	ipTok := cloud.ClientToken(e.inst.ID, "ips", "1")
	x, err := e.c.AssignIPv4(e.ctx, a.ID, 2, nil, ipTok)
	if err != nil {
		t.Fatal(err)
	}
	y, err := e.c.AssignIPv4(e.ctx, a.ID, 2, nil, ipTok)
	if err != nil || !cmp.Equal(x, y, addrCmp) {
		t.Errorf("replayed assign: %v, %v; first %v", y, err, x)
	}
	if n := len(describe(t, e, a.ID).IPv4); n != 4 {
		t.Errorf("%d secondary IPs after a replayed assign of 2 on 2, want 4", n)
	}
	if _, err := e.c.AssignIPv4(e.ctx, a.ID, 3, nil, ipTok); !errors.Is(err, cloud.ErrIdempotencyMismatch) {
		t.Errorf("assign with a reused token: %v, want ErrIdempotencyMismatch", err)
	}
}

// TestContractAssignBatches asks for more than 10 addresses: the client
// splits the request and a replay of the whole request is idempotent.
func TestContractAssignBatches(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "ecs.g7.4xlarge", nil) // 30 IPv4 per ENI
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID)})
	e.attach(t, eni.ID)
	tok := cloud.ClientToken(e.inst.ID, "big")
	got, err := e.c.AssignIPv4(e.ctx, eni.ID, 23, nil, tok)
	if err != nil || len(got) != 23 {
		t.Fatalf("AssignIPv4 23: %d, %v", len(got), err)
	}
	if n := e.calls("AssignPrivateIpAddresses", "ok"); n != 3 {
		t.Errorf("%d calls for 23 addresses, want 3", n)
	}
	again, err := e.c.AssignIPv4(e.ctx, eni.ID, 23, nil, tok)
	if err != nil || !cmp.Equal(got, again, addrCmp) {
		t.Errorf("replay of 23: %d addresses, %v", len(again), err)
	}
	if err := e.c.UnassignIPv4(e.ctx, eni.ID, got); err != nil {
		t.Fatal(err)
	}
	if n := len(describe(t, e, eni.ID).IPv4); n != 0 {
		t.Errorf("%d addresses left after unassigning all", n)
	}
}

func TestContractErrorClasses(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "ecs.g7.large", nil) // 3 ENIs, 6 IPv4 per ENI
	ctx := e.ctx
	tags := ownerTags(e.inst.ID)

	if err := e.c.AttachENI(ctx, "eni-nosuch", e.inst.ID); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("attach unknown ENI: %v, want ErrNotFound", err)
	}
	if _, err := e.c.CreateENI(ctx, cloud.CreateENIRequest{VSwitchID: "vsw-nosuch", SecurityGroups: []string{ecssim.DefaultSecurityGroup}}); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("create in unknown vswitch: %v, want ErrNotFound", err)
	}
	if _, err := e.c.AssignIPv4(ctx, "eni-nosuch", 1, nil, ""); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("assign to unknown ENI: %v, want ErrNotFound", err)
	}

	// The primary ENI is never detached.
	if err := e.c.DetachENI(ctx, e.inst.PrimaryENI, e.inst.ID); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("detach primary: %v, want ErrConflict", err)
	}

	// Per-type limits: 2 secondary ENIs fit, the third does not.
	var enis []observed.ENI
	for range 3 {
		enis = append(enis, e.create(t, cloud.CreateENIRequest{Tags: tags}))
	}
	e.attach(t, enis[0].ID)
	e.attach(t, enis[1].ID)
	if err := e.c.AttachENI(ctx, enis[2].ID, e.inst.ID); !errors.Is(err, cloud.ErrLimitExceeded) {
		t.Errorf("attach beyond EniQuantity: %v, want ErrLimitExceeded", err)
	}
	// 6 IPv4 per ENI, the primary included: 5 secondaries fit.
	if _, err := e.c.AssignIPv4(ctx, enis[0].ID, 5, nil, ""); err != nil {
		t.Fatalf("assign up to the limit: %v", err)
	}
	if _, err := e.c.AssignIPv4(ctx, enis[0].ID, 1, nil, ""); !errors.Is(err, cloud.ErrLimitExceeded) {
		t.Errorf("assign beyond EniPrivateIpAddressQuantity: %v, want ErrLimitExceeded", err)
	}
	// An address another ENI holds is a conflict.
	taken := describe(t, e, enis[0].ID).IPv4[0]
	if _, err := e.c.AssignIPv4(ctx, enis[1].ID, 0, []netip.Addr{taken}, ""); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("assign a taken address: %v, want ErrConflict", err)
	}
	// An ENI in use by us cannot go to another instance, nor be deleted.
	other, err := e.sim.AddInstance(ecssim.InstanceSpec{InstanceType: "ecs.g7.large", VSwitchID: e.inst.VSwitchID})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.AttachENI(ctx, enis[0].ID, other.ID); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("attach an InUse ENI elsewhere: %v, want ErrConflict", err)
	}
	if err := e.c.DeleteENI(ctx, enis[0].ID); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("delete an InUse ENI: %v, want ErrConflict", err)
	}

	// Wrong keys are an auth error, not retried.
	bad := e.cfg
	bad.Credentials = credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, "wrong")
	bc, err := cloud.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.ListENIs(ctx, cloud.ENIFilter{InstanceID: e.inst.ID}); !errors.Is(err, cloud.ErrAuth) || cloud.Retryable(err) {
		t.Errorf("wrong secret: %v, want a non-retryable ErrAuth", err)
	}
}

func TestContractVSwitchExhausted(t *testing.T) {
	// A /28 holds 16 addresses; the simulator reserves some; 20 cannot fit.
	e := newSimEnv(t, ecssim.Config{
		Zones:     []string{"cn-hangzhou-h"},
		VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-tiny", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.7.0/28")}},
	}, "ecs.g7.4xlarge", nil)
	_, err := e.c.CreateENI(e.ctx, cloud.CreateENIRequest{VSwitchID: "vsw-tiny", SecurityGroups: []string{ecssim.DefaultSecurityGroup}, IPv4Count: 20})
	if !errors.Is(err, cloud.ErrVSwitchExhausted) || cloud.Retryable(err) {
		t.Errorf("create beyond the vswitch: %v, want a non-retryable ErrVSwitchExhausted", err)
	}
}

func TestContractRetries(t *testing.T) {
	rec := &observer{}
	e := newSimEnv(t, ecssim.Config{}, "", func(c *cloud.Config) { c.Observer = rec })
	ctx := e.ctx
	list := func() error {
		_, err := e.c.ListENIs(ctx, cloud.ENIFilter{InstanceID: e.inst.ID})
		return err
	}

	// Throttling and 5xx within the budget: the call succeeds.
	for _, code := range []string{"Throttling", "Throttling.User", "InternalError", "ServiceUnavailable", "Operation.Conflict"} {
		e.sim.ResetCounters()
		e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: code, Count: 3})
		if err := list(); err != nil {
			t.Errorf("%s x3 then ok: %v", code, err)
		}
		if got := e.sim.Counters()["DescribeNetworkInterfaces"]; !cmp.Equal(map[string]int{code: 3, "ok": 1}, got) {
			t.Errorf("%s: server saw %v", code, got)
		}
	}
	// More failures than MaxAttempts (4): the classified error.
	e.sim.ResetCounters()
	e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: "Throttling.User", Count: 10})
	if err := list(); !errors.Is(err, cloud.ErrThrottled) {
		t.Errorf("throttled beyond the budget: %v, want ErrThrottled", err)
	}
	if n := e.calls("DescribeNetworkInterfaces", "Throttling.User"); n != 4 {
		t.Errorf("%d attempts, want 4", n)
	}
	e.sim.SetSettings(ecssim.Settings{}) // clear what is left

	e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: "ServiceUnavailable", Count: 10})
	if err := list(); !errors.Is(err, cloud.ErrUnavailable) {
		t.Errorf("5xx beyond the budget: %v, want ErrUnavailable", err)
	}
	e.sim.SetSettings(ecssim.Settings{})

	// Non-retryable codes are tried once.
	e.sim.ResetCounters()
	e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: "InvalidParameter", Count: 5})
	if err := list(); err == nil || cloud.Retryable(err) {
		t.Errorf("InvalidParameter: %v", err)
	}
	if n := e.calls("DescribeNetworkInterfaces", "InvalidParameter"); n != 1 {
		t.Errorf("InvalidParameter tried %d times, want 1", n)
	}
	e.sim.SetSettings(ecssim.Settings{})

	if n := rec.count("DescribeNetworkInterfaces", "Throttling.User"); n < 4 {
		t.Errorf("observer saw %d Throttling.User attempts, want >= 4", n)
	}
}

// TestContractAccountRateLimit runs a burst against an account limit of
// 20/s: without a client limit the client is throttled but its retries get
// through; with a client limit below the account's it is never throttled.
func TestContractAccountRateLimit(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{AccountRateLimit: ecssim.RateLimit{QPS: 20, Burst: 2}}, "", func(c *cloud.Config) {
		c.Retry = cloud.RetryPolicy{MaxAttempts: 20, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Budget: 5 * time.Second}
	})
	burst := func(c *cloud.Client) {
		t.Helper()
		for range 10 {
			if _, err := c.ListENIs(e.ctx, cloud.ENIFilter{InstanceID: e.inst.ID}); err != nil {
				t.Fatalf("within the retry budget: %v", err)
			}
		}
	}
	e.sim.ResetCounters()
	burst(e.c)
	if n := e.calls("DescribeNetworkInterfaces", "Throttling.User"); n == 0 {
		t.Errorf("no throttling seen without a client limit: is the account limit on?")
	}
	limited := e.cfg
	limited.RateLimit.QPS, limited.RateLimit.Burst = 15, 1
	lc, err := cloud.New(limited)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // let the account bucket refill
	e.sim.ResetCounters()
	burst(lc)
	if n := e.calls("DescribeNetworkInterfaces", "Throttling.User"); n != 0 {
		t.Errorf("%d throttled calls under a client limit below the account's", n)
	}
}

func TestContractRAMRoleCredentials(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{MetadataRequireToken: true}, "", nil)
	md := cloud.NewMetadata(e.sim.MetadataURL(e.inst.ID), nil)
	p, err := cloud.CredentialsFrom(desiredRAMRole(), nil, md)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Credentials = p
	c, err := cloud.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Instance(e.ctx, e.inst.ID)
	if err != nil {
		t.Fatalf("with RAM role credentials from metadata: %v", err)
	}
	if got.PrimaryENI != e.inst.PrimaryENI {
		t.Errorf("instance %+v", got)
	}
}

func desiredRAMRole() desired.Credentials {
	return desired.Credentials{Source: desired.CredentialsRAMRole}
}

// observer counts attempts by action and outcome.
type observer struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (o *observer) ObserveCall(action, outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[[2]string]int{}
	}
	o.n[[2]string{action, outcome}]++
}

func (o *observer) count(action, outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[[2]string{action, outcome}]
}

func TestContractMetadata(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{MetadataRequireToken: true}, "ecs.g7.large", nil)
	md := cloud.NewMetadata(e.sim.MetadataURL(e.inst.ID), nil)
	ctx := e.ctx
	for want, f := range map[string]func(context.Context) (string, error){
		e.inst.ID:            md.InstanceID,
		ecssim.DefaultRegion: md.RegionID,
		e.inst.Zone:          md.ZoneID,
		"ecs.g7.large":       md.InstanceType,
		ecssim.DefaultVPCID:  md.VPCID,
	} {
		if got, err := f(ctx); err != nil || got != want {
			t.Errorf("got %q, %v; want %q", got, err, want)
		}
	}
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID), IPv4Count: 2})
	e.attach(t, eni.ID)
	macs, err := md.MACs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{strings.ToLower(e.inst.MAC), eni.MAC}
	slices.Sort(want)
	if diff := cmp.Diff(want, macs); diff != "" {
		t.Errorf("MACs (-want +got):\n%s", diff)
	}
	got, err := md.Interface(ctx, e.inst.MAC)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.c.VSwitches(ctx, []string{e.inst.VSwitchID})
	if err != nil {
		t.Fatal(err)
	}
	wantIf := cloud.MetadataInterface{
		MAC: strings.ToLower(e.inst.MAC), ENIID: e.inst.PrimaryENI, VSwitchID: e.inst.VSwitchID,
		Gateway: vs[0].Gateway(), CIDR: vs[0].CIDR, IPv6CIDR: vs[0].IPv6CIDR, PrimaryIP: e.inst.PrimaryIP,
	}
	if vs[0].IPv6CIDR.IsValid() {
		wantIf.GatewayV6 = got.GatewayV6 // the simulator's choice; checked below
		if !vs[0].IPv6CIDR.Contains(got.GatewayV6) {
			t.Errorf("IPv6 gateway %v outside %v", got.GatewayV6, vs[0].IPv6CIDR)
		}
	}
	if diff := cmp.Diff(wantIf, got, addrCmp, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("primary interface (-want +got):\n%s", diff)
	}
}

func newBenchEnv(b *testing.B) *simEnv {
	return newSimEnv(b, ecssim.Config{}, "", nil)
}

// TestContractStaleReads runs the lifecycle against a simulator whose
// describes lag every change: the waits still end in the right state.
func TestContractStaleReads(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{StaleReads: 30 * time.Millisecond}, "", nil)
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID)})
	if got := e.attach(t, eni.ID); got.InstanceID != e.inst.ID {
		t.Errorf("attached to %q", got.InstanceID)
	}
	if err := e.c.DetachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitENI(e.ctx, eni.ID, observed.ENIAvailable); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteENI(e.ctx, eni.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.WaitENIGone(e.ctx, eni.ID); err != nil {
		t.Fatal(err)
	}
}

// TestContractWaitDeadEnd: waiting for InUse on an ENI nobody attaches
// ends with the policy's timeout, and on one being deleted with
// ErrConflict.
func TestContractWaitDeadEnd(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond, Detach: 20 * time.Millisecond, Delete: 300 * time.Millisecond}}, "",
		func(c *cloud.Config) { c.Wait.Timeout, c.Wait.Settle = 100*time.Millisecond, 10*time.Millisecond })
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID)})
	if _, err := e.c.WaitENI(e.ctx, eni.ID, observed.ENIInUse); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("nobody attaches: %v, want the wait timeout", err)
	}
	if err := e.c.DeleteENI(e.ctx, eni.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitENI(e.ctx, eni.ID, observed.ENIAvailable); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("waiting Available while it is deleted: %v, want ErrConflict", err)
	}
}

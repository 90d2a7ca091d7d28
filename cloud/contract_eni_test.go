package cloud_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
)

func TestContractENILifecycle(t *testing.T) {
	// A long enough attach that "Attaching" is still what a describe right
	// after AttachENI sees on a loaded machine (with -race, under go test ./...).
	e := newSimEnv(t, ecssim.Config{Delays: ecssim.Delays{Attach: 500 * time.Millisecond, Detach: 20 * time.Millisecond, Delete: 10 * time.Millisecond}}, "ecs.g7.xlarge", nil)
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

// TestContractConcurrentCalls runs calls from many goroutines through one
// Client (under -race this proves the per-attempt SDK clients share nothing
// mutable).
func TestContractConcurrentCalls(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "ecs.g7.4xlarge", nil)
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for i := range 8 {
		wg.Go(func() {
			if _, err := e.c.Instance(e.ctx, e.inst.ID); err != nil {
				errs <- err
			}
			tok := cloud.ClientToken(e.inst.ID, "concurrent", strconv.Itoa(i))
			eni, err := e.c.CreateENI(e.ctx, cloud.CreateENIRequest{VSwitchID: e.inst.VSwitchID,
				SecurityGroups: []string{ecssim.DefaultSecurityGroup}, Tags: ownerTags(e.inst.ID), ClientToken: tok})
			if err != nil {
				errs <- err
				return
			}
			if _, err := e.c.AssignIPv4(e.ctx, eni.ID, 2, nil, tok); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := e.c.ListENIs(e.ctx, cloud.ENIFilter{Tags: ownerTags(e.inst.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Errorf("%d ENIs, want 8", len(got))
	}
	for _, x := range got {
		if len(x.IPv4) != 2 {
			t.Errorf("%s has %d secondary IPs, want 2", x.ID, len(x.IPv4))
		}
	}
}

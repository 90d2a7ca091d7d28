package cloud_test

// The contract suite: the real SDK, through cloud.Client, against the
// ecssim simulator over HTTP on 127.0.0.1.

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
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
	// One transport for every client of the test, its connections closed
	// before the simulator shuts down (cleanups run last-in first-out): a
	// connection dialed but never used would hold the simulator's graceful
	// shutdown for 5 s.
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := cloud.Config{
		Transport:   tr,
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

func newBenchEnv(b *testing.B) *simEnv {
	return newSimEnv(b, ecssim.Config{}, "", nil)
}

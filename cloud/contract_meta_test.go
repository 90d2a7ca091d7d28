package cloud_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
)

func TestContractRAMRoleCredentials(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{MetadataRequireToken: true}, "", nil)
	md := cloud.NewMetadata(e.sim.MetadataURL(e.inst.ID), nil)
	p, err := cloud.CredentialsFrom(ramRole(), nil, md)
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

func ramRole() cloud.CredentialsConfig {
	return cloud.CredentialsConfig{Source: cloud.CredentialsRAMRole}
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

// TestContractMetadataLag: an ENI just InUse is not yet in metadata; its
// MAC is ErrNotFound until the lag passes.
func TestContractMetadataLag(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{MetadataLag: 80 * time.Millisecond}, "", nil)
	md := cloud.NewMetadata(e.sim.MetadataURL(e.inst.ID), nil)
	eni := e.create(t, cloud.CreateENIRequest{Tags: ownerTags(e.inst.ID)})
	e.attach(t, eni.ID)
	if _, err := md.Interface(e.ctx, eni.MAC); !errors.Is(err, cloud.ErrNotFound) {
		t.Fatalf("right after InUse: %v, want ErrNotFound", err)
	}
	if macs, err := md.MACs(e.ctx); err != nil || slices.Contains(macs, eni.MAC) {
		t.Errorf("MACs right after InUse: %v, %v; want without %s", macs, err, eni.MAC)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		mi, err := md.Interface(e.ctx, eni.MAC)
		if err == nil {
			if mi.ENIID != eni.ID {
				t.Errorf("metadata names %s, want %s", mi.ENIID, eni.ID)
			}
			break
		}
		if !errors.Is(err, cloud.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("after the lag: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The metadata service answers 5xx and 429 under load: reads retry them
// (boundedly), so a burst of three failures is invisible, and a service
// that keeps failing gives an error within a bound.
func TestContractMetadataRetries(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{MetadataRequireToken: true}, "", nil)
	md := cloud.NewMetadata(e.sim.MetadataURL(e.inst.ID), nil)
	e.sim.InjectFault(ecssim.Fault{Action: ecssim.MetadataAction, Status: 503, Count: 2})
	e.sim.InjectFault(ecssim.Fault{Action: ecssim.MetadataAction, Status: 429})
	if got, err := md.InstanceID(e.ctx); err != nil || got != e.inst.ID {
		t.Fatalf("after three busy answers: %q, %v", got, err)
	}
	if n := e.sim.Counters()[ecssim.MetadataAction]; n["503"] != 2 || n["429"] != 1 {
		t.Errorf("metadata faults served %v, want 2x503 and 1x429", n)
	}
	e.sim.SetSettings(ecssim.Settings{MetadataFaults: ecssim.MetadataFaults{Rate: 1}})
	start := time.Now()
	if _, err := md.ZoneID(e.ctx); err == nil {
		t.Fatal("a service that always fails: no error")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("gave up after %v, want a bounded retry", d)
	}
}

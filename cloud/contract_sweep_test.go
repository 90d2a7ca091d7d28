package cloud_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
)

// TestContractInstanceStatuses: the status of every instance named that
// exists, over more than one call's worth of IDs; a released or unknown
// one is simply absent.
func TestContractInstanceStatuses(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "", nil)
	want := map[string]string{e.inst.ID: "Running"}
	ids := []string{e.inst.ID}
	for i := range 120 {
		in, err := e.sim.AddInstance(ecssim.InstanceSpec{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID, "i-missing-"+in.ID)
		switch i % 3 {
		case 0:
			if _, _, err := e.sim.ReleaseInstance(in.ID); err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := e.sim.StopInstance(in.ID); err != nil {
				t.Fatal(err)
			}
			want[in.ID] = "Stopped"
		default:
			want[in.ID] = "Running"
		}
	}
	e.sim.ResetCounters()
	got, err := e.c.InstanceStatuses(e.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("statuses: %d, want %d; missing %v", len(got), len(want), slices.Collect(maps.Keys(want)))
	}
	if n := e.sim.Counters()["DescribeInstances"]["ok"]; n != 3 {
		t.Errorf("%d DescribeInstances for %d IDs, want 3 (100 per call)", n, len(ids))
	}
	e.sim.InjectFault(ecssim.Fault{Action: "DescribeInstances", Code: "Forbidden.RAM"})
	if _, err := e.c.InstanceStatuses(e.ctx, ids); err == nil {
		t.Error("a refused call gave an answer")
	}
}

// TestContractCreateDeleteOnRelease: an ENI enid creates is released with
// its instance; ListENIs filters by status.
func TestContractCreateDeleteOnRelease(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "", nil)
	tags := ownerTags(e.inst.ID)
	attached := e.create(t, cloud.CreateENIRequest{Tags: tags, IPv4Count: 1})
	e.attach(t, attached.ID)
	spare := e.create(t, cloud.CreateENIRequest{Tags: tags, IPv4Count: 1})
	if st := e.sim.Dump(); !slices.ContainsFunc(st.ENIs, func(x ecssim.ENIState) bool { return x.ID == spare.ID && x.DeleteOnRelease }) {
		t.Errorf("created without DeleteOnRelease: %+v", st.ENIs)
	}
	avail, err := e.c.ListENIs(e.ctx, cloud.ENIFilter{Tags: tags, Status: observed.ENIAvailable})
	if err != nil || len(avail) != 1 || avail[0].ID != spare.ID {
		t.Fatalf("Available ENIs %+v, %v; want %s", avail, err, spare.ID)
	}
	deleted, kept, err := e.sim.ReleaseInstance(e.inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(deleted, attached.ID) || len(kept) != 0 {
		t.Errorf("release deleted %v, kept %v; want %s deleted", deleted, kept, attached.ID)
	}
}

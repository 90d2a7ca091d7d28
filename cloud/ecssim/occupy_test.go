package ecssim_test

import (
	"net/netip"
	"testing"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestOccupyVSwitch: the vSwitch keeps exactly what was left free, the
// model stays consistent, and defragmenting gives everything back.
func TestOccupyVSwitch(t *testing.T) {
	sim, err := ecssim.New(ecssim.Config{VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-a", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/26")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	avail := func() int {
		for _, v := range sim.Dump().VSwitches {
			if v.ID == "vsw-a" {
				return v.AvailableIPs
			}
		}
		t.Fatal("vsw-a missing")
		return 0
	}
	before := avail()
	n, err := sim.OccupyVSwitch("vsw-a", 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := avail(); got != 3 || n != before-3 {
		t.Errorf("after occupying: %d available (took %d of %d), want 3 left", got, n, before)
	}
	if err := sim.Check(); err != nil {
		t.Error(err)
	}
	if _, err := sim.OccupyVSwitch("vsw-none", 0); err == nil {
		t.Error("an unknown vSwitch was occupied")
	}
	if back, err := sim.DefragmentVSwitch("vsw-a"); err != nil || back != n || avail() != before {
		t.Errorf("defragment gave back %d (err %v), %d available, want %d and %d", back, err, avail(), n, before)
	}
}

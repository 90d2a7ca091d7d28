package cloud_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
)

// TestContractSelectVSwitches: the vSwitches of a zone that carry every
// tag asked for, over more than one page; a tag set at run time is seen by
// the next call.
func TestContractSelectVSwitches(t *testing.T) {
	var vsws []ecssim.VSwitchConfig
	for i := range 70 {
		zone := "cn-hangzhou-h"
		if i%2 == 1 {
			zone = "cn-hangzhou-i"
		}
		tags := map[string]string{}
		if i%5 != 0 {
			tags["enid.dev/pods"] = "yes"
		}
		if i%7 == 0 {
			tags["team"] = "web"
		}
		vsws = append(vsws, ecssim.VSwitchConfig{ID: fmt.Sprintf("vsw-%03d", i), Zone: zone,
			CIDR: netip.MustParsePrefix(fmt.Sprintf("192.168.%d.0/24", i)), Tags: tags})
	}
	e := newSimEnv(t, ecssim.Config{VSwitches: vsws}, "", nil)
	got, err := e.c.SelectVSwitches(e.ctx, ecssim.DefaultVPCID, "cn-hangzhou-h", map[string]string{"enid.dev/pods": "yes"})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < 70; i += 2 {
		if i%5 != 0 {
			want = append(want, fmt.Sprintf("vsw-%03d", i))
		}
	}
	if ids := idsOf(got); fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("selected %v, want %v", ids, want)
	}
	if len(got) > 0 && (got[0].AvailableIPs != 252 || got[0].ZoneID != "cn-hangzhou-h" || !got[0].CIDR.IsValid()) {
		t.Errorf("described as %+v", got[0])
	}
	both, err := e.c.SelectVSwitches(e.ctx, "", "", map[string]string{"enid.dev/pods": "", "team": "web"})
	if err != nil {
		t.Fatal(err)
	}
	if ids := idsOf(both); fmt.Sprint(ids) != "[vsw-007 vsw-014 vsw-021 vsw-028 vsw-042 vsw-049 vsw-056 vsw-063]" {
		t.Errorf("two tags, any zone: %v", ids)
	}
	if err := e.sim.TagVSwitch("vsw-000", map[string]string{"enid.dev/pods": "yes"}); err != nil {
		t.Fatal(err)
	}
	got, err = e.c.SelectVSwitches(e.ctx, ecssim.DefaultVPCID, "cn-hangzhou-h", map[string]string{"enid.dev/pods": "yes"})
	if err != nil || len(got) != len(want)+1 || got[0].ID != "vsw-000" {
		t.Errorf("after tagging vsw-000: %v %v", idsOf(got), err)
	}
	if _, err := e.c.SelectVSwitches(e.ctx, "", "", nil); err == nil {
		t.Error("no tags accepted")
	}
}

func idsOf(vs []observed.VSwitch) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

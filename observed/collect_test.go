package observed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type fakeCloud struct {
	inst   Instance
	enis   []ENI
	vsw    map[string]VSwitch
	eniErr error
	asked  []string
}

func (f *fakeCloud) Instance(context.Context, string) (Instance, error) { return f.inst, nil }
func (f *fakeCloud) ENIs(context.Context, string) ([]ENI, error)        { return f.enis, f.eniErr }
func (f *fakeCloud) VSwitches(_ context.Context, ids []string) ([]VSwitch, error) {
	f.asked = ids
	var out []VSwitch
	for _, id := range ids {
		out = append(out, f.vsw[id])
	}
	return out, nil
}

func (f *fakeCloud) SelectVSwitches(context.Context, string, string, map[string]string) ([]VSwitch, error) {
	return nil, nil
}

type fakeNode struct{ node Node }

func (f fakeNode) Observe(context.Context) (Node, error) { return f.node, nil }

func TestCollectMergesSourcesAndAsksForENIVSwitches(t *testing.T) {
	c := &fakeCloud{
		inst: Instance{ID: "i-1"},
		enis: []ENI{{ID: "eni-b", VSwitchID: "vsw-2"}, {ID: "eni-a", VSwitchID: "vsw-1"}},
		vsw:  map[string]VSwitch{"vsw-1": {ID: "vsw-1"}, "vsw-2": {ID: "vsw-2"}},
	}
	st := Collect(context.Background(), Sources{Cloud: c, Node: fakeNode{}}, "i-1", VSwitchQuery{IDs: []string{"vsw-1"}}, time.Unix(0, 0))
	if !st.Complete {
		t.Fatalf("complete = false: %v", st.Problems)
	}
	if diff := cmp.Diff([]string{"vsw-1", "vsw-2"}, c.asked); diff != "" {
		t.Errorf("vSwitches asked (-want +got):\n%s", diff)
	}
	if st.ENIs[0].ID != "eni-a" {
		t.Errorf("ENIs not sorted: %v", st.ENIs)
	}
}

func TestCollectPartialIsIncomplete(t *testing.T) {
	c := &fakeCloud{eniErr: errors.New("throttled")}
	st := Collect(context.Background(), Sources{Cloud: c}, "i-1", VSwitchQuery{}, time.Unix(0, 0))
	if st.Complete {
		t.Fatal("complete = true with a failed ENI list and no node source")
	}
	want := []string{"list ENIs: throttled", "node: no node source"}
	if diff := cmp.Diff(want, st.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestGatewayOf(t *testing.T) {
	for _, tc := range []struct{ cidr, want string }{
		{"10.0.1.0/24", "10.0.1.253"},
		{"192.168.0.0/16", "192.168.255.253"},
		{"10.0.0.0/29", "10.0.0.5"},
	} {
		got := GatewayOf(mustPrefix(t, tc.cidr))
		if got.String() != tc.want {
			t.Errorf("GatewayOf(%s) = %s, want %s", tc.cidr, got, tc.want)
		}
	}
	if GatewayOf(mustPrefix(t, "10.0.0.0/30")).IsValid() {
		t.Error("a /30 has no room for a gateway")
	}
}

func TestGatewayV6Of(t *testing.T) {
	for _, tc := range []struct{ cidr, want string }{
		{"2408:4005:300::/64", "2408:4005:300:0:ffff:ffff:ffff:fffd"},
		{"2408:4005:300:7::/120", "2408:4005:300:7::fd"},
	} {
		if got := GatewayV6Of(mustPrefix(t, tc.cidr)); got.String() != tc.want {
			t.Errorf("GatewayV6Of(%s) = %s, want %s", tc.cidr, got, tc.want)
		}
	}
	if GatewayV6Of(mustPrefix(t, "10.0.0.0/24")).IsValid() {
		t.Error("an IPv4 prefix has no IPv6 gateway")
	}
}

package observed

import (
	"net/netip"
	"testing"
)

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOwned(t *testing.T) {
	ours := map[string]string{TagManagedBy: TagManagedByValue, TagOwner: "i-1"}
	for _, tc := range []struct {
		name string
		eni  ENI
		want bool
	}{
		{"ours", ENI{Type: ENITypeSecondary, Tags: ours}, true},
		{"other instance", ENI{Type: ENITypeSecondary, Tags: map[string]string{TagManagedBy: TagManagedByValue, TagOwner: "i-2"}}, false},
		{"untagged", ENI{Type: ENITypeSecondary}, false},
		{"primary with our tags", ENI{Type: ENITypePrimary, Tags: ours}, false},
	} {
		if got := tc.eni.Owned("i-1"); got != tc.want {
			t.Errorf("%s: Owned = %v, want %v", tc.name, got, tc.want)
		}
	}
	if (ENI{Type: ENITypeSecondary, Tags: ours}).Owned("") {
		t.Error("an empty instance ID owns nothing")
	}
}

func TestHasIP(t *testing.T) {
	e := ENI{IPv4: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.9")},
		IPv6: []netip.Addr{netip.MustParseAddr("2408::5")}}
	for ip, want := range map[string]bool{"10.0.0.9": true, "10.0.0.3": false, "2408::5": true, "2408::6": false} {
		if got := e.HasIP(netip.MustParseAddr(ip)); got != want {
			t.Errorf("HasIP(%s) = %v, want %v", ip, got, want)
		}
	}
}

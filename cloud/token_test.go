package cloud

import (
	"testing"
)

func TestClientToken(t *testing.T) {
	a := ClientToken("i-1", "eni", "slot-0", "gen-3")
	if a != ClientToken("i-1", "eni", "slot-0", "gen-3") {
		t.Fatal("same parts gave different tokens")
	}
	if len(a) > 64 {
		t.Fatalf("token %q is %d chars, ECS allows 64", a, len(a))
	}
	for _, r := range a {
		if r > 0x7e || r < 0x21 {
			t.Fatalf("token %q holds non-printable-ASCII %q", a, r)
		}
	}
	// Fixed for all time: a token must survive upgrades of the agent, or a
	// create retried across an upgrade would make a second ENI.
	if want := "enid-fa5a13c744d72de544e6f374fea7b54e7cbcf4486343c994073a101a"; a != want {
		t.Errorf("ClientToken changed: got %q, want %q", a, want)
	}
	distinct := map[string][]string{}
	for _, parts := range [][]string{
		{"i-1", "eni", "slot-0", "gen-3"},
		{"i-1", "eni", "slot-0", "gen-4"},
		{"i-1", "eni", "slot-0gen-3"},
		{"i-1", "enislot-0", "gen-3"},
		{"i-2", "eni", "slot-0", "gen-3"},
		{},
		{""},
		{"", ""},
	} {
		tok := ClientToken(parts...)
		if prev, ok := distinct[tok]; ok {
			t.Errorf("parts %q and %q give the same token %s", prev, parts, tok)
		}
		distinct[tok] = parts
	}
}

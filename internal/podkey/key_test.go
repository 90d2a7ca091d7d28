package podkey

import (
	"strings"
	"testing"
)

// Lists of attachments are kept in the order of their key strings.
func TestCompareAsStrings(t *testing.T) {
	var keys []Key
	for _, id := range []string{"ab", "ab_x", "ab-x", "abc", "a", "b", "ab.c"} {
		for _, f := range []string{"eth0", "eth1", "e", "net-1"} {
			keys = append(keys, Key{ContainerID: id, IfName: f})
		}
	}
	for _, a := range keys {
		for _, b := range keys {
			if got, want := a.Compare(b), strings.Compare(a.String(), b.String()); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// The grammar is the CNI spec's for container IDs and Linux's for interface
// names, without '_' in the name: every valid key's file names parse back
// to it, and no invalid one names a file.
func TestGrammarAndFileNames(t *testing.T) {
	long := strings.Repeat("a", MaxContainerIDLen)
	for _, tc := range []struct {
		k     Key
		valid bool
	}{
		{Key{ContainerID: "abc", IfName: "eth0"}, true},
		{Key{ContainerID: "a_b.c-d", IfName: "net-1"}, true},
		{Key{ContainerID: long, IfName: "eth0"}, true},
		{Key{ContainerID: long + "a", IfName: "eth0"}, false},
		{Key{ContainerID: "", IfName: "eth0"}, false},
		{Key{ContainerID: "_abc", IfName: "eth0"}, false},
		{Key{ContainerID: "../etc", IfName: "eth0"}, false},
		{Key{ContainerID: "abc", IfName: ""}, false},
		{Key{ContainerID: "abc", IfName: "net_1"}, false},
		{Key{ContainerID: "abc", IfName: ".."}, false},
		{Key{ContainerID: "abc", IfName: "a/b"}, false},
		{Key{ContainerID: "abc", IfName: "eth0:1"}, false},
		{Key{ContainerID: "abc", IfName: "éth0"}, false},
		{Key{ContainerID: "abc", IfName: "0123456789abcdef"}, false},
	} {
		if err := tc.k.Validate(); (err == nil) != tc.valid {
			t.Errorf("%q.Validate() = %v, want valid %v", tc.k, err, tc.valid)
		}
		for _, sfx := range []string{JSONSuffix, DeletionSuffix} {
			name := tc.k.String() + sfx
			got, ok := FromFileName(name, sfx)
			// An invalid key's name may parse as another, valid key
			// ("abc_net_1" is "abc_net" and "1"), never as itself.
			if tc.valid != (ok && got == tc.k) {
				t.Errorf("FromFileName(%q) = %v, %v; want %v, %v", name, got, ok, tc.k, tc.valid)
			}
		}
		if tc.valid && (FileName(tc.k) != tc.k.String()+".json" || DeletionFileName(tc.k) != tc.k.String()+".del") {
			t.Errorf("file names of %q: %q, %q", tc.k, FileName(tc.k), DeletionFileName(tc.k))
		}
	}
}

package observed

import (
	"strings"
	"testing"
)

// Lists of attachments are kept in the order of their key strings.
func TestAttachmentKeyCompareAsStrings(t *testing.T) {
	var keys []AttachmentKey
	for _, id := range []string{"ab", "ab_x", "ab-x", "abc", "a", "b", "ab.c"} {
		for _, f := range []string{"eth0", "eth1", "e", "net-1"} {
			keys = append(keys, AttachmentKey{ContainerID: id, IfName: f})
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

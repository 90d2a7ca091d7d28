package reconcile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/netnsid"
	"github.com/enidnet/enid/observed"
)

// countingGuard is guardedNoDatapath counting its checks.
type countingGuard struct {
	guardedNoDatapath
	checks *int
}

func (g countingGuard) CheckNetNS(path string) error {
	*g.checks++
	return g.guardedNoDatapath.CheckNetNS(path)
}

// TestRefuseNetNSKeepsVerdicts: the guard checks each entry revision once,
// refuses a netns that is not one (a regular file), notes one that is gone,
// forgets the verdicts of entries that went away, and, on a pass where no
// entry is refused, leaves the entries as they were (no copy of a
// thousand entries per pod start).
func TestRefuseNetNSKeepsVerdicts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "not-a-netns")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	checks := 0
	pl := Planning{Datapath: countingGuard{guardedNoDatapath{NoDatapath: NewNoDatapathMust(t), node: netnsid.ID{Dev: 1, Ino: 1}}, &checks}}
	entry := func(id, netns, rev string) desired.Entry {
		return desired.Entry{ContainerID: id, IfName: "eth0", NetNS: netns, Revision: rev}
	}
	live := entry("a", "/proc/self/ns/net", "1")
	gone := entry("b", filepath.Join(dir, "gone"), "1")
	refused := entry("c", file, "1")
	keys := func(es []desired.Entry) (out []string) {
		for _, e := range es {
			out = append(out, e.ContainerID)
		}
		return out
	}

	d := desired.State{Entries: []desired.Entry{live, gone, refused}}
	pl.Complete(&d)
	if got := keys(d.Entries); !slices.Equal(got, []string{"a", "b"}) || len(d.EntryProblems) != 1 || d.EntryProblems[0].ContainerID != "c" {
		t.Fatalf("entries %v, problems %+v: want a and b kept, c refused", got, d.EntryProblems)
	}
	if got := pl.missingNetNS(d); !slices.Equal(got, []observed.AttachmentKey{gone.Key()}) {
		t.Errorf("missing netns %v, want b's", got)
	}

	in := []desired.Entry{live, gone}
	d = desired.State{Entries: in}
	pl.Complete(&d)
	if checks != 3 {
		t.Errorf("%d checks after two passes over the same revisions: want 3, one each", checks)
	}
	if &d.Entries[0] != &in[0] || len(d.Entries) != 2 {
		t.Error("a pass that refused nothing copied the entries")
	}
	if got := pl.missingNetNS(d); !slices.Equal(got, []observed.AttachmentKey{gone.Key()}) {
		t.Errorf("missing netns %v on the second pass, want b's", got)
	}

	d = desired.State{Entries: []desired.Entry{live}}
	pl.Complete(&d)
	if len(pl.netns) != 1 || pl.missingNetNS(d) != nil {
		t.Errorf("after b and c went: %d verdicts kept, missing %v: want a's alone, none missing", len(pl.netns), pl.missingNetNS(d))
	}
	// b comes back (a new ADD, a new revision): checked anew.
	d = desired.State{Entries: []desired.Entry{live, entry("b", "/proc/self/ns/net", "2")}}
	pl.Complete(&d)
	if checks != 4 || pl.missingNetNS(d) != nil {
		t.Errorf("%d checks, missing %v after b's new revision: want 4 checks, none missing", checks, pl.missingNetNS(d))
	}
}

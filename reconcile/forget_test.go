package reconcile

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// TestForgetDeletionsUpdatesTheCachedState: the desired state is read again
// only when its files change, so once forgetDeletions removes a deletion
// record the state the next passes plan with must not list it (each pass
// would remove it again: an unlink per record per pass, for nothing), and
// the caller's copy must be left as it was.
func TestForgetDeletionsUpdatesTheCachedState(t *testing.T) {
	dir := t.TempDir()
	store := desired.NewEntryStore(dir)
	gone := desired.Key{ContainerID: "gone", IfName: "eth0"}
	kept := desired.Key{ContainerID: "kept", IfName: "eth0"}
	for _, k := range []desired.Key{gone, kept} {
		if err := store.MarkDeleted(k, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	a := &Agent{entries: store, log: slog.New(slog.DiscardHandler)}
	a.desired.Deleted = []desired.Key{gone, kept}
	d := a.desired
	// kept still has a status: its record stays.
	o := observed.State{Complete: true}
	o.Node.Published = []observed.Binding{{Key: kept}}
	a.forgetDeletions(d, o, nil)
	if _, err := os.Stat(filepath.Join(dir, desired.DeletionFileName(gone))); !os.IsNotExist(err) {
		t.Errorf("the record of %s is still on disk (%v)", gone, err)
	}
	if _, err := os.Stat(filepath.Join(dir, desired.DeletionFileName(kept))); err != nil {
		t.Errorf("the record of %s, whose status is still there, was removed: %v", kept, err)
	}
	if len(a.desired.Deleted) != 1 || a.desired.Deleted[0] != kept {
		t.Errorf("cached desired state lists deletions %v after forgetting %s, want only %s", a.desired.Deleted, gone, kept)
	}
	if len(d.Deleted) != 2 || d.Deleted[0] != gone {
		t.Errorf("the caller's state was changed: %v", d.Deleted)
	}
}

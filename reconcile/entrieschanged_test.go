package reconcile

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// TestEntriesChangedReadsOnlyTheEntries: an agent without its file watcher
// whose caller names the entry files it changed (Agent.EntriesChanged, as
// the simulation does) serves the entries named, and reads nothing else
// again for them: a config rewritten on disk meanwhile is not read (its
// fingerprint is a listing and a stat of every config file, which an entry
// change does not need) until the caller says something besides entries
// changed (Wake). An agent that took EntriesChanged for Wake would grow
// its pool to the new minIdle at once.
func TestEntriesChangedReadsOnlyTheEntries(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 0\n  maxIdle: 2\n  batch: 1\n")
	w.noWatch = true
	defer w.start(NewNoDatapathMust(t))()
	idle := func() int {
		a, err := status.ReadAgent(w.paths.AgentFile)
		if err != nil {
			return -1
		}
		return a.Pool.Idle
	}

	k0 := w.addPod(0)
	w.agent.EntriesChanged(desired.EntryFileName(k0))
	w.waitReady(k0)

	cfg, err := os.ReadFile(w.paths.Config.Main)
	if err != nil {
		t.Fatal(err)
	}
	grown := strings.Replace(string(cfg), "minIdle: 0\n  maxIdle: 2\n  batch: 1", "minIdle: 6\n  maxIdle: 10\n  batch: 6", 1)
	if grown == string(cfg) {
		t.Fatalf("the test's config has no pool to change:\n%s", cfg)
	}
	if err := os.WriteFile(w.paths.Config.Main, []byte(grown), 0o644); err != nil {
		t.Fatal(err)
	}
	k1 := w.addPod(1)
	w.agent.EntriesChanged(desired.EntryFileName(k1))
	w.waitReady(k1)
	// Passes go on (the heartbeat, the pool's own work); none may read the
	// config for the entry's change.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if n := idle(); n > 2 {
			t.Fatalf("%d idle addresses after an entry change alone: the config rewritten on disk (minIdle 6) was read, want the last one (maxIdle 2)", n)
		}
	}

	w.agent.Wake()
	w.waitFor("the pool grown to the rewritten config's minIdle after Wake", 20*time.Second, func() bool { return idle() >= 6 })

	// Deletions are entry changes too: the record and the entry named.
	if _, _, err := desired.NewEntryStore(w.paths.Entries).Delete(k0, time.Now()); err != nil {
		t.Fatal(err)
	}
	w.agent.EntriesChanged(desired.DeletionFileName(k0), desired.EntryFileName(k0))
	w.waitFor(fmt.Sprintf("%s torn down", k0), 20*time.Second, func() bool {
		_, ok := w.statuses()[k0.String()]
		return !ok
	})
}

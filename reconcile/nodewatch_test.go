package reconcile

import (
	"log/slog"
	"testing"
	"time"
)

// TestOwnChangesReadBackAtAShareOfTheReadTime: a node change that is
// probably the agent's own is read back no sooner than ownRecheck after
// the last read, or ownReadShare times as long as that read took when
// that is longer (a node with many pods); a change far from any own
// action (drift) is read after nodeDebounce whatever a read costs.
func TestOwnChangesReadBackAtAShareOfTheReadTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &Agent{log: slog.New(slog.DiscardHandler), exec: &executor{inflight: map[opKey]int{}, nodeDoneAt: t0}}
	now := t0.Add(10 * time.Millisecond) // 10 ms after the last own action
	for _, c := range []struct{ took, want time.Duration }{
		{0, ownRecheck},
		{5 * time.Millisecond, ownRecheck},
		{50 * time.Millisecond, ownReadShare * 50 * time.Millisecond},
	} {
		a.nodeDue, a.nodeReadAt, a.nodeReadTook = time.Time{}, t0, c.took
		if got := a.noteNodeChange(now); !got.Equal(t0.Add(c.want)) {
			t.Errorf("last read took %s: read again at +%s, want +%s", c.took, got.Sub(t0), c.want)
		}
	}
	a.exec.nodeDoneAt = t0.Add(-time.Hour)
	a.nodeDue, a.nodeReadAt, a.nodeReadTook = time.Time{}, t0, time.Second
	if got := a.noteNodeChange(now); !got.Equal(now.Add(nodeDebounce)) {
		t.Errorf("drift read at +%s, want +%s", got.Sub(now), nodeDebounce)
	}
}

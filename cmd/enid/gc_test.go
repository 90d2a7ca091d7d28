package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestTuneGC: the agent collects at agentGCPercent unless GOGC is set, and
// a GOGC in the environment stands (the runtime read it at start; tuneGC
// leaves it).
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	t.Setenv("GOGC", "")
	if got := tuneGC(); got != 100 {
		t.Errorf("with GOGC set, tuneGC reports %d: want the 100 in force", got)
	}
	if now := debug.SetGCPercent(100); now != 100 {
		t.Errorf("with GOGC set, tuneGC changed the GC percent to %d", now)
	}

	// Unset for the rest of the test (t.Setenv restores it after).
	t.Setenv("GOGC", "x")
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	if got := tuneGC(); got != agentGCPercent {
		t.Errorf("without GOGC, tuneGC reports %d: want %d", got, agentGCPercent)
	}
	if now := debug.SetGCPercent(100); now != agentGCPercent {
		t.Errorf("without GOGC, the GC percent is %d: want %d", now, agentGCPercent)
	}
}

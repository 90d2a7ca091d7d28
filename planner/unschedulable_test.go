package planner_test

import (
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/planner"
)

// TestNextDeadlineUnschedulable: the agent is woken when a cordoned node's
// pool is due to shrink, and only with the option on.
func TestNextDeadlineUnschedulable(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	var cfg desired.Config
	since := now.Add(-3 * time.Minute)
	if _, ok := (planner.Memory{}).NextDeadline(cfg, planner.Options{Now: now, Unschedulable: since}); ok {
		t.Error("a deadline with pool.unschedulableRelease off")
	}
	cfg.Pool.UnschedulableRelease = desired.Duration(5 * time.Minute)
	got, ok := (planner.Memory{}).NextDeadline(cfg, planner.Options{Now: now, Unschedulable: since})
	if want := since.Add(5 * time.Minute); !ok || !got.Equal(want) {
		t.Errorf("deadline %v %v, want %v", got, ok, want)
	}
	if _, ok := (planner.Memory{}).NextDeadline(cfg, planner.Options{Now: now}); ok {
		t.Error("a deadline on a schedulable node")
	}
}

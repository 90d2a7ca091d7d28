package planner

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// TestNoteAdmitted walks one pod UID through the cases of admitted.go, one
// pass per row, each row planning with the memory the previous one left.
func TestNoteAdmitted(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	cfg := desired.DefaultConfig()
	cfg.Pool.MinIdle, cfg.Pool.MaxIdle = 0, 10
	entry := func(uid string) desired.Entry {
		return desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: "c-" + uid, IfName: "eth0", PodUID: uid, Revision: "r1"}
	}
	type row struct {
		name    string
		at      time.Duration // pass time after t0
		listed  []string
		written time.Duration // file's time after t0
		partial bool
		entries []string
		// want
		expected int
		records  map[string]AdmittedRecord
	}
	rows := []row{
		{name: "admitted, no entry yet: demand", at: 2 * time.Second, listed: []string{"a", "b"}, written: time.Second,
			expected: 2, records: map[string]AdmittedRecord{"a": {Since: t0.Add(time.Second)}, "b": {Since: t0.Add(time.Second)}}},
		{name: "a gets its entry", at: 3 * time.Second, listed: []string{"a", "b"}, written: time.Second, entries: []string{"a"},
			expected: 1, records: map[string]AdmittedRecord{"a": {Since: t0.Add(time.Second), Entry: true}, "b": {Since: t0.Add(time.Second)}}},
		{name: "a deleted, still listed: not demand", at: 4 * time.Second, listed: []string{"a", "b"}, written: time.Second,
			expected: 1, records: map[string]AdmittedRecord{"a": {Since: t0.Add(time.Second), Entry: true}, "b": {Since: t0.Add(time.Second)}}},
		{name: "the file cannot be read: records kept", at: 5 * time.Second, partial: true,
			expected: 0, records: map[string]AdmittedRecord{"a": {Since: t0.Add(time.Second), Entry: true}, "b": {Since: t0.Add(time.Second)}}},
		{name: "read again: a still not demand", at: 6 * time.Second, listed: []string{"a", "b"}, written: time.Second,
			expected: 1, records: map[string]AdmittedRecord{"a": {Since: t0.Add(time.Second), Entry: true}, "b": {Since: t0.Add(time.Second)}}},
		{name: "b never gets an entry: expires", at: time.Second + DefaultAdmittedFor, listed: []string{"a", "b"}, written: time.Second,
			expected: 0, records: map[string]AdmittedRecord{"a": {Since: t0.Add(time.Second), Entry: true}, "b": {Since: t0.Add(time.Second)}}},
		{name: "rewritten at c's admission: a leaves the file and the memory", at: 3 * time.Minute, listed: []string{"b", "c"}, written: 3*time.Minute - time.Second,
			expected: 1, records: map[string]AdmittedRecord{"b": {Since: t0.Add(time.Second)}, "c": {Since: t0.Add(3*time.Minute - time.Second)}}},
		{name: "a file time after the pass: the pass's time", at: 4 * time.Minute, listed: []string{"b", "c", "d"}, written: 5 * time.Minute,
			expected: 2, records: map[string]AdmittedRecord{"b": {Since: t0.Add(time.Second)}, "c": {Since: t0.Add(3*time.Minute - time.Second)}, "d": {Since: t0.Add(4 * time.Minute)}}},
		{name: "no file: no records", at: 5 * time.Minute,
			expected: 0, records: nil},
	}
	var m Memory
	for _, r := range rows {
		d := desired.State{Config: cfg, Hints: desired.Hints{AdmittedPodUIDs: r.listed, AdmittedPartial: r.partial}}
		if r.listed != nil {
			d.Hints.AdmittedAt = t0.Add(r.written)
		}
		for _, u := range r.entries {
			d.Entries = append(d.Entries, entry(u))
		}
		p := Make(d, observed.State{}, Options{Now: t0.Add(r.at), Memory: m})
		if p.Pool.Expected != r.expected {
			t.Errorf("%s: expected = %d, want %d", r.name, p.Pool.Expected, r.expected)
		}
		if diff := cmp.Diff(r.records, p.Memory.Admitted); diff != "" {
			t.Errorf("%s: records (-want +got):\n%s", r.name, diff)
		}
		m = p.Memory
	}
}

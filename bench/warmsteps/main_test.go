package main

import (
	"strings"
	"testing"
	"time"
)

// TestSplit: an ADD's steps come from its own line, the first plan of a
// pass that started after its entry, and its container's setup; an ADD
// slower than the bound is counted, not split.
func TestSplit(t *testing.T) {
	const log = `time=10:00:00.000900 level=DEBUG msg=plan actions=2 pass_started=10:00:00.000800 pass_so_far=100µs
time=10:00:00.012500 level=DEBUG msg=plan actions=2 cloud_calls=0 pass_started=10:00:00.011000 pass_so_far=1.5ms
time=10:00:00.015500 level=DEBUG msg="action done" kind=SetupPod target=aaaaaaaaaaaa0000_eth0 took=3ms
time=10:00:00.020000 level=DEBUG msg="warm ADD" pod=w0 container=aaaaaaaaaaaa add_started=10:00:00.000000 entry_created=10:00:00.010000 status_updated=10:00:00.015600 add_returned=10:00:00.019000
time=10:00:00.200000 level=DEBUG msg="warm ADD" pod=w1 container=bbbbbbbbbbbb add_started=10:00:00.030000 entry_created=10:00:00.040000 status_updated=10:00:00.150000 add_returned=10:00:00.190000
`
	rows, left, err := split(strings.NewReader(log), 60*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || left != 1 {
		t.Fatalf("%d rows, %d left out; want 1 and 1", len(rows), left)
	}
	want := []time.Duration{10 * time.Millisecond, time.Millisecond, 1500 * time.Microsecond,
		3 * time.Millisecond, 100 * time.Microsecond, 3400 * time.Microsecond, 19 * time.Millisecond}
	for i, w := range want {
		if rows[0][i] != w {
			t.Errorf("%s = %s, want %s", steps[i], rows[0][i], w)
		}
	}
}

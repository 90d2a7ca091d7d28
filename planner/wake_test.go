package planner

import (
	"net/netip"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
)

func TestNextDeadline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := desired.Config{Pool: desired.Pool{ReleaseDelay: desired.Duration(time.Minute)}}
	opt := Options{Now: now}
	if _, ok := (Memory{}).NextDeadline(cfg, opt); ok {
		t.Fatal("empty memory has a deadline")
	}
	m := Memory{
		Cooldowns:         map[netip.Addr]time.Time{netip.MustParseAddr("10.0.0.1"): now.Add(30 * time.Second), netip.MustParseAddr("10.0.0.2"): now.Add(-time.Second)},
		Sticky:            map[string]Reservation{"a/b/eth0": {Until: now.Add(20 * time.Second)}, "a/c/eth0": {}},
		IdleAboveMaxSince: now.Add(-50 * time.Second),
		LeakedSince:       map[string]time.Time{"eni-1": now},
	}
	got, ok := m.NextDeadline(cfg, opt)
	if want := now.Add(10 * time.Second); !ok || !got.Equal(want) {
		t.Fatalf("NextDeadline = %v, %v; want %v (idle above max since 50s, delay 1m)", got, ok, want)
	}
	m.IdleAboveMaxSince = time.Time{}
	if got, _ := m.NextDeadline(cfg, opt); !got.Equal(now.Add(20 * time.Second)) {
		t.Fatalf("NextDeadline = %v, want the sticky hold's end", got)
	}
	// Another security-group set's release delay wakes the agent too.
	m.SetIdleAboveMaxSince = map[string]time.Time{"sg-a": now.Add(-55 * time.Second)}
	if got, _ := m.NextDeadline(cfg, opt); !got.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("NextDeadline = %v, want the sg-a set's release delay end", got)
	}
	// A vSwitch that refused a prefix is asked again when its mark ends.
	m = m.MarkFragmented("vsw-a", now.Add(3*time.Second))
	if got, _ := m.NextDeadline(cfg, opt); !got.Equal(now.Add(3 * time.Second)) {
		t.Fatalf("NextDeadline = %v, want the fragmented mark's end", got)
	}
	// A security-group set the cloud refused is tried again when its
	// mark ends.
	m = m.MarkRefusedGroups("sg-ghost", now.Add(2*time.Second))
	if got, _ := m.NextDeadline(cfg, opt); !got.Equal(now.Add(2 * time.Second)) {
		t.Fatalf("NextDeadline = %v, want the refused set's mark end", got)
	}
	// A backed-off action may run again when its back-off ends (an ended
	// one wakes nobody).
	m.Backoffs = map[RetryKey]Backoff{{Scope: RetryENI, ID: "eni-1"}: {Failures: 1, Until: now.Add(1500 * time.Millisecond)},
		{Scope: RetryENI, ID: "eni-2"}: {Failures: 3, Until: now.Add(-time.Second)}}
	if got, _ := m.NextDeadline(cfg, opt); !got.Equal(now.Add(1500 * time.Millisecond)) {
		t.Fatalf("NextDeadline = %v, want the back-off's end", got)
	}
	// An entry whose netns is gone is given up at staleEntryTimeout.
	cfg.StaleEntryTimeout = desired.Duration(time.Minute)
	m.NetNSGone = map[string]time.Time{"c1_eth0": now.Add(-59 * time.Second)}
	if got, _ := m.NextDeadline(cfg, opt); !got.Equal(now.Add(time.Second)) {
		t.Fatalf("NextDeadline = %v, want the stale entry's timeout", got)
	}
	// An admitted pod that never had an entry stops counting as demand
	// AdmittedFor after it was first seen; one that had an entry never
	// counts, so it sets no deadline.
	m = Memory{Admitted: map[string]AdmittedRecord{
		"u-new":     {Since: now.Add(-DefaultAdmittedFor + time.Second)},
		"u-deleted": {Since: now.Add(-DefaultAdmittedFor + 500*time.Millisecond), Entry: true},
		"u-expired": {Since: now.Add(-DefaultAdmittedFor - time.Second)},
	}}
	if got, ok := m.NextDeadline(cfg, opt); !ok || !got.Equal(now.Add(time.Second)) {
		t.Fatalf("NextDeadline = %v, %v; want u-new's expiry 1s from now", got, ok)
	}
	opt.AdmittedFor = 10 * time.Minute
	if got, _ := m.NextDeadline(cfg, opt); !got.Equal(now.Add(10*time.Minute - DefaultAdmittedFor - time.Second)) {
		t.Fatalf("NextDeadline = %v with AdmittedFor 10m, want u-expired's later expiry", got)
	}
}

package main

import (
	"testing"
	"time"
)

// TestPollerFastThenBackoff: a poller reads every pollFirst for its fast
// span, then backs off by half each read up to pollMax. DEL's fast span is
// the longer one: a teardown waits for the kernel's veth deletion, and a
// DEL that backed off from its first read saw the status gone late.
func TestPollerFastThenBackoff(t *testing.T) {
	p := newPoller(time.Hour) // still inside its fast span
	for i := range 5 {
		if d := p.next(); d != pollFirst {
			t.Fatalf("read %d inside the fast span waits %s, want %s", i, d, pollFirst)
		}
	}
	p = &poller{start: time.Now().Add(-time.Second), fast: delPollFast, interval: pollFirst}
	var got []time.Duration
	for range 14 {
		got = append(got, p.next())
	}
	for i := 1; i < len(got); i++ {
		if want := min(got[i-1]*3/2, pollMax); got[i] != want {
			t.Fatalf("after the fast span the waits are %v: wait %d is %s, want %s", got, i, got[i], want)
		}
	}
	if last := got[len(got)-1]; last != pollMax {
		t.Errorf("the waits %v never reach pollMax %s", got, pollMax)
	}
	if delPollFast <= pollFast {
		t.Errorf("DEL polls fast for %s, ADD for %s: a teardown (a veth's deletion) takes longer than a warm setup", delPollFast, pollFast)
	}
}

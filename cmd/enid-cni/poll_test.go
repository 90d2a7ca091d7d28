package main

import (
	"testing"
	"time"
)

// TestPollerFastThenProportional: a poller reads every pollFirst for its
// fast span, then waits a pollShare-th of the time waited so far, up to
// pollMax. So an answer that lands at any moment is seen at most
// max(pollFirst, a tenth of its wait, pollMax) late, and a long wait (a
// new ENI's seconds) costs a bounded number of reads. DEL's fast span is
// the longer one: a teardown waits for the kernel's veth deletion, and a
// DEL that backed off from its first read saw the status gone late.
func TestPollerFastThenProportional(t *testing.T) {
	p := newPoller(time.Hour) // still inside its fast span
	for i := range 5 {
		if d := p.next(); d != pollFirst {
			t.Fatalf("read %d inside the fast span waits %s, want %s", i, d, pollFirst)
		}
	}
	for _, fast := range []time.Duration{pollFast, delPollFast} {
		// The reads of a poll that waits 5 s, on a clock that moves only
		// by the waits.
		var reads []time.Duration
		for at := time.Duration(0); at <= 5*time.Second; at += pollWait(at, fast) {
			reads = append(reads, at)
		}
		for i := 1; i < len(reads); i++ {
			gap, prev := reads[i]-reads[i-1], reads[i-1]
			switch {
			case prev <= fast && gap != pollFirst:
				t.Fatalf("fast span %s: the read after %s came %s later, want %s", fast, prev, gap, pollFirst)
			case gap > max(pollFirst, prev/pollShare) || gap > pollMax:
				// An answer landing just after prev is seen gap late.
				t.Fatalf("fast span %s: the read after %s came %s later: an answer landing then is seen more than a tenth of its wait late", fast, prev, gap)
			}
		}
		if gaps := reads[len(reads)-1] - reads[len(reads)-2]; gaps != pollMax {
			t.Errorf("fast span %s: the waits never reach pollMax %s (last %s)", fast, pollMax, gaps)
		}
		// A new ENI's 5 s: the fast span's reads, ~10 ln(1 s / fast) up
		// to pollMax, then 40 at pollMax.
		if n := len(reads); n > int(fast/pollFirst)+100 {
			t.Errorf("fast span %s: %d reads in 5 s", fast, n)
		}
	}
	if delPollFast <= pollFast {
		t.Errorf("DEL polls fast for %s, ADD for %s: a teardown (a veth's deletion) takes longer than a warm setup", delPollFast, pollFast)
	}
}

package planner

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestLearn: what each failed outcome teaches, and what it does not.
func TestLearn(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	assign := Action{Kind: AssignIPs, ENIID: "eni-1", IPv4Count: 2, ClientToken: "tok-a"}
	prefix := Action{Kind: AssignIPs, ENIID: "eni-1", IPv4PrefixCount: 1, ClientToken: "tok-p"}
	create := Action{Kind: CreateENI, VSwitchID: "vsw-2", SecurityGroups: []string{"sg-b", "sg-a"}, IPv4Count: 3, ClientToken: "tok-c"}
	update := Action{Kind: UpdateENI, ENIID: "eni-1", SecurityGroups: []string{"sg-x"}}
	setup := Action{Kind: SetupPod, Target: "c1_eth0"}
	for _, tc := range []struct {
		name string
		outs []Outcome
		want []Lesson
	}{
		{"success teaches nothing", []Outcome{{Action: assign, VSwitchID: "vsw-1", NoAddresses: true}}, nil},
		{"addresses refused: exhausted, token burnt",
			[]Outcome{{Action: assign, Err: "IpNotEnough", VSwitchID: "vsw-1", NoAddresses: true, Definite: true}},
			[]Lesson{{LessonExhausted, "vsw-1", now.Add(DefaultExhaustedFor)}, {LessonTokenBurnt, "tok-a", time.Time{}}}},
		{"prefix refused: fragmented, not exhausted",
			[]Outcome{{Action: prefix, Err: "IpNotEnough", VSwitchID: "vsw-1", NoAddresses: true}},
			[]Lesson{{LessonFragmented, "vsw-1", now.Add(DefaultFragmentedFor)}}},
		{"no vSwitch known: nothing to mark",
			[]Outcome{{Action: assign, Err: "IpNotEnough", NoAddresses: true}}, nil},
		{"create refused for its groups: the sorted set",
			[]Outcome{{Action: create, Err: "InvalidSecurityGroupId.NotFound", GroupsRefused: true, Definite: true}},
			[]Lesson{{LessonRefusedGroups, "sg-a,sg-b", now.Add(DefaultRefusedFor)}, {LessonTokenBurnt, "tok-c", time.Time{}}}},
		{"update refused for its groups",
			[]Outcome{{Action: update, Err: "InvalidSecurityGroupId.NotFound", GroupsRefused: true, Definite: true}},
			[]Lesson{{LessonRefusedGroups, "sg-x", now.Add(DefaultRefusedFor)}}},
		{"an open outcome keeps the token",
			[]Outcome{{Action: create, Err: "InternalError"}}, nil},
		{"a node action's failure teaches the cloud nothing",
			[]Outcome{{Action: setup, Err: "netns gone", GroupsRefused: true, Definite: true}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, got := Memory{}.Learn(tc.outs, now)
			// Every failure backs off (TestLearnBackoff): here, the rest.
			if got = slices.DeleteFunc(got, func(l Lesson) bool { return l.Kind == LessonBackoff }); len(got) == 0 {
				got = nil
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("lessons (-want +got):\n%s", d)
			}
			for _, l := range got {
				var ok bool
				switch l.Kind {
				case LessonExhausted:
					_, ok = m.Exhausted[l.Key]
				case LessonFragmented:
					_, ok = m.Fragmented[l.Key]
				case LessonRefusedGroups:
					_, ok = m.RefusedGroups[l.Key]
				case LessonTokenBurnt:
					_, ok = m.Tokens[l.Key]
				}
				if !ok {
					t.Errorf("lesson %+v is not in the memory: %+v", l, m)
				}
			}
		})
	}
}

// TestLearnBackoff: every failure backs its retry key off, from when the
// action ended, briefly for a retryable class and long for a terminal one,
// longer with each failure in a row, with the same jitter for the same
// inputs; a success ends the back-off.
func TestLearnBackoff(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	ended := now.Add(-50 * time.Millisecond)
	setup := Action{Kind: SetupPod, Target: "c1_eth0", Pod: &PodTarget{Revision: "r1"}}
	create := Action{Kind: CreateENI, VSwitchID: "vsw-1", SecurityGroups: []string{"sg-b", "sg-a"}, ClientToken: "tok-c"}
	setupKey := RetryKey{Scope: RetryNode, Kind: SetupPod, ID: "c1_eth0"}
	createKey := RetryKey{Scope: RetryCreateIn, ID: "vsw-1", Groups: "sg-a,sg-b"}
	fail := func(a Action, c FailureClass) Outcome { return Outcome{Action: a, Err: "boom", Class: c, At: ended} }

	m, _ := Memory{}.Learn([]Outcome{fail(setup, FailTransient), fail(create, FailTerminal)}, now)
	for _, tc := range []struct {
		key      RetryKey
		min, max time.Duration
	}{{setupKey, 100 * time.Millisecond, 200 * time.Millisecond}, {createKey, 2500 * time.Millisecond, 5 * time.Second}} {
		b, ok := m.Backoffs[tc.key]
		if !ok {
			t.Fatalf("no back-off for %s: %+v", tc.key, m.Backoffs)
		}
		if d := b.Until.Sub(ended); b.Failures != 1 || d < tc.min || d > tc.max {
			t.Errorf("%s: %d failures, waits %v from the failure; want 1 and within [%v, %v]", tc.key, b.Failures, d, tc.min, tc.max)
		}
	}
	if b := m.Backoffs[setupKey]; b.Revision != "r1" || b.Class != FailTransient || b.Err != "boom" {
		t.Errorf("setup back-off %+v: want the failed revision r1, its class and error", b)
	}
	again, _ := Memory{}.Learn([]Outcome{fail(setup, FailTransient), fail(create, FailTerminal)}, now)
	if d := cmp.Diff(m.Backoffs, again.Backoffs); d != "" {
		t.Errorf("the same outcomes backed off differently (-first +second):\n%s", d)
	}

	m2, _ := m.Learn([]Outcome{fail(setup, FailTransient)}, now)
	if b := m2.Backoffs[setupKey]; b.Failures != 2 || b.Until.Sub(ended) < 200*time.Millisecond {
		t.Errorf("second failure: %+v, want 2 failures waiting at least 200ms", b)
	}
	if m.Backoffs[setupKey].Failures != 1 {
		t.Error("Learn changed the memory it was given")
	}
	m3, _ := m2.Learn([]Outcome{{Action: setup, At: now}}, now)
	if _, ok := m3.Backoffs[setupKey]; ok {
		t.Error("a success did not end the back-off")
	}
	if _, ok := m3.Backoffs[createKey]; !ok {
		t.Error("a success of another key ended the create's back-off")
	}
}

// TestBackoffDelay: the policy's bounds, doubling up to the limit.
func TestBackoffDelay(t *testing.T) {
	k := RetryKey{Scope: RetryENI, ID: "eni-1"}
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		n         int
		retryable bool
		max       time.Duration
	}{{1, true, 200 * time.Millisecond}, {2, true, 400 * time.Millisecond}, {20, true, 30 * time.Second},
		{1, false, 5 * time.Second}, {3, false, 20 * time.Second}, {20, false, 2 * time.Minute}} {
		d := BackoffDelay(k, tc.n, tc.retryable, at)
		if d < tc.max/2 || d > tc.max {
			t.Errorf("failure %d (retryable %v): %v, want within [%v, %v]", tc.n, tc.retryable, d, tc.max/2, tc.max)
		}
	}
}

// TestRetryKeyText: every scope's key reads back as written (memory.json).
func TestRetryKeyText(t *testing.T) {
	for _, a := range []Action{
		{Kind: CreateENI, VSwitchID: "vsw-1", SecurityGroups: []string{"sg-b", "sg-a"}},
		{Kind: UpdateENI, ENIID: "eni-1", SecurityGroups: []string{"sg-x"}},
		{Kind: AssignIPs, ENIID: "eni-1"},
		{Kind: AttachENI, Target: "new#0"},
		{Kind: SetupPod, Target: "c1_eth0"},
		{Kind: PublishStatus, Target: "c1_eth0"},
	} {
		k := RetryKeyOf(a)
		b, err := k.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got RetryKey
		if err := got.UnmarshalText(b); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got != k {
			t.Errorf("%s read back as %+v, want %+v", b, got, k)
		}
	}
	var k RetryKey
	if err := k.UnmarshalText([]byte("Nonsense/x")); err == nil {
		t.Error("a key of an unknown kind was read")
	}
}

// TestRetryable: which classes back off briefly.
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		c    FailureClass
		k    ActionKind
		want bool
	}{
		{FailThrottled, AssignIPs, true}, {FailTransient, CreateENI, true}, {FailTerminal, CreateENI, false},
		{FailNotFound, AssignIPs, false}, {FailTransient, SetupPod, true}, {FailNotFound, SetupPod, true},
		{FailNetNSRefused, SetupPod, true}, {FailConflict, SetupPod, false}, {FailConflict, MoveENI, false},
	} {
		if got := tc.c.Retryable(tc.k); got != tc.want {
			t.Errorf("%s of %s: retryable %v, want %v", tc.c, tc.k, got, tc.want)
		}
	}
}

package planner

import (
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

package reconcile

import (
	"slices"
	"testing"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/planner"
)

// TestExecutorBackoffPerSet: a create or an update the cloud refuses for
// its security groups (a group it does not know) backs off that set
// alone (planner.RetryKeyOf; the rig holds actions as the plan would,
// runHeld). A create of another set in the same vSwitch, and the update of
// the same ENI to other groups (the config corrected), run at once; the
// refused one does not reach the cloud again before its back-off ends.
// (Found end to end: one pod annotated with a group that does not exist
// held back every ENI create of the node's vSwitch, and a typo in
// eni.securityGroups held back its correction, for up to two minutes.)
func TestExecutorBackoffPerSet(t *testing.T) {
	r := newExecutorRigWith(t, ecssim.Config{SecurityGroups: []string{ecssim.DefaultSecurityGroup, "sg-a"}})
	calls := func(action string) int {
		n := 0
		for _, k := range r.sim.Counters()[action] {
			n += k
		}
		return n
	}
	create := func(id int, token string, groups ...string) planner.Action {
		return planner.Action{ID: id, Kind: planner.CreateENI, Target: "new#0", VSwitchID: r.vsw,
			SecurityGroups: groups, ClientToken: token, IPv4Count: 1}
	}

	r.run(planner.Plan{Actions: []planner.Action{create(0, "tok-ghost-1", "sg-ghost")}})
	if n := calls("CreateNetworkInterface"); n != 1 || len(r.x.errors()) != 1 {
		t.Fatalf("%d creates, errors %v: want the ghost set's create refused", n, r.x.errors())
	}
	// The refusal reaches the planner (Memory.MarkRefusedGroups).
	if got := lessonKeys(r.learn(), planner.LessonRefusedGroups); !slices.Equal(got, []string{"sg-ghost"}) {
		t.Errorf("refused sets %v, want [sg-ghost]", got)
	}
	// The ghost set's next token is held back; the default set's create
	// in the same vSwitch goes ahead.
	r.runHeld(planner.Plan{Actions: []planner.Action{create(0, "tok-ghost-2", "sg-ghost"), create(1, "tok-default", ecssim.DefaultSecurityGroup)}})
	if n := calls("CreateNetworkInterface"); n != 2 {
		t.Errorf("%d creates, want 2: the ghost set's second token must wait, the default set's create must not", n)
	}
	var made []string
	for _, e := range r.sim.Dump().ENIs {
		if e.Type != "Primary" {
			made = append(made, e.ID)
			if !slices.Equal(e.SecurityGroups, []string{ecssim.DefaultSecurityGroup}) {
				t.Errorf("ENI %s has groups %v", e.ID, e.SecurityGroups)
			}
		}
	}
	if len(made) != 1 {
		t.Errorf("ENIs made: %v, want one of the default set", made)
	}
	if got := lessonKeys(r.learn(), planner.LessonRefusedGroups); len(got) != 0 {
		t.Errorf("refused sets %v after a create that succeeded, want none", got)
	}

	e := r.attached(t)
	r.seed(e)
	update := func(groups ...string) planner.Action {
		return planner.Action{ID: 0, Kind: planner.UpdateENI, Target: e.ID, ENIID: e.ID, SecurityGroups: groups}
	}
	r.runHeld(planner.Plan{Actions: []planner.Action{update("sg-typo")}})
	if got := lessonKeys(r.learn(), planner.LessonRefusedGroups); !slices.Equal(got, []string{"sg-typo"}) {
		t.Errorf("refused sets %v after the refused update, want [sg-typo]", got)
	}
	r.runHeld(planner.Plan{Actions: []planner.Action{update("sg-typo")}})
	if n := calls("ModifyNetworkInterfaceAttribute"); n != 1 {
		t.Errorf("%d updates reached the cloud, want 1: the refused one backs off", n)
	}
	r.runHeld(planner.Plan{Actions: []planner.Action{update("sg-a")}})
	if n := calls("ModifyNetworkInterfaceAttribute"); n != 2 {
		t.Errorf("%d updates reached the cloud, want 2: the corrected update must not wait for the refused one's back-off", n)
	}
	if g := r.simENI(t, e.ID).SecurityGroups; !slices.Equal(g, []string{"sg-a"}) {
		t.Errorf("ENI groups %v after the corrected update, want [sg-a]", g)
	}
}

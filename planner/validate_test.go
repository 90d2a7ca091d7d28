package planner_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// TestActionValidate shows Validate can fail: valid actions of each kind
// pass, and each broken one is refused naming what is wrong.
func TestActionValidate(t *testing.T) {
	key := observed.AttachmentKey{ContainerID: "c1", IfName: "eth0"}
	pod := &planner.PodTarget{Key: key, NetNS: "/var/run/netns/c1", IPv4: netip.MustParseAddr("192.168.1.5")}
	good := map[string]planner.Action{
		"create":            {Kind: planner.CreateENI, Target: "new#0", VSwitchID: "vsw-1", SecurityGroups: []string{"sg-1"}, ClientToken: "t", IPv4Count: 5},
		"attach":            {ID: 1, Kind: planner.AttachENI, Target: "new#0", ENIRef: 1, InstanceID: "i-1"},
		"assign":            {Kind: planner.AssignIPs, Target: "eni-1", ENIID: "eni-1", IPv4Count: 3, ClientToken: "t"},
		"unassign":          {Kind: planner.UnassignIPs, Target: "eni-1", ENIID: "eni-1", IPv4: []netip.Addr{netip.MustParseAddr("192.168.1.6")}},
		"detach":            {Kind: planner.DetachENI, Target: "eni-1", ENIID: "eni-1", InstanceID: "i-1", MAC: "00:16:3e:00:00:02", Table: 1001},
		"delete":            {Kind: planner.DeleteENI, Target: "eni-1", ENIID: "eni-1"},
		"configure":         {Kind: planner.ConfigureENI, Target: "eni-1", ENIID: "eni-1", MAC: "00:16:3e:00:00:02", Table: 1001},
		"setup":             {Kind: planner.SetupPod, Target: key.String(), Pod: pod},
		"teardown":          {Kind: planner.TeardownPod, Target: key.String(), Pod: &planner.PodTarget{Key: key}},
		"publish":           {Kind: planner.PublishStatus, Target: key.String(), Status: &planner.PodStatus{Key: key, Phase: planner.PhaseReady}},
		"remove":            {Kind: planner.PublishStatus, Target: key.String()},
		"create prefixes":   {Kind: planner.CreateENI, Target: "new#0", VSwitchID: "vsw-1", SecurityGroups: []string{"sg-1"}, ClientToken: "t", IPv4PrefixCount: 2},
		"assign prefixes":   {Kind: planner.AssignIPs, Target: "eni-1", ENIID: "eni-1", IPv4PrefixCount: 10, ClientToken: "t"},
		"unassign prefixes": {Kind: planner.UnassignIPs, Target: "eni-1", ENIID: "eni-1", IPv4Prefixes: []netip.Prefix{netip.MustParsePrefix("192.168.1.16/28")}},
	}
	for name, a := range good {
		if err := a.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := []struct {
		name, want string
		edit       func(a *planner.Action)
		from       string
	}{
		{"create without token", "ClientToken", func(a *planner.Action) { a.ClientToken = "" }, "create"},
		{"create naming an ENI", "an ENI", func(a *planner.Action) { a.ENIID = "eni-9" }, "create"},
		{"attach with both", "exactly one of ENIID and ENIRef", func(a *planner.Action) { a.ENIID = "eni-9" }, "attach"},
		{"assign nothing", "addresses to assign", func(a *planner.Action) { a.IPv4Count = 0 }, "assign"},
		{"assign too many", "at most 10", func(a *planner.Action) { a.IPv4Count = 11 }, "assign"},
		{"unassign by ref", "ENIRef", func(a *planner.Action) { a.ENIRef = 1 }, "unassign"},
		{"detach half a device", "MAC and Table together", func(a *planner.Action) { a.Table = 0 }, "detach"},
		{"delete with a pod", "must not set Pod", func(a *planner.Action) { a.Pod = pod }, "delete"},
		{"configure without table", "MAC and Table", func(a *planner.Action) { a.Table = 0 }, "configure"},
		{"setup without pod", "needs Pod", func(a *planner.Action) { a.Pod = nil }, "setup"},
		{"setup without address", "a pod address", func(a *planner.Action) { a.Pod = &planner.PodTarget{Key: key, NetNS: "/x"} }, "setup"},
		{"setup of another target", "Target naming Pod.Key", func(a *planner.Action) { a.Target = "c2_eth0" }, "setup"},
		{"teardown with counts", "address counts", func(a *planner.Action) { a.IPv4Count = 1 }, "teardown"},
		{"publish for another", "Target naming Status.Key", func(a *planner.Action) { a.Target = "c2_eth0" }, "publish"},
		{"status on a cloud action", "must not set Status", func(a *planner.Action) { a.Status = &planner.PodStatus{} }, "assign"},
		{"unknown kind", "unknown kind", func(a *planner.Action) { a.Kind = "Reboot" }, "delete"},
		{"assign addresses and prefixes", "IPv4PrefixCount with IPv4 addresses", func(a *planner.Action) { a.IPv4Count = 1 }, "assign prefixes"},
		{"assign 11 prefixes", "IPv4PrefixCount of 0 to 10", func(a *planner.Action) { a.IPv4PrefixCount = 11 }, "assign prefixes"},
		{"create 11 prefixes", "IPv4PrefixCount of 0 to 10", func(a *planner.Action) { a.IPv4PrefixCount = 11 }, "create prefixes"},
		{"prefix count on unassign", "must not set IPv4PrefixCount", func(a *planner.Action) { a.IPv4PrefixCount = 1 }, "unassign prefixes"},
		{"prefixes on assign", "must not set IPv4Prefixes", func(a *planner.Action) { a.IPv4Prefixes = []netip.Prefix{netip.MustParsePrefix("192.168.1.16/28")} }, "assign prefixes"},
		{"unassign a /24", "aligned /28s", func(a *planner.Action) { a.IPv4Prefixes = []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")} }, "unassign prefixes"},
		{"unassign an unaligned /28", "aligned /28s", func(a *planner.Action) {
			a.IPv4Prefixes = []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("192.168.1.17"), 28)}
		}, "unassign prefixes"},
		{"unassign addresses and prefixes", "IPv4Prefixes with IPv4 addresses", func(a *planner.Action) { a.IPv4 = []netip.Addr{netip.MustParseAddr("192.168.1.6")} }, "unassign prefixes"},
		{"unassign 11 prefixes", "at most 10 IPv4Prefixes", func(a *planner.Action) {
			for i := range 10 {
				a.IPv4Prefixes = append(a.IPv4Prefixes, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i + 1), 0}), 28))
			}
		}, "unassign prefixes"},
	}
	for _, c := range bad {
		a := good[c.from]
		c.edit(&a)
		err := a.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %q", c.name, err, c.want)
		}
	}
	p := planner.Plan{Actions: []planner.Action{good["delete"], good["delete"]}}
	p.Actions[1].ID, p.Actions[1].DependsOn = 1, []int{1}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "not an earlier action") {
		t.Errorf("plan with a self-dependency: got %v", err)
	}
}

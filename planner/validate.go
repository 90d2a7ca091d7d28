package planner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/enidnet/enid/observed"
)

// maxAddressesPerCall is ECS's limit of addresses in one assign or
// unassign call.
const maxAddressesPerCall = 10

// maxSecurityGroups is ECS's limit of security groups on one ENI.
const maxSecurityGroups = 10

// Validate checks that the action carries what its kind needs and nothing
// that belongs to another kind: the table "Actions and ordering" of
// docs/plan.md as code (the fields every action may or may not carry in
// common, then its kind's own in kindChecks). The planner's script and
// property tests run it on every plan they make. It checks no facts of the
// world, and DependsOn only in Plan.Validate.
func (a Action) Validate() error {
	check, ok := kindChecks[a.Kind]
	if !ok {
		return fmt.Errorf("action %d: unknown kind %q", a.ID, a.Kind)
	}
	c := &checker{a: a}
	c.common()
	check(c)
	if len(c.errs) > 0 {
		return fmt.Errorf("action %d %s %s: %s", a.ID, a.Kind, a.Target, strings.Join(c.errs, "; "))
	}
	return nil
}

// checker collects what one action lacks or must not carry.
type checker struct {
	a    Action
	errs []string
}

func (c *checker) need(ok bool, what string) {
	if !ok {
		c.errs = append(c.errs, "needs "+what)
	}
}

func (c *checker) deny(set bool, what string) {
	if set {
		c.errs = append(c.errs, "must not set "+what)
	}
}

// oneENI: the action names its ENI by ID or by a create's reference.
func (c *checker) oneENI() {
	c.need((c.a.ENIID != "") != (c.a.ENIRef > 0), "exactly one of ENIID and ENIRef")
}

// existingENI: the action names an ENI that exists already.
func (c *checker) existingENI() {
	c.need(c.a.ENIID != "", "ENIID")
	c.deny(c.a.ENIRef > 0, "ENIRef")
}

// common checks what holds for every kind: identity, and the fields that
// belong to some kinds only.
func (c *checker) common() {
	a, k := c.a, c.a.Kind
	c.need(a.Target != "", "Target")
	c.need(a.ID >= 0 && a.ENIRef >= 0, "non-negative ID and ENIRef")
	c.need(a.ENIRef <= a.ID, "an ENIRef naming an earlier action")
	c.deny(a.Status != nil && k != PublishStatus, "Status")
	c.deny(a.Pod != nil && !k.podKind(), "Pod")
	c.deny(k != UnassignIPs && k != AssignIPs && (len(a.IPv4) > 0 || len(a.IPv6) > 0), "explicit addresses")
	c.deny(k != CreateENI && k != AssignIPs && (a.IPv4Count != 0 || a.IPv6Count != 0), "address counts")
	c.deny(k != MoveENI && a.Prefix.IsValid(), "Prefix")
	c.deny(k != MoveENI && a.PrefixV6.IsValid(), "PrefixV6")
	c.deny(k != MoveENI && len(a.HostRoutes) > 0, "HostRoutes")
	c.deny(k != CreateENI && k != UpdateENI && len(a.SecurityGroups) > 0, "SecurityGroups")
	c.deny(k != CreateENI && k != AssignIPs && a.IPv4PrefixCount != 0, "IPv4PrefixCount")
	c.deny(k != UnassignIPs && len(a.IPv4Prefixes) > 0, "IPv4Prefixes")
	// A call takes IPv4 as single addresses or as prefixes, never both.
	c.deny(a.IPv4PrefixCount != 0 && (a.IPv4Count != 0 || len(a.IPv4) > 0), "IPv4PrefixCount with IPv4 addresses")
	c.deny(len(a.IPv4Prefixes) > 0 && len(a.IPv4) > 0, "IPv4Prefixes with IPv4 addresses")
	c.need(a.IPv4PrefixCount >= 0 && a.IPv4PrefixCount <= maxPrefixesPerCall, fmt.Sprintf("an IPv4PrefixCount of 0 to %d", maxPrefixesPerCall))
	c.need(len(a.IPv4Prefixes) <= maxPrefixesPerCall, fmt.Sprintf("at most %d IPv4Prefixes", maxPrefixesPerCall))
	for _, p := range a.IPv4Prefixes {
		c.need(p.Addr().Is4() && p.Bits() == observed.IPv4PrefixBits && p.Masked() == p, "IPv4Prefixes of aligned /28s (got "+p.String()+")")
	}
}

// kindChecks holds, for every action kind, what it needs of its own.
var kindChecks = map[ActionKind]func(*checker){
	CreateENI: func(c *checker) {
		a := c.a
		c.need(a.VSwitchID != "", "VSwitchID")
		c.need(len(a.SecurityGroups) > 0, "SecurityGroups")
		c.need(a.ClientToken != "", "ClientToken")
		c.need(a.IPv4Count >= 0 && a.IPv6Count >= 0, "non-negative counts")
		c.deny(a.ENIID != "" || a.ENIRef > 0, "an ENI")
	},
	AttachENI: func(c *checker) {
		c.oneENI()
		c.need(c.a.InstanceID != "", "InstanceID")
	},
	AssignIPs: func(c *checker) {
		a := c.a
		c.oneENI()
		c.need(a.ClientToken != "", "ClientToken")
		c.need(a.IPv4Count >= 0 && a.IPv6Count >= 0, "non-negative counts")
		c.need(a.IPv4Count+a.IPv6Count+len(a.IPv4)+len(a.IPv6)+a.IPv4PrefixCount > 0, "addresses to assign")
		c.need(a.IPv4Count+len(a.IPv4) <= maxAddressesPerCall && a.IPv6Count+len(a.IPv6) <= maxAddressesPerCall,
			fmt.Sprintf("at most %d addresses per family", maxAddressesPerCall))
	},
	UnassignIPs: func(c *checker) {
		a := c.a
		c.existingENI()
		c.need(len(a.IPv4)+len(a.IPv6)+len(a.IPv4Prefixes) > 0, "addresses to unassign")
		c.need(len(a.IPv4) <= maxAddressesPerCall && len(a.IPv6) <= maxAddressesPerCall,
			fmt.Sprintf("at most %d addresses per family", maxAddressesPerCall))
	},
	DetachENI: func(c *checker) {
		c.existingENI()
		c.need(c.a.InstanceID != "", "InstanceID")
		c.need((c.a.MAC == "") == (c.a.Table == 0), "MAC and Table together (the device to unconfigure) or neither")
	},
	DeleteENI: (*checker).existingENI,
	ConfigureENI: func(c *checker) {
		c.oneENI()
		c.need(c.a.ENIRef > 0 || (c.a.MAC != "" && c.a.Table > 0), "MAC and Table of an existing ENI")
	},
	SetupPod:    (*checker).podAction,
	TeardownPod: (*checker).podAction,
	MoveENI:     (*checker).podAction,
	ReturnENI:   (*checker).podAction,
	UpdateENI: func(c *checker) {
		c.existingENI()
		c.need(len(c.a.SecurityGroups) > 0 && len(c.a.SecurityGroups) <= maxSecurityGroups,
			fmt.Sprintf("SecurityGroups (1 to %d, the complete new set)", maxSecurityGroups))
	},
	PublishStatus: func(c *checker) {
		if c.a.Status != nil {
			c.need(c.a.Target == c.a.Status.Key.String(), "Target naming Status.Key")
		}
	},
}

// podAction checks the actions on a pod attachment: its key, and for the
// setups its namespace, an address and, moving an ENI, its prefixes.
func (c *checker) podAction() {
	a := c.a
	c.need(a.Pod != nil, "Pod")
	if a.Pod == nil {
		return
	}
	c.need(a.Pod.Key.ContainerID != "" && a.Pod.Key.IfName != "", "Pod.Key")
	c.need(a.Target == a.Pod.Key.String(), "Target naming Pod.Key")
	if a.Kind == SetupPod || a.Kind == MoveENI {
		c.need(a.Pod.NetNS != "", "Pod.NetNS")
		c.need(a.Pod.IPv4.IsValid() || a.Pod.IPv6.IsValid(), "a pod address")
	}
	if a.Kind == MoveENI {
		c.need(a.Prefix.IsValid() || a.PrefixV6.IsValid(), "Prefix or PrefixV6")
		c.need(!a.PrefixV6.IsValid() || a.GatewayV6.IsValid(), "GatewayV6 with PrefixV6")
		for _, r := range a.HostRoutes {
			fam := (r.Addr().Is4() && a.Prefix.IsValid()) || (r.Addr().Is6() && a.PrefixV6.IsValid())
			c.need(r.IsValid() && r.Masked() == r && r.Bits() > 0 && fam, "HostRoutes of masked, non-default prefixes of the pod's families (got "+r.String()+")")
		}
	}
}

// podKind reports whether actions of kind k work on a pod attachment.
func (k ActionKind) podKind() bool {
	return k == SetupPod || k == TeardownPod || k == MoveENI || k == ReturnENI
}

// Validate checks every action (Action.Validate) and that each depends
// only on earlier ones.
func (p Plan) Validate() error {
	var errs []error
	for i, a := range p.Actions {
		if a.ID != i {
			errs = append(errs, fmt.Errorf("action %d has ID %d", i, a.ID))
		}
		for _, d := range a.DependsOn {
			if d < 0 || d >= i {
				errs = append(errs, fmt.Errorf("action %d depends on %d, not an earlier action", i, d))
			}
		}
		if err := a.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

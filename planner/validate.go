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
// docs/plan.md as code. The planner's script and property tests run it on
// every plan they make. It checks no facts of the world, and DependsOn only
// in Plan.Validate.
func (a Action) Validate() error {
	var errs []string
	need := func(ok bool, what string) {
		if !ok {
			errs = append(errs, "needs "+what)
		}
	}
	deny := func(set bool, what string) {
		if set {
			errs = append(errs, "must not set "+what)
		}
	}
	oneENI := func() { need((a.ENIID != "") != (a.ENIRef > 0), "exactly one of ENIID and ENIRef") }
	existingENI := func() {
		need(a.ENIID != "", "ENIID")
		deny(a.ENIRef > 0, "ENIRef")
	}
	need(a.Target != "", "Target")
	need(a.ID >= 0 && a.ENIRef >= 0, "non-negative ID and ENIRef")
	need(a.ENIRef <= a.ID, "an ENIRef naming an earlier action")
	deny(a.Status != nil && a.Kind != PublishStatus, "Status")
	deny(a.Pod != nil && !a.Kind.podKind(), "Pod")
	deny(a.Kind != UnassignIPs && a.Kind != AssignIPs && (len(a.IPv4) > 0 || len(a.IPv6) > 0), "explicit addresses")
	deny(a.Kind != CreateENI && a.Kind != AssignIPs && (a.IPv4Count != 0 || a.IPv6Count != 0), "address counts")
	deny(a.Kind != MoveENI && a.Prefix.IsValid(), "Prefix")
	deny(a.Kind != MoveENI && a.PrefixV6.IsValid(), "PrefixV6")
	deny(a.Kind != CreateENI && a.Kind != UpdateENI && len(a.SecurityGroups) > 0, "SecurityGroups")
	deny(a.Kind != CreateENI && a.Kind != AssignIPs && a.IPv4PrefixCount != 0, "IPv4PrefixCount")
	deny(a.Kind != UnassignIPs && len(a.IPv4Prefixes) > 0, "IPv4Prefixes")
	// A call takes IPv4 as single addresses or as prefixes, never both.
	deny(a.IPv4PrefixCount != 0 && (a.IPv4Count != 0 || len(a.IPv4) > 0), "IPv4PrefixCount with IPv4 addresses")
	deny(len(a.IPv4Prefixes) > 0 && len(a.IPv4) > 0, "IPv4Prefixes with IPv4 addresses")
	need(a.IPv4PrefixCount >= 0 && a.IPv4PrefixCount <= maxPrefixesPerCall, fmt.Sprintf("an IPv4PrefixCount of 0 to %d", maxPrefixesPerCall))
	need(len(a.IPv4Prefixes) <= maxPrefixesPerCall, fmt.Sprintf("at most %d IPv4Prefixes", maxPrefixesPerCall))
	for _, p := range a.IPv4Prefixes {
		need(p.Addr().Is4() && p.Bits() == observed.IPv4PrefixBits && p.Masked() == p, "IPv4Prefixes of aligned /28s (got "+p.String()+")")
	}
	switch a.Kind {
	case CreateENI:
		need(a.VSwitchID != "", "VSwitchID")
		need(len(a.SecurityGroups) > 0, "SecurityGroups")
		need(a.ClientToken != "", "ClientToken")
		need(a.IPv4Count >= 0 && a.IPv6Count >= 0, "non-negative counts")
		deny(a.ENIID != "" || a.ENIRef > 0, "an ENI")
	case AttachENI:
		oneENI()
		need(a.InstanceID != "", "InstanceID")
	case AssignIPs:
		oneENI()
		need(a.ClientToken != "", "ClientToken")
		need(a.IPv4Count >= 0 && a.IPv6Count >= 0, "non-negative counts")
		need(a.IPv4Count+a.IPv6Count+len(a.IPv4)+len(a.IPv6)+a.IPv4PrefixCount > 0, "addresses to assign")
		need(a.IPv4Count+len(a.IPv4) <= maxAddressesPerCall && a.IPv6Count+len(a.IPv6) <= maxAddressesPerCall,
			fmt.Sprintf("at most %d addresses per family", maxAddressesPerCall))
	case UnassignIPs:
		existingENI()
		need(len(a.IPv4)+len(a.IPv6)+len(a.IPv4Prefixes) > 0, "addresses to unassign")
		need(len(a.IPv4) <= maxAddressesPerCall && len(a.IPv6) <= maxAddressesPerCall,
			fmt.Sprintf("at most %d addresses per family", maxAddressesPerCall))
	case DetachENI:
		existingENI()
		need(a.InstanceID != "", "InstanceID")
		need((a.MAC == "") == (a.Table == 0), "MAC and Table together (the device to unconfigure) or neither")
	case DeleteENI:
		existingENI()
	case ConfigureENI:
		oneENI()
		need(a.ENIRef > 0 || (a.MAC != "" && a.Table > 0), "MAC and Table of an existing ENI")
	case SetupPod, TeardownPod, MoveENI, ReturnENI:
		need(a.Pod != nil, "Pod")
		if a.Pod != nil {
			need(a.Pod.Key.ContainerID != "" && a.Pod.Key.IfName != "", "Pod.Key")
			need(a.Target == a.Pod.Key.String(), "Target naming Pod.Key")
		}
		if a.Kind == SetupPod || a.Kind == MoveENI {
			need(a.Pod != nil && a.Pod.NetNS != "", "Pod.NetNS")
			need(a.Pod != nil && (a.Pod.IPv4.IsValid() || a.Pod.IPv6.IsValid()), "a pod address")
		}
		if a.Kind == MoveENI {
			need(a.Prefix.IsValid() || a.PrefixV6.IsValid(), "Prefix or PrefixV6")
			need(!a.PrefixV6.IsValid() || a.GatewayV6.IsValid(), "GatewayV6 with PrefixV6")
		}
	case UpdateENI:
		existingENI()
		need(len(a.SecurityGroups) > 0 && len(a.SecurityGroups) <= maxSecurityGroups,
			fmt.Sprintf("SecurityGroups (1 to %d, the complete new set)", maxSecurityGroups))
	case PublishStatus:
		if a.Status != nil {
			need(a.Target == a.Status.Key.String(), "Target naming Status.Key")
		}
	default:
		return fmt.Errorf("action %d: unknown kind %q", a.ID, a.Kind)
	}
	if len(errs) > 0 {
		return fmt.Errorf("action %d %s %s: %s", a.ID, a.Kind, a.Target, strings.Join(errs, "; "))
	}
	return nil
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

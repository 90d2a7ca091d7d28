package planner

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// FormatVersion is the version of the plan's JSON form (docs/plan.md,
// docs/plan.schema.json). It changes only when a field changes meaning or
// goes away; added fields keep it.
const FormatVersion = 1

// Render returns the plan as text, terraform style: actions grouped by ENI
// and by pod, one line each with its symbol, its ID and dependencies and
// its reason, then a summary line; "No changes." when there is nothing to do.
func (p Plan) Render() string {
	var w strings.Builder
	w.WriteString("enid plan")
	if p.NodeName != "" {
		w.WriteString(" for node " + p.NodeName)
	}
	if p.InstanceID != "" {
		w.WriteString(" (instance " + p.InstanceID + ")")
	}
	w.WriteString("\n")
	if !p.Complete {
		w.WriteString("Plan is INCOMPLETE: nothing is released or created until the observation is whole.\n")
	}
	for _, pr := range p.Problems {
		w.WriteString("! " + pr + "\n")
	}
	if p.Empty() {
		w.WriteString("No changes. The node matches the desired state.\n")
	} else {
		var order []string
		groups := map[string][]Action{}
		for _, a := range p.Actions {
			g := groupOf(a)
			if _, ok := groups[g]; !ok {
				order = append(order, g)
			}
			groups[g] = append(groups[g], a)
		}
		for _, g := range order {
			w.WriteString("\n  # " + g + "\n")
			for _, a := range groups[g] {
				w.WriteString("  " + string(a.Kind.Symbol()) + " " + describe(a))
				w.WriteString("  [" + itoa(a.ID))
				if len(a.DependsOn) > 0 {
					w.WriteString(" after")
					for i, d := range a.DependsOn {
						if i > 0 {
							w.WriteString(",")
						}
						w.WriteString(" " + itoa(d))
					}
				}
				w.WriteString("]")
				if a.Reason.Code != "" {
					w.WriteString("  # " + string(a.Reason.Code))
					if a.Reason.Text != "" {
						w.WriteString(": " + a.Reason.Text)
					}
				}
				w.WriteString("\n")
				if !a.NotBefore.IsZero() {
					w.WriteString(renderWait(a, p.Memory))
				}
			}
		}
		w.WriteString("\nPlan: " + plural(p.CloudCalls(), "cloud call") + ", " + plural(p.NodeChanges(), "node change") + ".\n")
	}
	s := p.Pool
	w.WriteString("Pool: total " + itoa(s.Total) + ", used " + itoa(s.Used) + ", idle " + itoa(s.Idle) +
		", cooldown " + itoa(s.Cooldown) + ", sticky " + itoa(s.Sticky) + ", waiting " + itoa(s.Waiting) +
		", target " + itoa(s.Target) + ", capacity " + itoa(s.Capacity))
	// Shown only when there are any, so a node without prefixes reads as
	// it always did.
	if s.Prefixes > 0 {
		w.WriteString(", prefixes " + itoa(s.Prefixes))
	}
	if s.Surplus > 0 {
		w.WriteString(", surplus " + itoa(s.Surplus))
	}
	if s.Expected > 0 {
		w.WriteString(", expected " + itoa(s.Expected))
	}
	w.WriteString(".\n")
	for _, s := range p.Sets {
		w.WriteString(renderSet(s))
	}
	if t := p.Memory.SpreadUntil; !t.IsZero() {
		w.WriteString("Spread: pool work after the pool's change waits for this node's turn, until " +
			t.UTC().Format(time.RFC3339) + " (pool.spreadWindow); waiting pods are served now.\n")
	}
	return w.String()
}

// renderWait is the line under an action held by a back-off: until when,
// and after which failures (Memory.Backoffs).
func renderWait(a Action, m Memory) string {
	line := "      waits until " + a.NotBefore.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	if b, ok := m.Backoffs[RetryKeyOf(a)]; ok {
		line += ": backing off " + RetryKeyOf(a).String() + " after " + plural(b.Failures, "failure")
		if b.Class != "" {
			line += " (" + string(b.Class) + ")"
		}
		if b.Err != "" {
			line += ": " + b.Err
		}
	}
	return line + "\n"
}

// renderSet is one security-group set's line: its name and groups, its
// ENIs, its pods and its pool.
func renderSet(s SetSummary) string {
	name := s.Name
	if name == "" {
		name = "(annotation)"
	}
	enis := "none"
	if len(s.ENIs) > 0 {
		enis = strings.Join(s.ENIs, " ")
	}
	return "Set " + name + " [" + strings.Join(s.SecurityGroups, ",") + "]: ENIs " + enis + "; pods " + itoa(s.Pods) +
		"; total " + itoa(s.Total) + ", used " + itoa(s.Used) + ", idle " + itoa(s.Idle) + ", cooldown " + itoa(s.Cooldown) +
		", sticky " + itoa(s.Sticky) + ", waiting " + itoa(s.Waiting) + ", target " + itoa(s.Target) + ".\n"
}

// groupOf names the section an action is shown in.
func groupOf(a Action) string {
	if a.Pod != nil || a.Kind == PublishStatus {
		return "pod " + a.Target
	}
	if a.ENIRef > 0 {
		return "eni new#" + itoa(a.ENIRef-1)
	}
	return "eni " + a.Target
}

// describe renders the action's kind, target and parameters.
func describe(a Action) string {
	var w strings.Builder
	w.WriteString(string(a.Kind) + " " + a.Target)
	switch a.Kind {
	case CreateENI:
		w.WriteString(" in " + a.VSwitchID)
		counts(&w, a)
		if set := a.Tags[observed.TagSecurityGroupSet]; set != "" && set != desired.DefaultSetName {
			// Another set than the config's: say which groups.
			w.WriteString(" security groups " + strings.Join(a.SecurityGroups, ","))
		}
	case AttachENI:
		w.WriteString(" to " + a.InstanceID)
	case UpdateENI:
		w.WriteString(": security groups " + strings.Join(a.SecurityGroups, ","))
	case AssignIPs:
		counts(&w, a)
	case UnassignIPs:
		addrs(&w, a.IPv4)
		addrs(&w, a.IPv6)
		for _, p := range a.IPv4Prefixes {
			w.WriteString(" " + p.String())
		}
	case ConfigureENI:
		if a.Table == 0 {
			w.WriteString(" table " + itoa(tableBase) + "+index")
		} else {
			w.WriteString(" table " + itoa(a.Table))
		}
		if a.Gateway.IsValid() {
			w.WriteString(" via " + a.Gateway.String())
		}
		if a.GatewayV6.IsValid() {
			w.WriteString(" via " + a.GatewayV6.String())
		}
		if a.MTU > 0 {
			w.WriteString(" mtu " + itoa(a.MTU))
		}
	case SetupPod, MoveENI, TeardownPod, ReturnENI:
		if a.Pod != nil {
			pair(&w, a.Pod.IPv4, a.Pod.IPv6)
			if a.Pod.ENIID != "" {
				w.WriteString(" on " + a.Pod.ENIID)
			} else if a.Pod.ENIMAC != "" {
				w.WriteString(" on " + a.Pod.ENIMAC)
			}
			if a.Pod.MTU > 0 && (a.Kind == SetupPod || a.Kind == MoveENI) {
				w.WriteString(" mtu " + itoa(a.Pod.MTU))
			}
			if len(a.HostRoutes) > 0 {
				w.WriteString(" via node")
				for _, r := range a.HostRoutes {
					w.WriteString(" " + r.String())
				}
			}
		}
	case PublishStatus:
		if a.Status == nil {
			w.WriteString(" remove")
			break
		}
		w.WriteString(" " + a.Status.Phase)
		pair(&w, a.Status.IPv4, a.Status.IPv6)
		if a.Status.ENIID != "" {
			w.WriteString(" on " + a.Status.ENIID)
		}
		if a.Status.Phase != PhaseReady {
			w.WriteString(" (" + string(a.Status.ReasonCode) + ": " + a.Status.Reason + ")")
		}
	}
	return w.String()
}

func counts(w *strings.Builder, a Action) {
	if a.IPv4Count > 0 {
		w.WriteString(" ipv4 +" + itoa(a.IPv4Count))
	}
	switch n := a.IPv4PrefixCount; {
	case n == 1:
		w.WriteString(" ipv4 +1 /28 prefix")
	case n > 1:
		w.WriteString(" ipv4 +" + itoa(n) + " /28 prefixes")
	}
	if a.IPv6Count > 0 {
		w.WriteString(" ipv6 +" + itoa(a.IPv6Count))
	}
}

func addrs(w *strings.Builder, l []netip.Addr) {
	for _, x := range l {
		w.WriteString(" " + x.String())
	}
}

func pair(w *strings.Builder, a, b netip.Addr) {
	if a.IsValid() {
		w.WriteString(" " + a.String())
	}
	if b.IsValid() {
		w.WriteString(" " + b.String())
	}
}

// jsonPlan is the JSON form of a Plan (docs/plan.md).
type jsonPlan struct {
	FormatVersion int          `json:"formatVersion"`
	Node          string       `json:"node,omitempty"`
	InstanceID    string       `json:"instanceID,omitempty"`
	Complete      bool         `json:"complete"`
	Empty         bool         `json:"empty"`
	CloudCalls    int          `json:"cloudCalls"`
	NodeChanges   int          `json:"nodeChanges"`
	Problems      []string     `json:"problems"`
	Actions       []Action     `json:"actions"`
	Statuses      []PodStatus  `json:"statuses"`
	Pool          PoolSummary  `json:"pool"`
	Sets          []SetSummary `json:"sets,omitempty"`
	Memory        Memory       `json:"memory"`
}

// MarshalJSON writes the plan in its documented JSON form.
func (p Plan) MarshalJSON() ([]byte, error) {
	j := jsonPlan{
		FormatVersion: FormatVersion, Node: p.NodeName, InstanceID: p.InstanceID,
		Complete: p.Complete, Empty: p.Empty(), CloudCalls: p.CloudCalls(), NodeChanges: p.NodeChanges(),
		Problems: p.Problems, Actions: p.Actions, Statuses: p.Statuses, Pool: p.Pool, Sets: p.Sets, Memory: p.Memory,
	}
	if j.Problems == nil {
		j.Problems = []string{}
	}
	if j.Actions == nil {
		j.Actions = []Action{}
	}
	if j.Statuses == nil {
		j.Statuses = []PodStatus{}
	}
	return json.Marshal(j)
}

// JSON returns the plan's JSON form, indented for people.
func (p Plan) JSON() ([]byte, error) {
	// Reasons hold "<" and ">" ("idle 5 < 8"): keep them readable rather
	// than HTML-escaped; the document is never embedded in HTML.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return itoa(n) + " " + what + "s"
}

package desired

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// This file is the security-group side of the desired state: the sets a
// config names, the pod annotation that asks for a set, and the one rule
// that decides which set a pod gets (Config.SecurityGroupsFor).

// Set names with a meaning of their own (docs/config.md).
const (
	// DefaultSetName names the set of eni.securityGroups.
	DefaultSetName = "default"
	// AnnotationSetName names a set that no config entry names, only pods'
	// annotations (its ENIs carry it in observed.TagSecurityGroupSet).
	AnnotationSetName = "annotation"
)

// MaxSecurityGroups is ECS's limit of security groups on one ENI.
const MaxSecurityGroups = 10

// maxSecurityGroupsLen bounds the annotation: 10 IDs of at most 128
// characters, with separators and spaces.
const maxSecurityGroupsLen = MaxSecurityGroups * 160

// SecurityGroupSet is a named set of security groups
// (eni.securityGroupSets[]). Pods get it by the security-groups annotation
// (the same groups, in any order) or by eni.namespaceSecurityGroups.
type SecurityGroupSet struct {
	// Name is a DNS-1123 label, unique, neither "default" nor "annotation".
	Name string `json:"name"`
	// SecurityGroups are the set's groups (1..10, order does not matter).
	// A change of them moves the set's existing ENIs to the new groups in
	// place (ModifyNetworkInterfaceAttribute).
	SecurityGroups []string `json:"securityGroups"`
	// Pool tunes the set's pool on a node; nil: the set keeps no minimum
	// and little idle (docs/config.md, "Security-group sets").
	Pool *SetPool `json:"pool,omitempty"`
	// MaxENIs caps the set's ENIs on a node (0: eni.maxENIsPerSet).
	MaxENIs int `json:"maxENIs,omitempty"`
}

// SetPool is a set's own pool policy: the counting knobs of Pool (the
// timing knobs, releaseDelay and cooldown, stay the config's).
type SetPool struct {
	MinIdle  int `json:"minIdle"`
	MaxIdle  int `json:"maxIdle"`
	MinTotal int `json:"minTotal"`
	// Batch is the growth step (0: pool.batch).
	Batch int `json:"batch,omitempty"`
}

// ErrInvalidSecurityGroups is wrapped by every error of
// ParseSecurityGroups.
var ErrInvalidSecurityGroups = errors.New("invalid security groups")

// ParseSecurityGroups reads the security-groups annotation: 1 to 10
// security group IDs separated by commas (spaces around them allowed), no
// duplicates. It returns them sorted: a set has no order.
func ParseSecurityGroups(s string) ([]string, error) {
	// The planner reads the annotation on every pass: a hostile value
	// (up to an entry's 512 KiB) is refused before it is split.
	if len(s) > maxSecurityGroupsLen {
		return nil, fmt.Errorf("%w: %d bytes, more than %d security group IDs can take", ErrInvalidSecurityGroups, len(s), MaxSecurityGroups)
	}
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: empty: list 1 to %d security group IDs such as sg-bp1a2b3c, separated by commas", ErrInvalidSecurityGroups, MaxSecurityGroups)
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxSecurityGroups {
		return nil, fmt.Errorf("%w: %d groups, at most %d per ENI", ErrInvalidSecurityGroups, len(parts), MaxSecurityGroups)
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if !secGroupRe.MatchString(p) || len(p) > 128 {
			return nil, fmt.Errorf("%w: %q is not a security group ID such as sg-bp1a2b3c", ErrInvalidSecurityGroups, clip(p))
		}
		out = append(out, p)
	}
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, fmt.Errorf("%w: %s is listed twice", ErrInvalidSecurityGroups, out[i])
		}
	}
	return out, nil
}

// SetNameFor names the set the entry's pod gets: the annotation's groups
// (sorted, with the name of the set they equal: "default", a configured
// set's, or ""); else its namespace's set (eni.namespaceSecurityGroups)
// by name, groups nil; else "default", groups nil. It allocates only for
// an annotation: the planner calls it for every pod of every pass. An
// invalid annotation is an error wrapping ErrInvalidSecurityGroups.
func (c Config) SetNameFor(e Entry) (string, []string, error) {
	if s, ok := e.Annotations[AnnotationSecurityGroups]; ok {
		g, err := ParseSecurityGroups(s)
		if err != nil {
			return "", nil, fmt.Errorf("annotation %s: %w", AnnotationSecurityGroups, err)
		}
		return c.SetNameOf(g), g, nil
	}
	if name, ok := c.ENI.NamespaceSecurityGroups[e.PodNamespace]; ok {
		if _, ok := c.SecurityGroupSet(name); ok {
			return name, nil, nil
		}
	}
	return DefaultSetName, nil, nil
}

// SecurityGroupsFor returns the security groups the entry's pod gets,
// sorted, and the name of their set ("default", a configured set's name,
// or "" for a set only annotations name). The pod's annotation wins; then
// its namespace's set (eni.namespaceSecurityGroups); then
// eni.securityGroups. An invalid annotation is an error wrapping
// ErrInvalidSecurityGroups: that pod fails, no other.
func (c Config) SecurityGroupsFor(e Entry) ([]string, string, error) {
	name, g, err := c.SetNameFor(e)
	switch {
	case err != nil:
		return nil, "", err
	case g != nil:
		return g, name, nil
	case name == DefaultSetName:
		return slices.Sorted(slices.Values(c.ENI.SecurityGroups)), name, nil
	}
	s, _ := c.SecurityGroupSet(name)
	return slices.Sorted(slices.Values(s.SecurityGroups)), name, nil
}

// SecurityGroupSet returns the configured set of that name.
func (c Config) SecurityGroupSet(name string) (SecurityGroupSet, bool) {
	for _, s := range c.ENI.SecurityGroupSets {
		if s.Name == name {
			return s, true
		}
	}
	return SecurityGroupSet{}, false
}

// SetNameOf names the set whose groups are g (sorted): "default" for
// eni.securityGroups, a configured set's name, else "".
func (c Config) SetNameOf(g []string) string {
	if sameGroups(g, c.ENI.SecurityGroups) {
		return DefaultSetName
	}
	for _, s := range c.ENI.SecurityGroupSets {
		if sameGroups(g, s.SecurityGroups) {
			return s.Name
		}
	}
	return ""
}

// sameGroups compares two lists of groups as sets (sorted a, any order b).
func sameGroups(sorted, b []string) bool {
	if len(sorted) != len(b) {
		return false
	}
	return slices.Equal(sorted, slices.Sorted(slices.Values(b)))
}

// securityGroupList checks one list of groups at path.
func (v *validator) securityGroupList(path string, groups []string, example string) {
	switch n := len(groups); {
	case n == 0:
		v.add(path, "at least one security group is required: %s (at most %d)", example, MaxSecurityGroups)
	case n > MaxSecurityGroups:
		v.add(path, "at most %d security groups per ENI (got %d)", MaxSecurityGroups, n)
	}
	seen := map[string]bool{}
	for i, sg := range groups {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case !secGroupRe.MatchString(sg):
			v.add(p, "must be a security group ID such as sg-bp1a2b3c (got %q)", clip(sg))
		case seen[sg]:
			v.add(p, "security group %s is listed twice", sg)
		}
		seen[sg] = true
	}
}

// securityGroupSets checks eni.securityGroupSets and
// eni.namespaceSecurityGroups.
func (v *validator) securityGroupSets(e ENIConfig, batch int) {
	names := map[string]int{}
	byGroups := map[string]string{strings.Join(slices.Sorted(slices.Values(e.SecurityGroups)), ","): "eni.securityGroups"}
	for i, s := range e.SecurityGroupSets {
		p := fmt.Sprintf("eni.securityGroupSets[%d]", i)
		switch {
		case len(s.Name) > 63 || !dns1123Label.MatchString(s.Name):
			v.add(p+".name", "must be a DNS-1123 label such as web (got %q)", clip(s.Name))
		case s.Name == DefaultSetName || s.Name == AnnotationSetName:
			v.add(p+".name", "%q is reserved (%q is eni.securityGroups, %q a set only annotations name): choose another name", s.Name, DefaultSetName, AnnotationSetName)
		case names[s.Name] > 0:
			v.add(p+".name", "set %s is named twice (first at eni.securityGroupSets[%d])", s.Name, names[s.Name]-1)
		default:
			names[s.Name] = i + 1
		}
		v.securityGroupList(p+".securityGroups", s.SecurityGroups, "list the set's groups, e.g. securityGroups: [sg-xxxx]")
		key := strings.Join(slices.Sorted(slices.Values(s.SecurityGroups)), ",")
		if first, ok := byGroups[key]; ok && len(s.SecurityGroups) > 0 {
			v.add(p+".securityGroups", "has the same groups as %s: a set is its groups, so two names would share one pool; remove one", first)
		} else {
			byGroups[key] = p
		}
		v.nonNegative(p+".maxENIs", s.MaxENIs)
		if sp := s.Pool; sp != nil {
			v.nonNegative(p+".pool.minIdle", sp.MinIdle)
			v.nonNegative(p+".pool.maxIdle", sp.MaxIdle)
			v.nonNegative(p+".pool.minTotal", sp.MinTotal)
			if sp.MinIdle >= 0 && sp.MaxIdle >= 0 && sp.MaxIdle < sp.MinIdle {
				v.add(p+".pool.maxIdle", "must be >= minIdle (got %d < %d)", sp.MaxIdle, sp.MinIdle)
			}
			if sp.Batch < 0 || sp.Batch > 10 {
				v.add(p+".pool.batch", "must be between 1 and 10, or 0 for pool.batch (%d) (got %d)", batch, sp.Batch)
			}
		}
	}
	v.nonNegative("eni.maxENIsPerSet", e.MaxENIsPerSet)
	for _, ns := range sortedKeys(e.NamespaceSecurityGroups) {
		p := fmt.Sprintf("eni.namespaceSecurityGroups[%s]", clip(ns))
		if len(ns) > 63 || !dns1123Label.MatchString(ns) {
			v.add(p, "key must be a namespace name (a DNS-1123 label) (got %q)", clip(ns))
		}
		if name := e.NamespaceSecurityGroups[ns]; names[name] == 0 {
			v.add(p, "names set %q, which eni.securityGroupSets does not define: add it there or fix the name", clip(name))
		}
	}
}

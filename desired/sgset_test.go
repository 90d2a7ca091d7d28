package desired

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSecurityGroups(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  string
	}{
		{"sg-a", []string{"sg-a"}, ""},
		{"sg-b,sg-a", []string{"sg-a", "sg-b"}, ""},
		{" sg-b , sg-a ", []string{"sg-a", "sg-b"}, ""},
		{"", nil, "empty"},
		{"  ", nil, "empty"},
		{"sg-a,", nil, `"" is not a security group ID`},
		{"sg-a,sg-a", nil, "sg-a is listed twice"},
		{"sg-A", nil, `"sg-A" is not a security group ID`},
		{"default", nil, `"default" is not a security group ID`},
		{"sg-", nil, `"sg-" is not a security group ID`},
		{"sg-a;sg-b", nil, `"sg-a;sg-b" is not a security group ID`},
		{"sg-a\x00", nil, "is not a security group ID"},
		{"sg-1,sg-2,sg-3,sg-4,sg-5,sg-6,sg-7,sg-8,sg-9,sg-10,sg-11", nil, "11 groups, at most 10"},
		{strings.Repeat("sg-a,", 100000), nil, "500000 bytes, more than 10 security group IDs can take"},
		{"sg-" + strings.Repeat("a", 300), nil, "is not a security group ID"},
	}
	for _, tc := range tests {
		got, err := ParseSecurityGroups(tc.in)
		if tc.err == "" {
			if err != nil {
				t.Errorf("ParseSecurityGroups(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseSecurityGroups(%q) (-want +got):\n%s", tc.in, diff)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalidSecurityGroups) {
			t.Errorf("ParseSecurityGroups(%.40q) = %v, %v; want an ErrInvalidSecurityGroups containing %q", tc.in, got, err, tc.err)
		}
		if len(err.Error()) > 300 {
			t.Errorf("ParseSecurityGroups(%.40q): error of %d bytes: a hostile value must not be echoed whole", tc.in, len(err.Error()))
		}
	}
}

func TestSecurityGroupsFor(t *testing.T) {
	var c Config
	c.ENI.SecurityGroups = []string{"sg-z", "sg-d"}
	c.ENI.SecurityGroupSets = []SecurityGroupSet{{Name: "web", SecurityGroups: []string{"sg-w2", "sg-w1"}}}
	c.ENI.NamespaceSecurityGroups = map[string]string{"shop": "web", "ghost": "gone"}
	entry := func(ns, ann string) Entry {
		e := Entry{PodNamespace: ns}
		if ann != "-" {
			e.Annotations = map[string]string{AnnotationSecurityGroups: ann}
		}
		return e
	}
	tests := []struct {
		name  string
		e     Entry
		want  string
		set   string
		isErr bool
	}{
		{"no annotation: the default, sorted", entry("default", "-"), "sg-d,sg-z", "default", false},
		{"namespace mapping", entry("shop", "-"), "sg-w1,sg-w2", "web", false},
		{"namespace naming no set: the default", entry("ghost", "-"), "sg-d,sg-z", "default", false},
		{"annotation wins over namespace", entry("shop", "sg-x"), "sg-x", "", false},
		{"annotation equal to a named set is that set", entry("default", "sg-w1,sg-w2"), "sg-w1,sg-w2", "web", false},
		{"annotation equal to the default is the default", entry("shop", "sg-z,sg-d"), "sg-d,sg-z", "default", false},
		{"invalid annotation", entry("default", "sg-x,,"), "", "", true},
		{"empty annotation is invalid, not the default", entry("default", ""), "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, set, err := c.SecurityGroupsFor(tc.e)
			if tc.isErr != (err != nil) || (err != nil && !errors.Is(err, ErrInvalidSecurityGroups)) {
				t.Fatalf("err = %v, want error %v", err, tc.isErr)
			}
			if got := strings.Join(g, ","); got != tc.want || set != tc.set {
				t.Errorf("got %q set %q, want %q set %q", got, set, tc.want, tc.set)
			}
		})
	}
}

// TestSecurityGroupSetValidation: each rule of eni.securityGroupSets and
// eni.namespaceSecurityGroups names its field and says how to fix it.
func TestSecurityGroupSetValidation(t *testing.T) {
	tests := []struct {
		name string
		drop string
		want []string
	}{
		{"valid", "eni:\n  securityGroupSets: [{name: web, securityGroups: [sg-w], pool: {minIdle: 1, maxIdle: 4}}]\n  namespaceSecurityGroups: {shop: web}", nil},
		{"name grammar", "eni: {securityGroupSets: [{name: Web_1, securityGroups: [sg-w]}]}", []string{
			`eni.securityGroupSets[0].name: must be a DNS-1123 label such as web (got "Web_1")`}},
		{"reserved name", "eni: {securityGroupSets: [{name: default, securityGroups: [sg-w]}]}", []string{
			`eni.securityGroupSets[0].name: "default" is reserved ("default" is eni.securityGroups, "annotation" a set only annotations name): choose another name`}},
		{"duplicate name", "eni: {securityGroupSets: [{name: web, securityGroups: [sg-w]}, {name: web, securityGroups: [sg-v]}]}", []string{
			`eni.securityGroupSets[1].name: set web is named twice (first at eni.securityGroupSets[0])`}},
		{"no groups", "eni: {securityGroupSets: [{name: web, securityGroups: []}]}", []string{
			`eni.securityGroupSets[0].securityGroups: at least one security group is required: list the set's groups, e.g. securityGroups: [sg-xxxx] (at most 10)`}},
		{"bad group", "eni: {securityGroupSets: [{name: web, securityGroups: [sg-w, web]}]}", []string{
			`eni.securityGroupSets[0].securityGroups[1]: must be a security group ID such as sg-bp1a2b3c (got "web")`}},
		{"duplicate group", "eni: {securityGroupSets: [{name: web, securityGroups: [sg-w, sg-w]}]}", []string{
			`eni.securityGroupSets[0].securityGroups[1]: security group sg-w is listed twice`}},
		{"same groups as the default", "eni: {securityGroupSets: [{name: web, securityGroups: [sg-a]}]}", []string{
			`eni.securityGroupSets[0].securityGroups: has the same groups as eni.securityGroups: a set is its groups, so two names would share one pool; remove one`}},
		{"same groups as another set, other order", "eni: {securityGroupSets: [{name: web, securityGroups: [sg-x, sg-y]}, {name: api, securityGroups: [sg-y, sg-x]}]}", []string{
			`eni.securityGroupSets[1].securityGroups: has the same groups as eni.securityGroupSets[0]: a set is its groups, so two names would share one pool; remove one`}},
		{"pool knobs", "eni: {securityGroupSets: [{name: web, securityGroups: [sg-w], pool: {minIdle: 3, maxIdle: 1, minTotal: -1, batch: 11}}]}", []string{
			`eni.securityGroupSets[0].pool.minTotal: must be >= 0 (got -1)`,
			`eni.securityGroupSets[0].pool.maxIdle: must be >= minIdle (got 1 < 3)`,
			`eni.securityGroupSets[0].pool.batch: must be between 1 and 10, or 0 for pool.batch (5) (got 11)`}},
		{"unknown pool key", "eni: {securityGroupSets: [{name: web, securityGroups: [sg-w], pool: {cooldown: 1s}}]}", []string{
			`eni.securityGroupSets[0].pool.cooldown: unknown field`}},
		{"ENI caps", "eni: {maxENIsPerSet: -1, securityGroupSets: [{name: web, securityGroups: [sg-w], maxENIs: -2}]}", []string{
			`eni.securityGroupSets[0].maxENIs: must be >= 0 (got -2)`,
			`eni.maxENIsPerSet: must be >= 0 (got -1)`}},
		{"namespace names no set", "eni: {namespaceSecurityGroups: {shop: web}}", []string{
			`eni.namespaceSecurityGroups[shop]: names set "web", which eni.securityGroupSets does not define: add it there or fix the name`}},
		{"namespace key grammar", "eni:\n  securityGroupSets: [{name: web, securityGroups: [sg-w]}]\n  namespaceSecurityGroups: {Shop: web}", []string{
			`eni.namespaceSecurityGroups[Shop]: key must be a namespace name (a DNS-1123 label) (got "Shop")`}},
		{"namespace to default is no set", "eni: {namespaceSecurityGroups: {shop: default}}", []string{
			`eni.namespaceSecurityGroups[shop]: names set "default", which eni.securityGroupSets does not define: add it there or fix the name`}},
		{"per-node default groups by override", "overrides:\n- match: {zones: [cn-hangzhou-k]}\n  config: {eni: {securityGroups: [sg-node]}}", nil},
	}
	base := readTestdata(t, "config/base.yaml")
	facts := NodeFacts{NodeName: "node-1", Zone: "cn-hangzhou-k", InstanceType: "ecs.g7.large"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
			writeFile(t, src.Main, base)
			writeFile(t, filepath.Join(src.DropInDir, "50-case.yaml"), "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\n"+tc.drop+"\n")
			cfg, err := LoadConfig(src, facts)
			got := problemsOf(t, err)
			// Unknown-field messages go on with a suggestion: compare the head.
			for i := range got {
				if i < len(tc.want) && strings.HasSuffix(tc.want[i], "unknown field") {
					got[i], _, _ = strings.Cut(got[i], " (")
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s\nfull error: %v", diff, err)
			}
			if tc.name == "per-node default groups by override" {
				g, set, _ := cfg.SecurityGroupsFor(Entry{PodNamespace: "x"})
				if strings.Join(g, ",") != "sg-node" || set != DefaultSetName {
					t.Errorf("override: pods get %v (%s), want the node's sg-node (default)", g, set)
				}
			}
		})
	}
}

// FuzzParseSecurityGroups: any annotation value either gives 1 to 10
// distinct, sorted security group IDs that parse back to themselves, or an
// error wrapping ErrInvalidSecurityGroups no longer than a few hundred
// bytes (a hostile value is never echoed whole).
func FuzzParseSecurityGroups(f *testing.F) {
	for _, s := range []string{"sg-a", "sg-b, sg-a", "", ",", "sg-a,,sg-b", "SG-A", strings.Repeat("sg-a,", 20), "sg-\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseSecurityGroups(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSecurityGroups) || len(err.Error()) > 400 {
				t.Fatalf("error %q (%d bytes) does not wrap ErrInvalidSecurityGroups or is too long", err, len(err.Error()))
			}
			return
		}
		if len(g) == 0 || len(g) > MaxSecurityGroups {
			t.Fatalf("%d groups", len(g))
		}
		for i, sg := range g {
			if !secGroupRe.MatchString(sg) || (i > 0 && g[i-1] >= sg) {
				t.Fatalf("groups %q: not sorted, distinct IDs", g)
			}
		}
		again, err := ParseSecurityGroups(strings.Join(g, ","))
		if err != nil || !cmp.Equal(g, again) {
			t.Fatalf("%q does not parse back: %v %v", g, again, err)
		}
	})
}

// TestSecurityGroupSetsRoundTrip: the sets survive String and a parse back
// (the agent logs the effective config; `enid plan --show-config`).
func TestSecurityGroupSetsRoundTrip(t *testing.T) {
	data := readTestdata(t, "../../examples/config/security-groups.yaml")
	facts := NodeFacts{Zone: "cn-hangzhou-k", Labels: map[string]string{"pool": "pci"}}
	cfg, err := ParseConfig([]byte(data), facts)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.ENI.SecurityGroups, ","); got != "sg-bp1pci" {
		t.Errorf("the override's default groups: got %q", got)
	}
	if s, ok := cfg.SecurityGroupSet("web"); !ok || s.Pool == nil || s.Pool.MinIdle != 1 {
		t.Errorf("set web: %+v, %v", s, ok)
	}
	again, err := ParseConfig([]byte(cfg.String()), facts)
	if err != nil {
		t.Fatalf("String() does not parse back: %v\n%s", err, cfg)
	}
	if diff := cmp.Diff(cfg, again); diff != "" {
		t.Errorf("round trip (-first +second):\n%s", diff)
	}
}

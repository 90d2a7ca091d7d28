package desired

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeFile writes a test file, creating its directory.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// problemsOf returns "path: message" for each problem of a *ConfigError.
func problemsOf(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error is %T, want *ConfigError: %v", err, err)
	}
	var out []string
	for _, p := range ce.Problems {
		out = append(out, Problem{Path: p.Path, Message: p.Message}.String())
	}
	return out
}

// TestValidationRules has one case per rule: a drop-in over a valid base
// config, and the exact problems it must produce.
func TestValidationRules(t *testing.T) {
	tests := []struct {
		name string
		drop string
		want []string
	}{
		{"valid base", ``, nil},
		{"apiVersion", `apiVersion: enid.dev/v1`, []string{`apiVersion: must be "enid.dev/v1alpha1" (got "enid.dev/v1")`}},
		{"kind", `kind: Config`, []string{`kind: must be "AgentConfig" (got "Config")`}},
		{"mode enum", `mode: trunk`, []string{`mode: must be one of shared-eni, exclusive-eni (got "trunk")`}},
		{"ipStack enum", `ipStack: ipv5`, []string{`ipStack: must be one of ipv4, dual, ipv6 (got "ipv5")`}},
		{"minIdle negative", `pool: {minIdle: -1}`, []string{`pool.minIdle: must be >= 0 (got -1)`}},
		{"maxIdle negative", `pool: {minIdle: 0, maxIdle: -1}`, []string{`pool.maxIdle: must be >= 0 (got -1)`}},
		{"maxIdle below minIdle", `pool: {minIdle: 5, maxIdle: 2}`, []string{`pool.maxIdle: must be >= pool.minIdle (got 2 < 5)`}},
		{"minTotal negative", `pool: {minTotal: -3}`, []string{`pool.minTotal: must be >= 0 (got -3)`}},
		{"batch zero", `pool: {batch: 0}`, []string{`pool.batch: must be between 1 and 10: ECS assigns at most 10 addresses per call (got 0)`}},
		{"batch eleven", `pool: {batch: 11}`, []string{`pool.batch: must be between 1 and 10: ECS assigns at most 10 addresses per call (got 11)`}},
		{"releaseDelay negative", `pool: {releaseDelay: -1s}`, []string{`pool.releaseDelay: must be >= 0 (got -1s)`}},
		{"cooldown negative", `pool: {cooldown: -1m}`, []string{`pool.cooldown: must be >= 0 (got -1m0s)`}},
		{"maxENIs negative", `eni: {maxENIs: -1}`, []string{`eni.maxENIs: must be >= 0 (got -1)`}},
		{"mtu range", `eni: {mtu: 100}`, []string{`eni.mtu: must be 0 (keep the device's) or between 1280 and 9000 (got 100)`}},
		{"no vSwitches", `eni: {vSwitches: null}`, []string{`eni.vSwitches: at least one vSwitch is required: list the vSwitches pods may use under their zone, e.g. eni.vSwitches: {cn-hangzhou-k: [vsw-xxxx]}`}},
		{"empty zone list only", `eni: {vSwitches: {cn-hangzhou-k: []}}`, []string{`eni.vSwitches: at least one vSwitch is required: list the vSwitches pods may use under their zone, e.g. eni.vSwitches: {cn-hangzhou-k: [vsw-xxxx]}`}},
		{"bad zone", `eni: {vSwitches: {Hangzhou: [vsw-x]}}`, []string{`eni.vSwitches[Hangzhou]: zone must be a zone ID such as cn-hangzhou-k (got "Hangzhou")`}},
		{"bad vSwitch id", `eni: {vSwitches: {cn-hangzhou-j: [subnet-1]}}`, []string{`eni.vSwitches[cn-hangzhou-j][0]: must be a vSwitch ID such as vsw-bp1a2b3c (got "subnet-1")`}},
		{"duplicate vSwitch", `eni: {vSwitches: {cn-hangzhou-j: [vsw-k1]}}`, []string{`eni.vSwitches[cn-hangzhou-k][0]: vSwitch vsw-k1 is listed twice (first under cn-hangzhou-j)`}},
		{"vSwitchPolicy enum", `eni: {vSwitchPolicy: emptiest}`, []string{`eni.vSwitchPolicy: must be one of most-free, ordered, random (got "emptiest")`}},
		{"vSwitchPolicy random", `eni: {vSwitchPolicy: random}`, nil},
		{"vSwitchSelector", `eni: {vSwitchSelector: {tags: {kubernetes.io/role/enid: "1"}}}`, nil},
		{"vSwitchSelector without tags", `eni: {vSwitchSelector: {tags: {}}}`, []string{`eni.vSwitchSelector.tags: at least one tag is required: the vSwitches to use carry it, e.g. {kubernetes.io/role/enid: "1"}`}},
		{"ipv4Allocation enum", `eni: {ipv4Allocation: auto}`, []string{`eni.ipv4Allocation: must be one of secondary, prefix, prefer-prefix (got "auto")`}},
		{"ipv4Allocation prefix", `eni: {ipv4Allocation: prefix}`, nil},
		{"ipv4Allocation prefer-prefix dual", "eni: {ipv4Allocation: prefer-prefix}\nipStack: dual", nil},
		{"ipv4Allocation prefix exclusive", "eni: {ipv4Allocation: prefix}\nmode: exclusive-eni", []string{`eni.ipv4Allocation: prefix applies to mode shared-eni only: an exclusive pod gets its ENI's primary address; set it to secondary or remove it (got "prefix" with mode exclusive-eni)`}},
		{"ipv4Allocation prefix ipv6", "eni: {ipv4Allocation: prefer-prefix}\nipStack: ipv6", []string{`eni.ipv4Allocation: prefer-prefix needs IPv4 pod addresses, and ipStack ipv6 gives pods none; set it to secondary or remove it (got "prefer-prefix" with ipStack ipv6)`}},
		{"no security groups", `eni: {securityGroups: []}`, []string{`eni.securityGroups: at least one security group is required: list the ones every ENI gets, e.g. eni.securityGroups: [sg-xxxx] (at most 10)`}},
		{"eleven security groups", `eni: {securityGroups: [sg-1, sg-2, sg-3, sg-4, sg-5, sg-6, sg-7, sg-8, sg-9, sg-10, sg-11]}`, []string{`eni.securityGroups: at most 10 security groups per ENI (got 11)`}},
		{"bad security group", `eni: {securityGroups: [default]}`, []string{`eni.securityGroups[0]: must be a security group ID such as sg-bp1a2b3c (got "default")`}},
		{"duplicate security group", `eni: {securityGroups: [sg-a, sg-a]}`, []string{`eni.securityGroups[1]: security group sg-a is listed twice`}},
		{"reserved tag", `eni: {tags: {enid.dev/owner: me}}`, []string{`eni.tags[enid.dev/owner]: tag keys starting with "enid.dev/" are reserved for enid's own tags (got "enid.dev/owner")`}},
		{"aliyun tag", `eni: {tags: {aliyun-x: v}}`, []string{`eni.tags[aliyun-x]: tag keys may not start with "aliyun" or "acs:" (reserved by Alibaba Cloud) (got "aliyun-x")`}},
		{"acs tag", `eni: {tags: {"acs:x": v}}`, []string{`eni.tags[acs:x]: tag keys may not start with "aliyun" or "acs:" (reserved by Alibaba Cloud) (got "acs:x")`}},
		{"http tag", `eni: {tags: {"see-http://x": v}}`, []string{`eni.tags[see-http://x]: tag keys may not contain http:// or https:// (got "see-http://x")`}},
		{"tag value", `eni: {tags: {a: "acs:1"}}`, []string{`eni.tags[a]: tag values may not start with "aliyun" or "acs:" (got "acs:1")`}},
		{"tag key too long", `eni: {tags: {` + strings.Repeat("k", 129) + `: v}}`, []string{`eni.tags[` + strings.Repeat("k", 129) + `]: tag key must be 1 to 128 characters (got 129)`}},
		{"too many tags", `eni: {tags: {a: "1", b: x, c: x, d: x, e: x, f: x, g: x, h: x, i: x, j: x, k: x, l: x, m: x, o: x, p: x, q: x, r: x, s: x}}`, []string{
			`eni.tags: at most 16 tags: ECS allows 20 per ENI and enid sets 4 (got 18)`}},
		{"tag value type", `eni: {tags: {a: 1, b: yes}}`, []string{`eni.tags[a]: must be a string (got 1)`, `eni.tags[b]: must be a string (got true)`}},
		{"region", `cloud: {region: Hangzhou}`, []string{`cloud.region: must be a region ID such as cn-hangzhou, or empty for the instance's own (got "Hangzhou")`}},
		{"endpoint with scheme", `cloud: {endpoint: "https://ecs.aliyuncs.com"}`, []string{`cloud.endpoint: must be host or host:port without a scheme, e.g. ecs-vpc.cn-hangzhou.aliyuncs.com (got "https://ecs.aliyuncs.com")`}},
		{"metadata endpoint", `cloud: {metadataEndpoint: "100.100.100.200"}`, []string{`cloud.metadataEndpoint: must be an http or https URL such as http://100.100.100.200 (got "100.100.100.200")`}},
		{"qps zero", `cloud: {rateLimit: {qps: 0}}`, []string{`cloud.rateLimit.qps: must be > 0 (got 0)`}},
		{"burst zero", `cloud: {rateLimit: {burst: 0}}`, []string{`cloud.rateLimit.burst: must be >= 1 (got 0)`}},
		{"unknown action", `cloud: {rateLimit: {perAction: {DescribeEverything: {qps: 1, burst: 1}}}}`, []string{`cloud.rateLimit.perAction[DescribeEverything]: unknown API action "DescribeEverything"; known: ` + strings.Join(CloudActions(), ", ")}},
		{"per-action rate", `cloud: {rateLimit: {perAction: {AttachNetworkInterface: {qps: -1}}}}`, []string{
			`cloud.rateLimit.perAction[AttachNetworkInterface].qps: must be > 0 (got -1)`,
			`cloud.rateLimit.perAction[AttachNetworkInterface].burst: must be >= 1 (got 0)`}},
		{"credential source", `cloud: {credentials: {source: vault}}`, []string{`cloud.credentials.source: must be one of env, file, ram-role (got "vault")`}},
		{"credentials file required", `cloud: {credentials: {source: file}}`, []string{`cloud.credentials.file: required when cloud.credentials.source is file: the path of the credentials file`}},
		{"credentials file absolute", `cloud: {credentials: {source: file, file: creds.yaml}}`, []string{`cloud.credentials.file: must be an absolute path (got "creds.yaml")`}},
		{"credentials file without source file", `cloud: {credentials: {file: /etc/enid/creds}}`, []string{`cloud.credentials.file: only used when cloud.credentials.source is file (source is "env"); remove it`}},
		{"roleName without ram-role", `cloud: {credentials: {roleName: r}}`, []string{`cloud.credentials.roleName: only used when cloud.credentials.source is ram-role (source is "env"); remove it`}},
		{"serviceCIDRs", `serviceCIDRs: [10.96.0.0/12, "fd00:10:96::/112"]`, nil},
		{"serviceCIDRs not a prefix", `serviceCIDRs: [10.96.0.0]`, []string{`serviceCIDRs[0]: must be an IPv4 or IPv6 prefix in CIDR notation, the cluster's Service range as kube-apiserver's --service-cluster-ip-range gives it, e.g. 10.96.0.0/12 (got "10.96.0.0")`}},
		{"serviceCIDRs host bits", `serviceCIDRs: [10.96.0.1/12]`, []string{`serviceCIDRs[0]: has host bits set: write the network address, 10.96.0.0/12 (got "10.96.0.1/12")`}},
		{"serviceCIDRs default route", `serviceCIDRs: ["::/0"]`, []string{`serviceCIDRs[0]: ::/0 would send all of a pod's traffic through the node instead of its ENI: list only the Service range, e.g. 10.96.0.0/12 (got "::/0")`}},
		{"serviceCIDRs twice", `serviceCIDRs: [10.96.0.0/12, 10.96.0.0/12]`, []string{`serviceCIDRs[1]: 10.96.0.0/12 is listed twice: remove one`}},
		{"serviceCIDRs mapped", `serviceCIDRs: ["::ffff:10.96.0.0/108"]`, []string{`serviceCIDRs[0]: must be a plain IPv4 or IPv6 prefix, e.g. 10.96.0.0/12 or fd00:10:96::/112 (got "::ffff:10.96.0.0/108")`}},
		{"serviceCIDRs too many", `serviceCIDRs: [10.0.0.0/16, 10.1.0.0/16, 10.2.0.0/16, 10.3.0.0/16, 10.4.0.0/16, 10.5.0.0/16, 10.6.0.0/16, 10.7.0.0/16, 10.8.0.0/16]`, []string{`serviceCIDRs: at most 8 prefixes (got 9): list the cluster's Service ranges, one per family (kube-apiserver's --service-cluster-ip-range)`}},
		{"serviceCIDRs not strings", `serviceCIDRs: 10.96.0.0/12`, []string{`serviceCIDRs: must be a list (got "10.96.0.0/12")`}},
		{"stickyIPHold negative", `stickyIPHold: -5m`, []string{`stickyIPHold: must be >= 0 (got -5m0s)`}},
		{"resyncPeriod negative", `resyncPeriod: -1s`, []string{`resyncPeriod: must be >= 0 (got -1s)`}},
		{"unknown key", `pool: {minIdel: 3}`, []string{`pool.minIdel: unknown field (did you mean "minIdle"?)`}},
		{"key case matters", `Pool: {minIdle: 3}`, []string{`Pool: unknown field (did you mean "pool"?)`}},
		{"wrong type", `pool: {minIdle: many}`, []string{`pool.minIdle: must be an integer (got "many")`}},
		{"duration without unit", `pool: {cooldown: 30}`, []string{`pool.cooldown: duration must be a string such as "30s" or "5m" (got 30)`}},
		{"override empty match", "overrides:\n- config: {pool: {minIdle: 1}}", []string{`overrides[0].match: is empty and would match every node: name nodeNames, zones, instanceTypes or labels, or move these settings out of overrides`}},
		{"override bad pattern", "overrides:\n- match: {nodeNames: ['[']}\n  config: {pool: {minIdle: 1}}", []string{`overrides[0].match.nodeNames[0]: not a valid pattern (got "[")`}},
		{"override without config", "overrides:\n- match: {zones: [cn-hangzhou-k]}", []string{`overrides[0].config: required: the settings this override changes`}},
		{"override sets kind", "overrides:\n- match: {zones: [cn-hangzhou-k]}\n  config: {kind: X}", []string{`overrides[0].config.kind: not allowed in an override`}},
		{"override unknown key", "overrides:\n- match: {zones: [cn-hangzhou-k]}\n  config: {pool: {maxIdel: 1}}", []string{`overrides[0].config.pool.maxIdel: unknown field (did you mean "maxIdle"?)`}},
		{"override applied then validated", "overrides:\n- match: {zones: [cn-hangzhou-k]}\n  config: {pool: {batch: 20}}", []string{`pool.batch: must be between 1 and 10: ECS assigns at most 10 addresses per call (got 20)`}},
		{"several problems at once", `pool: {minIdle: 5, maxIdle: 2, batch: 0}` + "\nmode: x", []string{
			`mode: must be one of shared-eni, exclusive-eni (got "x")`,
			`pool.maxIdle: must be >= pool.minIdle (got 2 < 5)`,
			`pool.batch: must be between 1 and 10: ECS assigns at most 10 addresses per call (got 0)`}},
	}
	base := readTestdata(t, "config/base.yaml")
	facts := NodeFacts{NodeName: "node-1", Zone: "cn-hangzhou-k", InstanceType: "ecs.g7.large"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
			writeFile(t, src.Main, base)
			if tc.drop != "" {
				doc := tc.drop + "\n"
				if !strings.HasPrefix(tc.drop, "kind:") {
					doc = "kind: AgentConfig\n" + doc
				}
				if !strings.HasPrefix(tc.drop, "apiVersion:") {
					doc = "apiVersion: enid.dev/v1alpha1\n" + doc
				}
				writeFile(t, filepath.Join(src.DropInDir, "50-case.yaml"), doc)
			}
			_, err := LoadConfig(src, facts)
			if diff := cmp.Diff(tc.want, problemsOf(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\nfull error: %v", diff, err)
			}
		})
	}
}

func TestDropInsMergeInLexicalOrder(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	hdr := "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\n"
	writeFile(t, src.Main, hdr+`
pool: {minIdle: 3, maxIdle: 30}
eni:
  vSwitches: {cn-hangzhou-k: [vsw-k1, vsw-k2]}
  securityGroups: [sg-a, sg-b]
  tags: {team: a, env: prod}
cloud: {region: cn-hangzhou}
`)
	// 20 sorts before 9: lexical, not numeric, order.
	writeFile(t, filepath.Join(src.DropInDir, "20-late.yaml"), hdr+"pool: {minIdle: 7}\n")
	writeFile(t, filepath.Join(src.DropInDir, "10-early.yaml"), hdr+`
pool: {minIdle: 5}
eni:
  vSwitches: {cn-hangzhou-j: [vsw-j1]}
  securityGroups: [sg-c]
  tags: {team: b, env: null}
cloud: {region: null}
`)
	writeFile(t, filepath.Join(src.DropInDir, "9-last.yaml"), hdr+"resyncPeriod: 1m\n")
	writeFile(t, filepath.Join(src.DropInDir, ".hidden.yaml"), "garbage: [")
	writeFile(t, filepath.Join(src.DropInDir, "notes.txt"), "not yaml: [")
	got, err := LoadConfig(src, NodeFacts{})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Pool.MinIdle = 7
	want.Pool.MaxIdle = 30
	want.ENI.VSwitches = map[string][]string{"cn-hangzhou-k": {"vsw-k1", "vsw-k2"}, "cn-hangzhou-j": {"vsw-j1"}}
	want.ENI.SecurityGroups = []string{"sg-c"}
	want.ENI.Tags = map[string]string{"team": "b"}
	want.ResyncPeriod = Duration(time.Minute)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged config (-want +got):\n%s", diff)
	}
}

func TestOverridesFollowFacts(t *testing.T) {
	doc := readTestdata(t, "config/base.yaml") + `
overrides:
- match: {instanceTypes: ["ecs.g7.*"]}
  config: {pool: {minIdle: 4, maxIdle: 40}}
- match: {zones: [cn-hangzhou-k], labels: {role: ingress}}
  config: {pool: {minIdle: 8}, eni: {tags: {role: ingress}}}
- match: {nodeNames: [node-9]}
  config: {mode: exclusive-eni}
`
	tests := []struct {
		name  string
		facts NodeFacts
		want  func(*Config)
	}{
		{"no match", NodeFacts{NodeName: "n", Zone: "cn-hangzhou-j", InstanceType: "ecs.c6.large"}, func(*Config) {}},
		{"instance type pattern", NodeFacts{InstanceType: "ecs.g7.2xlarge"}, func(c *Config) { c.Pool.MinIdle, c.Pool.MaxIdle = 4, 40 }},
		{"labels unknown never match", NodeFacts{Zone: "cn-hangzhou-k"}, func(*Config) {}},
		{"later override wins", NodeFacts{Zone: "cn-hangzhou-k", InstanceType: "ecs.g7.large", Labels: map[string]string{"role": "ingress"}}, func(c *Config) {
			c.Pool.MinIdle, c.Pool.MaxIdle = 8, 40
			c.ENI.Tags = map[string]string{"role": "ingress"}
		}},
		{"node name", NodeFacts{NodeName: "node-9"}, func(c *Config) { c.Mode = ModeExclusiveENI }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(doc), tc.facts)
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultConfig()
			want.ENI.VSwitches = map[string][]string{"cn-hangzhou-k": {"vsw-k1"}}
			want.ENI.SecurityGroups = []string{"sg-a"}
			want.Overrides = got.Overrides
			tc.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestProblemsNameTheirFile(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	writeFile(t, src.Main, readTestdata(t, "config/base.yaml")+"pool: {minIdle: 4}\n")
	drop := filepath.Join(src.DropInDir, "10-pool.yaml")
	writeFile(t, drop, "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\npool: {maxIdle: 1}\n")
	_, err := LoadConfig(src, NodeFacts{})
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("want *ConfigError, got %v", err)
	}
	want := []Problem{{File: drop, Path: "pool.maxIdle", Message: "must be >= pool.minIdle (got 1 < 4)"}}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNoConfigFilesGivesDefaultsAndSaysWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	cfg, err := LoadConfig(src, NodeFacts{})
	if !errors.Is(err, ErrNoConfig) {
		t.Fatalf("want ErrNoConfig, got %v", err)
	}
	if diff := cmp.Diff(DefaultConfig(), cfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), "eni.vSwitches: at least one vSwitch is required") {
		t.Errorf("error does not say how to fix it: %v", err)
	}
	// A drop-in alone is a complete config source.
	writeFile(t, filepath.Join(src.DropInDir, "00.yaml"), readTestdata(t, "config/base.yaml"))
	if _, err := LoadConfig(src, NodeFacts{}); err != nil {
		t.Errorf("drop-in only: %v", err)
	}
}

func TestEveryDropInIsVersioned(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	writeFile(t, src.Main, readTestdata(t, "config/base.yaml"))
	writeFile(t, filepath.Join(src.DropInDir, "10.yaml"), "pool: {minIdle: 1}\n")
	_, err := LoadConfig(src, NodeFacts{})
	want := []string{
		"apiVersion: required: every config file starts with apiVersion: enid.dev/v1alpha1",
		"kind: required: every config file starts with kind: AgentConfig",
	}
	if diff := cmp.Diff(want, problemsOf(t, err)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestDefaultsAreValidOnceVSwitchesAndGroupsAreSet(t *testing.T) {
	c := DefaultConfig()
	c.ENI.VSwitches = map[string][]string{"cn-hangzhou-k": {"vsw-1"}}
	c.ENI.SecurityGroups = []string{"sg-1"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"eni.vSwitches: at least one vSwitch is required: list the vSwitches pods may use under their zone, e.g. eni.vSwitches: {cn-hangzhou-k: [vsw-xxxx]}",
		"eni.securityGroups: at least one security group is required: list the ones every ENI gets, e.g. eni.securityGroups: [sg-xxxx] (at most 10)",
	}
	if diff := cmp.Diff(want, problemsOf(t, DefaultConfig().Validate())); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestStringRoundTrips(t *testing.T) {
	cfg, err := ParseConfig([]byte(readTestdata(t, "../../examples/config/full.yaml")), NodeFacts{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseConfig([]byte(cfg.String()), NodeFacts{})
	if err != nil {
		t.Fatalf("String() output does not parse: %v\n%s", err, cfg)
	}
	if diff := cmp.Diff(cfg, again); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// secretLike are words that mark a field as holding a secret.
var secretLike = []string{"secret", "token", "password", "accesskey", "privatekey"}

// TestSecretFieldsTagged fails when a config field that looks like a secret
// lacks the secret tag, so String and problems could print it.
func TestSecretFieldsTagged(t *testing.T) {
	var walk func(path string, typ reflect.Type)
	seen := map[reflect.Type]bool{}
	walk = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			lower := strings.ToLower(f.Name)
			for _, w := range secretLike {
				if strings.Contains(lower, w) && !isSecret(f) {
					t.Errorf("%s.%s looks like a secret: tag it `secret:\"true\"`", path, f.Name)
				}
			}
			walk(path+"."+f.Name, f.Type)
		}
	}
	walk("Config", reflect.TypeFor[Config]())
}

// TestRedaction proves the mechanism on a type that has secrets, since
// Config has none today.
func TestRedaction(t *testing.T) {
	type creds struct {
		ID     string `json:"id"`
		Secret string `json:"secret" secret:"true"`
	}
	type holder struct {
		Creds []creds `json:"creds"`
	}
	body := map[string]any{"creds": []any{map[string]any{"id": "AK1", "secret": "s3cr3t"}}}
	got := redactGeneric(body, reflect.TypeFor[holder]())
	want := map[string]any{"creds": []any{map[string]any{"id": "AK1", "secret": Redacted}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var h holder
	d := &strictDecoder{}
	d.decode("", map[string]any{"creds": []any{map[string]any{"secret": 42.0}}}, reflect.ValueOf(&h).Elem())
	for _, p := range d.problems {
		if strings.Contains(p.Message, "42") || !strings.Contains(p.Message, Redacted) {
			t.Errorf("secret value leaked or not redacted in %q", p)
		}
	}
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../examples/config/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least 2 examples, got %v (%v)", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseConfig(data, NodeFacts{Zone: "cn-hangzhou-k", InstanceType: "ecs.g7.large"}); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestIPv4AllocationProblemNamesItsFile: the refusal of prefixes in
// exclusive mode names the drop-in that asked for prefixes, the field and
// the fix.
func TestIPv4AllocationProblemNamesItsFile(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	writeFile(t, src.Main, readTestdata(t, "config/base.yaml")+"mode: exclusive-eni\n")
	drop := filepath.Join(src.DropInDir, "20-prefix.yaml")
	writeFile(t, drop, "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\neni: {ipv4Allocation: prefix}\n")
	_, err := LoadConfig(src, NodeFacts{})
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("want *ConfigError, got %v", err)
	}
	want := []Problem{{File: drop, Path: "eni.ipv4Allocation", Message: `prefix applies to mode shared-eni only: an exclusive pod gets its ENI's primary address; set it to secondary or remove it (got "prefix" with mode exclusive-eni)`}}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

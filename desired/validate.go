package desired

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// cloudActions are the ECS and VPC API actions enid calls; rate limits may
// be set per action only for these.
var cloudActions = []string{
	"AssignIpv6Addresses",
	"AssignPrivateIpAddresses",
	"AttachNetworkInterface",
	"CreateNetworkInterface",
	"DeleteNetworkInterface",
	"DescribeInstanceTypes",
	"DescribeInstances",
	"DescribeNetworkInterfaces",
	"DescribeVSwitches",
	"DetachNetworkInterface",
	"ModifyNetworkInterfaceAttribute",
	"TagResources",
	"UnassignIpv6Addresses",
	"UnassignPrivateIpAddresses",
	"UntagResources",
}

// CloudActions returns the API action names cloud.rateLimit.perAction
// accepts, sorted.
func CloudActions() []string { return slices.Clone(cloudActions) }

// MaxExtraTags is how many eni.tags may be set: ECS allows 20 tags on a
// resource and enid uses 4 of them (managed-by, owner, created-at,
// security-group-set).
const MaxExtraTags = 16

// ReservedTagPrefix starts the tag keys enid sets itself.
const ReservedTagPrefix = "enid.dev/"

var (
	zoneIDRe   = regexp.MustCompile(`^[a-z]{2}-[a-z0-9]+(-[a-z0-9]+)*$`)
	vSwitchRe  = regexp.MustCompile(`^vsw-[a-z0-9][a-z0-9-]*$`)
	secGroupRe = regexp.MustCompile(`^sg-[a-z0-9][a-z0-9-]*$`)
)

// Validate checks an effective config (defaults filled, overrides applied)
// and returns a *ConfigError listing every problem, or nil.
func (c Config) Validate() error {
	if ps := c.problems(); len(ps) > 0 {
		return &ConfigError{Problems: ps}
	}
	return nil
}

// problems lists everything wrong with c, in field order.
func (c Config) problems() []Problem {
	v := &validator{}
	v.exact("apiVersion", c.APIVersion, ConfigAPIVersion)
	v.exact("kind", c.Kind, ConfigKind)
	v.enum("mode", string(c.Mode), string(ModeSharedENI), string(ModeExclusiveENI))
	v.enum("ipStack", string(c.IPStack), string(IPv4Only), string(DualStack), string(IPv6Only))

	p := c.Pool
	v.nonNegative("pool.minIdle", p.MinIdle)
	v.nonNegative("pool.maxIdle", p.MaxIdle)
	if p.MinIdle >= 0 && p.MaxIdle >= 0 && p.MaxIdle < p.MinIdle {
		v.add("pool.maxIdle", "must be >= pool.minIdle (got %d < %d)", p.MaxIdle, p.MinIdle)
	}
	v.nonNegative("pool.minTotal", p.MinTotal)
	if p.Batch < 1 || p.Batch > 10 {
		v.add("pool.batch", "must be between 1 and 10: ECS assigns at most 10 addresses per call (got %d)", p.Batch)
	}
	v.duration("pool.releaseDelay", p.ReleaseDelay)
	v.duration("pool.cooldown", p.Cooldown)
	v.duration("pool.spreadWindow", p.SpreadWindow)
	v.duration("pool.unschedulableRelease", p.UnschedulableRelease)
	if p.SpreadWindow > Duration(maxSpreadWindow) {
		v.add("pool.spreadWindow", "must be at most %s: a longer spread only delays the pool (got %s)", maxSpreadWindow, time.Duration(p.SpreadWindow))
	}

	v.eni(c.ENI)
	v.ipv4Allocation(c)
	v.securityGroupSets(c.ENI, c.Pool.Batch)
	v.cloud(c.Cloud)

	v.serviceCIDRs(c.ServiceCIDRs)
	v.duration("stickyIPHold", c.StickyIPHold)
	v.duration("resyncPeriod", c.ResyncPeriod)
	v.duration("staleEntryTimeout", c.StaleEntryTimeout)
	v.problems = append(v.problems, overrideBodyProblems(c.Overrides)...)
	for i, o := range c.Overrides {
		m := o.Match
		if len(m.NodeNames) == 0 && len(m.Zones) == 0 && len(m.InstanceTypes) == 0 && len(m.Labels) == 0 {
			v.add(fmt.Sprintf("overrides[%d].match", i), "is empty and would match every node: name nodeNames, zones, instanceTypes or labels, or move these settings out of overrides")
		}
	}
	return v.problems
}

type validator struct{ problems []Problem }

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) exact(path, got, want string) {
	if got != want {
		v.add(path, "must be %q (got %q)", want, got)
	}
}

func (v *validator) enum(path, got string, allowed ...string) {
	if !slices.Contains(allowed, got) {
		v.add(path, "must be one of %s (got %q)", strings.Join(allowed, ", "), got)
	}
}

func (v *validator) nonNegative(path string, n int) {
	if n < 0 {
		v.add(path, "must be >= 0 (got %d)", n)
	}
}

// maxSpreadWindow caps pool.spreadWindow.
const maxSpreadWindow = 10 * time.Minute

func (v *validator) duration(path string, d Duration) {
	if d < 0 {
		v.add(path, "must be >= 0 (got %s)", time.Duration(d))
	}
}

// eni checks the eni section, in field order.
func (v *validator) eni(e ENIConfig) {
	v.nonNegative("eni.maxENIs", e.MaxENIs)
	if e.MTU != 0 && (e.MTU < 1280 || e.MTU > 9000) {
		v.add("eni.mtu", "must be 0 (keep the device's) or between 1280 and 9000 (got %d)", e.MTU)
	}
	total := v.vSwitches(e.VSwitches)
	v.vSwitchSelector(e.VSwitchSelector)
	if total == 0 && e.VSwitchSelector == nil {
		v.add("eni.vSwitches", "at least one vSwitch is required: list the vSwitches pods may use under their zone, e.g. eni.vSwitches: {cn-hangzhou-k: [vsw-xxxx]}")
	}
	v.enum("eni.vSwitchPolicy", string(e.VSwitchPolicy), string(VSwitchMostFree), string(VSwitchOrdered), string(VSwitchRandom))
	v.securityGroups(e.SecurityGroups)
	v.eniTags(e.Tags)
}

// vSwitches checks eni.vSwitches (zone IDs, vSwitch IDs, each vSwitch
// listed once) and returns how many are listed.
func (v *validator) vSwitches(byZone map[string][]string) int {
	total := 0
	seen := map[string]string{}
	for _, zone := range sortedKeys(byZone) {
		zp := fmt.Sprintf("eni.vSwitches[%s]", zone)
		if !zoneIDRe.MatchString(zone) {
			v.add(zp, "zone must be a zone ID such as cn-hangzhou-k (got %q)", zone)
		}
		for i, id := range byZone[zone] {
			total++
			ip := fmt.Sprintf("%s[%d]", zp, i)
			switch {
			case !vSwitchRe.MatchString(id):
				v.add(ip, "must be a vSwitch ID such as vsw-bp1a2b3c (got %q)", id)
			case seen[id] != "":
				v.add(ip, "vSwitch %s is listed twice (first under %s)", id, seen[id])
			default:
				seen[id] = zone
			}
		}
	}
	return total
}

// vSwitchSelector checks eni.vSwitchSelector, when set: 1 to 20 tags
// (DescribeVSwitches' Tag.N), each key 1 to 128 characters.
func (v *validator) vSwitchSelector(sel *VSwitchSelector) {
	if sel == nil {
		return
	}
	switch n := len(sel.Tags); {
	case n == 0:
		v.add("eni.vSwitchSelector.tags", "at least one tag is required: the vSwitches to use carry it, e.g. {kubernetes.io/role/enid: \"1\"}")
	case n > 20:
		v.add("eni.vSwitchSelector.tags", "at most 20 tags (DescribeVSwitches' Tag.N) (got %d)", n)
	}
	for _, k := range sortedKeys(sel.Tags) {
		if k == "" || len(k) > 128 {
			v.add(fmt.Sprintf("eni.vSwitchSelector.tags[%s]", k), "tag key must be 1 to 128 characters (got %d)", len(k))
		}
	}
}

// securityGroups checks eni.securityGroups: 1 to 10 security group IDs,
// each listed once.
func (v *validator) securityGroups(sgs []string) {
	switch n := len(sgs); {
	case n == 0:
		v.add("eni.securityGroups", "at least one security group is required: list the ones every ENI gets, e.g. eni.securityGroups: [sg-xxxx] (at most 10)")
	case n > 10:
		v.add("eni.securityGroups", "at most 10 security groups per ENI (got %d)", n)
	}
	sgSeen := map[string]bool{}
	for i, sg := range sgs {
		p := fmt.Sprintf("eni.securityGroups[%d]", i)
		switch {
		case !secGroupRe.MatchString(sg):
			v.add(p, "must be a security group ID such as sg-bp1a2b3c (got %q)", sg)
		case sgSeen[sg]:
			v.add(p, "security group %s is listed twice", sg)
		}
		sgSeen[sg] = true
	}
}

// eniTags checks eni.tags against ECS's tag rules: at most MaxExtraTags,
// keys 1 to 128 characters, values at most 128, neither reserved by
// Alibaba Cloud nor holding a URL, and no key of enid's own.
func (v *validator) eniTags(tags map[string]string) {
	if len(tags) > MaxExtraTags {
		v.add("eni.tags", "at most %d tags: ECS allows 20 per ENI and enid sets 4 (got %d)", MaxExtraTags, len(tags))
	}
	for _, k := range sortedKeys(tags) {
		p := fmt.Sprintf("eni.tags[%s]", k)
		lk := strings.ToLower(k)
		switch {
		case k == "" || len(k) > 128:
			v.add(p, "tag key must be 1 to 128 characters (got %d)", len(k))
		case strings.HasPrefix(lk, ReservedTagPrefix):
			v.add(p, "tag keys starting with %q are reserved for enid's own tags (got %q)", ReservedTagPrefix, k)
		case strings.HasPrefix(lk, "aliyun"), strings.HasPrefix(lk, "acs:"):
			v.add(p, "tag keys may not start with \"aliyun\" or \"acs:\" (reserved by Alibaba Cloud) (got %q)", k)
		case strings.Contains(lk, "http://"), strings.Contains(lk, "https://"):
			v.add(p, "tag keys may not contain http:// or https:// (got %q)", k)
		}
		val := tags[k]
		switch lv := strings.ToLower(val); {
		case len(val) > 128:
			v.add(p, "tag value must be at most 128 characters (got %d)", len(val))
		case strings.HasPrefix(lv, "aliyun"), strings.HasPrefix(lv, "acs:"):
			v.add(p, "tag values may not start with \"aliyun\" or \"acs:\" (got %q)", val)
		case strings.Contains(lv, "http://"), strings.Contains(lv, "https://"):
			v.add(p, "tag values may not contain http:// or https:// (got %q)", val)
		}
	}
}

// ipv4Allocation checks eni.ipv4Allocation and that it means something
// with the mode and stack: prefixes are shared-mode IPv4 pod addresses.
func (v *validator) ipv4Allocation(c Config) {
	a := c.ENI.IPv4Allocation
	v.enum("eni.ipv4Allocation", string(a), string(IPv4Secondary), string(IPv4Prefix), string(IPv4PreferPrefix))
	if a != IPv4Prefix && a != IPv4PreferPrefix {
		return
	}
	switch {
	case c.Mode == ModeExclusiveENI:
		v.add("eni.ipv4Allocation", "%s applies to mode shared-eni only: an exclusive pod gets its ENI's primary address; set it to secondary or remove it (got %q with mode %s)", a, a, c.Mode)
	case c.IPStack == IPv6Only:
		v.add("eni.ipv4Allocation", "%s needs IPv4 pod addresses, and ipStack ipv6 gives pods none; set it to secondary or remove it (got %q with ipStack %s)", a, a, c.IPStack)
	}
}

func (v *validator) cloud(c Cloud) {
	if c.Region != "" && !zoneIDRe.MatchString(c.Region) {
		v.add("cloud.region", "must be a region ID such as cn-hangzhou, or empty for the instance's own (got %q)", c.Region)
	}
	if c.Endpoint != "" {
		host := c.Endpoint
		if h, _, err := net.SplitHostPort(c.Endpoint); err == nil {
			host = h
		}
		if host == "" || strings.ContainsAny(c.Endpoint, "/?#@ ") {
			v.add("cloud.endpoint", "must be host or host:port without a scheme, e.g. ecs-vpc.cn-hangzhou.aliyuncs.com (got %q)", c.Endpoint)
		}
	}
	if c.MetadataEndpoint != "" {
		u, err := url.Parse(c.MetadataEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			v.add("cloud.metadataEndpoint", "must be an http or https URL such as http://100.100.100.200 (got %q)", c.MetadataEndpoint)
		}
	}
	v.rate("cloud.rateLimit", c.RateLimit.QPS, c.RateLimit.Burst)
	for _, action := range sortedKeys(c.RateLimit.PerAction) {
		p := fmt.Sprintf("cloud.rateLimit.perAction[%s]", action)
		if !slices.Contains(cloudActions, action) {
			v.add(p, "unknown API action %q; known: %s", action, strings.Join(cloudActions, ", "))
			continue
		}
		r := c.RateLimit.PerAction[action]
		v.rate(p, r.QPS, r.Burst)
	}
	cr := c.Credentials
	v.enum("cloud.credentials.source", string(cr.Source), string(CredentialsEnv), string(CredentialsFile), string(CredentialsRAMRole))
	switch {
	case cr.Source == CredentialsFile && cr.File == "":
		v.add("cloud.credentials.file", "required when cloud.credentials.source is file: the path of the credentials file")
	case cr.Source == CredentialsFile && !filepath.IsAbs(cr.File):
		v.add("cloud.credentials.file", "must be an absolute path (got %q)", cr.File)
	case cr.Source != CredentialsFile && cr.File != "":
		v.add("cloud.credentials.file", "only used when cloud.credentials.source is file (source is %q); remove it", cr.Source)
	}
	if cr.RoleName != "" && cr.Source != CredentialsRAMRole {
		v.add("cloud.credentials.roleName", "only used when cloud.credentials.source is ram-role (source is %q); remove it", cr.Source)
	}
}

func (v *validator) rate(path string, qps float64, burst int) {
	if !(qps > 0) || math.IsInf(qps, 0) {
		v.add(path+".qps", "must be > 0 (got %v)", qps)
	}
	if burst < 1 {
		v.add(path+".burst", "must be >= 1 (got %d)", burst)
	}
}

// maxServiceCIDRs caps serviceCIDRs: each is a route in every exclusive
// pod; clusters have one Service range per family.
const maxServiceCIDRs = 8

// serviceCIDRs checks serviceCIDRs: prefixes in CIDR notation, with no
// host bits, none twice, none that would take a pod's whole traffic.
func (v *validator) serviceCIDRs(cidrs []string) {
	if len(cidrs) > maxServiceCIDRs {
		v.add("serviceCIDRs", "at most %d prefixes (got %d): list the cluster's Service ranges, one per family (kube-apiserver's --service-cluster-ip-range)", maxServiceCIDRs, len(cidrs))
	}
	seen := map[netip.Prefix]bool{}
	for i, s := range cidrs {
		path := fmt.Sprintf("serviceCIDRs[%d]", i)
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			v.add(path, "must be an IPv4 or IPv6 prefix in CIDR notation, the cluster's Service range as kube-apiserver's --service-cluster-ip-range gives it, e.g. 10.96.0.0/12 (got %q)", s)
		case p.Addr().Zone() != "" || p.Addr().Is4In6():
			v.add(path, "must be a plain IPv4 or IPv6 prefix, e.g. 10.96.0.0/12 or fd00:10:96::/112 (got %q)", s)
		case p.Masked() != p:
			v.add(path, "has host bits set: write the network address, %s (got %q)", p.Masked(), s)
		case p.Bits() == 0:
			v.add(path, "%s would send all of a pod's traffic through the node instead of its ENI: list only the Service range, e.g. 10.96.0.0/12 (got %q)", p, s)
		case seen[p]:
			v.add(path, "%s is listed twice: remove one", p)
		default:
			seen[p] = true
		}
	}
}

package plannertest

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// Exec changes the world by one line of the compact text form used in
// planner/testdata (see docs/plan.md, "Test scripts"): a verb, positional
// words and key=value words.
func (w *World) Exec(line string) error {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return nil
	}
	verb, pos, kv := f[0], []string{}, map[string]string{}
	for _, x := range f[1:] {
		if k, v, ok := strings.Cut(x, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, x)
		}
	}
	flag := func(s string) bool { return slices.Contains(pos, s) }
	arg := func(i int) string {
		if i < len(pos) {
			return pos[i]
		}
		return ""
	}
	var err error
	num := func(k string, def int) int {
		v, ok := kv[k]
		if !ok {
			return def
		}
		n, e := strconv.Atoi(v)
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q: %w", k, v, e)
		}
		return n
	}
	dur := func(k string, def time.Duration) time.Duration {
		v, ok := kv[k]
		if !ok {
			return def
		}
		d, e := time.ParseDuration(v)
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q: %w", k, v, e)
		}
		return d
	}
	addr := func(k string) netip.Addr {
		v, ok := kv[k]
		if !ok {
			return netip.Addr{}
		}
		a, e := netip.ParseAddr(v)
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q: %w", k, v, e)
		}
		return a
	}
	addrs := func(k string) []netip.Addr {
		var out []netip.Addr
		for _, s := range list(kv[k]) {
			a, e := netip.ParseAddr(s)
			if e != nil && err == nil {
				err = fmt.Errorf("%s: %w", k, e)
			}
			out = append(out, a)
		}
		return sorted(out)
	}
	key := func() observed.AttachmentKey {
		return observed.AttachmentKey{ContainerID: arg(0), IfName: cmpOr(kv["if"], "eth0")}
	}
	cfg := &w.Desired.Config

	switch verb {
	case "instance":
		w.Instance = observed.Instance{ID: arg(0), RegionID: "cn-test", ZoneID: kv["zone"], InstanceType: "ecs.test",
			VPCID: "vpc-1", PrimaryENI: cmpOr(kv["primary"], "eni-primary"),
			Limits: observed.Limits{ENIs: num("enis", 3), IPv4PerENI: num("ips", 10), IPv6PerENI: num("ipv6", 10)}}
		w.ENIs = slices.DeleteFunc(w.ENIs, func(e observed.ENI) bool { return e.Type == observed.ENITypePrimary })
		w.ENIs = append(w.ENIs, observed.ENI{ID: w.Instance.PrimaryENI, MAC: "00:16:3e:00:00:01", Status: observed.ENIInUse,
			Type: observed.ENITypePrimary, InstanceID: w.Instance.ID, VSwitchID: "vsw-node", ZoneID: w.Instance.ZoneID,
			PrimaryIP: netip.MustParseAddr("192.168.0.10")})
	case "vswitch":
		p, e := netip.ParsePrefix(kv["cidr"])
		if e != nil {
			return fmt.Errorf("vswitch cidr: %w", e)
		}
		v := observed.VSwitch{ID: arg(0), ZoneID: cmpOr(kv["zone"], w.Instance.ZoneID), VPCID: "vpc-1", CIDR: p,
			AvailableIPs: num("free", (1<<(32-p.Bits()))-5)}
		if s, ok := kv["cidr6"]; ok {
			if v.IPv6CIDR, e = netip.ParsePrefix(s); e != nil {
				return fmt.Errorf("vswitch cidr6: %w", e)
			}
		}
		w.VSwitches = slices.DeleteFunc(w.VSwitches, func(x observed.VSwitch) bool { return x.ID == v.ID })
		w.VSwitches = append(w.VSwitches, v)
		slices.SortFunc(w.VSwitches, func(a, b observed.VSwitch) int { return strings.Compare(a.ID, b.ID) })
	case "vswitch-free":
		v := w.vswitch(arg(0))
		if v == nil {
			return fmt.Errorf("no vswitch %s", arg(0))
		}
		v.AvailableIPs = num("free", 0)
	case "config":
		if cfg.APIVersion == "" {
			*cfg = desired.Config{APIVersion: desired.ConfigAPIVersion, Kind: desired.ConfigKind, Mode: desired.ModeSharedENI,
				IPStack: desired.IPv4Only}
			cfg.ENI.VSwitchPolicy = desired.VSwitchMostFree
		}
		applyConfig(cfg, kv, w.Instance.ZoneID, num, dur)
	case "eni":
		e := observed.ENI{ID: arg(0), MAC: cmpOr(kv["mac"], macOf(arg(0))), Status: observed.ENIStatus(cmpOr(kv["status"], "InUse")),
			Type: observed.ENITypeSecondary, VSwitchID: kv["vsw"], IPv4: addrs("ips"), IPv6: addrs("ipv6"),
			PrimaryIP: addr("primary"), DeviceIndex: num("dev", 0), SecurityGroups: []string{"sg-1"}, CreatedAt: w.Now}
		if v := w.vswitch(e.VSwitchID); v != nil {
			e.ZoneID, e.VPCID = v.ZoneID, v.VPCID
		} else {
			e.ZoneID = w.Instance.ZoneID
		}
		if !e.PrimaryIP.IsValid() {
			e.PrimaryIP = netip.MustParseAddr("10.255.0." + strconv.Itoa(e.DeviceIndex+100+len(w.ENIs)))
		}
		if e.Status != observed.ENIAvailable {
			e.InstanceID = cmpOr(kv["instance"], w.Instance.ID)
		}
		if flag("owned") {
			e.Tags = map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: cmpOr(kv["owner"], w.Instance.ID)}
		} else {
			e.Tags = map[string]string{"team": "other"}
		}
		w.Reserve(e.VSwitchID, append(append([]netip.Addr{e.PrimaryIP}, e.IPv4...), e.IPv6...)...)
		w.ENIs = slices.DeleteFunc(w.ENIs, func(x observed.ENI) bool { return x.ID == e.ID })
		w.ENIs = append(w.ENIs, e)
		if flag("configured") {
			w.Node.ENIDevices = append(w.Node.ENIDevices, observed.ENIDevice{MAC: e.MAC, Name: "eth" + strconv.Itoa(e.DeviceIndex),
				Index: 10 + e.DeviceIndex, MTU: 1500, Up: true, Table: 1000 + e.DeviceIndex, Configured: true})
		}
	case "pod":
		k := key()
		e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: k.ContainerID, IfName: k.IfName,
			NetNS: "/var/run/netns/" + k.ContainerID, PodNamespace: cmpOr(kv["ns"], "default"), PodName: cmpOr(kv["name"], k.ContainerID),
			PodUID: kv["uid"], Revision: cmpOr(kv["rev"], "r1"), Created: w.Now}
		if flag("sticky") {
			e.Annotations = map[string]string{desired.AnnotationStickyIP: "true"}
		}
		w.Desired.Entries = slices.DeleteFunc(w.Desired.Entries, func(x desired.Entry) bool { return x.ContainerID == k.ContainerID && x.IfName == k.IfName })
		w.Desired.Entries = append(w.Desired.Entries, e)
		slices.SortFunc(w.Desired.Entries, func(a, b desired.Entry) int {
			return strings.Compare(a.ContainerID+"_"+a.IfName, b.ContainerID+"_"+b.IfName)
		})
	case "rm-pod":
		k := key()
		w.Desired.Entries = slices.DeleteFunc(w.Desired.Entries, func(x desired.Entry) bool { return x.ContainerID == k.ContainerID && x.IfName == k.IfName })
	case "kernel":
		k := key()
		pn := observed.PodNet{Key: k, HostVeth: "enid" + k.ContainerID, NetNS: "/var/run/netns/" + k.ContainerID,
			IPv4: addr("ip"), IPv6: addr("ip6"), Exclusive: flag("exclusive"), Healthy: !flag("unhealthy")}
		if pn.Exclusive {
			pn.HostVeth = ""
		}
		if !pn.Healthy {
			pn.Problems = []string{"route missing"}
		}
		if e := w.eni(kv["eni"]); e != nil {
			pn.ENIMAC = e.MAC
		}
		w.Node.Pods = slices.DeleteFunc(w.Node.Pods, func(x observed.PodNet) bool { return x.Key == k })
		w.Node.Pods = append(w.Node.Pods, pn)
		for _, e := range w.Desired.Entries {
			if e.ContainerID == k.ContainerID && e.IfName == k.IfName {
				w.identity[k] = e.PodNamespace + "/" + e.PodName + "/" + e.IfName
			}
		}
	case "rm-kernel":
		k := key()
		w.Node.Pods = slices.DeleteFunc(w.Node.Pods, func(x observed.PodNet) bool { return x.Key == k })
	case "published":
		k := key()
		b := observed.Binding{Key: k, Revision: cmpOr(kv["rev"], "r1"), Phase: cmpOr(kv["phase"], "Ready"),
			Reason: strings.ReplaceAll(kv["reason"], "_", " "), IPv4: addr("ip"), IPv6: addr("ip6"), ENIID: kv["eni"]}
		w.Node.Published = slices.DeleteFunc(w.Node.Published, func(x observed.Binding) bool { return x.Key == k })
		w.Node.Published = append(w.Node.Published, b)
	case "admitted":
		w.Desired.Hints.AdmittedPodUIDs = list(arg(0))
	case "runtime":
		w.Desired.Hints.RuntimeAttachments = append(w.Desired.Hints.RuntimeAttachments,
			desired.RuntimeAttachment{Network: "enid", ContainerID: arg(0), IfName: cmpOr(kv["if"], "eth0")})
	case "deleted":
		// A deletion record: the runtime's CNI DEL (or GC) removed the entry.
		w.Desired.Deleted = append(w.Desired.Deleted, desired.Key{ContainerID: arg(0), IfName: cmpOr(kv["if"], "eth0")})
	case "entry-problem":
		w.Desired.EntryProblems = append(w.Desired.EntryProblems, desired.EntryProblem{File: arg(0) + "_eth0.json",
			ContainerID: arg(0), IfName: "eth0", Err: strings.ReplaceAll(kv["err"], "_", " ")})
	case "config-problem":
		w.Desired.ConfigProblems = append(w.Desired.ConfigProblems, strings.Join(f[1:], " "))
	case "observe":
		w.Complete = kv["complete"] != "false"
		w.CloudFrom = time.Time{}
		if _, ok := kv["cloud-from"]; ok && !w.Complete {
			w.CloudFrom = w.Now.Add(-dur("cloud-from", 0))
		}
		w.Problems = nil
		if p, ok := kv["problem"]; ok {
			w.Problems = []string{strings.ReplaceAll(p, "_", " ")}
		}
	case "cooldown":
		a, e := netip.ParseAddr(arg(0))
		if e != nil {
			return e
		}
		if w.Memory.Cooldowns == nil {
			w.Memory.Cooldowns = map[netip.Addr]time.Time{}
		}
		w.Memory.Cooldowns[a] = w.Now.Add(dur("for", 30*time.Second))
	case "sticky":
		if w.Memory.Sticky == nil {
			w.Memory.Sticky = map[string]planner.Reservation{}
		}
		r := planner.Reservation{Key: kv["key"], IPv4: addr("ip"), IPv6: addr("ip6"), ENIID: kv["eni"]}
		if d := dur("for", 0); d > 0 {
			r.Until = w.Now.Add(d)
		}
		w.Memory.Sticky[arg(0)] = r
	case "exhausted":
		w.Memory = w.Memory.MarkExhausted(arg(0), w.Now.Add(dur("for", 10*time.Minute)))
	case "leaked":
		if w.Memory.LeakedSince == nil {
			w.Memory.LeakedSince = map[string]time.Time{}
		}
		w.Memory.LeakedSince[arg(0)] = w.Now.Add(-dur("ago", 0))
	case "sent-creates":
		// The executor started every create memory knows (the agent then
		// crashed, or describes do not show the ENIs yet).
		for _, r := range w.Memory.Tokens {
			w.Memory = w.Memory.TokenSent(r.Token)
		}
	case "tick":
		d, e := time.ParseDuration(arg(0))
		if e != nil {
			return e
		}
		w.Now = w.Now.Add(d)
	default:
		return fmt.Errorf("unknown verb %q", verb)
	}
	return err
}

// applyConfig sets the config keys of a "config" line.
func applyConfig(c *desired.Config, kv map[string]string, zone string, num func(string, int) int, dur func(string, time.Duration) time.Duration) {
	if v, ok := kv["mode"]; ok {
		c.Mode = map[string]desired.Mode{"shared": desired.ModeSharedENI, "exclusive": desired.ModeExclusiveENI}[v]
	}
	if v, ok := kv["stack"]; ok {
		c.IPStack = desired.IPStack(v)
	}
	c.Pool.MinIdle = num("minIdle", c.Pool.MinIdle)
	c.Pool.MaxIdle = num("maxIdle", c.Pool.MaxIdle)
	c.Pool.MinTotal = num("minTotal", c.Pool.MinTotal)
	c.Pool.Batch = num("batch", c.Pool.Batch)
	c.Pool.ReleaseDelay = desired.Duration(dur("delay", c.Pool.ReleaseDelay.D()))
	c.Pool.Cooldown = desired.Duration(dur("cooldown", c.Pool.Cooldown.D()))
	c.Pool.SpreadWindow = desired.Duration(dur("spread", c.Pool.SpreadWindow.D()))
	c.StickyIPHold = desired.Duration(dur("hold", c.StickyIPHold.D()))
	c.ENI.MaxENIs = num("maxENIs", c.ENI.MaxENIs)
	c.ENI.MTU = num("mtu", c.ENI.MTU)
	if v, ok := kv["vswitches"]; ok {
		c.ENI.VSwitches = map[string][]string{zone: list(v)}
	}
	if v, ok := kv["policy"]; ok {
		c.ENI.VSwitchPolicy = desired.VSwitchPolicy(v)
	}
	if v, ok := kv["sg"]; ok {
		c.ENI.SecurityGroups = list(v)
	}
	if v, ok := kv["tags"]; ok {
		c.ENI.Tags = map[string]string{}
		for _, t := range list(v) {
			k, val, _ := strings.Cut(t, ":")
			c.ENI.Tags[k] = val
		}
	}
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// macOf derives a stable MAC for a test ENI ID.
func macOf(id string) string {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return fmt.Sprintf("02:10:%02x:%02x:%02x:%02x", byte(h>>24), byte(h>>16), byte(h>>8), byte(h))
}

// Dump renders the world's state, one line per object, for scripts.
func (w *World) Dump() string {
	var b strings.Builder
	enis := slices.Clone(w.ENIs)
	slices.SortFunc(enis, func(x, y observed.ENI) int { return strings.Compare(x.ID, y.ID) })
	for _, e := range enis {
		if e.Type == observed.ENITypePrimary {
			continue
		}
		own := "foreign"
		if e.Owned(w.Instance.ID) {
			own = "owned"
		}
		fmt.Fprintf(&b, "eni %s %s %s dev=%d vsw=%s ipv4=%d%s", e.ID, e.Status, own, e.DeviceIndex, e.VSwitchID, len(e.IPv4), joinAddrs(e.IPv4))
		if len(e.IPv6) > 0 {
			fmt.Fprintf(&b, " ipv6=%d%s", len(e.IPv6), joinAddrs(e.IPv6))
		}
		b.WriteString("\n")
	}
	for _, d := range w.Node.ENIDevices {
		fmt.Fprintf(&b, "device %s table=%d configured=%t\n", d.Name, d.Table, d.Configured)
	}
	for _, p := range w.Node.Pods {
		fmt.Fprintf(&b, "kernel %s%s", p.Key, joinAddrs([]netip.Addr{p.IPv4, p.IPv6}))
		if p.Exclusive {
			b.WriteString(" exclusive")
		}
		b.WriteString("\n")
	}
	for _, p := range w.Node.Published {
		fmt.Fprintf(&b, "status %s %s%s", p.Key, p.Phase, joinAddrs([]netip.Addr{p.IPv4, p.IPv6}))
		if p.Phase != planner.PhaseReady {
			b.WriteString(" (" + p.Reason + ")")
		}
		b.WriteString("\n")
	}
	m := w.Memory
	if n := len(m.Cooldowns); n > 0 {
		ips := slices.Collect(maps.Keys(m.Cooldowns))
		slices.SortFunc(ips, netip.Addr.Compare)
		fmt.Fprintf(&b, "memory cooldown%s\n", joinAddrs(ips))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Sticky)) {
		r := m.Sticky[k]
		fmt.Fprintf(&b, "memory sticky %s%s key=%q", k, joinAddrs([]netip.Addr{r.IPv4, r.IPv6}), r.Key)
		if !r.Until.IsZero() {
			fmt.Fprintf(&b, " for %s", r.Until.Sub(w.Now))
		}
		b.WriteString("\n")
	}
	for _, k := range slices.Sorted(maps.Keys(m.Exhausted)) {
		fmt.Fprintf(&b, "memory exhausted %s for %s\n", k, m.Exhausted[k].Sub(w.Now))
	}
	for _, k := range slices.Sorted(maps.Keys(m.LeakedSince)) {
		fmt.Fprintf(&b, "memory leaked %s since %s ago\n", k, w.Now.Sub(m.LeakedSince[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Tokens)) {
		if r := m.Tokens[k]; r.Attempt > 0 {
			fmt.Fprintf(&b, "memory token %s attempt %d\n", k, r.Attempt)
		}
	}
	if !m.IdleAboveMaxSince.IsZero() {
		fmt.Fprintf(&b, "memory idle above max since %s ago\n", w.Now.Sub(m.IdleAboveMaxSince))
	}
	for _, v := range w.VSwitches {
		fmt.Fprintf(&b, "vswitch %s free=%d\n", v.ID, v.AvailableIPs)
	}
	return b.String()
}

func joinAddrs(l []netip.Addr) string {
	var b strings.Builder
	for _, a := range l {
		if a.IsValid() {
			b.WriteString(" " + a.String())
		}
	}
	return b.String()
}

// Converge plans and applies until a plan is empty or max rounds pass. It
// returns the number of plans that had actions, the last plan, and the
// errors of the rounds.
func (w *World) Converge(max int) (int, planner.Plan, []error) {
	var errs []error
	for r := 0; r < max; r++ {
		p := w.Plan()
		if p.Empty() {
			w.Memory = p.Memory
			return r, p, errs
		}
		errs = append(errs, w.Apply(p)...)
	}
	return max, w.Plan(), errs
}

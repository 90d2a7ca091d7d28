package plannertest

import (
	"encoding/json"
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
// words and key=value words. Each verb has its own handler (scriptVerbs).
func (w *World) Exec(line string) error {
	f := strings.Fields(line)
	if len(f) == 0 || strings.HasPrefix(f[0], "#") {
		return nil
	}
	verb, a := f[0], &scriptArgs{rest: strings.Join(f[1:], " "), kv: map[string]string{}}
	for _, x := range f[1:] {
		if k, v, ok := strings.Cut(x, "="); ok {
			a.kv[k] = v
		} else {
			a.pos = append(a.pos, x)
		}
	}
	h, ok := scriptVerbs[verb]
	if !ok {
		return fmt.Errorf("unknown verb %q", verb)
	}
	if err := h(w, a); err != nil {
		return err
	}
	return a.err
}

// scriptVerbs maps each script verb to its handler.
var scriptVerbs = map[string]func(*World, *scriptArgs) error{
	"instance":       (*World).scriptInstance,
	"vswitch":        (*World).scriptVSwitch,
	"vswitch-free":   (*World).scriptVSwitchFree,
	"vswitch-tags":   (*World).scriptVSwitchTags,
	"config":         (*World).scriptConfig,
	"eni":            (*World).scriptENI,
	"pod":            (*World).scriptPod,
	"rm-pod":         (*World).scriptRmPod,
	"kernel":         (*World).scriptKernel,
	"rm-kernel":      (*World).scriptRmKernel,
	"published":      (*World).scriptPublished,
	"admitted":       (*World).scriptAdmitted,
	"kubelet-files":  (*World).scriptKubeletFiles,
	"restart":        (*World).scriptRestart,
	"runtime":        (*World).scriptRuntime,
	"deleted":        (*World).scriptDeleted,
	"netns-gone":     (*World).scriptNetNSGone,
	"entry-problem":  (*World).scriptEntryProblem,
	"config-problem": (*World).scriptConfigProblem,
	"observe":        (*World).scriptObserve,
	"cooldown":       (*World).scriptCooldown,
	"sticky":         (*World).scriptSticky,
	"sgset":          (*World).scriptSGSet,
	"exhausted":      (*World).scriptExhausted,
	"fragment":       (*World).scriptFragment,
	"fragmented":     (*World).scriptFragmented,
	"refused":        (*World).scriptRefused,
	"leaked":         (*World).scriptLeaked,
	"sent-creates":   (*World).scriptSentCreates,
	"tick":           (*World).scriptTick,
	"cordon":         (*World).scriptCordon,
	"uncordon":       (*World).scriptUncordon,
}

// scriptArgs are the words of one script line after its verb: positional
// words, key=value words and the whole rest. Its getters parse values; the
// first parse error is kept in err (Exec returns it).
type scriptArgs struct {
	pos  []string
	kv   map[string]string
	rest string
	err  error
}

func (a *scriptArgs) flag(s string) bool { return slices.Contains(a.pos, s) }

func (a *scriptArgs) arg(i int) string {
	if i < len(a.pos) {
		return a.pos[i]
	}
	return ""
}

// fail keeps the first parse error.
func (a *scriptArgs) fail(k, v string, e error) {
	if e != nil && a.err == nil {
		a.err = fmt.Errorf("%s=%q: %w", k, v, e)
	}
}

// value parses key k's value with parse, def when the line has no k.
func value[T any](a *scriptArgs, k string, def T, parse func(string) (T, error)) T {
	v, ok := a.kv[k]
	if !ok {
		return def
	}
	x, e := parse(v)
	a.fail(k, v, e)
	return x
}

func (a *scriptArgs) num(k string, def int) int { return value(a, k, def, strconv.Atoi) }

func (a *scriptArgs) dur(k string, def time.Duration) time.Duration {
	return value(a, k, def, time.ParseDuration)
}

func (a *scriptArgs) addr(k string) netip.Addr { return value(a, k, netip.Addr{}, netip.ParseAddr) }

func (a *scriptArgs) addrs(k string) []netip.Addr {
	var out []netip.Addr
	for _, s := range list(a.kv[k]) {
		ip, e := netip.ParseAddr(s)
		a.fail(k, s, e)
		out = append(out, ip)
	}
	return sorted(out)
}

// key is the attachment the line names: its first word and if= (eth0).
func (a *scriptArgs) key() observed.AttachmentKey {
	return observed.AttachmentKey{ContainerID: a.arg(0), IfName: cmpOr(a.kv["if"], "eth0")}
}

// scriptInstance sets the instance: `instance ID zone=Z [primary=ENI] [enis=N ips=N ipv6=N]` (limits).
func (w *World) scriptInstance(a *scriptArgs) error {
	w.Instance = observed.Instance{ID: a.arg(0), RegionID: "cn-test", ZoneID: a.kv["zone"], InstanceType: "ecs.test",
		VPCID: "vpc-1", PrimaryENI: cmpOr(a.kv["primary"], "eni-primary"),
		Limits: observed.Limits{ENIs: a.num("enis", 3), IPv4PerENI: a.num("ips", 10), IPv6PerENI: a.num("ipv6", 10)}}
	w.ENIs = slices.DeleteFunc(w.ENIs, func(e observed.ENI) bool { return e.Type == observed.ENITypePrimary })
	w.ENIs = append(w.ENIs, observed.ENI{ID: w.Instance.PrimaryENI, MAC: "00:16:3e:00:00:01", Status: observed.ENIInUse,
		Type: observed.ENITypePrimary, InstanceID: w.Instance.ID, VSwitchID: "vsw-node", ZoneID: w.Instance.ZoneID,
		PrimaryIP: netip.MustParseAddr("192.168.0.10")})
	return nil
}

// scriptVSwitch adds or replaces a vSwitch: `vswitch ID cidr=P [cidr6=P] [zone=Z] [free=N] [tags=k:v,...]`.
func (w *World) scriptVSwitch(a *scriptArgs) error {
	p, e := netip.ParsePrefix(a.kv["cidr"])
	if e != nil {
		return fmt.Errorf("vswitch cidr: %w", e)
	}
	v := observed.VSwitch{ID: a.arg(0), ZoneID: cmpOr(a.kv["zone"], w.Instance.ZoneID), VPCID: "vpc-1", CIDR: p,
		AvailableIPs: a.num("free", (1<<(32-p.Bits()))-5)}
	if s, ok := a.kv["cidr6"]; ok {
		if v.IPv6CIDR, e = netip.ParsePrefix(s); e != nil {
			return fmt.Errorf("vswitch cidr6: %w", e)
		}
	}
	w.VSwitches = slices.DeleteFunc(w.VSwitches, func(x observed.VSwitch) bool { return x.ID == v.ID })
	w.VSwitches = append(w.VSwitches, v)
	slices.SortFunc(w.VSwitches, func(a, b observed.VSwitch) int { return strings.Compare(a.ID, b.ID) })
	if _, ok := a.kv["tags"]; ok {
		return w.scriptVSwitchTags(a)
	}
	return nil
}

// scriptVSwitchTags replaces a vSwitch's tags: `vswitch-tags ID tags=k:v,...`
// (tags= clears them).
func (w *World) scriptVSwitchTags(a *scriptArgs) error {
	if w.vswitch(a.arg(0)) == nil {
		return fmt.Errorf("no vswitch %s", a.arg(0))
	}
	if w.VSwitchTags == nil {
		w.VSwitchTags = map[string]map[string]string{}
	}
	tags := map[string]string{}
	for _, t := range list(a.kv["tags"]) {
		k, v, _ := strings.Cut(t, ":")
		tags[k] = v
	}
	w.VSwitchTags[a.arg(0)] = tags
	return nil
}

// scriptVSwitchFree sets a vSwitch's free addresses: `vswitch-free ID free=N`.
func (w *World) scriptVSwitchFree(a *scriptArgs) error {
	v := w.vswitch(a.arg(0))
	if v == nil {
		return fmt.Errorf("no vswitch %s", a.arg(0))
	}
	v.AvailableIPs = a.num("free", 0)
	return nil
}

// scriptConfig sets config keys over the script's defaults (see applyConfig).
func (w *World) scriptConfig(a *scriptArgs) error {
	cfg := &w.Desired.Config
	if cfg.APIVersion == "" {
		*cfg = desired.Config{APIVersion: desired.ConfigAPIVersion, Kind: desired.ConfigKind, Mode: desired.ModeSharedENI,
			IPStack: desired.IPv4Only}
		cfg.ENI.VSwitchPolicy = desired.VSwitchMostFree
		cfg.StaleEntryTimeout = desired.Duration(desired.DefaultStaleEntryTimeout)
	}
	applyConfig(cfg, a, w.Instance.ZoneID)
	return nil
}

// scriptENI adds or replaces an ENI: `eni ID vsw=V [ips=...] [prefixes=P/28,...] [ipv6=...] [dev=N] [status=S] [owned [owner=I] [set=NAME]] [sg=G,G] [configured [mtu=N]] ...`.
// Its groups are sg-1 without sg=; sg=- observes none.
func (w *World) scriptENI(a *scriptArgs) error {
	e := observed.ENI{ID: a.arg(0), MAC: cmpOr(a.kv["mac"], macOf(a.arg(0))), Status: observed.ENIStatus(cmpOr(a.kv["status"], "InUse")),
		Type: observed.ENITypeSecondary, VSwitchID: a.kv["vsw"], IPv4: a.addrs("ips"), IPv6: a.addrs("ipv6"),
		PrimaryIP: a.addr("primary"), DeviceIndex: a.num("dev", 0), SecurityGroups: list(cmpOr(a.kv["sg"], "sg-1")), CreatedAt: w.Now}
	if a.kv["sg"] == "-" {
		e.SecurityGroups = nil
	}
	for _, x := range list(a.kv["prefixes"]) {
		p, err := netip.ParsePrefix(x)
		if err != nil || p.Bits() != observed.IPv4PrefixBits || p.Masked() != p {
			return fmt.Errorf("prefixes: %q is not an aligned /28", x)
		}
		e.IPv4Prefixes = append(e.IPv4Prefixes, p)
	}
	slices.SortFunc(e.IPv4Prefixes, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	if v := w.vswitch(e.VSwitchID); v != nil {
		e.ZoneID, e.VPCID = v.ZoneID, v.VPCID
	} else {
		e.ZoneID = w.Instance.ZoneID
	}
	if !e.PrimaryIP.IsValid() {
		e.PrimaryIP = netip.MustParseAddr("10.255.0." + strconv.Itoa(e.DeviceIndex+100+len(w.ENIs)))
	}
	if e.Status != observed.ENIAvailable {
		e.InstanceID = cmpOr(a.kv["instance"], w.Instance.ID)
	}
	if a.flag("owned") {
		e.Tags = map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: cmpOr(a.kv["owner"], w.Instance.ID)}
		if set, ok := a.kv["set"]; ok {
			e.Tags[observed.TagSecurityGroupSet] = set
		}
	} else {
		e.Tags = map[string]string{"team": "other"}
	}
	w.Reserve(e.VSwitchID, append(append([]netip.Addr{e.PrimaryIP}, e.IPv4...), e.IPv6...)...)
	w.Reserve(e.VSwitchID, prefixAddrs(e.IPv4Prefixes)...)
	w.ENIs = slices.DeleteFunc(w.ENIs, func(x observed.ENI) bool { return x.ID == e.ID })
	w.ENIs = append(w.ENIs, e)
	if a.flag("configured") {
		w.Node.ENIDevices = append(w.Node.ENIDevices, observed.ENIDevice{MAC: e.MAC, Name: "eth" + strconv.Itoa(e.DeviceIndex),
			Index: 10 + e.DeviceIndex, MTU: a.num("mtu", 1500), Up: true, Table: planner.Table(e.DeviceIndex), Configured: true})
	}
	return nil
}

// scriptPod adds or replaces a pod's entry: `pod CID [if=IF] [ns= name= uid= rev=] [sticky] [sg=G,G]` (sg: the security-groups annotation, as written).
func (w *World) scriptPod(a *scriptArgs) error {
	k := a.key()
	e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: k.ContainerID, IfName: k.IfName,
		NetNS: "/var/run/netns/" + k.ContainerID, PodNamespace: cmpOr(a.kv["ns"], "default"), PodName: cmpOr(a.kv["name"], k.ContainerID),
		PodUID: a.kv["uid"], Revision: cmpOr(a.kv["rev"], "r1"), Created: w.Now}
	if a.flag("sticky") {
		e.Annotations = map[string]string{desired.AnnotationStickyIP: "true"}
	}
	if sg, ok := a.kv["sg"]; ok {
		if e.Annotations == nil {
			e.Annotations = map[string]string{}
		}
		e.Annotations[desired.AnnotationSecurityGroups] = sg
	}
	w.Desired.Entries = slices.DeleteFunc(w.Desired.Entries, func(x desired.Entry) bool { return x.ContainerID == k.ContainerID && x.IfName == k.IfName })
	w.Desired.Entries = append(w.Desired.Entries, e)
	slices.SortFunc(w.Desired.Entries, func(a, b desired.Entry) int {
		return strings.Compare(a.ContainerID+"_"+a.IfName, b.ContainerID+"_"+b.IfName)
	})
	return nil
}

// scriptRmPod removes a pod's entry.
func (w *World) scriptRmPod(a *scriptArgs) error {
	k := a.key()
	w.Desired.Entries = slices.DeleteFunc(w.Desired.Entries, func(x desired.Entry) bool { return x.ContainerID == k.ContainerID && x.IfName == k.IfName })
	return nil
}

// scriptKernel adds or replaces a pod's kernel state: `kernel CID [ip= ip6= eni=] [exclusive] [unhealthy]`.
func (w *World) scriptKernel(a *scriptArgs) error {
	k := a.key()
	pn := observed.PodNet{Key: k, HostVeth: "enid" + k.ContainerID, NetNS: "/var/run/netns/" + k.ContainerID,
		IPv4: a.addr("ip"), IPv6: a.addr("ip6"), Exclusive: a.flag("exclusive"), Healthy: !a.flag("unhealthy")}
	if pn.Exclusive {
		pn.HostVeth = ""
	}
	if !pn.Healthy {
		pn.Problems = []string{"route missing"}
	}
	if e := w.eni(a.kv["eni"]); e != nil {
		pn.ENIMAC = e.MAC
	}
	w.Node.Pods = slices.DeleteFunc(w.Node.Pods, func(x observed.PodNet) bool { return x.Key == k })
	w.Node.Pods = append(w.Node.Pods, pn)
	for _, e := range w.Desired.Entries {
		if e.ContainerID == k.ContainerID && e.IfName == k.IfName {
			w.identity[k] = e.PodNamespace + "/" + e.PodName + "/" + e.IfName
		}
	}
	return nil
}

// scriptRmKernel removes a pod's kernel state.
func (w *World) scriptRmKernel(a *scriptArgs) error {
	k := a.key()
	w.Node.Pods = slices.DeleteFunc(w.Node.Pods, func(x observed.PodNet) bool { return x.Key == k })
	return nil
}

// scriptPublished adds or replaces a pod's published status: `published CID [rev= phase= reason= ip= ip6= eni=]`.
func (w *World) scriptPublished(a *scriptArgs) error {
	k := a.key()
	b := observed.Binding{Key: k, Revision: cmpOr(a.kv["rev"], "r1"), Phase: cmpOr(a.kv["phase"], "Ready"),
		Reason: strings.ReplaceAll(a.kv["reason"], "_", " "), IPv4: a.addr("ip"), IPv6: a.addr("ip6"), ENIID: a.kv["eni"]}
	w.Node.Published = slices.DeleteFunc(w.Node.Published, func(x observed.Binding) bool { return x.Key == k })
	w.Node.Published = append(w.Node.Published, b)
	return nil
}

// scriptAdmitted sets the pod UIDs the kubelet's files list, as written D
// ago: `admitted [UID,UID...] [ago=D]` (default: just now; no UIDs: the
// files list none).
func (w *World) scriptAdmitted(a *scriptArgs) error {
	w.Desired.Hints.AdmittedPodUIDs = list(a.arg(0))
	w.Desired.Hints.AdmittedAt = w.Now.Add(-a.dur("ago", 0))
	return nil
}

// scriptKubeletFiles reads the hints from the files of a kubelet root
// directory, as the agent does (desired.ReadHints), as written D ago:
// `kubelet-files DIR [ago=D]`. The files' own times are their checkout's.
func (w *World) scriptKubeletFiles(a *scriptArgs) error {
	h := desired.ReadHints(desired.KubeletHintSources(a.arg(0), ""))
	if len(h.Problems) > 0 {
		return fmt.Errorf("kubelet-files %s: %v", a.arg(0), h.Problems)
	}
	if h.AdmittedAt.IsZero() {
		return fmt.Errorf("kubelet-files %s: no kubelet file there", a.arg(0))
	}
	w.Desired.Hints.AdmittedPodUIDs = h.AdmittedPodUIDs
	w.Desired.Hints.AdmittedAt = w.Now.Add(-a.dur("ago", 0))
	return nil
}

// scriptRestart restarts the agent: its memory is what it persisted, read
// back from JSON (`restart`), or lost (`restart forget`).
func (w *World) scriptRestart(a *scriptArgs) error {
	if a.flag("forget") {
		w.Memory = planner.Memory{}
		return nil
	}
	b, err := json.Marshal(w.Memory)
	if err != nil {
		return err
	}
	var m planner.Memory
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	w.Memory = m
	return nil
}

// scriptRuntime adds an attachment the runtime's libcni cache records.
func (w *World) scriptRuntime(a *scriptArgs) error {
	w.Desired.Hints.RuntimeAttachments = append(w.Desired.Hints.RuntimeAttachments,
		desired.RuntimeAttachment{Network: "enid", ContainerID: a.arg(0), IfName: cmpOr(a.kv["if"], "eth0")})
	return nil
}

// scriptDeleted adds a deletion record: the runtime's CNI DEL (or GC) removed the entry.
func (w *World) scriptDeleted(a *scriptArgs) error {
	// A deletion record: the runtime's CNI DEL (or GC) removed the entry.
	w.Desired.Deleted = append(w.Desired.Deleted, desired.Key{ContainerID: a.arg(0), IfName: cmpOr(a.kv["if"], "eth0")})
	return nil
}

// scriptNetNSGone sets the entries whose network namespace the datapath
// finds missing: `netns-gone CID...` (none: every namespace exists).
func (w *World) scriptNetNSGone(a *scriptArgs) error {
	w.Node.MissingNetNS = nil
	for _, c := range a.pos {
		w.Node.MissingNetNS = append(w.Node.MissingNetNS, desired.Key{ContainerID: c, IfName: "eth0"})
	}
	slices.SortFunc(w.Node.MissingNetNS, desired.Key.Compare)
	return nil
}

// scriptEntryProblem adds an entry file that could not be read.
func (w *World) scriptEntryProblem(a *scriptArgs) error {
	w.Desired.EntryProblems = append(w.Desired.EntryProblems, desired.EntryProblem{File: a.arg(0) + "_eth0.json",
		ContainerID: a.arg(0), IfName: "eth0", Err: strings.ReplaceAll(a.kv["err"], "_", " ")})
	return nil
}

// scriptConfigProblem adds a config problem (the rest of the line).
func (w *World) scriptConfigProblem(a *scriptArgs) error {
	w.Desired.ConfigProblems = append(w.Desired.ConfigProblems, a.rest)
	return nil
}

// scriptObserve sets how complete the observation is: `observe [complete=false] [cloud-from=D] [problem=TEXT]`.
func (w *World) scriptObserve(a *scriptArgs) error {
	w.Complete = a.kv["complete"] != "false"
	w.CloudFrom = time.Time{}
	if _, ok := a.kv["cloud-from"]; ok && !w.Complete {
		w.CloudFrom = w.Now.Add(-a.dur("cloud-from", 0))
	}
	w.Problems = nil
	if p, ok := a.kv["problem"]; ok {
		w.Problems = []string{strings.ReplaceAll(p, "_", " ")}
	}
	return nil
}

// scriptCooldown puts an address in cooldown: `cooldown IP [for=D]`.
func (w *World) scriptCooldown(a *scriptArgs) error {
	ip, e := netip.ParseAddr(a.arg(0))
	if e != nil {
		return e
	}
	if w.Memory.Cooldowns == nil {
		w.Memory.Cooldowns = map[netip.Addr]time.Time{}
	}
	w.Memory.Cooldowns[ip] = w.Now.Add(a.dur("for", 30*time.Second))
	return nil
}

// scriptSticky adds a sticky reservation: `sticky NAME key=K ip=IP [ip6=] [eni=] [for=D]`.
func (w *World) scriptSticky(a *scriptArgs) error {
	if w.Memory.Sticky == nil {
		w.Memory.Sticky = map[string]planner.Reservation{}
	}
	r := planner.Reservation{Key: a.kv["key"], IPv4: a.addr("ip"), IPv6: a.addr("ip6"), ENIID: a.kv["eni"]}
	if d := a.dur("for", 0); d > 0 {
		r.Until = w.Now.Add(d)
	}
	w.Memory.Sticky[a.arg(0)] = r
	return nil
}

// scriptSGSet adds, replaces or removes a named security-group set:
// `sgset NAME groups=G,G [minIdle= maxIdle= minTotal= batch=] [maxENIs=N] [ns=NS,NS]`
// (ns: namespaces whose pods get the set), `sgset NAME remove`.
func (w *World) scriptSGSet(a *scriptArgs) error {
	c := &w.Desired.Config.ENI
	name := a.arg(0)
	c.SecurityGroupSets = slices.DeleteFunc(c.SecurityGroupSets, func(s desired.SecurityGroupSet) bool { return s.Name == name })
	for ns, n := range c.NamespaceSecurityGroups {
		if n == name {
			delete(c.NamespaceSecurityGroups, ns)
		}
	}
	if a.flag("remove") {
		return nil
	}
	s := desired.SecurityGroupSet{Name: name, SecurityGroups: list(a.kv["groups"]), MaxENIs: a.num("maxENIs", 0)}
	if _, ok := a.kv["minIdle"]; ok || a.kv["maxIdle"] != "" || a.kv["minTotal"] != "" || a.kv["batch"] != "" {
		s.Pool = &desired.SetPool{MinIdle: a.num("minIdle", 0), MaxIdle: a.num("maxIdle", 0), MinTotal: a.num("minTotal", 0), Batch: a.num("batch", 0)}
	}
	c.SecurityGroupSets = append(c.SecurityGroupSets, s)
	for _, ns := range list(a.kv["ns"]) {
		if c.NamespaceSecurityGroups == nil {
			c.NamespaceSecurityGroups = map[string]string{}
		}
		c.NamespaceSecurityGroups[ns] = name
	}
	return nil
}

// scriptExhausted marks a vSwitch exhausted: `exhausted ID [for=D]`.
func (w *World) scriptExhausted(a *scriptArgs) error {
	w.Memory = w.Memory.MarkExhausted(a.arg(0), w.Now.Add(a.dur("for", 10*time.Minute)))
	return nil
}

// scriptFragment makes the model's cloud refuse IPv4 prefixes on a vSwitch
// (no aligned /28 free) while its single addresses are still given:
// `fragment ID [off]`. A refused prefix marks the vSwitch in memory as the
// executor does (Memory.MarkFragmented).
func (w *World) scriptFragment(a *scriptArgs) error {
	if w.vswitch(a.arg(0)) == nil {
		return fmt.Errorf("no vswitch %s", a.arg(0))
	}
	if a.flag("off") {
		delete(w.fragmentedVSw, a.arg(0))
	} else {
		w.fragmentedVSw[a.arg(0)] = true
	}
	return nil
}

// scriptFragmented marks a vSwitch in memory as having refused a prefix:
// `fragmented ID [for=D]` (default planner.DefaultFragmentedFor).
func (w *World) scriptFragmented(a *scriptArgs) error {
	w.Memory = w.Memory.MarkFragmented(a.arg(0), w.Now.Add(a.dur("for", planner.DefaultFragmentedFor)))
	return nil
}

// scriptRefused marks a security-group set as refused by the cloud, as the
// executor does when a CreateENI is refused for its groups
// (Memory.MarkRefusedGroups): `refused sg-a,sg-b [for=D]` (default
// planner.DefaultRefusedFor).
func (w *World) scriptRefused(a *scriptArgs) error {
	w.Memory = w.Memory.MarkRefusedGroups(a.arg(0), w.Now.Add(a.dur("for", planner.DefaultRefusedFor)))
	return nil
}

// scriptLeaked records since when an ENI looks leaked: `leaked ID [ago=D]`.
func (w *World) scriptLeaked(a *scriptArgs) error {
	if w.Memory.LeakedSince == nil {
		w.Memory.LeakedSince = map[string]time.Time{}
	}
	w.Memory.LeakedSince[a.arg(0)] = w.Now.Add(-a.dur("ago", 0))
	return nil
}

// scriptSentCreates marks every create memory knows as started (the agent then crashed, or describes do not show the ENIs yet).
func (w *World) scriptSentCreates(a *scriptArgs) error {
	// The executor started every create memory knows (the agent then
	// crashed, or describes do not show the ENIs yet).
	for _, r := range w.Memory.Tokens {
		w.Memory = w.Memory.TokenSent(r.Token)
	}
	return nil
}

// scriptTick advances the clock: `tick D`.
func (w *World) scriptTick(a *scriptArgs) error {
	d, e := time.ParseDuration(a.arg(0))
	if e != nil {
		return e
	}
	w.Now = w.Now.Add(d)
	return nil
}

// applyConfig sets the config keys of a "config" line.
func applyConfig(c *desired.Config, a *scriptArgs, zone string) {
	if v, ok := a.kv["mode"]; ok {
		c.Mode = map[string]desired.Mode{"shared": desired.ModeSharedENI, "exclusive": desired.ModeExclusiveENI}[v]
	}
	if v, ok := a.kv["stack"]; ok {
		c.IPStack = desired.IPStack(v)
	}
	c.Pool.MinIdle = a.num("minIdle", c.Pool.MinIdle)
	c.Pool.MaxIdle = a.num("maxIdle", c.Pool.MaxIdle)
	c.Pool.MinTotal = a.num("minTotal", c.Pool.MinTotal)
	c.Pool.Batch = a.num("batch", c.Pool.Batch)
	c.Pool.ReleaseDelay = desired.Duration(a.dur("delay", c.Pool.ReleaseDelay.D()))
	c.Pool.Cooldown = desired.Duration(a.dur("cooldown", c.Pool.Cooldown.D()))
	c.Pool.SpreadWindow = desired.Duration(a.dur("spread", c.Pool.SpreadWindow.D()))
	c.Pool.UnschedulableRelease = desired.Duration(a.dur("unschedulable", c.Pool.UnschedulableRelease.D()))
	c.StickyIPHold = desired.Duration(a.dur("hold", c.StickyIPHold.D()))
	c.StaleEntryTimeout = desired.Duration(a.dur("stale", c.StaleEntryTimeout.D()))
	c.ENI.MaxENIs = a.num("maxENIs", c.ENI.MaxENIs)
	c.ENI.MaxENIsPerSet = a.num("maxENIsPerSet", c.ENI.MaxENIsPerSet)
	c.ENI.MTU = a.num("mtu", c.ENI.MTU)
	if v, ok := a.kv["vswitches"]; ok {
		c.ENI.VSwitches = map[string][]string{zone: list(v)}
	}
	if v, ok := a.kv["ipv4Allocation"]; ok {
		c.ENI.IPv4Allocation = desired.IPv4Allocation(v)
	}
	if v, ok := a.kv["policy"]; ok {
		c.ENI.VSwitchPolicy = desired.VSwitchPolicy(v)
	}
	if v, ok := a.kv["selector"]; ok {
		c.ENI.VSwitchSelector = nil
		if v != "" {
			c.ENI.VSwitchSelector = &desired.VSwitchSelector{Tags: map[string]string{}}
			for _, t := range list(v) {
				k, val, _ := strings.Cut(t, ":")
				c.ENI.VSwitchSelector.Tags[k] = val
			}
		}
	}
	if v, ok := a.kv["sg"]; ok {
		c.ENI.SecurityGroups = list(v)
	}
	if v, ok := a.kv["services"]; ok {
		c.ServiceCIDRs = list(v)
	}
	if v, ok := a.kv["tags"]; ok {
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
		if len(e.IPv4Prefixes) > 0 {
			fmt.Fprintf(&b, " prefixes=%d", len(e.IPv4Prefixes))
			for _, p := range e.IPv4Prefixes {
				b.WriteString(" " + p.String())
			}
		}
		if len(e.IPv6) > 0 {
			fmt.Fprintf(&b, " ipv6=%d%s", len(e.IPv6), joinAddrs(e.IPv6))
		}
		// Security groups only where they are not the config's default.
		if g := slices.Sorted(slices.Values(e.SecurityGroups)); !slices.Equal(g, slices.Sorted(slices.Values(w.Desired.Config.ENI.SecurityGroups))) {
			fmt.Fprintf(&b, " sg=%s", strings.Join(g, ","))
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
		if len(p.HostRoutes) > 0 {
			rs := make([]string, len(p.HostRoutes))
			for i, r := range p.HostRoutes {
				rs[i] = r.String()
			}
			b.WriteString(" hostRoutes=" + strings.Join(rs, ","))
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
	for _, k := range slices.Sorted(maps.Keys(m.Fragmented)) {
		fmt.Fprintf(&b, "memory fragmented %s for %s\n", k, m.Fragmented[k].Sub(w.Now))
	}
	for _, k := range slices.Sorted(maps.Keys(m.LeakedSince)) {
		fmt.Fprintf(&b, "memory leaked %s since %s ago\n", k, w.Now.Sub(m.LeakedSince[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(m.NetNSGone)) {
		fmt.Fprintf(&b, "memory netns gone %s since %s ago\n", k, w.Now.Sub(m.NetNSGone[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(m.Tokens)) {
		if r := m.Tokens[k]; r.Attempt > 0 {
			fmt.Fprintf(&b, "memory token %s attempt %d\n", k, r.Attempt)
		}
	}
	if !m.IdleAboveMaxSince.IsZero() {
		fmt.Fprintf(&b, "memory idle above max since %s ago\n", w.Now.Sub(m.IdleAboveMaxSince))
	}
	for _, u := range slices.Sorted(maps.Keys(m.Admitted)) {
		r := m.Admitted[u]
		fmt.Fprintf(&b, "memory admitted %s since %s ago", u, w.Now.Sub(r.Since))
		if r.Entry {
			b.WriteString(" entry")
		}
		b.WriteString("\n")
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

// scriptCordon marks the node unschedulable from now: `cordon`.
func (w *World) scriptCordon(*scriptArgs) error {
	w.Unschedulable = w.Now
	return nil
}

// scriptUncordon makes the node schedulable again: `uncordon`.
func (w *World) scriptUncordon(*scriptArgs) error {
	w.Unschedulable = time.Time{}
	return nil
}

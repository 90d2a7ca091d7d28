package planner_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// benchState builds a node with n pods spread over ENIs of 49 addresses
// each. warm: every pod is set up and published (the steady state; the plan
// is empty). Otherwise no pod has an address yet (a burst).
func benchState(n int, warm bool) (desired.State, observed.State) {
	const perENI = 49
	nENI := n/perENI + 2
	inst := observed.Instance{ID: "i-1", ZoneID: "z1", PrimaryENI: "eni-p",
		Limits: observed.Limits{ENIs: nENI + 2, IPv4PerENI: perENI + 1, IPv6PerENI: perENI}}
	d := desired.State{Config: desired.Config{Mode: desired.ModeSharedENI, IPStack: desired.IPv4Only,
		Pool:         desired.Pool{MinIdle: 5, MaxIdle: 2 * perENI, Batch: 10, ReleaseDelay: desired.Duration(time.Minute), Cooldown: desired.Duration(30 * time.Second)},
		ENI:          desired.ENIConfig{VSwitches: map[string][]string{"z1": {"vsw-a"}}, SecurityGroups: []string{"sg-1"}},
		StickyIPHold: desired.Duration(5 * time.Minute)}}
	o := observed.State{Instance: inst, Complete: true,
		VSwitches: []observed.VSwitch{{ID: "vsw-a", ZoneID: "z1", CIDR: netip.MustParsePrefix("10.0.0.0/8"), AvailableIPs: 1 << 20}}}
	tags := map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: "i-1"}
	ip := netip.MustParseAddr("10.1.0.0")
	for i := range nENI {
		e := observed.ENI{ID: fmt.Sprintf("eni-%04d", i), MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&255),
			Status: observed.ENIInUse, Type: observed.ENITypeSecondary, InstanceID: "i-1", VSwitchID: "vsw-a", ZoneID: "z1",
			Tags: tags, DeviceIndex: i + 1, SecurityGroups: []string{"sg-1"}}
		for range perENI {
			ip = ip.Next()
			e.IPv4 = append(e.IPv4, ip)
		}
		o.ENIs = append(o.ENIs, e)
		o.Node.ENIDevices = append(o.Node.ENIDevices, observed.ENIDevice{MAC: e.MAC, Up: true, Table: 1000 + i + 1, Configured: true})
	}
	for i := range n {
		e := o.ENIs[i/perENI]
		k := observed.AttachmentKey{ContainerID: fmt.Sprintf("c%06d", i), IfName: "eth0"}
		ent := desired.Entry{ContainerID: k.ContainerID, IfName: "eth0", NetNS: "/var/run/netns/" + k.ContainerID,
			PodNamespace: "ns", PodName: fmt.Sprintf("p%d", i), Revision: "r1"}
		if i%10 == 0 {
			ent.Annotations = map[string]string{desired.AnnotationStickyIP: "true"}
		}
		d.Entries = append(d.Entries, ent)
		if warm {
			a := e.IPv4[i%perENI]
			o.Node.Pods = append(o.Node.Pods, observed.PodNet{Key: k, IPv4: a, ENIMAC: e.MAC, Healthy: true})
			o.Node.Published = append(o.Node.Published, observed.Binding{Key: k, Revision: "r1", Phase: planner.PhaseReady, IPv4: a, ENIID: e.ID})
		}
	}
	return d, o
}

// BenchmarkMake plans nodes of 10 to 5000 pods, steady (warm) and burst,
// as the agent plans: each plan in the arrays of the one before
// (Options.Recycle). Figures are recorded in docs/plan.md.
func BenchmarkMake(b *testing.B) { benchMake(b, []int{10, 100, 1000, 5000}, benchState, true) }

// BenchmarkMakeAllocating is BenchmarkMake at 1,000 pods with every plan
// allocating its arrays (as `enid plan` does, and every pass did before
// Options.Recycle).
func BenchmarkMakeAllocating(b *testing.B) { benchMake(b, []int{1000}, benchState, false) }

// benchMake plans nodes of each size from state, converged (warm) and with
// every pod new (burst); with recycle, each in the previous plan's arrays.
func benchMake(b *testing.B, sizes []int, state func(n int, warm bool) (desired.State, observed.State), recycle bool) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, warm := range []bool{true, false} {
		for _, n := range sizes {
			name := fmt.Sprintf("warm/pods=%d", n)
			if !warm {
				name = fmt.Sprintf("burst/pods=%d", n)
			}
			b.Run(name, func(b *testing.B) {
				d, o := state(n, warm)
				mem := planner.Make(d, o, planner.Options{Now: now}).Memory
				if p := planner.Make(d, o, planner.Options{Now: now, Memory: mem}); warm && !p.Empty() {
					b.Fatalf("warm state is not converged:\n%s", p.Render())
				}
				b.ReportAllocs()
				var spent planner.Plan
				for b.Loop() {
					p := planner.Make(d, o, planner.Options{Now: now, Memory: mem, Recycle: spent})
					if recycle {
						spent = p
					}
				}
			})
		}
	}
}

// benchPrefixState is benchState in prefix mode: ENIs of 19 /28 prefixes
// (304 addresses, an instance type of 20 addresses per ENI), pods filling
// them in order.
func benchPrefixState(n int, warm bool) (desired.State, observed.State) {
	const slots, perENI = 19, 19 * observed.IPv4PrefixSize
	d, o := benchState(0, false)
	d.Config.ENI.IPv4Allocation = desired.IPv4Prefix
	nENI := n/perENI + 2
	o.Instance.Limits = observed.Limits{ENIs: nENI + 2, IPv4PerENI: slots + 1, IPv6PerENI: slots}
	tags := map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: "i-1"}
	base := netip.MustParseAddr("10.1.0.0")
	o.ENIs, o.Node.ENIDevices = nil, nil
	for i := range nENI {
		e := observed.ENI{ID: fmt.Sprintf("eni-%04d", i), MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&255),
			Status: observed.ENIInUse, Type: observed.ENITypeSecondary, InstanceID: "i-1", VSwitchID: "vsw-a", ZoneID: "z1",
			Tags: tags, DeviceIndex: i + 1, SecurityGroups: []string{"sg-1"}}
		for range slots {
			base = netip.AddrFrom4([4]byte{base.As4()[0], base.As4()[1], base.As4()[2], base.As4()[3] + observed.IPv4PrefixSize})
			if base.As4()[3] == 0 {
				b := base.As4()
				b[2]++
				base = netip.AddrFrom4(b)
			}
			e.IPv4Prefixes = append(e.IPv4Prefixes, netip.PrefixFrom(base, observed.IPv4PrefixBits))
		}
		o.ENIs = append(o.ENIs, e)
		o.Node.ENIDevices = append(o.Node.ENIDevices, observed.ENIDevice{MAC: e.MAC, Up: true, Table: 1000 + i + 1, Configured: true})
	}
	for i := range n {
		e := o.ENIs[i/perENI]
		k := observed.AttachmentKey{ContainerID: fmt.Sprintf("c%06d", i), IfName: "eth0"}
		d.Entries = append(d.Entries, desired.Entry{ContainerID: k.ContainerID, IfName: "eth0", NetNS: "/var/run/netns/" + k.ContainerID,
			PodNamespace: "ns", PodName: fmt.Sprintf("p%d", i), Revision: "r1"})
		if warm {
			p := e.IPv4Prefixes[i%perENI/observed.IPv4PrefixSize].Addr().As4()
			p[3] += byte(i % observed.IPv4PrefixSize)
			a := netip.AddrFrom4(p)
			o.Node.Pods = append(o.Node.Pods, observed.PodNet{Key: k, IPv4: a, ENIMAC: e.MAC, Healthy: true})
			o.Node.Published = append(o.Node.Published, observed.Binding{Key: k, Revision: "r1", Phase: planner.PhaseReady, IPv4: a, ENIID: e.ID})
		}
	}
	return d, o
}

// BenchmarkMakePrefix plans prefix-mode nodes, steady and burst: the cost
// of indexing prefix addresses and ordering them fullest prefix first.
func BenchmarkMakePrefix(b *testing.B) { benchMake(b, []int{100, 1000, 5000}, benchPrefixState, true) }

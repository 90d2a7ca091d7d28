package planner

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
)

// This file decides the host routes of exclusive pods: the destinations
// a pod whose ENI holds its default route must still reach through the
// node (its service veth), because only the node can serve them.
//
//   - the config's serviceCIDRs: kube-proxy translates ClusterIPs in the
//     node's netfilter, and the VPC does not route them;
//   - the node's own address (the primary ENI's primary IPv4, /32, and its
//     first IPv6, /128): the kubelet probes a pod from it, and its answer
//     must come back the way the probe went, not through the VPC.

// hostRoutes is the plan's view of exclusive pods' host routes.
type hostRoutes struct {
	// all are every route, both families, sorted.
	all []netip.Prefix
	// known is false when the node's own address could not be read (the
	// primary ENI is not in the observation): all then lacks it, and a
	// running pod's routes are not compared (a pass with a partial view
	// must not strip the node's route from every pod).
	known bool
}

// exclusiveHostRoutes builds the host routes from the config and the
// observed primary ENI.
func exclusiveHostRoutes(cfg desired.Config, o observed.State) hostRoutes {
	hr := hostRoutes{all: cfg.ServicePrefixes()}
	for _, e := range o.ENIs {
		if e.ID != o.Instance.PrimaryENI || o.Instance.PrimaryENI == "" {
			continue
		}
		hr.known = e.PrimaryIP.IsValid()
		if hr.known {
			hr.all = append(hr.all, netip.PrefixFrom(e.PrimaryIP, 32))
		}
		if len(e.IPv6) > 0 {
			hr.all = append(hr.all, netip.PrefixFrom(e.IPv6[0], 128))
		}
	}
	slices.SortFunc(hr.all, netip.Prefix.Compare)
	hr.all = slices.Compact(hr.all)
	return hr
}

// forPod returns the routes of the families a pod has (v4: it has an
// IPv4 address, v6: an IPv6 one); nil when none.
func (hr hostRoutes) forPod(v4, v6 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range hr.all {
		if (p.Addr().Is4() && v4) || (p.Addr().Is6() && v6) {
			out = append(out, p)
		}
	}
	return out
}

// differ reports whether a running pod's routes (observed) differ from
// want, and says how; never when the node's address is unknown.
func (hr hostRoutes) differ(have, want []netip.Prefix) (string, bool) {
	if !hr.known || slices.Equal(have, want) {
		return "", false
	}
	return "host routes " + prefixList(have) + ", want " + prefixList(want), true
}

func prefixList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// noServiceCIDRs is the problem line of an exclusive-mode config without
// serviceCIDRs: pods are served, but their Service traffic leaves through
// their ENI into a VPC that does not know ClusterIPs.
const noServiceCIDRs = "config: serviceCIDRs is empty in mode exclusive-eni: exclusive pods cannot reach Services (ClusterIPs leave through their ENI into the VPC); set it to the cluster's Service range, e.g. serviceCIDRs: [10.96.0.0/12]"

// overlapProblems lists the serviceCIDRs that overlap an observed
// vSwitch's CIDR: an exclusive pod would send its traffic to those VPC
// addresses through the node instead of its ENI (it still arrives, by
// another path, with the node's netfilter in the way), which is almost
// certainly a wrong range.
func overlapProblems(cfg desired.Config, vsws []observed.VSwitch) []string {
	var out []string
	for _, p := range cfg.ServicePrefixes() {
		for _, v := range vsws {
			for _, c := range []netip.Prefix{v.CIDR, v.IPv6CIDR} {
				if c.IsValid() && c.Overlaps(p) {
					out = append(out, "config: serviceCIDRs "+p.String()+" overlaps vSwitch "+v.ID+" ("+c.String()+
						"): exclusive pods reach those VPC addresses through the node, not their ENI; list only the cluster's Service range")
				}
			}
		}
	}
	return out
}

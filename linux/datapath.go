package linux

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"sort"
	"strings"

	"github.com/enidnet/enid/internal/netnsid"
	"github.com/enidnet/enid/observed"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Rule priorities and the route protocol enid uses. See docs/datapath.md.
const (
	// PrioToPod is the priority of "to <podIP> lookup main": traffic for a
	// local pod is delivered by the main table before any per-ENI rule.
	PrioToPod = 512
	// PrioFromPod is the priority of "from <podIP> lookup <ENI table>":
	// traffic a pod sends leaves through its own ENI.
	PrioFromPod = 2048
	// Proto marks every route and rule enid installs (rtnetlink protocol
	// number; `ip route show proto 222`, `ip rule show protocol 222`).
	Proto = 222
	// GatewayV4 is the pod's IPv4 gateway: a link-local address answered by
	// a permanent neighbour entry naming the host veth's MAC.
	GatewayV4 = observed.PodGatewayV4
	// GatewayV6 is the pod's IPv6 gateway, likewise.
	GatewayV6 = observed.PodGatewayV6
	// aliasPrefix starts the IFLA_IFALIAS of every link enid labels.
	aliasPrefix = "enid:v1 "
)

// podGateway returns the pod's gateway for a's family.
func podGateway(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom4([4]byte{169, 254, 1, 1})
	}
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 15: 1})
}

// Datapath configures one node namespace. Its methods are safe for
// concurrent use on different attachments; two calls for the same
// attachment at once are the caller's mistake.
type Datapath struct {
	logger *slog.Logger
	node   *nsRef
	// nodeID is the node namespace's identity: no pod may name it.
	nodeID netnsid.ID
	// strict is a route handle in the node namespace whose dumps the
	// kernel filters (NETLINK_GET_STRICT_CHK, Linux 4.20): the routes of
	// one device, not the whole main table, which holds a route per pod.
	// nil when the kernel does not filter; the full dump is filtered here
	// then.
	strict *netlink.Handle
}

// New opens the node namespace at nodeNS ("" means this process's own
// namespace, the host in production). Close releases it.
func New(logger *slog.Logger, nodeNS string) (*Datapath, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n, err := openNS(nodeNS)
	if err != nil {
		return nil, fmt.Errorf("open node netns: %w", err)
	}
	id, err := netnsid.OfFD(int(n.fd))
	if err != nil {
		_ = n.Close() // the identity error is the one worth reporting
		return nil, fmt.Errorf("identify node netns: %w", err)
	}
	return &Datapath{logger: logger, node: n, nodeID: id, strict: strictHandle(n.fd)}, nil
}

// strictHandle opens a route handle in the namespace ns whose dumps the
// kernel filters, or returns nil where it does not.
func strictHandle(ns netns.NsHandle) *netlink.Handle {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil
	}
	if err := h.SetStrictCheck(true); err != nil {
		h.Close()
		return nil
	}
	return h
}

// Close releases the node namespace handles.
func (d *Datapath) Close() error {
	if d.strict != nil {
		d.strict.Close()
	}
	return d.node.Close()
}

// Changes lists, one human-readable line each, what an operation changed
// (e.g. "add rule from 10.0.1.5 lookup 1001"). Empty means nothing.
type Changes []string

// String joins the changes with "; ".
func (c Changes) String() string { return strings.Join(c, "; ") }

// logChanges records at Info what an operation changed (errors are the
// caller's to report, with the changes made before them).
func (d *Datapath) logChanges(op, target string, ch *Changes) {
	if len(*ch) > 0 {
		d.logger.Info("datapath changed", "op", op, "target", target, "changes", []string(*ch))
	}
}

func (c *Changes) add(format string, args ...any) { *c = append(*c, fmt.Sprintf(format, args...)) }

// HostVethName is the host-side veth name for an attachment: "enid" plus
// 11 hex digits of SHA-256 over "<containerID>_<ifName>" (15 bytes, the
// kernel's limit). Stable across restarts, so it is found again by name.
func HostVethName(key observed.AttachmentKey) string {
	sum := sha256.Sum256([]byte(key.String()))
	return "enid" + hex.EncodeToString(sum[:])[:11]
}

// svcVethName is the pod-side name of the service veth in exclusive mode.
func svcVethName(key observed.AttachmentKey) string {
	sum := sha256.Sum256([]byte(key.String()))
	return "enids" + hex.EncodeToString(sum[:])[:10]
}

// label is what enid records in a link's alias: the attachment identity and
// what Observe and teardown need to find everything again.
type label struct {
	Key   observed.AttachmentKey
	NetNS string
	// Mode is "shared" or "exclusive".
	Mode string
	// ENI is the ENI MAC (the rules' table owner, or the moved device).
	ENI string
	// Orig is, on a moved ENI device, its name on the host; Up whether it
	// was up there.
	Orig string
	Up   bool
	// IPv4 and IPv6 are the pod's addresses (so rules can be found and
	// health judged even when the host routes are gone).
	IPv4, IPv6 netip.Addr
}

// maxAlias is the longest alias the kernel keeps (IFALIASZ - 1).
const maxAlias = 255

const (
	modeShared    = "shared"
	modeExclusive = "exclusive"
)

// String renders the alias: "enid:v1 cid=<id> if=<ifName> ns=<path> mode=<m>
// eni=<mac> [orig=<name> up=1]" with values path-escaped.
func (l label) String() string {
	kv := []string{
		"cid=" + url.PathEscape(l.Key.ContainerID),
		"if=" + url.PathEscape(l.Key.IfName),
	}
	if l.NetNS != "" {
		kv = append(kv, "ns="+escapeNS(l.NetNS))
	}
	kv = append(kv, "mode="+l.Mode)
	if l.ENI != "" {
		kv = append(kv, "eni="+l.ENI)
	}
	if l.Orig != "" {
		kv = append(kv, "orig="+url.PathEscape(l.Orig))
		if l.Up {
			kv = append(kv, "up=1")
		}
	}
	if l.IPv4.IsValid() {
		kv = append(kv, "ip4="+l.IPv4.String())
	}
	if l.IPv6.IsValid() {
		kv = append(kv, "ip6="+l.IPv6.String())
	}
	s := aliasPrefix + strings.Join(kv, " ")
	if len(s) > maxAlias && l.NetNS != "" {
		// The netns path is the one field Observe can do without.
		l.NetNS = ""
		return l.String()
	}
	return s
}

// escapeNS keeps slashes readable while escaping spaces and percent signs.
func escapeNS(p string) string {
	return strings.NewReplacer("%", "%25", " ", "%20").Replace(p)
}

// parseLabel reads an alias written by label.String; ok is false for any
// other alias.
func parseLabel(alias string) (label, bool) {
	rest, ok := strings.CutPrefix(alias, aliasPrefix)
	if !ok {
		return label{}, false
	}
	var l label
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		u, err := url.PathUnescape(v)
		if err != nil {
			return label{}, false
		}
		switch k {
		case "cid":
			l.Key.ContainerID = u
		case "if":
			l.Key.IfName = u
		case "ns":
			l.NetNS = u
		case "mode":
			l.Mode = u
		case "eni":
			l.ENI = u
		case "orig":
			l.Orig = u
		case "up":
			l.Up = u == "1"
		case "ip4", "ip6":
			a, err := netip.ParseAddr(u)
			if err != nil {
				return label{}, false
			}
			if k == "ip4" {
				l.IPv4 = a
			} else {
				l.IPv6 = a
			}
		}
	}
	if l.Key.ContainerID == "" || l.Key.IfName == "" {
		return label{}, false
	}
	return l, true
}

// Interface is one interface for the CNI result.
type Interface struct {
	Name string
	MAC  string
	// Sandbox is the netns path for interfaces inside the pod, "" on the host.
	Sandbox string
}

// PodResult describes what a pod attachment got, for the CNI result.
type PodResult struct {
	// HostVeth is the host-side veth name.
	HostVeth string
	// PodMAC is the MAC of the pod's interface.
	PodMAC string
	// Interfaces lists the host veth then the pod interface.
	Interfaces []Interface
}

// Bandwidth is a rate limit: rates in bits per second, bursts in bits.
// Zero means unlimited in that direction. Ingress is traffic to the pod.
type Bandwidth struct {
	IngressRate, IngressBurst uint64
	EgressRate, EgressBurst   uint64
}

// helpers over netip and net.

func hostPrefix(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func addrOf(ip net.IP) netip.Addr {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

// prefixOf converts a route or rule destination; nil means the zero Prefix.
func prefixOf(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(addrOf(n.IP), ones)
}

// isHost reports whether n is exactly a.
func isHost(n *net.IPNet, a netip.Addr) bool {
	p := prefixOf(n)
	return p.IsValid() && p.Bits() == a.BitLen() && p.Addr() == a
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func normMAC(s string) (net.HardwareAddr, error) {
	hw, err := net.ParseMAC(s)
	if err != nil {
		return nil, fmt.Errorf("parse mac %q: %w", s, err)
	}
	return hw, nil
}

func podIPs(v4, v6 netip.Addr) []netip.Addr {
	var r []netip.Addr
	if v4.IsValid() {
		r = append(r, v4)
	}
	if v6.IsValid() {
		r = append(r, v6)
	}
	return r
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/testbed/simvpc"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// vpcHost is an address elsewhere in the VPC (on the vpc namespace's lo):
// a NodePort's client, and a ClusterIP's backend outside the node.
var vpcHost = netip.MustParseAddr("10.255.0.1")

// nsName is the name `ip netns` knows a /run/netns path by.
func nsName(path string) string { return path[strings.LastIndexByte(path, '/')+1:] }

// inNS runs a command (iptables, nft) in the namespace.
func inNS(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", nsName(ns)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// serve answers every TCP connection to addr in the namespace with reply.
func serveIn(t *testing.T, ns string, addr netip.AddrPort, reply string) {
	t.Helper()
	var ln net.Listener
	if err := simvpc.InNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, reply) // a short answer fails the client's check
			_ = c.Close()                   // the client reads until EOF
		}
	}()
}

// fetch connects from the namespace (from src when valid) to dst and
// returns the answer.
func fetchFrom(ns string, src netip.Addr, dst netip.AddrPort, within time.Duration) (string, error) {
	var c net.Conn
	if err := simvpc.InNS(ns, func() error {
		d := net.Dialer{Timeout: within}
		if src.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
		}
		var err error
		c, err = d.DialContext(context.Background(), "tcp", dst.String())
		return err
	}); err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }() // read-only use
	if err := c.SetDeadline(time.Now().Add(within)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// kubeProxy writes, with iptables in the node namespace, what kube-proxy
// (iptables mode) writes for a Service port with one endpoint: nat
// PREROUTING DNATs vip:port to backend; masqAll marks every connection
// for masquerade (a NodePort without externalTrafficPolicy Local), and a
// connection from the endpoint itself is always marked (hairpin); nat
// POSTROUTING masquerades what carries the 0x4000 mark.
func kubeProxy(t *testing.T, ns string, vip netip.Addr, port uint16, backend netip.AddrPort, masqAll bool) {
	t.Helper()
	match := []string{"-d", vip.String() + "/32", "-p", "tcp", "--dport", fmt.Sprint(port)}
	pre := func(args ...string) {
		inNS(t, ns, append(append([]string{"iptables", "-w", "-t", "nat", "-A", "PREROUTING"}, match...), args...)...)
	}
	if masqAll {
		pre("-j", "MARK", "--set-xmark", "0x4000/0x4000")
	} else {
		pre("-s", backend.Addr().String()+"/32", "-j", "MARK", "--set-xmark", "0x4000/0x4000")
	}
	pre("-j", "DNAT", "--to-destination", backend.String())
}

// TestServicesReplyPath (docs/datapath.md "Services"): with kube-proxy's
// rules on the node and the VPC dropping what an ENI sends from an address
// not its own (simvpc), a client in the VPC reaches a pod through the
// node's NodePort, masqueraded and not (externalTrafficPolicy Local), and
// a pod reaches ClusterIPs whose backend is itself (hairpin), another pod
// of the node, and an address in the VPC. The NodePort answers only
// because the agent installs the reply path (nftables table inet enid and
// rule 1024): without it the reply leaves the pod's secondary ENI with the
// node's address and the VPC drops it.
func TestServicesReplyPath(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp := n.sn.Topology
	// The primary ENI on the node, addressed as its DHCP client would
	// (the agent never touches it).
	ev, ok := n.sn.Sim.Event(n.sn.Instance.PrimaryENI)
	if !ok {
		t.Fatal("no primary ENI in the simulator")
	}
	if err := tp.PlugENI(ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway, ev.IPv4...); err != nil {
		t.Fatal(err)
	}
	if err := tp.AddressPrimary(ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway); err != nil {
		t.Fatal(err)
	}
	nodeIP := ev.PrimaryIP
	vfd, err := netns.GetFromPath(tp.VPCNS)
	if err != nil {
		t.Fatal(err)
	}
	defer vfd.Close()
	vh, err := netlink.NewHandleAt(vfd, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer vh.Close()
	lo, err := vh.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := vh.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: vpcHost.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}

	n.startAgent()
	n.waitReady(30 * time.Second)
	a, b := n.newPod("svc-a"), n.newPod("svc-b")
	ips := n.addAll(ctx, []*pod{a, b})
	ipA, ipB := ips[0], ips[1]
	serveIn(t, a.NetNS, netip.AddrPortFrom(ipA, 8080), "a")
	serveIn(t, b.NetNS, netip.AddrPortFrom(ipB, 8080), "b")
	serveIn(t, tp.VPCNS, netip.AddrPortFrom(vpcHost, 8080), "vpc")

	kubeProxy(t, tp.NodeNS, nodeIP, 30080, netip.AddrPortFrom(ipA, 8080), true)
	kubeProxy(t, tp.NodeNS, nodeIP, 30081, netip.AddrPortFrom(ipA, 8080), false)
	vipSelf, vipB, vipVPC := netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.96.0.11"), netip.MustParseAddr("10.96.0.12")
	kubeProxy(t, tp.NodeNS, vipSelf, 80, netip.AddrPortFrom(ipA, 8080), false)
	kubeProxy(t, tp.NodeNS, vipB, 80, netip.AddrPortFrom(ipB, 8080), false)
	kubeProxy(t, tp.NodeNS, vipVPC, 80, netip.AddrPortFrom(vpcHost, 8080), false)
	// kube-proxy with --masquerade-all (or a --cluster-cidr that does not
	// hold the pods' vSwitch addresses) marks a pod's own connection for
	// masquerade too.
	vipVPCMasq := netip.MustParseAddr("10.96.0.13")
	kubeProxy(t, tp.NodeNS, vipVPCMasq, 80, netip.AddrPortFrom(vpcHost, 8080), true)
	inNS(t, tp.NodeNS, "iptables", "-w", "-t", "nat", "-A", "POSTROUTING", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "MASQUERADE")

	// The agent puts the reply path in place at its first full
	// observation.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "exec", nsName(tp.NodeNS), "nft", "list", "table", "inet", "enid").CombinedOutput()
		if err == nil {
			t.Logf("nft list table inet enid:\n%s", out)
			break
		}
		if time.Now().After(deadline) {
			// Go on: the connections below show what its absence costs.
			t.Errorf("no table inet enid on the node: %v\n%s", err, out)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("ip rule:\n%s", inNS(t, tp.NodeNS, "ip", "rule"))

	for _, c := range []struct {
		what string
		ns   string
		src  netip.Addr
		dst  netip.AddrPort
		want string
	}{
		{"VPC -> NodePort, masqueraded", tp.VPCNS, vpcHost, netip.AddrPortFrom(nodeIP, 30080), "a"},
		{"VPC -> NodePort, not masqueraded (externalTrafficPolicy Local)", tp.VPCNS, vpcHost, netip.AddrPortFrom(nodeIP, 30081), "a"},
		{"pod a -> ClusterIP of pod a (hairpin)", a.NetNS, netip.Addr{}, netip.AddrPortFrom(vipSelf, 80), "a"},
		{"pod a -> ClusterIP of pod b (same node)", a.NetNS, netip.Addr{}, netip.AddrPortFrom(vipB, 80), "b"},
		{"pod a -> ClusterIP of an address in the VPC", a.NetNS, netip.Addr{}, netip.AddrPortFrom(vipVPC, 80), "vpc"},
		{"node (host network) -> pod b", tp.NodeNS, netip.Addr{}, netip.AddrPortFrom(ipB, 8080), "b"},
	} {
		got, err := fetchFrom(c.ns, c.src, c.dst, 5*time.Second)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.what, got, err, c.want)
		}
	}
	// kube-proxy with --masquerade-all (or a --cluster-cidr without the
	// vSwitches) marks the pod's own connection for masquerade: it leaves
	// with the node's primary address, so rule PrioMasquerade sends it by
	// the node's route (eth0); by the pod's ENI the VPC would drop it
	// (docs/datapath.md, "Services").
	if got, err := fetchFrom(a.NetNS, netip.Addr{}, netip.AddrPortFrom(vipVPCMasq, 80), 5*time.Second); err != nil || got != "vpc" {
		t.Errorf("pod a -> ClusterIP of an address in the VPC, masqueraded: %q, %v; want %q", got, err, "vpc")
	}
	// Restart: the agent, killed, finds its rule in place and its table
	// gone (deleted while it was away); it puts the table back and keeps
	// one rule per family.
	n.agent.kill()
	inNS(t, tp.NodeNS, "nft", "delete", "table", "inet", "enid")
	n.startAgent()
	n.waitReady(30 * time.Second)
	waitFor(t, 20*time.Second, "the table put back after a restart", func() (bool, string) {
		out, err := exec.Command("ip", "netns", "exec", nsName(tp.NodeNS), "nft", "list", "tables").CombinedOutput()
		return err == nil && strings.Count(string(out), "table inet enid") == 1, string(out)
	})
	for _, fam := range []string{"-4", "-6"} {
		if out := inNS(t, tp.NodeNS, "ip", fam, "rule", "show", "priority", "1024"); strings.Count(out, "fwmark 0x2000/0x2000 lookup main") != 1 {
			t.Errorf("ip %s rule show priority 1024 after a restart:\n%s", fam, out)
		}
	}
	if got, err := fetchFrom(tp.VPCNS, vpcHost, netip.AddrPortFrom(nodeIP, 30081), 5*time.Second); err != nil || got != "a" {
		t.Errorf("NodePort after a restart: %q, %v", got, err)
	}
	if t.Failed() {
		t.Logf("vpc anti-spoofing:\n%s", inNS(t, tp.VPCNS, "nft", "list", "table", "inet", "simvpc"))
		t.Logf("node nat:\n%s", inNS(t, tp.NodeNS, "iptables", "-w", "-t", "nat", "-S", "-v"))
	}
}

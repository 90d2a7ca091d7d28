package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/testbed/simvpc"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// serviceCIDR is the cluster's Service range in these tests, and
// clusterIP a Service address in it.
const (
	serviceCIDR = "10.96.0.0/12"
	clusterIP   = "10.96.0.10"
)

// TestExclusiveServices: in exclusive mode with serviceCIDRs set, an
// exclusive pod routes the Service range and the node's own address
// through its service veth (via 169.254.1.1), and a connection to a
// ClusterIP really reaches the backend pod through the node: the node
// namespace holds what kube-proxy (iptables mode, masqueradeAll) would
// install, a DNAT of the ClusterIP to the backend and a MASQUERADE of the
// translated traffic. Without the routes the ClusterIP leaves through the
// pod's ENI into the VPC, which does not route it, and the connection
// fails. The node reaches the backend too (the kubelet's probes), and its
// answer comes back over the veth. A change of serviceCIDRs reaches the
// running pods.
func TestExclusiveServices(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: exclusivePool + "serviceCIDRs: [" + serviceCIDR + "]\n", exclusive: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodeIP := n.plugPrimary()
	nodeSh(t, n.sn.NodeNS(), "sysctl", "-qw", "net.ipv4.ip_forward=1") // a Kubernetes node forwards (kube-proxy needs it)

	client, backend := n.newPod("svc-client"), n.newPod("svc-backend")
	n.startAgent()
	ips := n.addAll(ctx, []*pod{client, backend})
	n.checkExclusive([]*pod{client, backend}, ips)
	backendIP := ips[1]

	for _, p := range []*pod{client, backend} {
		for _, dst := range []string{serviceCIDR, nodeIP.String() + "/32"} {
			if r := viaServiceVeth(t, p, dst); r != "" {
				t.Errorf("pod %s: %s", p.Name, r)
			}
		}
	}

	// kube-proxy's rules for one Service, clusterIP:80 -> backend:8080,
	// with masqueradeAll: the backend answers the node, which reverses
	// both translations (the backend's own default route is its ENI, so
	// an answer to the client's address would bypass the node).
	nodeSh(t, n.sn.NodeNS(), "iptables", "-t", "nat", "-A", "PREROUTING", "-d", clusterIP+"/32", "-p", "tcp", "--dport", "80",
		"-j", "MARK", "--set-xmark", "0x4000/0x4000")
	nodeSh(t, n.sn.NodeNS(), "iptables", "-t", "nat", "-A", "PREROUTING", "-d", clusterIP+"/32", "-p", "tcp", "--dport", "80",
		"-j", "DNAT", "--to-destination", backendIP.String()+":8080")
	nodeSh(t, n.sn.NodeNS(), "iptables", "-t", "nat", "-A", "POSTROUTING", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "MASQUERADE")

	serve(t, backend.NetNS, ":8080")
	got, err := fetch(ctx, client.NetNS, clusterIP+":80")
	if err != nil {
		t.Fatalf("client -> ClusterIP %s:80 -> backend %s:8080: %v", clusterIP, backendIP, err)
	}
	// The backend saw the node's address: the request went through the
	// node and was masqueraded there, as kube-proxy does.
	if want := "hello from the backend to " + nodeIP.String(); got != want {
		t.Errorf("client got %q, want %q", got, want)
	}
	// The kubelet's probe: from the node's address to the pod, and back.
	if got, err := fetch(ctx, n.sn.NodeNS(), net.JoinHostPort(backendIP.String(), "8080")); err != nil || !strings.HasSuffix(got, nodeIP.String()) {
		t.Errorf("node -> backend %s:8080: %q, %v", backendIP, got, err)
	}

	// A second Service range is added on the running node: the running
	// pods get it without being recreated.
	if err := os.WriteFile(n.cfgFile, []byte(n.Config(exclusivePool+"serviceCIDRs: ["+serviceCIDR+", 172.20.0.0/16]\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "new service range in the running pods", func() (bool, string) {
		for _, p := range []*pod{client, backend} {
			if r := viaServiceVeth(t, p, "172.20.0.0/16"); r != "" {
				return false, p.Name + ": " + r
			}
		}
		return true, ""
	})
	n.checkPlanEmpty()
	n.delAll(ctx, []*pod{client, backend})
	n.waitSettled(1, 1, 60*time.Second)
}

// plugPrimary plugs the instance's primary ENI into the node namespace
// and addresses it there, as the node's DHCP client does on a real
// instance (enid never touches it), and returns the node's address.
func (n *node) plugPrimary() netip.Addr {
	n.t.Helper()
	ev, ok := n.sn.Sim.Event(n.sn.Instance.PrimaryENI)
	if !ok {
		n.t.Fatalf("primary ENI %s not in the simulator", n.sn.Instance.PrimaryENI)
	}
	if err := n.sn.Topology.PlugENIInto(n.sn.NodeNS(), ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway, ev.IPv4...); err != nil {
		n.t.Fatal(err)
	}
	if err := n.sn.Topology.AddressPrimary(ev.MAC, ev.PrimaryIP, ev.CIDR, ev.Gateway); err != nil {
		n.t.Fatal(err)
	}
	return ev.PrimaryIP
}

// viaServiceVeth checks that the pod's main table routes dst via
// 169.254.1.1 over its service veth (enids…), and says what it found
// otherwise ("" when it does).
func viaServiceVeth(t *testing.T, p *pod, dst string) string {
	h := nsHandle(t, p.NetNS)
	defer h.Close()
	routes, err := h.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err.Error()
	}
	var seen []string
	for _, r := range routes {
		l, err := h.LinkByIndex(r.LinkIndex)
		if err != nil {
			continue
		}
		s := fmt.Sprintf("%v via %v dev %s", r.Dst, r.Gw, l.Attrs().Name)
		seen = append(seen, s)
		if r.Dst != nil && r.Dst.String() == dst && r.Gw.String() == "169.254.1.1" && strings.HasPrefix(l.Attrs().Name, "enids") {
			return ""
		}
	}
	return fmt.Sprintf("no route %s via 169.254.1.1 dev enids…; routes: %s", dst, strings.Join(seen, "; "))
}

// nodeSh runs a command inside the namespace at path.
func nodeSh(t *testing.T, path string, args ...string) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=" + path}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s in %s: %v\n%s", strings.Join(args, " "), path, err, out)
	}
}

// serve listens on addr inside the namespace at path and answers every
// connection with the address it came from; it stops with the test.
func serve(t *testing.T, path, addr string) {
	t.Helper()
	var ln net.Listener
	if err := simvpc.InNS(path, func() error {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", path, err)
	}
	t.Cleanup(func() { _ = ln.Close() }) // ends the accept loop below
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			from, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = io.WriteString(c, "hello from the backend to "+from) // the client reports a short answer
			_ = c.Close()
		}
	}()
}

// fetch connects to addr from inside the namespace at path and returns
// what the server wrote, trying for up to 10 seconds (the agent may still
// be setting the routes up).
func fetch(ctx context.Context, path, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lastErr error
	for {
		var c net.Conn
		lastErr = simvpc.InNS(path, func() error {
			var err error
			c, err = net.DialTimeout("tcp4", addr, time.Second)
			return err
		})
		if lastErr == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second)) // a dead connection fails the read below
			b, err := io.ReadAll(c)
			_ = c.Close() // read-only: nothing to flush
			if err == nil {
				return string(b), nil
			}
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no answer within 10s: %v", lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

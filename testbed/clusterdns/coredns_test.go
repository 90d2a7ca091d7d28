package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enidnet/enid/kube/kubetest"
)

// dnsServiceIP is the kube-dns Service's address in kubetest's service
// range (10.0.0.0/24).
const dnsServiceIP = "10.0.0.10"

// corednsBin returns build.sh's coredns, next to the API server's
// binaries; the test skips without it, or fails where kubetest.Required.
func corednsBin(t *testing.T) string {
	t.Helper()
	dir := kubetest.BinDir()
	p := filepath.Join(dir, Binary)
	if st, err := os.Stat(p); dir == "" || err != nil || st.Mode()&0o111 == 0 {
		msg := "coredns is not built: run sh kube/kubetest/build.sh DIR coredns (or network-e2e)"
		if kubetest.Required() {
			t.Fatal(msg + "; it is required here (CI=true or ENID_REQUIRE_KUBE=1)")
		}
		t.Skip("skipped: " + msg)
	}
	return p
}

// TestCoreDNSServesTheCluster runs build.sh's CoreDNS as a process with
// the manifests' Corefile (its own ports, a kubeconfig, and a fake
// upstream instead of resolv.conf) against a real API server holding the
// manifests' objects, with the coredns ServiceAccount's token, so the
// ClusterRole is all it has. It asks over UDP what pods ask.
func TestCoreDNSServesTheCluster(t *testing.T) {
	bin := corednsBin(t)
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := s.Client(s.AdminToken)

	// The manifests as a cluster applies them (the API server validates
	// every object; the Deployment's pods never run: no kubelet here).
	manifests := filepath.Join(t.TempDir(), "coredns.yaml")
	if err := os.WriteFile(manifests, []byte(Manifests(dnsServiceIP, "cluster.local", Repository+":test")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := kubetest.Apply(ctx, s.RESTConfig(s.AdminToken), "clusterdns-test", manifests); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, Deployment,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ref[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	upstream := fakeUpstream(t, map[string]netip.Addr{"example.org.": netip.MustParseAddr("192.0.2.99")})
	dns := startCoreDNS(t, bin, s.Kubeconfig("coredns", tok.Status.Token), upstream)

	web, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A headless Service: its names are its EndpointSlices' addresses.
	if _, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ref(true)}},
			{Addresses: []string{"10.1.0.6"}, Conditions: discoveryv1.EndpointConditions{Ready: ref(true)}},
			// Not ready: a headless name leaves it out.
			{Addresses: []string{"10.1.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ref(false)}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ref("pg"), Port: ref[int32](5432)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("service", func(t *testing.T) {
		eventuallyA(t, dns, "web.default.svc.cluster.local.", []string{web.Spec.ClusterIP})
	})
	t.Run("kube-dns", func(t *testing.T) {
		eventuallyA(t, dns, "kube-dns.kube-system.svc.cluster.local.", []string{dnsServiceIP})
	})
	t.Run("headless", func(t *testing.T) {
		eventuallyA(t, dns, "db.default.svc.cluster.local.", []string{"10.1.0.5", "10.1.0.6"})
	})
	t.Run("nxdomain", func(t *testing.T) {
		for _, name := range []string{"nosuch.default.svc.cluster.local.", "web.nosuchns.svc.cluster.local."} {
			m := query(t, dns, name, dnsmessage.TypeA)
			if m.RCode != dnsmessage.RCodeNameError || !m.Authoritative || len(m.Answers) != 0 {
				t.Errorf("%s: %s, authoritative %v, %d answers; want an authoritative NXDOMAIN", name, m.RCode, m.Authoritative, len(m.Answers))
			}
		}
	})
	t.Run("ptr", func(t *testing.T) {
		m := query(t, dns, "10.0.0.10.in-addr.arpa.", dnsmessage.TypePTR)
		var got []string
		for _, a := range m.Answers {
			if p, ok := a.Body.(*dnsmessage.PTRResource); ok {
				got = append(got, p.PTR.String())
			}
		}
		if !slices.Equal(got, []string{"kube-dns.kube-system.svc.cluster.local."}) {
			t.Errorf("PTR of %s: %v (%s)", dnsServiceIP, got, m.RCode)
		}
	})
	t.Run("forward", func(t *testing.T) {
		if got := addrs(query(t, dns, "example.org.", dnsmessage.TypeA)); !slices.Equal(got, []string{"192.0.2.99"}) {
			t.Errorf("example.org (outside the cluster domain, from the upstream): %v, want [192.0.2.99]", got)
		}
	})
	// The e2e tests create a Service and look it up at once, often after a
	// lookup that failed: the Corefile keeps the cache off the cluster
	// domain, so an NXDOMAIN must not outlive the Service's creation. With
	// the cache on, the NXDOMAIN would be served for its SOA's TTL.
	t.Run("new service after nxdomain", func(t *testing.T) {
		const name = "late.default.svc.cluster.local."
		m := query(t, dns, name, dnsmessage.TypeA)
		if m.RCode != dnsmessage.RCodeNameError {
			t.Fatalf("%s before it exists: %s", name, m.RCode)
		}
		asked := time.Now()
		// A cached NXDOMAIN would be served until asked+negTTL; half of
		// that leaves the watch seconds to deliver the Service.
		bound := negativeTTL(t, m) / 2
		late, err := admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "late"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		for {
			got := addrs(query(t, dns, name, dnsmessage.TypeA))
			if slices.Equal(got, []string{late.Spec.ClusterIP}) {
				t.Logf("%s resolves %s after its creation", name, time.Since(created).Round(time.Millisecond))
				return
			}
			if time.Since(asked) >= bound {
				t.Fatalf("%s: %v %s after the NXDOMAIN, half its TTL: a cached denial?", name, got, bound)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestCoreDNSLoopIsFatal checks why the Corefile keeps loop: a CoreDNS
// whose upstream is itself (a pod whose node's resolv.conf names a
// loopback resolver) must exit saying so, not spin.
func TestCoreDNSLoopIsFatal(t *testing.T) {
	bin := corednsBin(t)
	dir := t.TempDir()
	port := freeUDPPort(t)
	cf := corefile{Domain: "cluster.local", Port: port, Health: "127.0.0.1:" + strconv.Itoa(freeTCPPort(t)),
		Ready: "127.0.0.1:" + strconv.Itoa(freeTCPPort(t)), Metrics: "127.0.0.1:" + strconv.Itoa(freeTCPPort(t)),
		Upstream: "127.0.0.1:" + strconv.Itoa(port)}
	// No API server: the kubernetes plugin would wait for one; the loop
	// probe goes to "." which only forward serves.
	text := cf.String()
	start := strings.Index(text, "    kubernetes ")
	end := strings.Index(text[start:], "\n    }\n")
	if start < 0 || end < 0 {
		t.Fatalf("no kubernetes block in the Corefile:\n%s", text)
	}
	text = text[:start] + text[start+end+len("\n    }\n"):]
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := kubetest.StartProcess(t, dir, "coredns", bin, "-conf", conf)
	defer p.Stop(5 * time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for !p.Exited() {
		if time.Now().After(deadline) {
			t.Fatalf("coredns forwarding to itself still runs after 30s:\n%s\nCorefile:\n%s", kubetest.Tail(p.Log, 20), text)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if log := kubetest.Tail(p.Log, 20); !strings.Contains(log, "Loop") || !strings.Contains(log, "detected") {
		t.Fatalf("coredns exited, but not for a loop:\n%s", log)
	}
}

// startCoreDNS runs bin with the manifests' Corefile on free ports of
// 127.0.0.1, reading the API server through kubeconfig and forwarding to
// upstream, waits until /ready answers and returns its DNS address.
func startCoreDNS(t *testing.T, bin, kubeconfig, upstream string) string {
	t.Helper()
	dir := t.TempDir()
	port := freeUDPPort(t)
	ready := "127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
	cf := corefile{Domain: "cluster.local", Port: port,
		Health: "127.0.0.1:" + strconv.Itoa(freeTCPPort(t)), Ready: ready, Metrics: "127.0.0.1:" + strconv.Itoa(freeTCPPort(t)),
		Upstream: upstream, Kubeconfig: kubeconfig}
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(cf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := kubetest.StartProcess(t, dir, "coredns", bin, "-conf", conf)
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("coredns (tail):\n%s\nCorefile:\n%s", kubetest.Tail(p.Log, 30), cf)
		}
	})
	// ready answers 200 once the kubernetes plugin has synced its lists,
	// which can be before the DNS listeners are open: wait for an answer.
	kubetest.WaitHTTP(t, nil, "http://"+ready+"/ready", nil, 60*time.Second)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := exchange(addr, "cluster.local.", dnsmessage.TypeSOA)
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("coredns ready, but no DNS answer on %s after 10s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query asks server one question over UDP.
func query(t *testing.T, server, name string, qtype dnsmessage.Type) dnsmessage.Message {
	t.Helper()
	m, err := exchange(server, name, qtype)
	if err != nil {
		t.Fatalf("%s %s: %v", name, qtype, err)
	}
	return m
}

func exchange(server, name string, qtype dnsmessage.Type) (dnsmessage.Message, error) {
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: uint16(rand.Uint32()), RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	b, err := q.Pack()
	if err != nil {
		return dnsmessage.Message{}, err
	}
	c, err := net.Dial("udp", server)
	if err != nil {
		return dnsmessage.Message{}, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return dnsmessage.Message{}, err
	}
	if _, err := c.Write(b); err != nil {
		return dnsmessage.Message{}, err
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return dnsmessage.Message{}, err
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		return dnsmessage.Message{}, err
	}
	if m.ID != q.ID {
		return dnsmessage.Message{}, fmt.Errorf("answer ID %d for question %d", m.ID, q.ID)
	}
	return m, nil
}

// addrs are the A records of m's answer, sorted.
func addrs(m dnsmessage.Message) []string {
	var out []string
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			out = append(out, netip.AddrFrom4(r.A).String())
		}
	}
	slices.Sort(out)
	return out
}

// eventuallyA waits until name's A records are want: the kubernetes
// plugin learns of a new object through its watch.
func eventuallyA(t *testing.T, server, name string, want []string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		m := query(t, server, name, dnsmessage.TypeA)
		got := addrs(m)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v (%s), want %v", name, got, m.RCode, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// negativeTTL is how long a cache may keep m, a denial: its SOA's
// minimum, or the SOA record's own TTL if that is lower (RFC 2308).
func negativeTTL(t *testing.T, m dnsmessage.Message) time.Duration {
	t.Helper()
	for _, a := range m.Authorities {
		if soa, ok := a.Body.(*dnsmessage.SOAResource); ok {
			return time.Duration(min(soa.MinTTL, a.Header.TTL)) * time.Second
		}
	}
	t.Fatalf("a denial without an SOA: %+v", m)
	return 0
}

// fakeUpstream answers A questions for the names of records and NXDOMAIN
// for the rest, on a free UDP port of 127.0.0.1, until the test ends; it
// stands for the resolver a node's resolv.conf names.
func fakeUpstream(t *testing.T, records map[string]netip.Addr) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		// Ends when the cleanup closes pc.
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			} else if err != nil {
				continue
			}
			var q dnsmessage.Message
			if err := q.Unpack(buf[:n]); err != nil || len(q.Questions) != 1 {
				continue
			}
			r := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, RecursionDesired: q.RecursionDesired,
				RecursionAvailable: true, RCode: dnsmessage.RCodeNameError}, Questions: q.Questions}
			qq := q.Questions[0]
			if a, ok := records[qq.Name.String()]; ok {
				r.RCode = dnsmessage.RCodeSuccess
				if qq.Type == dnsmessage.TypeA {
					r.Answers = []dnsmessage.Resource{{Header: dnsmessage.ResourceHeader{Name: qq.Name, Type: dnsmessage.TypeA,
						Class: dnsmessage.ClassINET, TTL: 60}, Body: &dnsmessage.AResource{A: a.As4()}}}
				}
			}
			b, err := r.Pack()
			if err != nil {
				continue
			}
			pc.WriteTo(b, from) //nolint:errcheck // a lost answer is a timeout the test reports
		}
	}()
	return pc.LocalAddr().String()
}

// freeUDPPort is a port free for UDP and TCP on 127.0.0.1 (CoreDNS
// serves both on it).
func freeUDPPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		pc.Close()
		if err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP on 127.0.0.1")
	return 0
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ref is a pointer to v, for the API's optional fields.
func ref[T any](v T) *T { return &v }

package linux_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/observed"
)

// eni is one plugged test ENI and the spec that configures it.
type eni struct {
	mac  string
	spec linux.ENISpec
	cidr netip.Prefix
}

// env is a topology with a datapath on its node namespace.
type env struct {
	tp   *linuxtest.Topology
	dp   *linux.Datapath
	enis []eni
}

// ctxT returns a context bounded well inside the package's time budget.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newEnv builds a topology with n ENIs plugged (10.0.<i+1>.0/24 each, MACs
// 02:00:00:00:00:<i+1>, pod IPs .10-.99 routed by the vpc) and configured.
func newEnv(t testing.TB, n int) *env {
	t.Helper()
	roottest.Need(t)
	tp := linuxtest.NewTopology(t)
	dp, err := linux.New(slog.New(slog.DiscardHandler), tp.NodeNS)
	if err != nil {
		t.Fatalf("new datapath: %v", err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("close datapath: %v", err)
		}
	})
	e := &env{tp: tp, dp: dp}
	for i := range n {
		mac := fmt.Sprintf("02:00:00:00:00:%02x", i+1)
		cidr := netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/24", i+1))
		gw := observed.GatewayOf(cidr)
		var ips []netip.Addr
		for h := 10; h < 100; h++ {
			ips = append(ips, v4(i, h), v6(i, h))
		}
		if err := tp.PlugENI(mac, netip.MustParseAddr(fmt.Sprintf("10.0.%d.5", i+1)), cidr, gw, ips...); err != nil {
			t.Fatalf("plug eni: %v", err)
		}
		s := linux.ENISpec{
			MAC: mac, Table: 1001 + i, Gateway: gw,
			GatewayV6: netip.MustParseAddr(linuxtest.GatewayV6), MTU: 1500, WaitForDevice: time.Second,
		}
		if _, err := dp.EnsureENI(ctxT(t), s); err != nil {
			t.Fatalf("ensure eni %s: %v", mac, err)
		}
		e.enis = append(e.enis, eni{mac: mac, spec: s, cidr: cidr})
	}
	return e
}

// v4 is pod address h on ENI i.
func v4(i, h int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("10.0.%d.%d", i+1, h)) }

// v6 is pod IPv6 address h on ENI i.
func v6(i, h int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("fd00:%d::%d", i+1, h)) }

// podSpec returns the spec for pod h on ENI i in a new pod namespace.
func (e *env) podSpec(t testing.TB, i, h int) linux.PodSpec {
	t.Helper()
	name := fmt.Sprintf("p%d-%d", i, h)
	ns, cleanup, err := e.tp.NewPodNS(name)
	if err != nil {
		t.Fatalf("new pod ns: %v", err)
	}
	t.Cleanup(cleanup)
	return linux.PodSpec{
		Key:    observed.AttachmentKey{ContainerID: fmt.Sprintf("c%040d%d", h, i), IfName: "eth0"},
		NetNS:  ns,
		IfName: "eth0",
		IPv4:   v4(i, h), IPv6: v6(i, h),
		ENIMAC: e.enis[i].mac,
		Table:  e.enis[i].spec.Table,
		MTU:    1500,
	}
}

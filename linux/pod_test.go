package linux_test

import (
	"net/netip"
	"testing"

	"github.com/enidnet/enid/linux/linuxtest"
)

// TestPodsReachEachOtherAndVPC proves the routes and rules work: two pods
// on two ENIs ping each other and the vpc router, over IPv4 and IPv6.
func TestPodsReachEachOtherAndVPC(t *testing.T) {
	e := newEnv(t, 2)
	a, b := e.podSpec(t, 0, 10), e.podSpec(t, 1, 20)
	ctx := ctxT(t)
	if _, ch, err := e.dp.EnsurePod(ctx, a); err != nil {
		t.Fatalf("ensure pod a: %v (changes %v)", err, ch)
	}
	if _, _, err := e.dp.EnsurePod(ctx, b); err != nil {
		t.Fatalf("ensure pod b: %v", err)
	}
	checks := []struct {
		name string
		ns   string
		dst  string
	}{
		{"a to b v4", a.NetNS, b.IPv4.String()},
		{"b to a v4", b.NetNS, a.IPv4.String()},
		{"a to gateway 1", a.NetNS, e.enis[0].spec.Gateway.String()},
		{"b to gateway 2", b.NetNS, e.enis[1].spec.Gateway.String()},
		{"a to b v6", a.NetNS, b.IPv6.String()},
		{"vpc to a v4", e.tp.VPCNS, a.IPv4.String()},
		{"vpc to b v6", e.tp.VPCNS, b.IPv6.String()},
		{"a to vpc v6", a.NetNS, linuxtest.VPCHostV6},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := linuxtest.Ping(ctx, c.ns, mustAddr(c.dst)); err != nil {
				t.Error(err)
			}
		})
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

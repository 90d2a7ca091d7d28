// Package linuxtest holds the test helpers over the simulated VPC topology
// of testbed/simvpc (which the enid binary links for its demo, and which
// must therefore not import package testing). The names below keep the
// tests of linux, reconcile and e2e written against linuxtest.
package linuxtest

import (
	"strings"
	"testing"

	"github.com/enidnet/enid/testbed/simvpc"
)

// Topology is a vpc namespace and a node namespace with ENIs plugged
// between them (simvpc.Topology).
type Topology = simvpc.Topology

// GatewayV6 and VPCHostV6 are simvpc's IPv6 gateway and VPC host.
const (
	GatewayV6 = simvpc.GatewayV6
	VPCHostV6 = simvpc.VPCHostV6
)

// New, InNS, Ping, Sysctl and SetSysctl are simvpc's.
var (
	New       = simvpc.New
	InNS      = simvpc.InNS
	Ping      = simvpc.Ping
	Sysctl    = simvpc.Sysctl
	SetSysctl = simvpc.SetSysctl
)

// NewTopology is New for tests: it fails t on error and removes the
// topology when the test ends.
func NewTopology(t testing.TB) *Topology {
	t.Helper()
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return -1
	}, name)
	if len(name) > 20 {
		name = name[:20]
	}
	tp, err := New("enidt" + name)
	if err != nil {
		t.Fatalf("new topology: %v", err)
	}
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Errorf("close topology: %v", err)
		}
	})
	return tp
}

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// TestVSwitchSelector (issue 26 item 4): with eni.vSwitchSelector and no
// vSwitch listed, the agent creates its ENIs in the vSwitches of its zone
// that carry the tags (never one of another zone), and sees a change of
// the tags at its next resync: once vsw-h2 is tagged and the first one
// untagged, `enid plan` creates the next ENI there and says why, and so
// does the agent.
func TestVSwitchSelector(t *testing.T) {
	pods := map[string]string{"enid.dev/pods": "yes"}
	n := newNode(t, nodeOptions{sim: ecssim.Config{VSwitches: []ecssim.VSwitchConfig{
		{ID: "vsw-sim-h", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/24"), Tags: pods},
		{ID: "vsw-h2", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.1.0/24")},
		{ID: "vsw-sim-i", Zone: "cn-hangzhou-i", CIDR: netip.MustParsePrefix("192.168.2.0/24"), Tags: pods},
	}}})
	cfg := "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\nmode: shared-eni\neni:\n" +
		"  vSwitchSelector:\n    tags: {enid.dev/pods: \"yes\"}\n  securityGroups: [" + ecssim.DefaultSecurityGroup + "]\n" +
		testPool + "resyncPeriod: 1s\n"
	if err := os.WriteFile(n.cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	p := n.newPod("sel0")
	if _, err := n.add(ctx, p); err != nil {
		t.Fatal(err)
	}
	vswOf := func() map[string]int {
		by := map[string]int{}
		for _, e := range n.owned(n.sn.Sim.Dump()) {
			by[e.VSwitchID]++
		}
		return by
	}
	if by := vswOf(); by["vsw-sim-h"] != 1 || len(by) != 1 {
		t.Fatalf("ENIs by vSwitch %v, want one in the tagged vsw-sim-h", by)
	}

	if err := n.sn.Sim.TagVSwitch("vsw-h2", pods); err != nil {
		t.Fatal(err)
	}
	if err := n.sn.Sim.TagVSwitch("vsw-sim-h", map[string]string{"enid.dev/pods": ""}); err != nil {
		t.Fatal(err)
	}
	// A candidate that needs a second ENI: the plan names the new vSwitch.
	more := strings.Replace(testPool, "  maxIdle: 6\n", "  maxIdle: 30\n  minTotal: 20\n  spreadWindow: 0s\n", 1)
	candidate := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(candidate, []byte(strings.Replace(cfg, testPool, more, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "enid plan picks the newly tagged vSwitch", func() (bool, string) {
		_, out, stderr := n.plan(ctx, "--config", candidate)
		return strings.Contains(out, " in vsw-h2 ipv4") && strings.Contains(out, "selected by tags"), out + stderr
	})
	time.Sleep(2 * time.Second) // past a resync: the agent's view has the new tags
	if err := os.WriteFile(filepath.Join(n.cfgDir, "20-more.yaml"), []byte("apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\npool:\n  minTotal: 20\n  maxIdle: 30\n  spreadWindow: 0s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a second ENI in vsw-h2", func() (bool, string) {
		by := vswOf()
		return by["vsw-h2"] >= 1 && by["vsw-sim-i"] == 0, fmt.Sprintf("ENIs by vSwitch %v", by)
	})
	n.delAll(ctx, []*pod{p})
}

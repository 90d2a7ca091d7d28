package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// A pod whose namespace already holds an eth0 that enid did not create
// (a foreign interface where the pod's must go) fails at once with a typed
// reason, instead of staying Pending with setup-failed while the agent
// retries for ever; the other pods of the node are served.
func TestForeignInterfaceFailsPod(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool, addTimeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad, good := n.newPod("foreign"), n.newPod("good")
	h := nsHandle(t, bad.NetNS)
	defer h.Close()
	// A veth pair with both ends in the pod (dummy links need a module
	// that CI machines may lack).
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "foreign0"}); err != nil {
		t.Fatalf("add a foreign eth0 in the pod's namespace: %v", err)
	}
	n.startAgent()
	n.waitReady(30 * time.Second)
	start := time.Now()
	_, err := n.add(ctx, bad)
	if err == nil {
		t.Fatal("ADD into a namespace holding a foreign eth0 succeeded")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("ADD failed after %v: it waited, not failed", took)
	}
	st, serr := n.statusOf(bad)
	if serr != nil {
		t.Fatal(serr)
	}
	if st.Phase != status.Failed || st.ReasonCode != string(planner.ReasonInterfaceConflict) {
		t.Errorf("status %s %s (%s), want Failed %s", st.Phase, st.ReasonCode, st.Reason, planner.ReasonInterfaceConflict)
	}
	if !strings.Contains(err.Error(), string(planner.ReasonInterfaceConflict)) && !strings.Contains(err.Error(), "did not create") {
		t.Errorf("ADD error does not say why: %v", err)
	}
	if _, err := n.add(ctx, good); err != nil {
		t.Errorf("another pod on the node: %v", err)
	}
	// The foreign interface is left alone.
	if _, err := h.LinkByName("eth0"); err != nil {
		t.Errorf("the foreign eth0 is gone: %v", err)
	}
}

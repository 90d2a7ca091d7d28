package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// TestBadEntryIsolated is invariant 6 for entries: a damaged pod entry
// gets a Failed status that says why, and neither it nor its removal stops
// the agent serving other pods.
func TestBadEntryIsolated(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	const badID = "badbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadbadb"
	bad := filepath.Join(n.runDir, "pods", badID+"_eth0.json")
	if err := os.WriteFile(bad, []byte(`{"apiVersion": "enid.dev/v1alpha1", "containerID": `), 0o600); err != nil {
		t.Fatal(err)
	}
	pods := []*pod{n.newPod("ok0"), n.newPod("ok1")}
	n.addAll(ctx, pods)
	var st status.Attachment
	waitFor(t, 10*time.Second, "a Failed status for the damaged entry", func() (bool, string) {
		var err error
		st, err = status.NewStore(filepath.Join(n.runDir, "status")).Read(badID, "eth0")
		return err == nil && st.Phase == status.Failed, st.Reason
	})
	if st.Reason == "" || !strings.Contains(st.Reason, badID) {
		t.Errorf("the damaged entry's status reason %q does not name its file", st.Reason)
	}
	t.Logf("status of the damaged entry: %s (%s)", st.Reason, st.ReasonCode)
	// The heartbeat counts the statuses the pass after their publication
	// saw: an ADD returns as soon as its status is written, which may be a
	// pass before agent.json says so.
	waitFor(t, 5*time.Second, fmt.Sprintf("agent.json counting %d Ready pods and 1 Failed", len(pods)), func() (bool, string) {
		a := n.waitReady(5 * time.Second)
		return a.Pods[status.Ready] == len(pods) && a.Pods[status.Failed] == 1, fmt.Sprintf("agent.json counts pods %v", a.Pods)
	})
	n.checkBindings(pods)

	if err := os.Remove(bad); err != nil {
		t.Fatal(err)
	}
	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 60*time.Second)
}

// TestStickyIP: a pod annotated enid.dev/sticky-ip keeps its address when
// it is deleted and comes back under the same namespace and name in a new
// sandbox (a StatefulSet pod being rescheduled on the node), across an
// agent SIGKILL in between, and an ordinary pod created meanwhile does not
// get it.
func TestStickyIP(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool + "stickyIPHold: 30s\n"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	sticky := map[string]string{desired.AnnotationStickyIP: "true"}
	first := n.newPod("db-0-a")
	first.Name, first.Annotations = "db-0", sticky
	ips := n.addAll(ctx, []*pod{first})
	n.delAll(ctx, []*pod{first})
	// The reservation is planner memory kept in the state dir: it must
	// survive a crash.
	n.agent.kill()
	n.startAgent()
	n.waitReady(30 * time.Second)

	// Past the cooldown, ordinary pods take whatever is free.
	time.Sleep(500 * time.Millisecond)
	others := []*pod{n.newPod("web-0"), n.newPod("web-1"), n.newPod("web-2")}
	for i, ip := range n.addAll(ctx, others) {
		if ip == ips[0] {
			t.Errorf("ordinary pod %s got %s, held for the sticky pod db-0", others[i].Name, ip)
		}
	}

	again := n.newPod("db-0-b")
	again.Name, again.Annotations = "db-0", sticky
	if got := n.addAll(ctx, []*pod{again}); got[0] != ips[0] {
		t.Errorf("sticky pod db-0 came back with %s, had %s", got[0], ips[0])
	}
	all := append(others, again)
	n.checkBindings(all)
	n.delAll(ctx, all)
}

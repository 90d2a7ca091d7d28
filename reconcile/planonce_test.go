package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/netnsid"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// guardedNoDatapath is a NoDatapath with the real pod-netns check of
// linux.Datapath (netnsid.CheckPod against node, the namespace that plays
// the node's and is never handed to enid as a pod's).
type guardedNoDatapath struct {
	*NoDatapath
	node netnsid.ID
}

func (g guardedNoDatapath) CheckNetNS(path string) error { return netnsid.CheckPod(path, g.node) }

// TestPlanOnceIsTheAgentsPlan: PlanOnce (`enid plan`) plans what the
// agent's own pass plans, where a hand-built observe-and-plan drifted: an
// entry whose netns the guard refuses (a regular file) fails at once in
// the agent, and `enid plan` must not show a setup for it.
func TestPlanOnceIsTheAgentsPlan(t *testing.T) {
	// The node is a namespace no pod names; the accepted pod's is the
	// test's own (it must exist: an entry whose netns is gone is not set
	// up either, planner/stale.go).
	node := netnsid.ID{Dev: 1, Ino: 1}
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n")
	dp := guardedNoDatapath{NoDatapath: NewNoDatapathMust(t), node: node}
	stop := w.start(dp)
	okEntry := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: fmt.Sprintf("%064x", 1), IfName: "eth0",
		NetNS: "/proc/self/ns/net", PodNamespace: "default", PodName: "pod-0", Created: time.Now()}
	if _, err := desired.NewEntryStore(w.paths.Entries).Write(okEntry); err != nil {
		t.Fatal(err)
	}
	ok := okEntry.Key()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: "f" + ok.ContainerID[1:], IfName: "eth0",
		NetNS: file, PodNamespace: "default", PodName: "pod-file", Created: time.Now()}
	if _, err := desired.NewEntryStore(w.paths.Entries).Write(e); err != nil {
		t.Fatal(err)
	}
	w.waitReady(ok)
	w.waitFor("the refused pod failed", 10*time.Second, func() bool {
		st := w.statuses()[e.Key().String()]
		return st.Phase == status.Failed && st.ReasonCode == string(planner.ReasonNetNSRefused)
	})
	w.waitFor("the node steady", 10*time.Second, w.steady)
	stop()
	agentPlan := w.agent.lastPlan // Run has returned: no race

	r, err := PlanOnce(context.Background(), Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: w.cl, Datapath: dp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Plan.Render(), agentPlan.Render(); got != want {
		t.Errorf("PlanOnce plans\n%s\nthe agent's last pass planned\n%s", got, want)
	}
	if !r.Plan.Empty() {
		t.Errorf("plan of a converged node is not empty:\n%s", r.Plan.Render())
	}
	// The same files planned without the agent's completion of desired
	// state (what `enid plan` did before PlanOnce): the refused entry
	// would get an address and a setup.
	raw := desired.Load(desired.NewConfigLoader(w.paths.Config, desired.NodeFacts{Zone: w.inst.Zone}), desired.NewEntryStore(w.paths.Entries), desired.HintSources{})
	if p := planner.Make(raw, r.Observed, planner.Options{Now: time.Now(), Memory: r.Plan.Memory, NodeName: "node-1"}); p.Empty() {
		t.Errorf("without the guard the plan is empty too: the test shows nothing")
	}
}

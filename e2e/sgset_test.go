package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/linux/linuxtest"
	"github.com/enidnet/enid/reconcile/status"
)

// sgAnnotation is the pod annotation that asks for a security-group set.
const sgAnnotation = "enid.dev/security-groups"

// withSecurityGroups returns the node's config with eni.securityGroups
// replaced by eniExtra (YAML lines indented under eni:) and extra appended.
// The simulator's config names only its default group; the test's sets
// live under the same eni: key, so they replace that line rather than
// follow the config.
func (n *node) withSecurityGroups(eniExtra, extra string) string {
	n.t.Helper()
	line := fmt.Sprintf("  securityGroups: [%s]\n", ecssim.DefaultSecurityGroup)
	base := n.Config("")
	if !strings.Contains(base, line) {
		n.t.Fatalf("the simulator's config has no line %q:\n%s", line, base)
	}
	return strings.Replace(base, line, eniExtra, 1) + extra
}

// TestSecurityGroupSets is issue 16's first e2e acceptance: pods of two
// sets (the default, and a named one asked for by annotation) and of a
// third (chosen by the pod's namespace) get addresses on ENIs whose groups,
// as the simulator reports them, are exactly their set; the pods of a set
// share its ENIs; a pod with an invalid annotation fails alone with
// security-groups-invalid, and one naming a group the cloud does not know
// with security-groups-refused (its refused create holds back no other
// set's, and takes no ENI slot); `enid status` and `enid plan` name the
// sets; after DEL of all, the other sets' ENIs go and nothing leaks.
func TestSecurityGroupSets(t *testing.T) {
	n := newNode(t, nodeOptions{sim: ecssim.Config{SecurityGroups: []string{ecssim.DefaultSecurityGroup, "sg-web", "sg-db", "sg-shop"}}})
	cfg := n.withSecurityGroups(`  securityGroups: [sg-sim]
  securityGroupSets:
    - name: web-db
      securityGroups: [sg-web, sg-db]
    - name: shop
      securityGroups: [sg-shop]
  namespaceSecurityGroups: {shop: shop}
`, testPool)
	n.writeConfig(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)

	// want maps a pod to its set's sorted groups.
	want := map[*pod][]string{}
	var pods []*pod
	for i := range 4 {
		p := n.newPod(fmt.Sprintf("plain-%d", i))
		want[p] = []string{"sg-sim"}
		pods = append(pods, p)
	}
	for i, ann := range []string{"sg-web,sg-db", "sg-db,sg-web", " sg-db , sg-web ", "sg-web,sg-db"} {
		p := n.newPod(fmt.Sprintf("webdb-%d", i))
		p.Annotations = map[string]string{sgAnnotation: ann}
		want[p] = []string{"sg-db", "sg-web"}
		pods = append(pods, p)
	}
	for i := range 2 {
		p := n.newPod(fmt.Sprintf("shop-%d", i))
		p.Namespace = "shop"
		want[p] = []string{"sg-shop"}
		pods = append(pods, p)
	}
	bad := n.newPod("bad")
	bad.Annotations = map[string]string{sgAnnotation: "sg-web,web"}

	// A pod that names a group the cloud does not know comes first: its
	// set's CreateENI is refused, and its ADD fails with the reason. The
	// other sets' pods, which need ENIs of their own, then get the
	// instance's last ENI slots (the refused set plans no create while its
	// mark holds) and do not wait for the refused create's back-off.
	ghost := n.newPod("ghost")
	ghost.Annotations = map[string]string{sgAnnotation: "sg-ghost"}
	if _, err := n.add(ctx, ghost); err == nil || !strings.Contains(err.Error(), "security-groups-refused") {
		t.Errorf("ADD of a pod annotated %q: %v, want a failure naming security-groups-refused", ghost.Annotations[sgAnnotation], err)
	} else {
		t.Logf("ADD of the pod naming an unknown group: %v", err)
	}

	var badErr error
	var wg sync.WaitGroup
	wg.Go(func() { _, badErr = n.add(ctx, bad) })
	start := time.Now()
	ips := n.addAll(ctx, pods)
	took := time.Since(start)
	t.Logf("the pods of three sets Ready in %v", took.Round(time.Millisecond))
	if bound := fastOnly(2 * time.Second); took > bound {
		t.Errorf("the pods of three sets took %v (> %v) beside a set the cloud refused: its back-off must hold back no other set", took, bound)
	}
	wg.Wait()
	if k := n.sn.Sim.Counters()["CreateNetworkInterface"]["InvalidSecurityGroupId.NotFound"]; k != 1 {
		t.Errorf("the cloud refused %d creates of the unknown group, want 1 (then none while the mark holds)", k)
	}
	if badErr == nil || !strings.Contains(badErr.Error(), "security-groups-invalid") {
		t.Errorf("ADD of a pod annotated %q: %v, want a failure naming security-groups-invalid", bad.Annotations[sgAnnotation], badErr)
	} else {
		t.Logf("ADD of the badly annotated pod: %v", badErr)
	}
	n.checkBindings(pods)
	n.checkSets(pods, want)
	enisOf := map[string]map[string]bool{}
	for _, p := range pods {
		st, err := n.statusOf(p)
		if err != nil {
			t.Fatal(err)
		}
		k := strings.Join(want[p], ",")
		if enisOf[k] == nil {
			enisOf[k] = map[string]bool{}
		}
		enisOf[k][st.ENIID] = true
	}
	for set, enis := range enisOf {
		// Density: at most 4 pods of a set here, one ENI holds 14.
		if len(enis) != 1 {
			t.Errorf("set %s: pods on %d ENIs %v, want all on one", set, len(enis), enis)
		}
	}
	for i, p := range pods {
		j := (i + 5) % len(pods)
		if err := linuxtest.Ping(ctx, p.NetNS, ips[j]); err != nil {
			t.Errorf("%s -> %s: %v", p.Name, pods[j].Name, err)
		}
	}

	// The operator's views name every set.
	sets := []string{"Set default [sg-sim]", "Set web-db [sg-db,sg-web]", "Set shop [sg-shop]"}
	code, out, stderr := n.enid(ctx, "status", "--run-dir", n.runDir)
	if code != 0 {
		t.Errorf("enid status: exit %d %s%s", code, out, stderr)
	}
	for _, s := range sets {
		if !strings.Contains(out, s) {
			t.Errorf("enid status does not say %q:\n%s", s, out)
		}
	}
	code, out, stderr = n.plan(ctx)
	if code != 0 {
		t.Errorf("enid plan: exit %d %s%s", code, out, stderr)
	}
	for _, s := range sets {
		if !strings.Contains(out, s) {
			t.Errorf("enid plan does not say %q:\n%s", s, out)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// kubelet's DEL of the failed sandboxes, then of every pod.
	n.delAll(ctx, append(pods, bad, ghost))
	n.waitSettled(2, 6, 30*time.Second)
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		if got := sortedGroups(e); !slices.Equal(got, []string{"sg-sim"}) {
			t.Errorf("with no pod left, ENI %s of groups %v remains; only the default set keeps a pool", e.ID, got)
		}
	}
}

// TestSecurityGroupsChangeInPlace is issue 16's second e2e acceptance: a
// change of eni.securityGroups (a ConfigMap update, the agent running)
// moves every ENI of the default set to the new groups in place: the same
// ENIs, no delete, every pod keeps its address and stays reachable. A
// group the cloud does not know is refused without harm (a pod started
// meanwhile fails with security-groups-refused), and its correction
// applies at once. A change made while the agent is stopped
// shows in `enid plan` as `~ UpdateENI` per ENI, and is applied when the
// agent is back. Then DEL of all and the leak check.
func TestSecurityGroupsChangeInPlace(t *testing.T) {
	n := newNode(t, nodeOptions{configMap: true,
		sim: ecssim.Config{SecurityGroups: []string{ecssim.DefaultSecurityGroup, "sg-new1", "sg-new2"}}})
	oldCfg := n.withSecurityGroups("  securityGroups: [sg-sim]\n", testPool)
	n.swapConfigMap(oldCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	// 16 pods fill one ENI (14 addresses) and go on to a second, so that
	// more than one ENI moves.
	var pods []*pod
	for i := range 16 {
		pods = append(pods, n.newPod(fmt.Sprintf("p%d", i)))
	}
	ips := n.addAll(ctx, pods)
	n.checkBindings(pods)
	// The pool's growth after the ADDs ends before the change, so that the
	// cloud calls counted below are the change's.
	n.waitPlanEmpty(ctx)
	before := n.ownedIDs()
	if len(before) < 2 {
		t.Fatalf("%d owned ENIs before the change (%v), want at least 2", len(before), before)
	}
	counters := n.sn.Sim.Counters()

	newGroups := []string{"sg-new1", "sg-new2"}
	n.swapConfigMap(n.withSecurityGroups("  securityGroups: [sg-new2, sg-new1]\n", testPool))
	n.waitGroups(newGroups, 20*time.Second)
	n.checkUnmoved(pods, ips, before)
	after := n.sn.Sim.Counters()
	if k := after["ModifyNetworkInterfaceAttribute"]["ok"] - counters["ModifyNetworkInterfaceAttribute"]["ok"]; k != len(before) {
		t.Errorf("%d ModifyNetworkInterfaceAttribute calls succeeded for %d ENIs, want one each", k, len(before))
	}
	for _, call := range []string{"CreateNetworkInterface", "DeleteNetworkInterface", "DetachNetworkInterface", "UnassignPrivateIpAddresses"} {
		if k := after[call]["ok"] - counters[call]["ok"]; k != 0 {
			t.Errorf("%d %s calls during the change, want none", k, call)
		}
	}
	if !strings.Contains(readFile(t, n.agent.log), "kind=UpdateENI") {
		t.Errorf("the agent log has no UpdateENI action")
	}
	n.checkPlanEmpty()

	// A group the cloud does not know (a typo): the update is refused, the
	// groups are marked refused, and no update is planned again while the
	// mark holds (planner.DefaultRefusedFor, a minute): nothing else
	// moves, running pods are not held back by a retried move, and the
	// corrected config is applied at once.
	refused := func() int {
		return n.sn.Sim.Counters()["ModifyNetworkInterfaceAttribute"]["InvalidSecurityGroupId.NotFound"]
	}
	n.swapConfigMap(n.withSecurityGroups("  securityGroups: [sg-new1, sg-typo]\n", testPool))
	waitFor(t, 20*time.Second, "each ENI's update refused", func() (bool, string) {
		return refused() >= len(before), fmt.Sprintf("%d refusals", refused())
	})
	// The executor's back-off alone would have resent them within 5 s.
	k := refused()
	time.Sleep(6 * time.Second)
	if got := refused(); got != k {
		t.Errorf("%d more refused updates while the refusal mark holds, want none", got-k)
	}
	n.waitGroups(newGroups, 0)
	if a, err := n.agentFile(); err != nil || !a.Ready {
		t.Errorf("with a refused update: heartbeat %+v (err %v), want ready", a, err)
	}
	n.checkUnmoved(pods, ips, before)
	// A pod started meanwhile is not placed on an ENI that cannot move to
	// its groups: its ADD fails at once with the reason (kubelet then
	// deletes the sandbox).
	late := n.newPod("late")
	if _, err := n.add(ctx, late); err == nil || !strings.Contains(err.Error(), "security-groups-refused") {
		t.Errorf("ADD with the default groups refused: %v, want a failure naming security-groups-refused", err)
	}
	n.delAll(ctx, []*pod{late})
	n.swapConfigMap(n.withSecurityGroups("  securityGroups: [sg-new1]\n", testPool))
	n.waitGroups([]string{"sg-new1"}, fastOnly(3*time.Second))
	n.checkUnmoved(pods, ips, before)
	n.checkPlanEmpty()

	// The change back, planned while the agent is stopped: `enid plan`
	// shows one in-place update per ENI and nothing else on them.
	n.agent.stop(t)
	n.swapConfigMap(oldCfg)
	code, out, stderr := n.plan(ctx, "--detailed-exitcode")
	if code != 2 {
		t.Errorf("enid plan --detailed-exitcode after the change back: exit %d, want 2\n%s%s", code, out, stderr)
	}
	for _, id := range before {
		if line := "~ UpdateENI " + id + ": security groups sg-sim"; !strings.Contains(out, line) {
			t.Errorf("enid plan does not say %q:\n%s", line, out)
		}
	}
	t.Logf("enid plan after the change back, the agent stopped:\n%s", out)
	for _, kind := range []string{"DeleteENI", "DetachENI", "CreateENI", "TeardownPod", "SetupPod"} {
		if strings.Contains(out, kind) {
			t.Errorf("enid plan for a change of groups has a %s:\n%s", kind, out)
		}
	}
	n.startAgent()
	n.waitReady(30 * time.Second)
	n.waitGroups([]string{"sg-sim"}, 20*time.Second)
	n.checkUnmoved(pods, ips, before)
	n.checkPlanEmpty()

	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 30*time.Second)
}

// checkSets checks each pod's address is on an ENI (as the simulator
// reports it) whose sorted security groups are want[p].
func (n *node) checkSets(pods []*pod, want map[*pod][]string) {
	n.t.Helper()
	groups := map[netip.Addr][]string{}
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		for _, a := range e.IPv4 {
			groups[a] = sortedGroups(e)
		}
	}
	for _, p := range pods {
		st, err := n.statusOf(p)
		if err != nil || len(st.IPs) == 0 {
			n.t.Errorf("pod %s: status %+v (err %v)", p.Name, st, err)
			continue
		}
		ip := st.IPs[0].Address.Addr()
		if got := groups[ip]; !slices.Equal(got, want[p]) {
			n.t.Errorf("pod %s (%s): on an ENI with groups %v, want %v", p.Name, ip, got, want[p])
		}
	}
}

// sortedGroups returns the ENI's security groups, sorted.
func sortedGroups(e ecssim.ENIState) []string {
	g := slices.Clone(e.SecurityGroups)
	slices.Sort(g)
	return g
}

// ownedIDs returns the IDs of the owned ENIs, sorted.
func (n *node) ownedIDs() []string {
	var ids []string
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	return ids
}

// waitGroups waits until every owned ENI has exactly the groups want
// (sorted).
func (n *node) waitGroups(want []string, timeout time.Duration) {
	n.t.Helper()
	waitFor(n.t, timeout, fmt.Sprintf("every owned ENI on %v", want), func() (bool, string) {
		for _, e := range n.owned(n.sn.Sim.Dump()) {
			if got := sortedGroups(e); !slices.Equal(got, want) {
				return false, fmt.Sprintf("ENI %s has %v", e.ID, got)
			}
		}
		return true, ""
	})
}

// checkUnmoved checks that the owned ENIs are still exactly enis, that
// every pod is bound as before with the address ADD gave it, and that the
// VPC still reaches it.
func (n *node) checkUnmoved(pods []*pod, ips []netip.Addr, enis []string) {
	n.t.Helper()
	if got := n.ownedIDs(); !slices.Equal(got, enis) {
		n.t.Errorf("owned ENIs %v, were %v: a change of groups must not recreate ENIs", got, enis)
	}
	n.checkBindings(pods)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, p := range pods {
		st, err := n.statusOf(p)
		if err != nil || st.Phase != status.Ready || len(st.IPs) == 0 || st.IPs[0].Address.Addr() != ips[i] {
			n.t.Errorf("pod %s: status %+v (err %v), want Ready with %s", p.Name, st, err, ips[i])
		}
		if err := linuxtest.Ping(ctx, n.sn.Topology.VPCNS, ips[i]); err != nil {
			n.t.Errorf("vpc -> %s: %v", p.Name, err)
		}
	}
}

// waitPlanEmpty waits until `enid plan --detailed-exitcode` exits 0.
func (n *node) waitPlanEmpty(ctx context.Context) {
	n.t.Helper()
	waitFor(n.t, 20*time.Second, "plan empty", func() (bool, string) {
		code, out, stderr := n.plan(ctx, "--detailed-exitcode")
		return code == 0, fmt.Sprintf("exit %d\n%s%s", code, out, stderr)
	})
}

// fastOnly returns d on the fast simulator profile (the default) and a
// minute on any other: a bound on how soon something happens holds only
// where the simulator's own delays are known to be short.
func fastOnly(d time.Duration) time.Duration {
	if p := os.Getenv(profileEnv); p != "" && p != ecssim.ProfileFast {
		return time.Minute
	}
	return d
}

// writeConfig replaces the agent's config file.
func (n *node) writeConfig(cfg string) {
	n.t.Helper()
	if err := os.WriteFile(n.cfgFile, []byte(cfg), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

// readFile returns a file's content, failing the test when it cannot.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSecurityGroupsExclusive is issue 16 in exclusive-ENI mode: a pod's
// annotation picks the groups of the whole ENI it gets, and a change of
// eni.securityGroups moves the default set's ENIs (the one in a pod's
// netns and the spare) in place, leaving the annotated pod's ENI alone;
// pods keep their ENIs and addresses. Then DEL of all and the leak check.
func TestSecurityGroupsExclusive(t *testing.T) {
	n := newNode(t, nodeOptions{exclusive: true, configMap: true,
		sim: ecssim.Config{SecurityGroups: []string{ecssim.DefaultSecurityGroup, "sg-web", "sg-new"}}})
	n.swapConfigMap(n.withSecurityGroups("  securityGroups: [sg-sim]\n", exclusivePool))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	plain, web := n.newPod("plain"), n.newPod("web")
	web.Annotations = map[string]string{sgAnnotation: "sg-web"}
	pods := []*pod{plain, web}
	ips := n.addAll(ctx, pods)
	n.checkExclusive(pods, ips)
	want := map[*pod][]string{plain: {"sg-sim"}, web: {"sg-web"}}
	n.checkENIGroups(pods, want)
	n.waitPlanEmpty(ctx)
	before := n.ownedIDs()

	n.swapConfigMap(n.withSecurityGroups("  securityGroups: [sg-new]\n", exclusivePool))
	want[plain] = []string{"sg-new"}
	waitFor(t, 20*time.Second, "the default set's ENIs on sg-new", func() (bool, string) {
		for _, e := range n.owned(n.sn.Sim.Dump()) {
			if g := sortedGroups(e); !slices.Equal(g, []string{"sg-new"}) && !slices.Equal(g, []string{"sg-web"}) {
				return false, fmt.Sprintf("ENI %s has %v", e.ID, g)
			}
		}
		return true, ""
	})
	if got := n.ownedIDs(); !slices.Equal(got, before) {
		t.Errorf("owned ENIs %v, were %v: a change of groups must not recreate ENIs", got, before)
	}
	n.checkExclusive(pods, ips)
	n.checkENIGroups(pods, want)
	for i, p := range pods {
		if err := linuxtest.Ping(ctx, n.sn.Topology.VPCNS, ips[i]); err != nil {
			t.Errorf("vpc -> %s: %v", p.Name, err)
		}
	}
	n.checkPlanEmpty()

	n.delAll(ctx, pods)
	n.waitSettled(1, 1, 60*time.Second)
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		if g := sortedGroups(e); !slices.Equal(g, []string{"sg-new"}) {
			t.Errorf("the spare ENI %s has groups %v, want the default set's [sg-new]", e.ID, g)
		}
	}
}

// checkENIGroups checks that the ENI each pod's status names has, in the
// simulator, exactly the groups want[p] (sorted).
func (n *node) checkENIGroups(pods []*pod, want map[*pod][]string) {
	n.t.Helper()
	groups := map[string][]string{}
	for _, e := range n.owned(n.sn.Sim.Dump()) {
		groups[e.ID] = sortedGroups(e)
	}
	for _, p := range pods {
		st, err := n.statusOf(p)
		if err != nil {
			n.t.Errorf("pod %s: %v", p.Name, err)
			continue
		}
		if got := groups[st.ENIID]; !slices.Equal(got, want[p]) {
			n.t.Errorf("pod %s: its ENI %s has groups %v, want %v", p.Name, st.ENIID, got, want[p])
		}
	}
}

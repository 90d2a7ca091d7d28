package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
)

// fleetSim is a simulator whose clock runs two hours behind, so that every
// ENI a test creates is past the sweep's grace period by the real clock
// `enid sweep` reads, and the config and environment `enid sweep` reads.
type fleetSim struct {
	sim *ecssim.Server
	c   *cloud.Client
	// rawMu guards raw, created on first use.
	rawMu sync.Mutex
	raw   *ecs.Client
	ctx   context.Context
	args  []string // --config-file and --config-dir
}

func newFleetSim(t *testing.T) *fleetSim {
	t.Helper()
	sim, err := ecssim.New(ecssim.Config{
		Delays: ecssim.Delays{Attach: 30 * time.Millisecond, Detach: 30 * time.Millisecond, Delete: 10 * time.Millisecond},
		Clock:  func() time.Time { return time.Now().Add(-2 * time.Hour) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sim.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := sim.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := cloud.New(cloud.Config{Transport: tr, Endpoint: sim.Endpoint(), Region: ecssim.DefaultRegion,
		Credentials: credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret),
		Retry:       cloud.RetryPolicy{MaxAttempts: 4, BaseDelay: 2 * time.Millisecond, MaxDelay: 10 * time.Millisecond, Budget: 5 * time.Second},
		Wait:        cloud.WaitPolicy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Timeout: 10 * time.Second, Settle: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.yaml")
	cfg := `apiVersion: enid.dev/v1alpha1
kind: AgentConfig
eni:
  vSwitches: {cn-hangzhou-h: [vsw-sim-h]}
  securityGroups: [sg-sim]
cloud:
  region: cn-hangzhou
  credentials: {source: env}
`
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envECSEndpoint, sim.Endpoint())
	t.Setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", ecssim.DefaultAccessKeyID)
	t.Setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", ecssim.DefaultAccessKeySecret)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &fleetSim{sim: sim, c: c, ctx: ctx, args: []string{"--config-file", cfgFile, "--config-dir", filepath.Join(dir, "none")}}
}

// rawCreate creates an ENI with a bare SDK client, for what enid's client
// would not send. Calls are serialized: an SDK client is not safe for
// concurrent use, and creating one touches the SDK's globals.
func (fs *fleetSim) rawCreate(req *ecs.CreateNetworkInterfaceRequest) (*ecs.CreateNetworkInterfaceResponse, error) {
	fs.rawMu.Lock()
	defer fs.rawMu.Unlock()
	if fs.raw == nil {
		raw, err := ecs.NewClientWithOptions(ecssim.DefaultRegion, sdk.NewConfig(),
			credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret))
		if err != nil {
			return nil, err
		}
		raw.Domain = fs.sim.Endpoint()
		fs.raw = raw
	}
	return fs.raw.CreateNetworkInterface(req)
}

// sweepCmd runs `enid sweep` with args and returns its output and exit code.
func (fs *fleetSim) sweepCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(append([]string{"sweep"}, fs.args...), args...))
	code := 0
	if err := root.ExecuteContext(fs.ctx); err != nil {
		code = exitCode(err)
	}
	if errOut.Len() > 0 {
		t.Logf("enid sweep %v stderr:\n%s", args, errOut.String())
	}
	return out.String(), code
}

// enidTags are the tags an agent of instance puts on an ENI it creates.
func enidTags(instance string, at time.Time) map[string]string {
	return map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: instance,
		observed.TagCreatedAt: at.UTC().Format(time.RFC3339)}
}

// fleetNode is one simulated node: its instance, and the steps its agent
// takes with each ENI (create, attach, detach, delete) through the real
// client, in the order an agent takes them. legacy nodes create their ENIs
// as an agent before DeleteOnRelease did (without it).
type fleetNode struct {
	fs     *fleetSim
	inst   ecssim.InstanceInfo
	legacy bool
}

// steps of one ENI's life, in order; die after step k.
var eniSteps = []string{"create", "attach", "attached", "detach", "detached", "delete"}

func (n *fleetNode) create() (string, error) {
	now := time.Now().Add(-2 * time.Hour)
	if !n.legacy {
		e, err := n.fs.c.CreateENI(n.fs.ctx, cloud.CreateENIRequest{VSwitchID: n.inst.VSwitchID, SecurityGroups: []string{ecssim.DefaultSecurityGroup},
			Tags: enidTags(n.inst.ID, now), IPv4Count: 2, ClientToken: cloud.ClientToken(n.inst.ID, fmt.Sprint(rand.Int64()))})
		return e.ID, err
	}
	req := ecs.CreateCreateNetworkInterfaceRequest()
	req.VSwitchId, req.SecurityGroupId = n.inst.VSwitchID, ecssim.DefaultSecurityGroup
	var tags []ecs.CreateNetworkInterfaceTag
	for k, v := range enidTags(n.inst.ID, now) {
		tags = append(tags, ecs.CreateNetworkInterfaceTag{Key: k, Value: v})
	}
	req.Tag = &tags
	resp, err := n.fs.rawCreate(req)
	if err != nil {
		return "", err
	}
	return resp.NetworkInterfaceId, nil
}

// run takes the ENI's steps up to and including step last.
func (n *fleetNode) run(last int) error {
	ctx, c := n.fs.ctx, n.fs.c
	id, err := n.create()
	if err != nil {
		return err
	}
	for _, step := range eniSteps[1 : last+1] {
		switch step {
		case "attach":
			err = c.AttachENI(ctx, id, n.inst.ID)
		case "attached":
			_, err = c.WaitENI(ctx, id, observed.ENIInUse)
		case "detach":
			err = c.DetachENI(ctx, id, n.inst.ID)
		case "detached":
			_, err = c.WaitENI(ctx, id, observed.ENIAvailable)
		case "delete":
			err = c.DeleteENI(ctx, id)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", step, id, err)
		}
	}
	return nil
}

// orphans are, from the simulator's own state, the ENIs no agent will
// ever clean up: both of enid's tags, Available, owner released.
func orphans(st ecssim.State) []string {
	alive := map[string]bool{}
	for _, in := range st.Instances {
		alive[in.ID] = true
	}
	var out []string
	for _, e := range st.ENIs {
		if e.Tags[observed.TagManagedBy] == observed.TagManagedByValue && e.Tags[observed.TagOwner] != "" &&
			!alive[e.Tags[observed.TagOwner]] && e.Status == "Available" {
			out = append(out, e.ID)
		}
	}
	return out
}

func eniIDs(st ecssim.State) []string {
	var out []string
	for _, e := range st.ENIs {
		out = append(out, e.ID)
	}
	return out
}

// settle waits until no ENI is in a transition.
func settle(t *testing.T, sim *ecssim.Server) ecssim.State {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := sim.Dump()
		busy := slices.ContainsFunc(st.ENIs, func(e ecssim.ENIState) bool {
			return e.Status == "Attaching" || e.Status == "Detaching" || e.Status == "Deleting"
		})
		if !busy {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("ENIs still in transition: %+v", st.ENIs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSweepFleetDeaths: a fleet's nodes die at random points of their
// ENIs' lives (right after a create, in the middle of an attach or a
// detach, attached, after a detach and before the delete, while
// deleting), some as agents that set no DeleteOnRelease; others live on
// with ENIs in every state, one is stopped, and the account holds ENIs
// that are not enid's. The sweep deletes exactly the orphans: the ENIs
// with enid's tags, Available, whose owner is released; nothing else, and
// a second sweep finds nothing.
func TestSweepFleetDeaths(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	fs := newFleetSim(t)
	const dying, living = 24, 6
	var nodes []*fleetNode
	for i := range dying + living + 1 {
		inst, err := fs.sim.AddInstance(ecssim.InstanceSpec{})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &fleetNode{fs: fs, inst: inst, legacy: i%3 == 0})
	}
	// The dying: each its own random point, the first ones the points the
	// issue names (in the middle of a create, after a detach), so every run
	// has them.
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes)*2)
	for i, n := range nodes[:dying] {
		last := rng.IntN(len(eniSteps))
		switch i {
		case 0, 1:
			last = 0 // created, never attached
		case 2, 3:
			last = 4 // detached, not yet deleted
		}
		// An earlier ENI of the same node may have finished its life.
		earlier := rng.IntN(2) == 0
		wg.Go(func() {
			if earlier {
				if err := n.run(len(eniSteps) - 1); err != nil {
					errs <- err
					return
				}
			}
			if err := n.run(last); err != nil {
				errs <- err
				return
			}
			// Killed now: its transition, if any, is under way.
			if _, _, err := fs.sim.ReleaseInstance(n.inst.ID); err != nil {
				errs <- err
			}
		})
	}
	// The living: ENIs in every state, one created and left Available (in
	// flight), one detached and not yet deleted.
	for _, n := range nodes[dying : dying+living] {
		wg.Go(func() {
			for _, last := range []int{0, 2, 4} {
				if err := n.run(last); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	stopped := nodes[dying+living]
	if err := stopped.run(0); err != nil {
		t.Fatal(err)
	}
	if err := fs.sim.StopInstance(stopped.inst.ID); err != nil {
		t.Fatal(err)
	}
	// Not enid's: untagged, an owner tag without managed-by, managed by
	// another agent, managed-by without an owner, all of dead owners.
	dead := nodes[0].inst.ID
	for _, tags := range []map[string]string{
		nil,
		{observed.TagOwner: dead},
		{observed.TagManagedBy: "terway", observed.TagOwner: dead},
		{observed.TagManagedBy: observed.TagManagedByValue},
	} {
		req := ecs.CreateCreateNetworkInterfaceRequest()
		req.VSwitchId, req.SecurityGroupId = nodes[0].inst.VSwitchID, ecssim.DefaultSecurityGroup
		var ts []ecs.CreateNetworkInterfaceTag
		for k, v := range tags {
			ts = append(ts, ecs.CreateNetworkInterfaceTag{Key: k, Value: v})
		}
		if len(ts) > 0 {
			req.Tag = &ts
		}
		if _, err := fs.rawCreate(req); err != nil {
			t.Fatal(err)
		}
	}

	before := settle(t, fs.sim)
	want := orphans(before)
	byOwner := map[string]string{}
	for _, e := range before.ENIs {
		byOwner[e.ID] = e.Tags[observed.TagOwner]
	}
	for _, id := range []string{nodes[0].inst.ID, nodes[2].inst.ID} {
		if !slices.ContainsFunc(want, func(e string) bool { return byOwner[e] == id }) {
			t.Fatalf("node %s left no orphan: the test does not test what it says", id)
		}
	}
	t.Logf("%d ENIs, %d orphans of %d dead nodes", len(before.ENIs), len(want), dying)

	// Dry run: the orphans, and nothing changes.
	out, code := fs.sweepCmd(t, "--dry-run", "--output", "json", "--detailed-exitcode")
	if code != 2 {
		t.Fatalf("dry run exit %d, want 2:\n%s", code, out)
	}
	var plan struct {
		Complete bool
		Delete   []struct{ ENIID string }
		Keep     []struct{ ENIID, Code string }
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	var got []string
	for _, d := range plan.Delete {
		got = append(got, d.ENIID)
	}
	if !plan.Complete || !slices.Equal(got, want) {
		t.Fatalf("dry run deletes %v, want the orphans %v", got, want)
	}
	if after := fs.sim.Dump(); !slices.Equal(eniIDs(after), eniIDs(before)) {
		t.Fatal("the dry run changed the account")
	}

	fs.sim.ResetCounters()
	out, code = fs.sweepCmd(t)
	if code != 0 {
		t.Fatalf("sweep exit %d:\n%s", code, out)
	}
	t.Logf("enid sweep:\n%s", out)
	after := settle(t, fs.sim)
	var wantLeft []string
	for _, id := range eniIDs(before) {
		if !slices.Contains(want, id) {
			wantLeft = append(wantLeft, id)
		}
	}
	if got := eniIDs(after); !slices.Equal(got, wantLeft) {
		t.Errorf("ENIs left %v, want %v", got, wantLeft)
	}
	if n := fs.sim.Counters()["DeleteNetworkInterface"]["ok"]; n != len(want) {
		t.Errorf("%d deletions, want %d", n, len(want))
	}
	if err := fs.sim.Check(); err != nil {
		t.Fatal(err)
	}

	out, code = fs.sweepCmd(t, "--detailed-exitcode")
	if code != 0 || !bytes.Contains([]byte(out), []byte("No changes.")) {
		t.Errorf("second sweep exit %d:\n%s", code, out)
	}
	// The stopped node's in-flight ENI goes only when stopped owners are
	// given up.
	out, code = fs.sweepCmd(t, "--stopped-owners", "--detailed-exitcode")
	t.Logf("enid sweep --stopped-owners:\n%s", out)
	if code != 2 || !bytes.Contains([]byte(out), []byte("owner-stopped")) {
		t.Errorf("sweep of stopped owners exit %d:\n%s", code, out)
	}
	for _, e := range settle(t, fs.sim).ENIs {
		if e.Tags[observed.TagOwner] == stopped.inst.ID && e.Status == "Available" {
			t.Errorf("stopped owner's ENI %s kept", e.ID)
		}
	}
}

// TestSweepIncomplete: when the owners cannot be described the sweep
// deletes nothing and fails.
func TestSweepIncomplete(t *testing.T) {
	fs := newFleetSim(t)
	inst, err := fs.sim.AddInstance(ecssim.InstanceSpec{})
	if err != nil {
		t.Fatal(err)
	}
	n := &fleetNode{fs: fs, inst: inst}
	if err := n.run(0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fs.sim.ReleaseInstance(inst.ID); err != nil {
		t.Fatal(err)
	}
	fs.sim.InjectFault(ecssim.Fault{Action: "DescribeInstances", Code: "Forbidden.RAM", Count: 100})
	out, code := fs.sweepCmd(t)
	if code != 1 || !bytes.Contains([]byte(out), []byte("INCOMPLETE")) {
		t.Errorf("exit %d:\n%s", code, out)
	}
	if len(orphans(fs.sim.Dump())) != 1 {
		t.Error("an incomplete sweep deleted")
	}
}

package reconcile

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/reconcile/status"
)

// goneNetNSDatapath is the no-datapath mode with the pod-netns guard of
// linux.Datapath: the namespaces named in gone do not exist (their pods
// ended without a DEL), the others do.
type goneNetNSDatapath struct {
	*NoDatapath
	gone map[string]bool
}

func (d goneNetNSDatapath) CheckNetNS(path string) error {
	if d.gone[path] {
		return fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
	}
	return nil
}

// TestAgentRunsOnVirtualTime: an agent given a clock.Virtual runs on it
// alone. An entry whose pod's netns is gone is Pending (netns-gone) for
// staleEntryTimeout, a minute, then Failed: the minute passes by moving
// the clock, not by waiting for it, so the test takes far less than a
// minute of wall time. The agent must wake by itself when the minute is
// up (its retry timer is on the clock, armed at the planner's deadline),
// and stamp statuses and the heartbeat with the clock's time: an agent
// that read package time anywhere on that path would leave the entry
// Pending here, or stamp a time of the wall clock.
func TestAgentRunsOnVirtualTime(t *testing.T) {
	wallStart := time.Now()
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 0\n  maxIdle: 4\nstaleEntryTimeout: 1m\n")
	// Years away from the wall clock, so a time read from it shows.
	start := time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)
	v := clock.NewVirtual(start)
	cl, err := cloud.New(cloud.Config{Endpoint: w.sim.Endpoint(), Region: w.sim.Dump().Region, Clock: v,
		Credentials: credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, ecssim.DefaultAccessKeySecret)})
	if err != nil {
		t.Fatal(err)
	}
	const netns = "/var/run/netns/ended-pod"
	e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: fmt.Sprintf("%064x", 7), IfName: "eth0",
		NetNS: netns, PodNamespace: "default", PodName: "ended", PodUID: "uid-ended", Created: v.Now()}
	if _, err := desired.NewEntryStore(w.paths.Entries).Write(e); err != nil {
		t.Fatal(err)
	}
	key := e.Key().String()
	a, err := New(Config{Paths: w.paths, InstanceID: w.inst.ID, NodeName: "node-1", Cloud: cl, Clock: v,
		Datapath: goneNetNSDatapath{NewNoDatapathMust(t), map[string]bool{netns: true}},
		// No file watcher: its debounce would be one more timer on the
		// clock for the test to move; the entry is written before Run.
		NoWatch: true,
		// Off the minute's grid (7s, ..., 56s, 63s): when the minute is up
		// the retry timer alone is due, so only it can wake the agent.
		Heartbeat: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer runAgent(t, a)()

	phase := func() status.Attachment { return w.statuses()[key] }
	w.waitFor("the ended pod's entry Pending with netns-gone", 10*time.Second, func() bool {
		s := phase()
		return s.Phase == status.Pending && s.ReasonCode == "netns-gone"
	})
	if got := phase().Updated; !got.Equal(start) {
		t.Fatalf("the Pending status is stamped %v: want the virtual clock's %v (the clock has not moved)", got, start)
	}

	// Half a minute on: still Pending. The move wakes the heartbeat,
	// which may bring a pass; none may give up the entry early.
	v.Advance(30 * time.Second)
	time.Sleep(100 * time.Millisecond) // wall time for a pass the move caused, if any
	if s := phase(); s.Phase != status.Pending {
		t.Fatalf("30s after its netns went the entry is %s (%s): want Pending until staleEntryTimeout (1m)", s.Phase, s.Reason)
	}

	// The minute is up: the agent wakes by itself, on the clock (a retry
	// timer on the wall clock would wait another 30s of wall time).
	v.Advance(30 * time.Second)
	w.waitFor("the ended pod's entry Failed once staleEntryTimeout passed on the clock", 10*time.Second, func() bool {
		return phase().Phase == status.Failed
	})
	s := phase()
	if s.ReasonCode != "netns-gone" || !strings.Contains(s.Reason, "given up after staleEntryTimeout 1m0s") {
		t.Errorf("Failed status: %s %q", s.ReasonCode, s.Reason)
	}
	if want := start.Add(time.Minute); !s.Updated.Equal(want) {
		t.Errorf("the Failed status is stamped %v, want %v: the clock's time when the minute was up", s.Updated, want)
	}

	// The heartbeat is written on the clock's ticks with the clock's time.
	v.Advance(3 * time.Second) // to the tick at 63s
	w.waitFor("a heartbeat stamped with the virtual clock", 10*time.Second, func() bool {
		hb, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && !hb.Heartbeat.Before(start.Add(time.Minute))
	})
	hb, _ := status.ReadAgent(w.paths.AgentFile)
	if d := hb.Heartbeat.Sub(start); d > time.Minute+3*time.Second {
		t.Errorf("heartbeat at start+%v: later than the clock ever read", d)
	}

	took := time.Since(wallStart)
	t.Logf("a minute and 3s on the agent's clock took %v of wall time", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("the test took %v of wall time: the minute of staleEntryTimeout must pass on the clock, not on the wall", took)
	}
}

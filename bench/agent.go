package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/internal/poll"
	"github.com/enidnet/enid/reconcile"
	"github.com/enidnet/enid/reconcile/status"
)

// The cloud client's wait policy, as cmd/enid/wiring.go sets it for the
// agent (keep the two in step: the cold burst measures it).
const (
	waitInitial = 100 * time.Millisecond
	waitMax     = time.Second
)

// agentOptions describe one in-process agent.
type agentOptions struct {
	dir        string // its files: etc/, run/, state/
	sim        *ecssim.Server
	region     string // the simulator's region ("": read from a Dump)
	instanceID string
	nodeName   string
	config     string // the whole config.yaml
	datapath   reconcile.Datapath
	noWatch    bool
	heartbeat  time.Duration
	rate       cloud.RateLimit // zero: the config's default
	// hints are the kubelet and runtime files the agent reads (zero: none,
	// a simulated node has no kubelet).
	hints desired.HintSources
	log   *slog.Logger
}

// agent is an agent running in this process; Stop ends it.
type agent struct {
	*reconcile.Agent
	dir     string
	entries *desired.EntryStore
	status  *status.Store
	cloud   *cloud.Client
	stop    context.CancelFunc
	done    chan error
}

func (a *agent) configFile() string { return filepath.Join(a.dir, "etc", "config.yaml") }
func (a *agent) agentFile() string  { return filepath.Join(a.dir, "run", "agent.json") }

// startAgent wires the cloud client and the agent as `enid run` does, and
// runs it until Stop.
func startAgent(ctx context.Context, o agentOptions) (*agent, error) {
	for _, d := range []string{"etc/config.d", "run", "state"} {
		if err := os.MkdirAll(filepath.Join(o.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(o.dir, "etc", "config.yaml"), []byte(o.config), 0o644); err != nil {
		return nil, err
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	rl := o.rate
	if rl.QPS == 0 {
		rl = cloud.RateLimit{QPS: desired.DefaultQPS, Burst: desired.DefaultBurst}
	}
	keys := map[string]string{
		cloud.EnvAccessKeyID:     ecssim.DefaultAccessKeyID,
		cloud.EnvAccessKeySecret: ecssim.DefaultAccessKeySecret,
	}
	creds, err := cloud.CredentialsFrom(cloud.CredentialsConfig{Source: cloud.CredentialsEnv}, func(k string) string { return keys[k] }, nil)
	if err != nil {
		return nil, err
	}
	if o.region == "" {
		o.region = o.sim.Dump().Region
	}
	clk := clock.Real{} // one clock for the agent and its client, as `enid run` wires them
	metrics := reconcile.NewMetrics()
	c, err := cloud.New(cloud.Config{Endpoint: o.sim.Endpoint(), Region: o.region, Credentials: creds,
		RateLimit: rl, Observer: metrics, Logger: o.log, Clock: clk,
		Wait: cloud.WaitPolicy{Initial: waitInitial, Max: waitMax}})
	if err != nil {
		return nil, err
	}
	dp := o.datapath
	if dp == nil {
		if dp, err = reconcile.NewNoDatapath(""); err != nil {
			return nil, err
		}
	}
	p := reconcile.DefaultPaths()
	p.Config = desired.ConfigSource{Main: filepath.Join(o.dir, "etc", "config.yaml"), DropInDir: filepath.Join(o.dir, "etc", "config.d")}
	p.Entries = filepath.Join(o.dir, "run", "pods")
	p.Statuses = filepath.Join(o.dir, "run", "status")
	p.AgentFile = filepath.Join(o.dir, "run", "agent.json")
	p.StateDir = filepath.Join(o.dir, "state")
	p.Hints = o.hints
	ra, err := reconcile.New(reconcile.Config{Paths: p, InstanceID: o.instanceID, NodeName: o.nodeName,
		Cloud: c, Datapath: dp, Logger: o.log, Metrics: metrics, NoWatch: o.noWatch, Heartbeat: o.heartbeat, Version: "bench", Clock: clk})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	a := &agent{Agent: ra, dir: o.dir, entries: desired.NewEntryStore(p.Entries), status: status.NewStore(p.Statuses),
		cloud: c, stop: cancel, done: make(chan error, 1)}
	go func() { a.done <- ra.Run(actx) }()
	return a, nil
}

// Stop ends the agent and waits for it.
func (a *agent) Stop() error {
	a.stop()
	err := <-a.done
	a.cloud.CloseIdleConnections()
	return err
}

// pool reads the agent's heartbeat (zero value when it has none yet).
func (a *agent) heartbeat() (status.Agent, bool) {
	h, err := status.ReadAgent(a.agentFile())
	return h, err == nil
}

// waitPool waits until the heartbeat satisfies cond.
func (a *agent) waitPool(ctx context.Context, timeout time.Duration, cond func(status.Agent) bool) error {
	return poll.Until(ctx, clock.Real{}, timeout, 10*time.Millisecond, func() (bool, error) {
		select {
		case err := <-a.done:
			a.done <- err
			return false, fmt.Errorf("the agent stopped: %v", err)
		default:
		}
		h, ok := a.heartbeat()
		return ok && cond(h), nil
	})
}

// pod is a pod entry the harness wrote, as the CNI plugin would.
type pod struct {
	key desired.Key
	rev string
	// created is when the entry was written (what CNI ADD does).
	created time.Time
}

// addPod writes an entry for pod i (what CNI ADD writes) and returns it.
func (a *agent) addPod(name string, netns string, now time.Time) (pod, error) {
	return a.addPodAnnotated(name, netns, now, nil)
}

// addPodAnnotated is addPod for a pod with the given annotations (as the
// runtime passes them to CNI).
func (a *agent) addPodAnnotated(name string, netns string, now time.Time, annotations map[string]string) (pod, error) {
	e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: containerID(a.dir + "/" + name), IfName: "eth0",
		NetNS: netns, PodNamespace: "bench", PodName: name, PodUID: "uid-" + name, Created: now.UTC(), Annotations: annotations}
	if e.NetNS == "" {
		e.NetNS = "/var/run/netns/" + name
	}
	rev, err := a.entries.Write(e)
	if err != nil {
		return pod{}, fmt.Errorf("write entry %s: %w", name, err)
	}
	return pod{key: e.Key(), rev: rev, created: now}, nil
}

// delPod removes a pod's entry (what CNI DEL does).
func (a *agent) delPod(p pod) error {
	if err := a.entries.Remove(p.key); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove entry %s: %w", p.key, err)
	}
	return nil
}

// podStatus reads a pod's status: its phase when it answers the pod's
// revision, "" otherwise.
func (a *agent) podStatus(p pod) (status.Attachment, status.Phase) {
	st, err := a.status.Read(p.key.ContainerID, p.key.IfName)
	if err != nil || st.Revision != p.rev {
		return st, ""
	}
	return st, st.Phase
}

// containerID is a stable 64-hex-digit container ID for a name.
func containerID(name string) string {
	h := sha256.Sum256([]byte(name))
	return hex.EncodeToString(h[:])
}

// configYAML is a shared-ENI config over the simulator's vSwitches of zone
// with the given pool block (YAML lines under "pool:", indented two spaces)
// and extra top-level lines.
func configYAML(sim *ecssim.Server, zone, pool, extra string) string {
	return configYAMLENI(sim, zone, "", pool, extra)
}

// configYAMLENI is configYAML with extra lines under "eni:" (indented two
// spaces), such as the IPv4 allocation mode.
func configYAMLENI(sim *ecssim.Server, zone, eni, pool, extra string) string {
	var ids []string
	for _, v := range sim.Dump().VSwitches {
		if v.ZoneID == zone {
			ids = append(ids, v.ID)
		}
	}
	sort.Strings(ids)
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmode: shared-eni\n", desired.ConfigAPIVersion, desired.ConfigKind)
	fmt.Fprintf(&b, "eni:\n  vSwitches:\n    %s: [%s]\n  securityGroups: [%s]\n", zone, strings.Join(ids, ", "), ecssim.DefaultSecurityGroup)
	b.WriteString(eni)
	if pool != "" {
		b.WriteString("pool:\n" + pool)
	}
	b.WriteString(extra)
	return b.String()
}

// checkBindings reports pods that share an address (invariant 2) among
// the Ready statuses of the given agents.
func checkBindings(agents []*agent) []string {
	holder := map[netip.Addr]string{}
	var bad []string
	for _, a := range agents {
		sts, _, err := a.status.ReadAll()
		if err != nil {
			bad = append(bad, fmt.Sprintf("read statuses of %s: %v", a.dir, err))
			continue
		}
		for _, st := range sts {
			if st.Phase != status.Ready {
				continue
			}
			for _, ip := range st.IPs {
				who := a.dir + "/" + st.ContainerID[:12]
				if prev, ok := holder[ip.Address.Addr()]; ok {
					bad = append(bad, fmt.Sprintf("%s bound to both %s and %s", ip.Address.Addr(), prev, who))
				}
				holder[ip.Address.Addr()] = who
			}
		}
	}
	return bad
}

// simCheck runs the simulator's own consistency check.
func simCheck(r *Result, sim *ecssim.Server) {
	if err := sim.Check(); err != nil {
		r.broken("simulator Check: %v", err)
	}
}

// calls sums the simulator's counters: all calls, mutations, throttled.
type callCount struct {
	total, mutations, throttled, failed int
}

func countCalls(c map[string]map[string]int) callCount {
	var n callCount
	for action, outcomes := range c {
		mut := !strings.HasPrefix(action, "Describe")
		for outcome, k := range outcomes {
			n.total += k
			if mut {
				n.mutations += k
			}
			switch {
			case strings.HasPrefix(outcome, "Throttling"):
				n.throttled += k
			case outcome != "ok":
				n.failed += k
			}
		}
	}
	return n
}

// callBreakdown renders the counters as "Action n, ..." by count, largest
// first.
func callBreakdown(c map[string]map[string]int) string {
	type kv struct {
		action string
		n      int
	}
	var all []kv
	for a, outcomes := range c {
		n := 0
		for _, k := range outcomes {
			n += k
		}
		all = append(all, kv{a, n})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].action < all[j].action
	})
	var parts []string
	for _, x := range all {
		parts = append(parts, fmt.Sprintf("%s %d", x.action, x.n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

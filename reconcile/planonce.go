package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// Planning is the half of a pass that the agent and `enid plan` share, so
// that `enid plan` shows exactly what the agent's next pass would do: it
// completes desired state as read from the files (pod facts from the
// Kubernetes link, the pod-netns guard) and plans it against an
// observation with the planner's memory. It writes nothing: actions,
// statuses and the memory are the agent's.
type Planning struct {
	// Datapath answers the pod-netns guard when it can (linux.Datapath);
	// nil or a datapath without CheckNetNS: no guard.
	Datapath Datapath
	// Kube gives pod facts; nil: none.
	Kube Kube
	// NodeName is the planner's NodeName.
	NodeName string
	// Logger logs refusals (discarded when nil).
	Logger *slog.Logger
	// netns holds the datapath's verdict on each entry's netns, by entry
	// revision (refuseNetNS), so a pass checks only what changed.
	netns map[observed.AttachmentKey]netnsVerdict
	// recheck and recheckAll ask refuseNetNS to look again whether the
	// namespaces of these entries (of all) still exist (recheckNetNS).
	recheck    map[observed.AttachmentKey]bool
	recheckAll bool
	// gone counts the entries whose namespace the last check found gone
	// (missingNetNS looks for them only when there are some).
	gone int
}

func (pl *Planning) log() *slog.Logger {
	if pl.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return pl.Logger
}

// newPlanning returns the Planning of an agent wired by cfg.
func newPlanning(cfg Config) Planning {
	return Planning{Datapath: cfg.Datapath, Kube: cfg.Kube, NodeName: cfg.NodeName, Logger: cfg.Logger}
}

// Complete applies what the files alone do not say to d as desired.Load
// read it: pod facts from the Kubernetes link (addPodFacts), then the
// pod-netns guard (refuseNetNS).
func (pl *Planning) Complete(d *desired.State) {
	pl.addPodFacts(d)
	pl.refuseNetNS(d)
}

// Plan plans d (completed, with its hints) against o with the planner's
// memory m at now, in the arrays of spent, a plan nobody reads any more
// (planner.Options.Recycle; zero to allocate).
func (pl *Planning) Plan(d desired.State, o observed.State, m planner.Memory, now time.Time, spent planner.Plan) planner.Plan {
	o.Node.MissingNetNS = pl.missingNetNS(d)
	opt := pl.Options(now)
	opt.Memory, opt.Recycle = m, spent
	return planner.Make(d, o, opt)
}

// Options are the planner's options of a pass at now: the node's name,
// and whether it is cordoned (from the Kubernetes link). NextDeadline
// takes the same.
func (pl *Planning) Options(now time.Time) planner.Options {
	return planner.Options{Now: now, NodeName: pl.NodeName, Unschedulable: pl.unschedulable()}
}

// PlanResult is what PlanOnce planned and from what.
type PlanResult struct {
	Plan     planner.Plan
	Desired  desired.State
	Observed observed.State
}

// ErrConfigInvalid is wrapped by PlanOnce's error when the config on disk
// is invalid (PlanResult.Desired.ConfigProblems lists why): nothing is
// planned. The agent keeps its last good config in that case; a preview
// of a broken config has none to keep.
var ErrConfigInvalid = errors.New("the config is invalid: nothing planned")

// PlanOnce is one read-only observe-and-plan pass as the agent's next pass
// would make it (`enid plan`), wired as the agent is (in is the agent's
// Config; the loop's settings are not used): desired state from the files
// (config, entries, deletion records, hints) completed as the agent
// completes it (Planning.Complete), a full observation and the memory the
// agent persisted. When o is not nil it is planned against instead of
// observing. PlanOnce writes no file (no status, no memory, no deletion
// record) and calls nothing that changes the cloud or the node.
func PlanOnce(ctx context.Context, in Config, o *observed.State) (PlanResult, error) {
	var r PlanResult
	now := clock.OrReal(in.Clock).Now()
	var inst observed.Instance
	if o != nil {
		inst = o.Instance
	} else {
		var err error
		if inst, err = in.Cloud.Instance(ctx, in.InstanceID); err != nil {
			return r, fmt.Errorf("describe instance %s: %w", in.InstanceID, err)
		}
	}
	loader := desired.NewConfigLoader(in.Paths.Config, desired.NodeFacts{NodeName: in.NodeName, Zone: inst.ZoneID,
		InstanceType: inst.InstanceType, Labels: nodeLabels(in.Kube, in.NodeLabels)})
	r.Desired = desired.Load(loader, desired.NewEntryStore(in.Paths.Entries), in.Paths.Hints)
	if len(r.Desired.ConfigProblems) > 0 {
		return r, ErrConfigInvalid
	}
	pl := newPlanning(in)
	pl.Complete(&r.Desired)
	if o != nil {
		r.Observed = *o
	} else {
		src := NewSources(in.Cloud, in.Datapath, status.NewStore(in.Paths.Statuses))
		src.Cloud = cloudSource{c: in.Cloud, known: inst} // described above: not again
		r.Observed = observed.Collect(ctx, src, in.InstanceID, vSwitchQuery(r.Desired.Config), now)
	}
	m, err := ReadMemory(in.Paths.StateDir)
	if err != nil {
		return r, err
	}
	r.Plan = pl.Plan(r.Desired, r.Observed, m, now, planner.Plan{})
	return r, nil
}

// nodeLabels returns the labels overrides match on: the Node's (from the
// link, when it has seen the Node), with the configured ones
// (--node-labels) on top, for nodes whose API access is missing or for an
// operator's override.
func nodeLabels(k Kube, configured map[string]string) map[string]string {
	if k == nil {
		return configured
	}
	l, ok := k.NodeLabels()
	if !ok {
		return configured
	}
	if l == nil {
		l = map[string]string{}
	}
	maps.Copy(l, configured)
	return l
}

// vSwitchQuery names the vSwitches the config names, in every zone, and
// the tags of its selector.
func vSwitchQuery(cfg desired.Config) observed.VSwitchQuery {
	var q observed.VSwitchQuery
	for _, ids := range cfg.ENI.VSwitches {
		q.IDs = append(q.IDs, ids...)
	}
	if sel := cfg.ENI.VSwitchSelector; sel != nil {
		q.Tags = sel.Tags
	}
	return q
}

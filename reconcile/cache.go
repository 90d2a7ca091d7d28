package reconcile

import (
	"sync"
	"time"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// cache is the agent's observed state between full observations. Action
// results update it at once (and destructive actions update it before they
// run, so no pass hands out an address that is on its way out); a full
// observation replaces it on start, on resync and after errors.
//
// A snapshot handed to the planner shares backing arrays with the cache;
// planner.Effects copies them before the next change, never after.
type cache struct {
	mu sync.Mutex // guards everything below
	// fx holds the observed state and applies actions to it in place
	// (planner.Effects): a snapshot costs one copy of the lists at the next
	// change, not one per action.
	fx planner.Effects
	// have is false until the first full observation.
	have bool
	// refreshed is when the last full observation was taken.
	refreshed time.Time
	// dirty asks for a full observation at the next opportunity.
	dirty bool
	// starved: pods wait while a vSwitch is marked exhausted (setStarved).
	starved bool
	// actedAt is when a cloud action of this agent last ended
	// (noteCloudAction); conflictAt when one last failed because the
	// cloud's state was not what the cache said (noteConflict).
	actedAt, conflictAt time.Time
	// nodeStale: a node action found something missing, so the node is to
	// be read again (not the cloud); missing names the attachments whose
	// namespace is to be checked again (markNodeStale, takeNodeStale).
	nodeStale bool
	missing   []observed.AttachmentKey
	// gen counts the changes to the state and the ends of actions (tick):
	// a plan made from a snapshot of generation g has seen every action
	// that ended at or before g (view, executor.dispatch).
	gen uint64
}

// markNodeStale asks for a read of the node (not of the cloud) and a new
// check of the namespaces of the attachments named.
func (c *cache) markNodeStale(keys ...observed.AttachmentKey) {
	c.mu.Lock()
	c.nodeStale = true
	c.missing = append(c.missing, keys...)
	c.mu.Unlock()
}

// takeNodeStale returns and clears what markNodeStale asked for.
func (c *cache) takeNodeStale() (stale bool, keys []observed.AttachmentKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stale, keys = c.nodeStale, c.missing
	c.nodeStale, c.missing = false, nil
	return stale, keys
}

func (c *cache) snapshot() (observed.State, bool) {
	st, have, _ := c.view()
	return st, have
}

// view is snapshot with the generation of the state it returns.
func (c *cache) view() (observed.State, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fx.State(), c.have, c.gen
}

// generation returns the current generation.
func (c *cache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// tick marks the end of an action (after what it did was applied) and
// returns the generation from which snapshots show it: a snapshot taken
// before has a lower one.
func (c *cache) tick() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	return c.gen
}

func (c *cache) replace(st observed.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.fx.Replace(st)
	c.have, c.refreshed, c.dirty = true, st.At, !st.Complete
}

// routine reports whether a full observation now would be routine (one
// was taken and nothing asked for another), with the current state.
func (c *cache) routine() (bool, observed.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.have && !c.dirty, c.fx.State()
}

func (c *cache) markDirty() {
	c.mu.Lock()
	c.dirty = true
	c.mu.Unlock()
}

// transitRefresh is how often a full observation is taken while an ENI is
// in an asynchronous transition that no action of this agent waits for (an
// attach a previous run started before it crashed, a detach by someone
// else): nothing else would show its end before the next resync.
const transitRefresh = time.Second

// needsRefresh reports whether a full observation is due.
func (c *cache) needsRefresh(now time.Time, resync time.Duration) bool {
	at, ok := c.refreshAt(resync)
	return ok && !now.Before(at)
}

// refreshAt is when a full observation falls due (the zero time: it is
// due now): the last one's age reaching the resync period, or sooner
// while an ENI is in transit, pods are starved, or the last one may have
// missed this agent's own last action. ok is false when nothing will make
// one due but a change (markDirty).
func (c *cache) refreshAt(resync time.Duration) (at time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.have || c.dirty {
		return time.Time{}, true
	}
	due := func(d time.Duration) {
		if t := c.refreshed.Add(d); !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if resync > 0 {
		due(resync)
	}
	if c.inTransit() {
		due(transitRefresh)
	}
	if c.starved {
		due(starvedRefresh)
	}
	if !c.refreshed.Before(c.actedAt) && c.refreshed.Sub(c.actedAt) < confirmRefresh {
		due(confirmRefresh)
	}
	if settled := c.conflictAt.Add(confirmRefresh); !c.conflictAt.IsZero() && c.refreshed.Before(settled) {
		due(settled.Sub(c.refreshed))
	}
	return at, ok
}

// noteConflict records that a cloud action failed at t because the
// cloud's state was not what the cache said (cloud.ErrConflict: an ENI
// attached by a run that was killed, shown Available by a stale
// describe). The full observation that follows (markDirty) can be as
// stale as the one that misled the action, so one is taken again once
// describes have caught up (confirmRefresh after t), whatever this agent
// did in between: the simulation found a restarted agent that attached a
// new ENI instead and left the old one InUse and unconfigured until the
// resync (docs/simulation.md).
func (c *cache) noteConflict(t time.Time) {
	c.mu.Lock()
	if t.After(c.conflictAt) {
		c.conflictAt = t
	}
	c.mu.Unlock()
}

// noteCloudAction records that a cloud action of this agent ended at t. A
// full observation taken less than confirmRefresh after it may show the
// ENI as it was before the action (describes lag) and replace what the
// executor recorded of it, so it is taken again once the lag has passed.
func (c *cache) noteCloudAction(t time.Time) {
	c.mu.Lock()
	if t.After(c.actedAt) {
		c.actedAt = t
	}
	c.mu.Unlock()
}

// confirmRefresh is when a full observation taken less than this after a
// cloud action of this agent ended is taken again: describes lag changes
// (about a second on ECS), so it can show an ENI as it was before the
// action (addresses just assigned missing, an ENI attached by the previous
// run still Available) and overwrite what the executor recorded, and
// nothing else would correct that before the next resync. It outlasts the
// lag (cloud.WaitPolicy.Settle likewise). (Taking every agent's first
// observation again as well cost the fleet join 40% more calls; a replayed
// create brings back an ENI a stale first observation missed.)
const confirmRefresh = 2 * time.Second

// starvedRefresh is how often a full observation is taken while pods wait
// and a vSwitch is marked exhausted: it shows addresses freed there (which
// lifts the mark, planner.Memory.ExhaustedFree) within about one back-off
// of a failed create, not at the next resync.
const starvedRefresh = 5 * time.Second

// setStarved records whether pods wait while a vSwitch is marked exhausted.
func (c *cache) setStarved(b bool) {
	c.mu.Lock()
	c.starved = b
	c.mu.Unlock()
}

// inTransit reports, with mu held, whether an ENI is Attaching, Detaching
// or Deleting. The agent's own transitions update the cache when they end,
// and the agent takes no full observation while actions run, so only the
// ones it does not wait for keep this true across passes.
func (c *cache) inTransit() bool {
	for _, e := range c.fx.Peek().ENIs {
		switch e.Status {
		case observed.ENIAttaching, observed.ENIDetaching, observed.ENIDeleting:
			return true
		}
	}
	return false
}

// before applies what action a gives up, before it runs
// (planner.Before).
func (c *cache) before(a planner.Action) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.fx.Before(a)
}

// apply records the result of action a (planner.Apply).
func (c *cache) apply(a planner.Action, r planner.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.fx.Apply(a, r)
}

// failed records what a failed action a leaves; refused: the call did
// nothing (planner.Failed).
func (c *cache) failed(a planner.Action, refused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.fx.Failed(a, refused)
}

// eni returns the ENI with that ID.
func (c *cache) eni(id string) (observed.ENI, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.fx.Peek().ENIs {
		if e.ID == id {
			return e, true
		}
	}
	return observed.ENI{}, false
}

// publishedKey finds the attachment published under the name s.
func (c *cache) publishedKey(s string) (observed.AttachmentKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.fx.Peek().Node.Published {
		if len(b.Key.ContainerID)+1+len(b.Key.IfName) == len(s) && b.Key.String() == s {
			return b.Key, true
		}
	}
	return observed.AttachmentKey{}, false
}

// publishedReady reports whether a Ready status for that revision is out.
func (c *cache) publishedReady(key observed.AttachmentKey, revision string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.fx.Peek().Node.Published {
		if b.Key == key {
			return b.Phase == "Ready" && b.Revision == revision
		}
	}
	return false
}

// vSwitchOf returns the vSwitch of the ENI with that ID ("" if unknown).
func (c *cache) vSwitchOf(eniID string) string {
	e, _ := c.eni(eniID) // unknown: the zero ENI, whose vSwitch is ""
	return e.VSwitchID
}

// tally counts the published statuses by phase: what the status files
// say, which is what the CNI plugin and `enid status` read, not what the
// last plan meant to publish (a setup that failed leaves Pending where the
// plan said Ready); phases without a status are absent. It also counts the
// ENIs in use that instance owns. It reads the cache under its lock and
// hands nothing out: a snapshot would make the next action's edit copy
// the list it changes (planner.Effects), and the heartbeat and the
// metrics read these after every pass, while that pass's actions run.
func (c *cache) tally(instance string) (phases map[status.Phase]int, enis int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.fx.Peek()
	phases = map[status.Phase]int{}
	for _, s := range st.Node.Published {
		phases[status.Phase(s.Phase)]++
	}
	for _, e := range st.ENIs {
		if e.Owned(instance) && e.Status == observed.ENIInUse {
			enis++
		}
	}
	return phases, enis
}

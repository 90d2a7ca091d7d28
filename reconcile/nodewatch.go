package reconcile

import (
	"context"
	"slices"
	"time"

	"github.com/enidnet/enid/observed"
)

// Drift on the node (a pod's host route or rule, an ENI's table route or
// address removed by hand) is repaired within a second: the datapath
// reports rtnetlink changes in the node namespace, the loop waits for them
// to settle (nodeDebounce), then re-reads only the node (netlink), never
// the cloud, and plans. enid's own changes are reported as well; the node
// is re-read only when no node action runs (a read racing one would undo
// its result in the cache), so a burst of own changes costs one read and
// one pass that plans nothing: it cannot loop. A change reported while the
// agent's own node actions run, or just after, is probably theirs: it is
// read no sooner than ownRecheck after the last read (or twenty times as
// long as that read took, on a node whose pods make reads long), so a
// stream of pods costs at most about three node reads a second, and drift
// in the middle of it is still repaired within a third of a second or so
// (a second or so with a thousand pods).

// nodeWatcher is a datapath that reports changes in the node namespace
// and reads that namespace alone (linux.Datapath: Watch, ObserveNode).
type nodeWatcher interface {
	Watch(ctx context.Context, changed func()) error
	ObserveNode(ctx context.Context) (observed.Node, error)
}

// nodeDebounce is the quiet time after a node change before the node is
// read again; a steady stream of changes is read at least every
// nodeDebounceMax.
const nodeDebounce = 20 * time.Millisecond

// ownWindow is how long after the agent's last node action a reported
// change counts as probably its own; ownRecheck is the least time between
// two node reads for such changes, and ownReadShare bounds the loop's time
// they take: the next one waits at least that many times as long as the
// last read took. A read lists every pod's veth, routes and rules (tens of
// milliseconds with a thousand pods) and holds the pass that makes it, so
// a stream of pod starts on a full node would otherwise spend a tenth of
// its time reading back its own changes.
const (
	ownWindow    = 100 * time.Millisecond
	ownRecheck   = 300 * time.Millisecond
	ownReadShare = 20
)

// noteNodeChange records a reported node change and returns when the node
// is to be read for it: after nodeDebounce, or, for a change that is
// probably the agent's own, no sooner than ownRecheck after the last read.
// An earlier time already set stands.
func (a *Agent) noteNodeChange(now time.Time) time.Time {
	a.nodeDirty = true
	due := now.Add(nodeDebounce)
	busy, last := a.exec.nodeActivity()
	a.log.Debug("node changed", "own_actions_running", busy, "since_last_own", now.Sub(last))
	if busy || now.Sub(last) < ownWindow {
		if t := a.nodeReadAt.Add(max(ownRecheck, ownReadShare*a.nodeReadTook)); t.After(due) {
			due = t
		}
	}
	if a.nodeDue.IsZero() || due.Before(a.nodeDue) {
		a.nodeDue = due
	}
	return a.nodeDue
}

// watchNode runs w.Watch until ctx ends, subscribing again after a failure
// (after a pause, and with a signal: changes in between were missed). Its
// goroutine is started by Run and ends with Run's watch context.
func (a *Agent) watchNode(ctx context.Context, w nodeWatcher, c chan<- struct{}) {
	signal := func() {
		select {
		case c <- struct{}{}:
		default: // one pending signal covers this change too
		}
	}
	pause := 100 * time.Millisecond
	for {
		err := w.Watch(ctx, signal)
		if ctx.Err() != nil {
			return
		}
		a.log.Warn("node netlink watch failed: subscribing again", "err", err, "in", pause)
		if a.clk.Sleep(ctx, pause) != nil {
			return
		}
		signal()
		pause = min(2*pause, 10*time.Second)
	}
}

// rereadNode reads the node namespace again (not the pods' namespaces:
// the watch covers only the node's), when a change was reported and no
// node action runs, and puts it in the cache in place of the kernel half
// (the published statuses are the agent's own files and stay). A failed
// read asks for a full observation.
func (a *Agent) rereadNode(ctx context.Context) {
	nw, ok := a.cfg.Datapath.(nodeWatcher)
	now := a.now()
	if busy, _ := a.exec.nodeActivity(); !a.nodeDirty || !ok || now.Before(a.nodeDue) || busy {
		return
	}
	a.nodeDirty, a.nodeDue, a.nodeReadAt = false, time.Time{}, now
	n, err := nw.ObserveNode(ctx)
	a.nodeReadTook = a.now().Sub(now)
	if err != nil {
		a.log.Warn("read node after a netlink change", "err", err)
		a.cache.markDirty()
		return
	}
	a.metrics.nodeReads.Inc()
	a.cache.replaceNode(n)
}

// replaceNode replaces the kernel half of the cached observation with a
// reading of the node namespace alone. A pod's side (its namespace) is not
// in that reading: a pod the cache holds unhealthy stays so, with its
// problems, and one it holds healthy takes the node's verdict; an
// exclusive pod keeps the host routes last read in its namespace. At worst
// a pod whose node-side problem was just repaired is set up once more (a
// no-op); a node-side problem is never hidden.
func (c *cache) replaceNode(n observed.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.have {
		return
	}
	st := c.fx.State()
	old := st.Node.Pods
	for i := range n.Pods {
		p := &n.Pods[i]
		j, ok := slices.BinarySearchFunc(old, p.Key, func(x observed.PodNet, k observed.AttachmentKey) int { return x.Key.Compare(k) })
		if ok && p.HostRoutes == nil {
			p.HostRoutes = old[j].HostRoutes
		}
		if ok && !old[j].Healthy {
			p.Healthy = false
			p.Problems = append(slices.Clone(p.Problems), old[j].Problems...)
		}
	}
	n.Published = st.Node.Published
	st.Node = n
	c.fx.Replace(st)
}

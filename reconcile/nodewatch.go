package reconcile

import (
	"context"
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
// one pass that plans nothing: it cannot loop.

// nodeWatcher is a datapath that reports changes in the node namespace
// (linux.Datapath.Watch).
type nodeWatcher interface {
	Watch(ctx context.Context, changed func()) error
}

// nodeDebounce is the quiet time after a node change before the node is
// read again; a steady stream of changes is read at least every
// nodeDebounceMax.
const (
	nodeDebounce    = 20 * time.Millisecond
	nodeDebounceMax = 200 * time.Millisecond
)

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
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		signal()
		pause = min(2*pause, 10*time.Second)
	}
}

// rereadNode reads the node's kernel state again, when a change was
// reported and no node action runs, and puts it in the cache in place of
// the kernel half (the published statuses are the agent's own files and
// stay). A failed read asks for a full observation.
func (a *Agent) rereadNode(ctx context.Context) {
	if !a.nodeDirty || a.exec.nodeBusy() {
		return
	}
	a.nodeDirty = false
	n, err := a.cfg.Datapath.Observe(ctx)
	if err != nil {
		a.log.Warn("read node after a netlink change", "err", err)
		a.cache.markDirty()
		return
	}
	a.metrics.nodeReads.Inc()
	a.cache.replaceNode(n)
}

// replaceNode replaces the kernel half of the cached observation.
func (c *cache) replaceNode(n observed.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.have {
		return
	}
	n.Published = c.st.Node.Published
	c.st.Node = n
}

package simulation

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/observed"
)

// Start is the virtual time every run starts at.
var Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// world is one run: the simulated cloud, the nodes, the virtual clock and
// the queue of the harness's own events. Everything but the agents'
// goroutines runs on the goroutine of Run, one event at a time.
type world struct {
	cfg     Config
	clk     *clock.Virtual
	sim     *ecssim.Server
	handler http.Handler
	nodes   []*node
	dir     string
	zone    string
	// protected are the ENIs enid must never change: ID -> "primary" or
	// "foreign".
	protected map[string]string

	// events are the harness's own events, in (time, order of scheduling).
	events eventHeap
	evSeq  uint64

	mu sync.Mutex // guards the fields below (agents' goroutines touch them)
	// parked are the cloud calls waiting to be released, first to go
	// first.
	parked callHeap
	arrive uint64
	// touched are the nodes whose goroutines ran since the last check.
	touched map[*node]bool
	// violations found (the run stops at the first).
	violations []string
	// trace hashes every line; tail keeps the last lines for a report.
	trace     hash.Hash
	traceOut  io.Writer
	tail      []string
	lines     int
	calls     map[string]int // action -> outcome counts, "action outcome"
	callTotal int
	// onCall, when set, is told of every call's outcome (with mu held).
	onCall func(n *node, action, outcome string)

	// bound is every address set up for a pod on any node: address ->
	// "node/attachment" (the invariant: one pod per address).
	bound map[netip.Addr]string
	stats Stats
	// faultUntil is when the last fault window of the cloud ends.
	faultUntil time.Time
	// starts and wakes are the agents to start and to wake once the
	// run's current event is over (flush): an agent woken in the middle
	// of one would run beside it, and see some of its files or not as the
	// scheduler has it. A wake names the entry files the event changed,
	// or none for a change to anything else (the config).
	starts []*incarnation
	wakes  map[*node]*wakeup
	// killNow are the nodes whose agent an answered attach armed for a
	// kill (node.killOnAttach), killed at the next check.
	killNow []*node
	// inodesUnique: the nodes' files are on tmpfs, where a new file never
	// takes the inode number of an earlier one (pod.readStatus).
	inodesUnique bool
	// inUseSince is when the harness first saw each owned ENI InUse on
	// its node and not configured on the node (checkConfigured).
	inUseSince map[string]time.Time
}

// flush starts the agents an event started and wakes those it asked to,
// in node order, each once, and reports whether it did anything.
func (w *world) flush() bool {
	if len(w.starts) == 0 && len(w.wakes) == 0 {
		return false
	}
	started := map[*node]bool{}
	for _, inc := range w.starts {
		inc.run()
		started[inc.node] = true
	}
	w.starts = w.starts[:0]
	wakes := w.wakes
	w.wakes = map[*node]*wakeup{}
	nodes := make([]*node, 0, len(wakes))
	for n := range wakes {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b *node) int { return a.idx - b.idx })
	for _, n := range nodes {
		if started[n] || n.cur == nil {
			continue // a new agent's first pass reads everything anyway
		}
		// As the file watcher would: the entries named are read again,
		// the config and the other entries taken as last read.
		if u := wakes[n]; u.all {
			n.cur.agent.Wake()
		} else {
			n.cur.agent.EntriesChanged(u.entries...)
		}
	}
	// The passes these start run before the next check: their nodes are
	// checked then, as a node whose timer fired is. A status written in a
	// pass a wake started was seen only at the node's next timer before
	// (30 ms later, the burst's end, or a minute later once nothing else
	// was due), so every served pod was counted Ready that much late.
	for n := range started {
		w.touch(n)
	}
	for _, n := range nodes {
		w.touch(n)
	}
	return true
}

// event is one of the harness's own events.
type event struct {
	at  time.Time
	seq uint64
	do  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// at schedules do at time t (now if t is earlier).
func (w *world) at(t time.Time, do func()) {
	if now := w.clk.Now(); t.Before(now) {
		t = now
	}
	w.evSeq++
	heap.Push(&w.events, &event{at: t, seq: w.evSeq, do: do})
}

// after schedules do d from now.
func (w *world) after(d time.Duration, do func()) { w.at(w.clk.Now().Add(d), do) }

// park queues a cloud call for release.
func (w *world) park(c *call) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.arrive++
	c.seq = w.arrive
	heap.Push(&w.parked, c)
}

// unpark drops a call whose context ended before its release.
func (w *world) unpark(c *call) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.index >= 0 {
		heap.Remove(&w.parked, c.index)
	}
}

// releaseCall lets the first parked call (by node and content) go, and
// reports whether there was one.
func (w *world) releaseCall() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.parked) == 0 {
		return false
	}
	close(heap.Pop(&w.parked).(*call).go_)
	return true
}

// callHeap orders parked calls by (order, seq).
type callHeap []*call

func (h callHeap) Len() int { return len(h) }
func (h callHeap) Less(i, j int) bool {
	if h[i].order != h[j].order {
		return h[i].order < h[j].order
	}
	return h[i].seq < h[j].seq
}
func (h callHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *callHeap) Push(x any) {
	c := x.(*call)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *callHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	c.index = -1
	*h = old[:len(old)-1]
	return c
}

// attachAnswered notes an attach the cloud answered for n: an armed node
// is killed at the next check, with the attach in progress.
func (w *world) attachAnswered(n *node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.killOnAttach {
		n.killOnAttach = false
		w.killNow = append(w.killNow, n)
	}
}

// killPending kills the agents an answered attach armed for it, now that
// every goroutine is parked (the files are as the kill leaves them).
func (w *world) killPending() {
	w.mu.Lock()
	kill := w.killNow
	w.killNow = nil
	w.mu.Unlock()
	for _, n := range kill {
		w.stats.Kills++
		w.log("%s killed right after an attach was answered", n.name)
		if err := n.kill(); err != nil {
			w.violate("%v", err)
		}
	}
}

// touch notes that a node's goroutines ran.
func (w *world) touch(n *node) {
	w.mu.Lock()
	w.touched[n] = true
	w.mu.Unlock()
}

// violate records a broken invariant.
func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.mu.Lock()
	w.violations = append(w.violations, msg)
	w.mu.Unlock()
	w.log("VIOLATION %s", msg)
}

// log adds a line to the trace, stamped with the virtual time since Start.
func (w *world) log(format string, args ...any) {
	line := fmt.Sprintf("%12s %s", w.clk.Now().Sub(Start).Round(time.Microsecond), fmt.Sprintf(format, args...))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.trace.Write([]byte(line))
	w.trace.Write([]byte{'\n'})
	w.lines++
	if w.traceOut != nil {
		fmt.Fprintln(w.traceOut, line)
	}
	if w.cfg.TailLines > 0 {
		if len(w.tail) >= w.cfg.TailLines {
			w.tail = w.tail[1:]
		}
		w.tail = append(w.tail, line)
	}
}

// noteCall counts and traces a cloud call's outcome.
func (w *world) noteCall(n *node, action, eni string, rec *httptest.ResponseRecorder) {
	outcome := "ok"
	if rec.Code != http.StatusOK {
		outcome = errorCode(rec.Body.Bytes())
	}
	w.mu.Lock()
	w.calls[action+" "+outcome]++
	w.callTotal++
	if w.onCall != nil {
		w.onCall(n, action, outcome)
	}
	w.mu.Unlock()
	if w.cfg.TraceCalls {
		w.log("%s %s %s -> %s", n.name, action, eni, outcome)
	}
}

// errorCode is the Code of an ECS error body.
func errorCode(b []byte) string {
	s := string(b)
	i := strings.Index(s, `"Code":"`)
	if i < 0 {
		return "error"
	}
	s = s[i+len(`"Code":"`):]
	if j := strings.IndexByte(s, '"'); j >= 0 {
		return s[:j]
	}
	return "error"
}

// loop runs events until the virtual time reaches end (or a violation is
// found): after each, it waits until every goroutine of the run is parked
// again, checks the nodes that ran, and moves on to the next event: a
// parked cloud call first, then the earliest of the clock's waiters and
// the harness's events (the clock's first at the same instant).
func (w *world) loop(end time.Time) { w.loopUntil(end, nil) }

// loopUntil is loop that also returns as soon as done (when not nil)
// says so after a check; it reports whether done did.
func (w *world) loopUntil(end time.Time, done func() bool) bool {
	for {
		synctest.Wait()
		w.check()
		w.killPending()
		if w.flush() {
			continue
		}
		if len(w.violations) > 0 {
			return false
		}
		if done != nil && done() {
			return true
		}
		if w.releaseCall() {
			continue
		}
		next, armed := w.clk.Next()
		var ev *event
		if len(w.events) > 0 {
			ev = w.events[0]
		}
		switch {
		case armed && (ev == nil || !next.After(ev.at)) && !next.After(end):
			_, owner, _ := w.clk.StepOwner()
			if inc, ok := owner.(*incarnation); ok {
				w.touch(inc.node)
			}
			w.stats.Steps++
		case ev != nil && !ev.at.After(end):
			heap.Pop(&w.events)
			w.clk.AdvanceTo(ev.at) // fires nothing: no waiter is due before ev.at
			ev.do()
			w.flush()
			w.stats.Events++
		default:
			w.clk.AdvanceTo(end)
			return false
		}
	}
}

// check looks at the nodes whose goroutines ran: their pods' statuses and
// the addresses their datapath set up.
func (w *world) check() {
	w.mu.Lock()
	touched := make([]*node, 0, len(w.touched))
	for n := range w.touched {
		touched = append(touched, n)
	}
	clear(w.touched)
	w.mu.Unlock()
	slices.SortFunc(touched, func(a, b *node) int { return a.idx - b.idx })
	for _, n := range touched {
		n.check()
	}
}

// Hash is the trace's hash so far.
func (w *world) hash() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return hex.EncodeToString(w.trace.Sum(nil))
}

func newWorld(cfg Config, dir string) *world {
	return &world{cfg: cfg, clk: clock.NewVirtual(Start), dir: dir, protected: map[string]string{},
		touched: map[*node]bool{}, wakes: map[*node]*wakeup{}, trace: sha256.New(), traceOut: cfg.Trace, calls: map[string]int{},
		bound: map[netip.Addr]string{}, inUseSince: map[string]time.Time{}}
}

// quiesce stops every agent and lets the clock run until their goroutines
// are gone (each agent ends within its shutdown grace).
func (w *world) quiesce() {
	w.flush()
	for _, n := range w.nodes {
		if n.cur != nil {
			n.cur.stop()
		}
	}
	for {
		synctest.Wait()
		if w.releaseCall() {
			continue
		}
		running := false
		for _, n := range w.nodes {
			if n.cur != nil && !n.cur.exited() {
				running = true
				break
			}
		}
		if !running {
			return
		}
		if _, ok := w.clk.Step(); !ok {
			return
		}
	}
}

// keyOf is the desired-state key of an attachment as the trace names it.
func keyOf(k desired.Key) string { return k.ContainerID[:16] + "/" + k.IfName }

// configuredBound is how long an owned ENI may be InUse on its node, with
// the cloud healthy throughout, before the node's datapath has it
// configured. The agent sees an attach end, its own or one a killed run
// started, within a few passes (a second apart while an ENI is in
// transit); the next resync (2 minutes) is too late: the ENI's addresses
// stay out of the pool meanwhile (a98f176, e2e TestKillDuringAttach).
const configuredBound = 90 * time.Second

// configuredEvery is how often checkConfigured runs.
const configuredEvery = 5 * time.Second

// checkConfigured holds the invariant above for every node, then runs
// again configuredEvery later.
func (w *world) checkConfigured() {
	now := w.clk.Now()
	configured := map[*node]map[string]bool{}
	seen := map[string]bool{}
	for _, n := range w.nodes {
		if n.cur == nil {
			continue
		}
		for _, e := range w.sim.InstanceENIs(n.inst.ID) {
			if e.Status != "InUse" || e.Tags[observed.TagOwner] != n.inst.ID {
				continue
			}
			if configured[n] == nil {
				o, err := n.dp.Observe(context.Background())
				if err != nil {
					w.violate("node %s: observe datapath: %v", n.name, err)
					return
				}
				configured[n] = map[string]bool{}
				for _, d := range o.ENIDevices {
					if d.Configured {
						configured[n][d.MAC] = true
					}
				}
			}
			if configured[n][e.MAC] {
				continue
			}
			seen[e.ID] = true
			since, ok := w.inUseSince[e.ID]
			if !ok {
				w.inUseSince[e.ID] = now
				continue
			}
			if now.Sub(since) >= configuredBound && since.After(w.faultUntil) {
				w.violate("%s: owned ENI %s InUse since %v, with the cloud healthy, and not configured on the node", n.name, e.ID, since.Sub(Start))
				return
			}
		}
	}
	for id := range w.inUseSince {
		if !seen[id] {
			delete(w.inUseSince, id)
		}
	}
	w.after(configuredEvery, w.checkConfigured)
}

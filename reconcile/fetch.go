package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/reconcile/status"
)

// fetch is the cloud half of a full observation, read by a goroutine so
// that a slow or hung cloud never holds the loop: warm ADDs are planned and
// set up from the cache meanwhile.
type fetch struct {
	// at is when the read started (the observation's time).
	at   time.Time
	half observed.CloudHalf
}

// startFetch starts reading the cloud half of a full observation. The
// goroutine is owned by the loop: it ends when the read does (the client
// bounds every call) or when ctx is cancelled at shutdown, which waits for
// it, and it delivers its result on fetchC, never blocking.
//
// A routine resync (nothing went wrong, nothing is in doubt) lists the
// owned ENIs that are not attached only every ownedListEvery times: they
// appear only after a crash (the first observation lists them), a failed
// attach or detach (which asks for a full observation), or someone else's
// doing, and a leaked one is deleted only after its 5-minute grace anyway.
// The agent carries the ones it knows.
func (a *Agent) startFetch(ctx context.Context, cfg desired.Config, now time.Time) {
	vsw := vSwitchQuery(cfg)
	cs := cloudSource{c: a.cfg.Cloud, known: a.instance}
	if routine, prev := a.cache.routine(); routine {
		a.routineRefreshes++
		if a.routineRefreshes%ownedListEvery != 0 {
			cs.attachedOnly = true
			for _, e := range prev.ENIs {
				if e.Owned(a.cfg.InstanceID) && e.InstanceID != a.cfg.InstanceID {
					cs.carry = append(cs.carry, e)
				}
			}
		}
	}
	f := &fetch{at: now}
	a.fetch = f
	a.fetchWG.Add(1)
	go func() {
		defer a.fetchWG.Done()
		// The observation is retried whole (applyFetch's back-off): its
		// describes are not retried one by one after a service failure.
		f.half = observed.CollectCloud(cloud.WithCallerRetries(ctx), cs, a.cfg.InstanceID, vsw)
		a.fetchC <- f
	}()
}

// applyFetch completes the full observation whose cloud half is in: it
// reads the node half now (no action runs, so none of their results is
// lost by the replacement), carries the last complete cloud view when the
// cloud could not be read (degraded mode), and replaces the cache.
// Failures back off (1 s doubling to a minute), so a broken API is never
// polled in a tight loop.
func (a *Agent) applyFetch(ctx context.Context, now time.Time) {
	f := a.fetched
	a.fetched = nil
	a.badStatuses = nil
	pub := publishedSource{st: a.statuses, problems: func(p []status.Problem) { a.badStatuses = p }}
	// This observation reads the node after the changes reported so far.
	a.nodeDirty, a.nodeDue = false, time.Time{}
	st := observed.Merge(f.half, observed.CollectNode(ctx, a.cfg.Datapath, pub), f.at)
	if st.Instance.ID == "" {
		st.Instance = a.instance
	}
	a.carryCloud(&st, now)
	a.cache.replace(st)
	// A full observation re-reads everything, in case a watch missed a change,
	// and checks again that every pod's namespace exists.
	a.hintsDirty = true
	a.entries.Unsure()
	a.configDirty.Store(true)
	a.desiredDirty.Store(true)
	a.planning.recheckNetNS()
	if sw, ok := a.cfg.Datapath.(sweeper); ok && st.Complete {
		if _, err := sw.Sweep(ctx); err != nil {
			a.log.Warn("sweep orphaned pod rules", "err", err)
		}
	}
	a.ensureReplyPath(ctx, st)
	a.fulls++
	if st.Complete {
		a.fullFails = 0
		a.nextFull = time.Time{}
		a.resyncShare = 0.75 + 0.25*a.spread(a.fulls)
		return
	}
	a.fullFails++
	// Equal jitter: the fleet's agents that failed together (an outage,
	// throttling) do not all try again together.
	d := min(time.Minute, time.Second<<min(a.fullFails-1, 6))
	a.nextFull = now.Add(d/2 + time.Duration(a.spread(a.fulls)*float64(d/2)))
	a.log.Warn("observation incomplete", "problems", st.Problems, "retry_at", a.nextFull)
}

// dropBadStatuses removes the status files that could not be read and that
// no entry (valid or not) names: no pass would ever rewrite them, and a
// reader would trip on them for ever.
func (a *Agent) dropBadStatuses(bad []status.Problem, d desired.State) {
	if len(bad) == 0 {
		return
	}
	live := make(map[string]bool, len(d.Entries)+len(d.EntryProblems))
	for _, e := range d.Entries {
		live[desired.EntryFileName(e.Key())] = true
	}
	for _, p := range d.EntryProblems {
		live[p.File] = true
	}
	for _, p := range bad {
		if live[p.File] || strings.ContainsRune(p.File, '/') {
			continue
		}
		path := filepath.Join(a.cfg.Paths.Statuses, p.File)
		if err := os.Remove(path); err != nil {
			a.log.Warn("remove unreadable status", "file", path, "err", err)
			continue
		}
		a.log.Warn("removed an unreadable status that no entry names", "file", path, "problem", p.Err)
	}
}

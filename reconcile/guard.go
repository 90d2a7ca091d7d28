package reconcile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/netnsid"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// netnsChecker is a datapath that can tell which pod namespaces it must
// refuse (linux.Datapath: the node's own namespace, or no network
// namespace at all).
type netnsChecker interface {
	CheckNetNS(path string) error
}

// netnsVerdict is the answer for one entry revision.
type netnsVerdict struct {
	revision string
	err      error
}

// refuseNetNS moves every entry whose netns the datapath refuses from
// d.Entries to d.EntryProblems, so the planner binds no address to it and
// publishes a Failed status at once (rather than a setup that fails and is
// retried forever). Each entry revision is checked once: an open, two
// fstats and an ioctl. A netns that does not exist is not refused here: it
// went with its pod, and DEL follows.
func (pl *Planning) refuseNetNS(d *desired.State) {
	ck, ok := pl.Datapath.(netnsChecker)
	if !ok {
		return
	}
	seen := make(map[observed.AttachmentKey]netnsVerdict, len(d.Entries))
	kept := d.Entries[:0:0]
	for _, e := range d.Entries {
		k := e.Key()
		v, ok := pl.netns[k]
		if !ok || v.revision != e.Revision {
			v = netnsVerdict{revision: e.Revision}
			if err := ck.CheckNetNS(e.NetNS); errors.Is(err, netnsid.ErrNodeNetNS) || errors.Is(err, netnsid.ErrNotNetNS) {
				v.err = err
				pl.log().Error("pod netns refused: the pod fails", "attachment", k.String(), "netns", e.NetNS, "err", err)
			}
		}
		seen[k] = v
		if v.err != nil {
			d.EntryProblems = append(d.EntryProblems, desired.EntryProblem{File: desired.EntryFileName(e.Key()),
				ContainerID: e.ContainerID, IfName: e.IfName, Err: v.err.Error(), Code: string(planner.ReasonNetNSRefused)})
			continue
		}
		kept = append(kept, e)
	}
	d.Entries = kept
	pl.netns = seen
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

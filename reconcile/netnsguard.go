package reconcile

import (
	"errors"
	"io/fs"
	"os"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/netnsid"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
)

// This file checks each entry's pod network namespace: refused (the node's
// own, not a namespace), gone (stale.go in the planner), or fine.

// netnsChecker is a datapath that can tell which pod namespaces it must
// refuse (linux.Datapath: the node's own namespace, or no network
// namespace at all).
type netnsChecker interface {
	CheckNetNS(path string) error
}

// netnsVerdict is the answer for one entry revision: refused (err), gone
// (the path names nothing), or fine.
type netnsVerdict struct {
	revision string
	err      error
	gone     bool
}

// refuseNetNS moves every entry whose netns the datapath refuses from
// d.Entries to d.EntryProblems, so the planner binds no address to it and
// publishes a Failed status at once (rather than a setup that fails and is
// retried forever), and notes the entries whose netns does not exist: they
// went with their pods (DEL follows, or was lost), and the planner serves
// live pods first and gives them up after a bound (planner/stale.go; see
// missingNetNS). Each entry revision is checked once (an open, two fstats
// and an ioctl); a namespace found gone stays gone (the runtime makes it
// before ADD, and a new ADD writes a new revision). Whether a namespace
// found before still exists is asked again only when recheckNetNS says so:
// a stat each.
func (pl *Planning) refuseNetNS(d *desired.State) {
	ck, ok := pl.Datapath.(netnsChecker)
	if !ok {
		return
	}
	recheck := pl.recheckAll
	pl.recheckAll = false
	if pl.netns == nil {
		pl.netns = make(map[observed.AttachmentKey]netnsVerdict, len(d.Entries))
	}
	// Nothing is allocated on a pass where no entry is refused and none
	// went away (a pod start on a node of a thousand pods): verdicts are
	// kept in place, d.Entries is copied only to drop a refused entry, and
	// the verdicts of entries gone are looked for only when some are.
	var kept []desired.Entry
	gone := 0
	for i, e := range d.Entries {
		k := e.Key()
		old, ok := pl.netns[k]
		v, changed := old, false
		switch {
		case !ok || v.revision != e.Revision:
			v, changed = netnsVerdict{revision: e.Revision}, true
			switch err := ck.CheckNetNS(e.NetNS); {
			case errors.Is(err, netnsid.ErrNodeNetNS) || errors.Is(err, netnsid.ErrNotNetNS):
				v.err = err
				pl.log().Error("pod netns refused: the pod fails", "attachment", k.String(), "netns", e.NetNS, "err", err)
			case errors.Is(err, fs.ErrNotExist): // linux.ErrNotFound keeps the errno
				v.gone = true
			}
		case !v.gone && v.err == nil && (recheck || pl.recheck[k]):
			if _, err := os.Stat(e.NetNS); errors.Is(err, fs.ErrNotExist) {
				v.gone, changed = true, true
			}
		}
		if v.gone && (!ok || !old.gone) {
			pl.log().Warn("pod netns does not exist: its pod is gone; waiting for its CNI DEL", "attachment", k.String(), "netns", e.NetNS)
		}
		if changed {
			pl.netns[k] = v
		}
		if v.gone {
			gone++
		}
		if v.err != nil {
			if kept == nil {
				kept = append(make([]desired.Entry, 0, len(d.Entries)), d.Entries[:i]...)
			}
			d.EntryProblems = append(d.EntryProblems, desired.EntryProblem{File: desired.EntryFileName(e.Key()),
				ContainerID: e.ContainerID, IfName: e.IfName, Err: v.err.Error(), Code: string(planner.ReasonNetNSRefused)})
			continue
		}
		if kept != nil {
			kept = append(kept, e)
		}
	}
	all := d.Entries
	if kept != nil {
		d.Entries = kept
	}
	// Every entry has its verdict now: more verdicts than entries means
	// some entries went away (a DEL); their verdicts go too.
	if len(pl.netns) > len(all) {
		cur := make(map[observed.AttachmentKey]bool, len(all))
		for _, e := range all {
			cur[e.Key()] = true
		}
		for k := range pl.netns {
			if !cur[k] {
				delete(pl.netns, k)
			}
		}
	}
	pl.gone = gone
	pl.recheck = nil
}

// recheckNetNS asks the next refuseNetNS to look again whether the
// namespaces of the given entries (all, with none given) still exist.
func (pl *Planning) recheckNetNS(keys ...observed.AttachmentKey) {
	if len(keys) == 0 {
		pl.recheckAll = true
		return
	}
	if pl.recheck == nil {
		pl.recheck = map[observed.AttachmentKey]bool{}
	}
	for _, k := range keys {
		pl.recheck[k] = true
	}
}

// missingNetNS lists, in key order, the entries of d whose network
// namespace the last check found gone (observed.Node.MissingNetNS).
func (pl *Planning) missingNetNS(d desired.State) []observed.AttachmentKey {
	if pl.gone == 0 {
		return nil // no verdict says gone: no lookup per entry on every pass
	}
	var out []observed.AttachmentKey
	for _, e := range d.Entries {
		if v, ok := pl.netns[e.Key()]; ok && v.gone && v.revision == e.Revision {
			out = append(out, e.Key())
		}
	}
	return out
}

package simulation

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// What the container runtime and enid's CNI plugin do, as the simulation
// plays them: ADD writes the pod's entry and waits for a status answering
// its revision (Ready: the pod runs; Failed, or no answer within the
// plugin's timeout: the runtime DELs the sandbox and tries again with a
// new one); DEL records the deletion and removes the entry; GC removes the
// entries of sandboxes the runtime no longer knows.

// Plugin and runtime timings.
const (
	// addTimeout is how long the plugin waits for a status (cmd/enid-cni's
	// default timeout).
	addTimeout = 2 * time.Minute
	// retryAfter is how long the runtime waits before it tries a failed
	// sandbox again.
	retryAfter = 10 * time.Second
)

type podPhase int

const (
	podAdding podPhase = iota
	podRunning
	podDeleting
	podGone
)

// pod is one pod on a node, as the runtime knows it.
type pod struct {
	n *node
	// id is unique in the node; name is the pod's (a StatefulSet's pod
	// comes back under its name, with a new UID).
	id   int
	name string
	// sandbox counts the pod's sandboxes: each ADD attempt is a new one,
	// with its own container ID.
	sandbox int
	key     desired.Key
	rev     string
	phase   podPhase
	// first is when the pod's first ADD began; addAt when the current one.
	first, addAt time.Time
	// ended: the pod was deleted by its owner; no new sandbox is tried.
	ended bool
	// lost: the runtime forgot the sandbox without a DEL (a CNI GC
	// clears it).
	lost bool
	// seen is the status file as the last check read it (readStatus).
	seen seenStatus
}

// seenStatus is a status file as a check last read it: its path, its
// inode (0: there was none) and what the read returned.
type seenStatus struct {
	path string
	ino  uint64
	st   status.Attachment
	err  error
}

// readStatus reads the pod's status, or returns what the last read
// returned when the file is the same one: the agent writes a status by
// renaming a new file into place (podkey.WriteFileAtomic), so a status
// that changed is a new inode. Only on tmpfs, which never reuses an inode
// number while the mount lives (a counter); elsewhere a freed inode can
// come back for the next write, and every check reads. This read, after
// every event on a node, was an eighth of a 1,000-node fleet's CPU.
func (p *pod) readStatus() (status.Attachment, error) {
	n := p.n
	path := n.cur.status.Path(p.key.ContainerID, p.key.IfName)
	if n.w.inodesUnique {
		var ino uint64
		var sb syscall.Stat_t
		switch err := syscall.Stat(path, &sb); {
		case err == nil:
			ino = sb.Ino
		case errors.Is(err, syscall.ENOENT):
		default:
			ino = ^uint64(0) // unknown: read
		}
		if ino != ^uint64(0) && p.seen.path == path && p.seen.ino == ino {
			return p.seen.st, p.seen.err
		}
		st, err := n.cur.status.Read(p.key.ContainerID, p.key.IfName)
		p.seen = seenStatus{path: path, ino: ino, st: st, err: err}
		return st, err
	}
	return n.cur.status.Read(p.key.ContainerID, p.key.IfName)
}

// containerID is the container ID of the pod's current sandbox: 64 hex
// digits, as containerd's, derived from the node, the name and the
// sandbox number (the first 16 digits name it in the trace).
func (p *pod) containerID() string {
	return fmt.Sprintf("%04x%06x%06x%048x", p.n.idx, p.id, p.sandbox, 0xe1d)
}

// add starts an ADD of a new sandbox of the pod.
func (p *pod) add() {
	n := p.n
	p.sandbox++
	now := n.w.clk.Now()
	p.key = desired.Key{ContainerID: p.containerID(), IfName: "eth0"}
	if p.first.IsZero() {
		p.first = now
	}
	p.addAt, p.phase = now, podAdding
	p.write()
	sandbox := p.sandbox
	n.w.after(addTimeout, func() {
		if p.phase == podAdding && p.sandbox == sandbox {
			p.check(n.w.clk.Now())
		}
	})
}

// finish is the pod's deletion by its owner: DEL of its sandbox.
func (p *pod) finish() {
	p.ended = true
	if p.phase == podAdding || p.phase == podRunning {
		p.del("pod deleted")
	}
}

// write writes the pod's entry (a first ADD, or the runtime repeating it).
func (p *pod) write() {
	n := p.n
	e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: p.key.ContainerID, IfName: p.key.IfName,
		NetNS: "/var/run/netns/cni-" + p.key.ContainerID[:16], PodNamespace: "sim", PodName: p.name,
		PodUID: fmt.Sprintf("uid-%s-%d", n.name, p.id), Created: n.w.clk.Now().UTC()}
	rev, err := n.cur.entries.Write(e)
	if err != nil {
		n.w.violate("%s: write entry of %s: %v", n.name, p.name, err)
		return
	}
	if err := n.cur.entries.ForgetDeletion(p.key); err != nil {
		n.w.violate("%s: forget deletion of %s: %v", n.name, p.name, err)
	}
	p.rev = rev
	n.w.log("%s ADD %s %s", n.name, p.name, keyOf(p.key))
	n.entriesChanged(desired.EntryFileName(p.key), desired.DeletionFileName(p.key))
}

// del starts a DEL of the pod's current sandbox.
func (p *pod) del(why string) {
	n := p.n
	if _, _, err := n.cur.entries.Delete(p.key, n.w.clk.Now()); err != nil {
		n.w.violate("%s: delete entry of %s: %v", n.name, p.name, err)
	}
	p.phase = podDeleting
	n.w.log("%s DEL %s %s (%s)", n.name, p.name, keyOf(p.key), why)
	n.entriesChanged(desired.DeletionFileName(p.key), desired.EntryFileName(p.key))
}

// check reads the pod's status and moves it on.
func (p *pod) check(now time.Time) {
	n := p.n
	st, err := p.readStatus()
	switch p.phase {
	case podAdding:
		if err == nil && st.Revision == p.rev {
			switch st.Phase {
			case status.Ready:
				p.phase = podRunning
				n.w.stats.podReady(now.Sub(p.addAt))
				var addrs []string
				for _, ip := range st.IPs {
					addrs = append(addrs, ip.Address.String())
				}
				n.w.log("%s %s Ready %v after %v", n.name, p.name, addrs, now.Sub(p.addAt))
				return
			case status.Failed:
				if st.Reason == "" {
					n.w.violate("%s: %s Failed without a reason", n.name, p.name)
				}
				n.w.stats.Failed++
				n.w.log("%s %s Failed: %s (%s)", n.name, p.name, st.ReasonCode, st.Reason)
				p.retry()
				return
			}
		}
		if now.Sub(p.addAt) >= addTimeout {
			n.w.stats.TimedOut++
			n.w.log("%s %s ADD timed out", n.name, p.name)
			// The bound: with the cloud healthy and the agent running
			// throughout, a pod gets Ready or Failed (with a reason)
			// before the plugin gives up.
			if p.addAt.After(n.w.faultUntil) && p.addAt.After(n.killedAt) {
				n.w.violate("%s: %s had no Ready or Failed status within %v of its ADD, with the cloud healthy and the agent running", n.name, p.name, addTimeout)
			}
			p.retry()
		}
	case podDeleting:
		if errors.Is(err, fs.ErrNotExist) {
			p.phase = podGone
			n.w.log("%s %s %s torn down", n.name, p.name, keyOf(p.key))
			if p.ended {
				delete(n.pods, p.id)
			}
		}
	}
}

// retry: the runtime DELs the failed sandbox and, unless the pod's time is
// up, tries a new one later.
func (p *pod) retry() {
	p.del("ADD failed")
	p.n.w.after(retryAfter, func() {
		if !p.ended && (p.phase == podGone || p.phase == podDeleting) {
			p.add()
		}
	})
}

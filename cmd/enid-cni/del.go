package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// del records the deletion, removes the entry and, when the agent is
// alive, waits up to delTimeout for it to tear the attachment down (its
// status disappears). The deletion record, written first, is what makes the
// removal authoritative: the agent tears down at once an attachment with a
// record and no entry, whatever other node-local sources say (the runtime's
// own cache names the attachment until DEL returns). It succeeds when the
// entry is already gone, when the netns is gone (CNI_NETNS may be empty) and
// when the agent is down: the record waits for it.
//
// On a full /run the record is an empty file, or, with no inode left,
// written after the entry's removal freed one (EntryStore.Delete). When
// even that fails DEL still succeeds, without waiting: the agent then keeps
// the attachment while the runtime's own record names it, and tears it down
// when libcni removes that record, which it does as soon as DEL returns. A
// DEL that failed instead would be retried for ever while the full disk
// lasts, with the pod's address held. Only an entry that cannot be removed
// is an error (5), so the runtime retries.
func (p *plugin) del(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := attachmentArgs(args, false); err != nil {
		return err
	}
	key := desired.Key{ContainerID: args.ContainerID, IfName: args.IfName}
	recorded, recordErr, err := conf.entries().Delete(key, p.now())
	if err != nil {
		return types.NewError(types.ErrIOFailure, "remove pod entry "+key.String(), err.Error())
	}
	if !recorded {
		p.log.Warn("entry removed without a deletion record: the agent tears the attachment down once the runtime's record of it is gone",
			"container", args.ContainerID, "ifname", args.IfName, "err", recordErr)
		return nil // the teardown waits for this DEL to return: nothing to wait for
	}
	if conf.delTimeout == 0 {
		return nil
	}
	a, err := status.ReadAgent(conf.AgentFile)
	if err != nil || !a.Alive(p.now(), conf.heartbeatMaxAge) {
		return nil // agent down or stopped: nobody to wait for
	}
	ctx, cancel := context.WithTimeout(context.Background(), conf.delTimeout)
	defer cancel()
	if !waitGone(ctx, conf.statuses(), args.ContainerID, args.IfName) {
		p.log.Warn("agent did not finish teardown before delTimeout; it continues in the background",
			"container", args.ContainerID, "ifname", args.IfName, "delTimeout", conf.delTimeout)
	}
	return nil
}

// waitGone polls until the attachment has no status, reporting whether it
// went before ctx ended. Only the file's absence answers, so a stat is
// all a poll needs.
func waitGone(ctx context.Context, store *status.Store, containerID, ifName string) bool {
	path := store.Path(containerID, ifName)
	poll := newPoller(delPollFast)
	timer := time.NewTimer(0) // the real clock, as all of the plugin (main.go)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		}
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return true
		}
		timer.Reset(poll.next())
	}
}

// gc removes every entry whose attachment the runtime does not list as
// valid, recording each deletion first (as DEL does, full disk included:
// the runtime vouches that the attachment is gone). Without any list (neither cni.dev/valid-attachments nor
// cni.dev/attachments) it removes nothing: an absent list is not "no pod is
// valid". Entry files that cannot be parsed are removed when their file name
// names an attachment outside the list.
func (p *plugin) gc(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	valid, ok := conf.validAttachments()
	if !ok {
		p.log.Warn("GC without a list of valid attachments: nothing removed")
		return nil
	}
	store := conf.entries()
	entries, problems, err := store.ReadAll()
	if err != nil {
		return types.NewError(types.ErrIOFailure, "list pod entries", err.Error())
	}
	var stale []desired.Key
	for _, e := range entries {
		stale = appendStale(stale, valid, e.ContainerID, e.IfName)
	}
	for _, pr := range problems {
		if pr.ContainerID != "" {
			stale = appendStale(stale, valid, pr.ContainerID, pr.IfName)
		}
	}
	var errs []error
	for _, k := range stale {
		recorded, recordErr, err := store.Delete(k, p.now())
		if err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", k, err))
		} else if !recorded {
			p.log.Warn("entry removed without a deletion record: the agent tears the attachment down once the runtime's record of it is gone",
				"container", k.ContainerID, "ifname", k.IfName, "err", recordErr)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return types.NewError(types.ErrIOFailure, "remove stale pod entries", err.Error())
	}
	return nil
}

func appendStale(stale []desired.Key, valid map[types.GCAttachment]bool, containerID, ifName string) []desired.Key {
	if valid[types.GCAttachment{ContainerID: containerID, IfName: ifName}] {
		return stale
	}
	return append(stale, desired.Key{ContainerID: containerID, IfName: ifName})
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// del removes the entry and, when the agent is alive, waits up to
// delTimeout for it to tear the attachment down (its status disappears).
// It succeeds when the entry is already gone, when the netns is gone
// (CNI_NETNS may be empty) and when the agent is down: the agent tears down
// whatever has no entry when it comes back. Only failing to remove the entry
// is an error, so the runtime retries.
func (p *plugin) del(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := attachmentArgs(args, false); err != nil {
		return err
	}
	key := desired.Key{ContainerID: args.ContainerID, IfName: args.IfName}
	if err := conf.entries().Remove(key); err != nil {
		return types.NewError(types.ErrIOFailure, "remove pod entry "+key.String(), err.Error())
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
// went before ctx ended.
func waitGone(ctx context.Context, store *status.Store, containerID, ifName string) bool {
	interval := pollFirst
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		}
		if _, err := store.Read(containerID, ifName); errors.Is(err, fs.ErrNotExist) {
			return true
		}
		timer.Reset(interval)
		interval = min(interval*3/2, pollMax)
	}
}

// gc removes every entry whose attachment the runtime does not list as
// valid. Without any list (neither cni.dev/valid-attachments nor
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
		if err := store.Remove(k); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", k, err))
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

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// Status polling: every millisecond while the agent's answer may land
// (reading a small file costs tens of microseconds, a stat a few), then at
// a tenth of the time waited so far, up to a bound, so that a slow setup
// (a new ENI) costs little CPU and an answer is never seen much later than
// it landed. An inotify watch was tried instead: closing it costs the
// exiting plugin 10-16 ms (the kernel waits for an SRCU grace period), more
// than polling ever loses.
const (
	pollFirst = time.Millisecond
	// pollFast is how long ADD polls at pollFirst: a warm pool's setup.
	pollFast = 15 * time.Millisecond
	// delPollFast is how long DEL polls at pollFirst: a teardown waits in
	// the kernel for the veth's deletion (an RCU grace period, 15-25 ms)
	// and a loaded node's runs to tens of ms; backing off from the start,
	// as DEL did, saw the status gone up to a third of the wait late.
	delPollFast = 100 * time.Millisecond
	pollMax     = 100 * time.Millisecond
	// pollShare: after the fast span each wait is the time waited so far
	// divided by pollShare, so an answer is seen at most a tenth of its
	// wait late. Waits that grew by half each read (as they did before)
	// saw an answer up to a third late: on a node of 1,000 pods the
	// agent answers a warm setup 12-13 ms after the entry at the median,
	// near the end of the fast span, and its slower answers after it
	// (docs/cni.md, "Latency and size"; docs/benchmarks.md).
	pollShare = 10
)

// poller spaces a plugin's status reads: pollFirst until fast has passed
// since start, then pollWait.
type poller struct {
	start time.Time
	fast  time.Duration
}

func newPoller(fast time.Duration) *poller {
	return &poller{start: time.Now(), fast: fast} // the real clock, as all of the plugin (main.go)
}

// next is the wait before the next read.
func (p *poller) next() time.Duration { return pollWait(time.Since(p.start), p.fast) }

// pollWait is the wait before the next read when waited has passed since
// the poll began: pollFirst within the fast span, then a pollShare-th of
// waited, between pollFirst and pollMax.
func pollWait(waited, fast time.Duration) time.Duration {
	if waited <= fast {
		return pollFirst
	}
	return min(max(waited/pollShare, pollFirst), pollMax)
}

// add writes the entry and waits for a Ready status answering its revision.
func (p *plugin) add(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := attachmentArgs(args, true); err != nil {
		return err
	}
	pod, err := parseArgs(args.Args)
	if err != nil {
		return err
	}
	if pod.Namespace == "" || pod.Name == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_ARGS must carry %s and %s (enid serves Kubernetes pods)", argPodNamespace, argPodName), "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), conf.timeout)
	defer cancel()
	start := time.Now() // the real clock, as all of the plugin (main.go)

	bw := conf.RuntimeConfig.Bandwidth
	if bw != nil && *bw == (desired.Bandwidth{}) {
		bw = nil
	}
	rev, err := conf.entries().Write(desired.Entry{
		APIVersion:   desired.EntryAPIVersion,
		ContainerID:  args.ContainerID,
		IfName:       args.IfName,
		NetNS:        args.Netns,
		PodNamespace: pod.Namespace,
		PodName:      pod.Name,
		PodUID:       pod.UID,
		Annotations:  conf.RuntimeConfig.PodAnnotations,
		Bandwidth:    bw,
		Created:      p.now().UTC(),
	})
	if err != nil {
		return entryError("write pod entry", err)
	}
	// A deletion record of an earlier DEL of the same key no longer speaks
	// for it: the entry wins while both exist, but if this entry vanished
	// later without a DEL, the old record would read as one. Removed after
	// the entry is written, so the key always has one of the two.
	if err := conf.entries().ForgetDeletion(desired.Key{ContainerID: args.ContainerID, IfName: args.IfName}); err != nil {
		p.log.Warn("stale deletion record left", "container", args.ContainerID, "ifname", args.IfName, "err", err)
	}
	st, err := p.waitReady(ctx, conf, args.ContainerID, args.IfName, rev)
	if err != nil {
		return err
	}
	p.log.Debug("attachment ready", "container", args.ContainerID, "ifname", args.IfName,
		"revision", rev, "waited", time.Since(start))
	return types.PrintResult(result(st, args), conf.CNIVersion)
}

// waitReady polls the attachment's status until it answers revision rev
// with Ready (returned) or Failed (error 11), or ctx ends (error 11 with
// the last thing the agent said).
func (p *plugin) waitReady(ctx context.Context, conf *netConf, containerID, ifName, rev string) (status.Attachment, error) {
	store := conf.statuses()
	poll := newPoller(pollFast)
	last := "no status published yet"
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
			case <-time.After(poll.next()):
			}
		}
		// The status is read once before a timeout is reported, however
		// late the first read comes (a loaded node can spend the whole
		// timeout before it): the error then says what the agent said.
		if ctx.Err() != nil && !first {
			return status.Attachment{}, types.NewError(types.ErrTryAgainLater,
				fmt.Sprintf("enid agent did not set up %s_%s within %s: %s", containerID, ifName, conf.timeout, last),
				agentState(conf, p.now()))
		}
		st, err := store.Read(containerID, ifName)
		switch {
		case err == nil && st.Revision == rev:
			switch st.Phase {
			case status.Ready:
				return st, nil
			case status.Failed:
				return status.Attachment{}, types.NewError(types.ErrTryAgainLater,
					fmt.Sprintf("enid agent cannot set up %s_%s: %s", containerID, ifName, reason(st)), "")
			default:
				last = "Pending: " + reason(st)
			}
		case err == nil:
			last = fmt.Sprintf("the status answers entry revision %q, not %q (%s: %s)", st.Revision, rev, st.Phase, reason(st))
		case errors.Is(err, fs.ErrNotExist):
			last = "no status published yet"
		default:
			// An unreadable status may be rewritten: keep waiting, and say
			// what was wrong if it never is.
			last = err.Error()
		}
	}
}

// reason renders a status's reason and code.
func reason(st status.Attachment) string {
	switch {
	case st.Reason == "" && st.ReasonCode == "":
		return "no reason given"
	case st.ReasonCode == "":
		return st.Reason
	default:
		return st.Reason + " (" + st.ReasonCode + ")"
	}
}

// agentState says whether the agent looks alive, for error details.
func agentState(conf *netConf, now time.Time) string {
	a, err := status.ReadAgent(conf.AgentFile)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("no agent heartbeat at %s: is the enid agent running?", conf.AgentFile)
	}
	if err != nil {
		return err.Error()
	}
	if err := a.Serving(now, conf.heartbeatMaxAge); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("agent pid %d is ready (pool: %d idle of %d)", a.PID, a.Pool.Idle, a.Pool.Total)
}

// entryError maps an entry store error to a CNI error: an invalid entry
// comes from the runtime's input (environment, CNI_ARGS, runtimeConfig);
// anything else is the file system.
func entryError(what string, err error) error {
	if errors.Is(err, desired.ErrInvalidEntry) {
		return types.NewError(types.ErrInvalidEnvironmentVariables, what, err.Error())
	}
	return types.NewError(types.ErrIOFailure, what, err.Error())
}

// result renders a Ready status as the CNI result. When the status lists
// no routes, each address gets a default route via its gateway.
func result(st status.Attachment, args *skel.CmdArgs) *current.Result {
	iface := &current.Interface{Name: st.Interface.Name, Mac: st.Interface.MAC, Sandbox: st.Interface.Sandbox}
	if iface.Name == "" {
		iface.Name = args.IfName
	}
	if iface.Sandbox == "" {
		iface.Sandbox = args.Netns
	}
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, Interfaces: []*current.Interface{iface}}
	defaults := map[bool]bool{} // family (is4) -> default route added
	for _, ip := range st.IPs {
		cfg := &current.IPConfig{Interface: current.Int(0), Address: *ipNet(ip.Address)}
		if ip.Gateway.IsValid() {
			cfg.Gateway = net.IP(ip.Gateway.AsSlice())
		}
		res.IPs = append(res.IPs, cfg)
		is4 := ip.Address.Addr().Is4()
		if len(st.Routes) == 0 && ip.Gateway.IsValid() && !defaults[is4] {
			defaults[is4] = true
			dst := netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			if is4 {
				dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			}
			res.Routes = append(res.Routes, &types.Route{Dst: *ipNet(dst), GW: cfg.Gateway})
		}
	}
	for _, r := range st.Routes {
		rt := &types.Route{Dst: *ipNet(r.Dst.Masked())}
		if r.GW.IsValid() {
			rt.GW = net.IP(r.GW.AsSlice())
		}
		res.Routes = append(res.Routes, rt)
	}
	return res
}

// ipNet converts a prefix, keeping the host bits of the address.
func ipNet(p netip.Prefix) *net.IPNet {
	bits := 128
	if p.Addr().Is4() {
		bits = 32
	}
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

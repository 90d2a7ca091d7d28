package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/enidnet/enid/internal/fileread"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// NoDatapath stands in for the kernel where enid runs without one: without
// root, in the demo's no-root mode, and for the simulated nodes of the fleet
// benchmark. It records what it was asked to set up and reports it back, so
// the agent's logic runs unchanged; nothing reaches the kernel. After a
// restart it is empty, as a rebooted node would be, and the agent rebuilds
// it from the published statuses.
//
// With a file, the record is kept there too (rewritten atomically on every
// change), so another process (`enid plan`, `enid status`) can observe it.
type NoDatapath struct {
	file string
	mu   sync.Mutex // guards node and the file
	// node is what was set up, changed by the planner's own effects
	// (planner.Effects), as the agent's cache is.
	node planner.Effects
}

// maxNoDatapathFile bounds the record read at start (a simulated node's
// record is a few hundred bytes per pod).
const maxNoDatapathFile = 64 << 20

// noDatapathRecord is the file form of a NoDatapath.
type noDatapathRecord struct {
	ENIs []observed.ENIDevice `json:"enis"`
	Pods []observed.PodNet    `json:"pods"`
}

// NewNoDatapath returns a NoDatapath; file "" keeps it in memory only,
// otherwise it starts from what the file holds (absent: empty).
func NewNoDatapath(file string) (*NoDatapath, error) {
	n := &NoDatapath{file: file}
	if file == "" {
		return n, nil
	}
	b, err := fileread.Read(file, maxNoDatapathFile, fileread.NoFollow)
	if errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	var rec noDatapathRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	slices.SortFunc(rec.ENIs, func(a, b observed.ENIDevice) int { return strings.Compare(a.MAC, b.MAC) })
	slices.SortFunc(rec.Pods, func(a, b observed.PodNet) int { return a.Key.Compare(b.Key) })
	n.node.Replace(observed.State{Node: observed.Node{ENIDevices: rec.ENIs, Pods: rec.Pods}})
	return n, nil
}

// save writes the record file; the caller holds mu.
func (n *NoDatapath) save() error {
	if n.file == "" {
		return nil
	}
	node := n.node.Peek().Node
	rec := noDatapathRecord{ENIs: append([]observed.ENIDevice{}, node.ENIDevices...),
		Pods: append([]observed.PodNet{}, node.Pods...)}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := status.WriteFileAtomic(n.file, b, 0o600); err != nil {
		return fmt.Errorf("record datapath state: %w", err)
	}
	return nil
}

// Observe reports every ENI and pod recorded.
func (n *NoDatapath) Observe(context.Context) (observed.Node, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	node := n.node.Peek().Node
	return observed.Node{ENIDevices: slices.Clone(node.ENIDevices), Pods: slices.Clone(node.Pods)}, nil
}

// apply records what the action did (planner.Effects) and reports whether
// anything changed; the caller holds mu. Only the device or the pod the
// action names can change, so only that one is compared (a copy of the
// lists per action would cost O(pods) each).
func (n *NoDatapath) apply(a planner.Action, r planner.Result) bool {
	mac := a.MAC
	var key observed.AttachmentKey
	if a.Pod != nil {
		key = a.Pod.Key
		if a.Kind == planner.MoveENI {
			mac = a.Pod.ENIMAC
		}
	}
	dev, devOK := n.device(mac)
	pod, podOK := n.pod(key)
	n.node.Apply(a, r)
	dev2, devOK2 := n.device(mac)
	pod2, podOK2 := n.pod(key)
	return devOK != devOK2 || dev != dev2 || podOK != podOK2 || (podOK && !samePod(pod, pod2))
}

// device and pod find what the record holds for a MAC or a key; the
// caller holds mu.
func (n *NoDatapath) device(mac string) (observed.ENIDevice, bool) {
	if mac == "" {
		return observed.ENIDevice{}, false
	}
	for _, d := range n.node.Peek().Node.ENIDevices {
		if d.MAC == mac {
			return d, true
		}
	}
	return observed.ENIDevice{}, false
}

func (n *NoDatapath) pod(k observed.AttachmentKey) (observed.PodNet, bool) {
	if k == (observed.AttachmentKey{}) {
		return observed.PodNet{}, false
	}
	pods := n.node.Peek().Node.Pods
	i, ok := slices.BinarySearchFunc(pods, k, func(p observed.PodNet, k observed.AttachmentKey) int { return p.Key.Compare(k) })
	if !ok {
		return observed.PodNet{}, false
	}
	return pods[i], true
}

// samePod compares the parts of a pod record the datapath sets.
func samePod(a, b observed.PodNet) bool {
	return a.Key == b.Key && a.IPv4 == b.IPv4 && a.IPv6 == b.IPv6 && a.ENIMAC == b.ENIMAC
}

// EnsureENI records the ENI as configured.
func (n *NoDatapath) EnsureENI(_ context.Context, s linux.ENISpec) (linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	name := "sim-" + strings.ReplaceAll(s.MAC[max(0, len(s.MAC)-5):], ":", "")
	if !n.apply(planner.Action{Kind: planner.ConfigureENI, MAC: s.MAC, Table: s.Table, MTU: s.MTU}, planner.Result{DeviceName: name}) {
		return nil, nil
	}
	return linux.Changes{"record eni " + s.MAC}, n.save()
}

// RemoveENI forgets the ENI.
func (n *NoDatapath) RemoveENI(_ context.Context, mac string, _ int) (linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	// A detach's effect on the node is that its device goes.
	if !n.apply(planner.Action{Kind: planner.DetachENI, MAC: mac}, planner.Result{Gone: true}) {
		return nil, nil
	}
	return linux.Changes{"forget eni " + mac}, n.save()
}

// EnsurePod records the pod as set up.
func (n *NoDatapath) EnsurePod(_ context.Context, s linux.PodSpec) (linux.PodResult, linux.Changes, error) {
	return n.record(planner.Action{Kind: planner.SetupPod, Pod: &planner.PodTarget{Key: s.Key, NetNS: s.NetNS,
		IPv4: s.IPv4, IPv6: s.IPv6, ENIMAC: s.ENIMAC}})
}

// EnsureExclusive records the exclusive attachment.
func (n *NoDatapath) EnsureExclusive(_ context.Context, s linux.ExclusiveSpec) (linux.PodResult, linux.Changes, error) {
	return n.record(planner.Action{Kind: planner.MoveENI, HostRoutes: s.HostRoutes, Pod: &planner.PodTarget{Key: s.Key, NetNS: s.NetNS,
		IPv4: s.Prefix.Addr(), IPv6: s.PrefixV6.Addr(), ENIMAC: s.MAC}})
}

func (n *NoDatapath) record(a planner.Action) (linux.PodResult, linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	res := linux.PodResult{HostVeth: linux.HostVethName(a.Pod.Key)}
	if !n.apply(a, planner.Result{HostVeth: res.HostVeth}) {
		return res, nil, nil
	}
	return res, linux.Changes{"record pod " + a.Pod.Key.String()}, n.save()
}

// TeardownPod forgets the pod.
func (n *NoDatapath) TeardownPod(_ context.Context, key observed.AttachmentKey, _ string, _ ...netip.Addr) (linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.apply(planner.Action{Kind: planner.TeardownPod, Pod: &planner.PodTarget{Key: key}}, planner.Result{}) {
		return nil, nil
	}
	return linux.Changes{"forget pod " + key.String()}, n.save()
}

// TeardownExclusive forgets the exclusive attachment.
func (n *NoDatapath) TeardownExclusive(ctx context.Context, key observed.AttachmentKey, netns, _ string) (linux.Changes, error) {
	return n.TeardownPod(ctx, key, netns)
}

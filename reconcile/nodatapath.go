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
	mu   sync.Mutex // guards the maps and the file
	enis map[string]observed.ENIDevice
	pods map[observed.AttachmentKey]observed.PodNet
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
	n := &NoDatapath{file: file, enis: map[string]observed.ENIDevice{}, pods: map[observed.AttachmentKey]observed.PodNet{}}
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
	for _, d := range rec.ENIs {
		n.enis[d.MAC] = d
	}
	for _, p := range rec.Pods {
		n.pods[p.Key] = p
	}
	return n, nil
}

// save writes the record file; the caller holds mu.
func (n *NoDatapath) save() error {
	if n.file == "" {
		return nil
	}
	rec := noDatapathRecord{ENIs: []observed.ENIDevice{}, Pods: []observed.PodNet{}}
	for _, d := range n.enis {
		rec.ENIs = append(rec.ENIs, d)
	}
	for _, p := range n.pods {
		rec.Pods = append(rec.Pods, p)
	}
	slices.SortFunc(rec.ENIs, func(a, b observed.ENIDevice) int { return strings.Compare(a.MAC, b.MAC) })
	slices.SortFunc(rec.Pods, func(a, b observed.PodNet) int { return strings.Compare(a.Key.String(), b.Key.String()) })
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
	var node observed.Node
	for _, d := range n.enis {
		node.ENIDevices = append(node.ENIDevices, d)
	}
	for _, p := range n.pods {
		node.Pods = append(node.Pods, p)
	}
	slices.SortFunc(node.ENIDevices, func(a, b observed.ENIDevice) int { return strings.Compare(a.MAC, b.MAC) })
	slices.SortFunc(node.Pods, func(a, b observed.PodNet) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return node, nil
}

// EnsureENI records the ENI as configured.
func (n *NoDatapath) EnsureENI(_ context.Context, s linux.ENISpec) (linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	want := observed.ENIDevice{MAC: s.MAC, Name: "sim-" + strings.ReplaceAll(s.MAC[max(0, len(s.MAC)-5):], ":", ""), Up: true, MTU: s.MTU, Table: s.Table, Configured: true}
	if n.enis[s.MAC] == want {
		return nil, nil
	}
	n.enis[s.MAC] = want
	return linux.Changes{"record eni " + s.MAC}, n.save()
}

// RemoveENI forgets the ENI.
func (n *NoDatapath) RemoveENI(_ context.Context, mac string, _ int) (linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.enis[mac]; !ok {
		return nil, nil
	}
	delete(n.enis, mac)
	return linux.Changes{"forget eni " + mac}, n.save()
}

// EnsurePod records the pod as set up.
func (n *NoDatapath) EnsurePod(_ context.Context, s linux.PodSpec) (linux.PodResult, linux.Changes, error) {
	return n.record(s.Key, observed.PodNet{Key: s.Key, NetNS: s.NetNS, IPv4: s.IPv4, IPv6: s.IPv6, ENIMAC: s.ENIMAC, Healthy: true})
}

// EnsureExclusive records the exclusive attachment.
func (n *NoDatapath) EnsureExclusive(_ context.Context, s linux.ExclusiveSpec) (linux.PodResult, linux.Changes, error) {
	return n.record(s.Key, observed.PodNet{Key: s.Key, NetNS: s.NetNS, IPv4: s.Prefix.Addr(), ENIMAC: s.MAC, Exclusive: true, Healthy: true})
}

func (n *NoDatapath) record(key observed.AttachmentKey, p observed.PodNet) (linux.PodResult, linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p.HostVeth = linux.HostVethName(key)
	res := linux.PodResult{HostVeth: p.HostVeth}
	if old, ok := n.pods[key]; ok && old.IPv4 == p.IPv4 && old.IPv6 == p.IPv6 && old.ENIMAC == p.ENIMAC {
		return res, nil, nil
	}
	n.pods[key] = p
	return res, linux.Changes{"record pod " + key.String()}, n.save()
}

// TeardownPod forgets the pod.
func (n *NoDatapath) TeardownPod(_ context.Context, key observed.AttachmentKey, _ string, _ ...netip.Addr) (linux.Changes, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.pods[key]; !ok {
		return nil, nil
	}
	delete(n.pods, key)
	return linux.Changes{"forget pod " + key.String()}, n.save()
}

// TeardownExclusive forgets the exclusive attachment.
func (n *NoDatapath) TeardownExclusive(ctx context.Context, key observed.AttachmentKey, netns, _ string) (linux.Changes, error) {
	return n.TeardownPod(ctx, key, netns)
}

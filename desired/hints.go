package desired

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/enidnet/enid/internal/fileread"
)

// HintSources are the kubelet's and the runtime's files read as hints.
// An empty path skips that source.
type HintSources struct {
	// AllocatedPodsState is kubelet's allocated_pods_state checkpoint.
	AllocatedPodsState string
	// DeviceCheckpoint is the device manager's kubelet_internal_checkpoint.
	DeviceCheckpoint string
	// CNIResultsDir is libcni's result cache of the container runtime.
	CNIResultsDir string
}

// DefaultHintSources returns the standard kubelet and libcni locations.
func DefaultHintSources() HintSources {
	return HintSources{
		AllocatedPodsState: DefaultAllocatedPods,
		DeviceCheckpoint:   DefaultDeviceCheckpoint,
		CNIResultsDir:      DefaultCNIResultsDir,
	}
}

// maxHintFile bounds each hint file read; kubelet's checkpoints for a full
// node are a few MiB at most.
const maxHintFile = 32 << 20

// ReadHints reads every hint source. It never fails: a missing file adds
// nothing, and a file in an unknown format adds a line to Hints.Problems.
// Hints say which pods exist soon or still; a pod missing from them is never
// a reason to release anything (kubelet does not persist removals).
func ReadHints(src HintSources) Hints {
	var r HintReader
	return r.Read(src)
}

// Dirs returns the directories that hold the hint sources, for a watcher:
// a change of any source is a change in one of them.
func (src HintSources) Dirs() []string {
	var dirs []string
	for _, p := range []string{src.AllocatedPodsState, src.DeviceCheckpoint} {
		if p != "" && !slices.Contains(dirs, filepath.Dir(p)) {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	if src.CNIResultsDir != "" && !slices.Contains(dirs, src.CNIResultsDir) {
		dirs = append(dirs, src.CNIResultsDir)
	}
	return dirs
}

// HintReader reads the hint sources like ReadHints, keeping the runtime's
// cache records it parsed by file identity: libcni writes one file per
// attachment, and a re-read after one ADD then costs one lstat per record
// instead of a read and a parse. Not safe for concurrent use.
type HintReader struct {
	cni map[string]cachedRecord
}

type cachedRecord struct {
	id  fileID
	att RuntimeAttachment
	// ours: the record is of enid's network (isEnidConfig); others are
	// kept here only so that a re-read skips them for one lstat too.
	ours bool
}

// Read reads every hint source (see ReadHints).
func (r *HintReader) Read(src HintSources) Hints {
	var h Hints
	uids := map[string]bool{}
	if src.AllocatedPodsState != "" {
		got, err := readAllocatedPods(src.AllocatedPodsState)
		h.note(src.AllocatedPodsState, err)
		for _, u := range got {
			uids[u] = true
		}
	}
	if src.DeviceCheckpoint != "" {
		got, err := readDeviceCheckpoint(src.DeviceCheckpoint)
		h.note(src.DeviceCheckpoint, err)
		for _, u := range got {
			uids[u] = true
		}
	}
	for u := range uids {
		h.AdmittedPodUIDs = append(h.AdmittedPodUIDs, u)
	}
	sort.Strings(h.AdmittedPodUIDs)
	if src.CNIResultsDir != "" {
		atts, problems := r.readCNIResults(src.CNIResultsDir)
		h.RuntimeAttachments = atts
		h.Problems = append(h.Problems, problems...)
	}
	return h
}

func (h *Hints) note(file string, err error) {
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.Problems = append(h.Problems, fmt.Sprintf("%s: %v", file, unwrapPath(err)))
	}
}

func readLimited(path string) ([]byte, error) {
	return fileread.Read(path, maxHintFile, fileread.Follow)
}

// readAllocatedPods reads kubelet's allocation checkpoint:
// {"data":"<JSON string>","checksum":N}, where the inner JSON maps pod UIDs
// under "entries" (kubelet >= 1.33). The checksum is not verified: it hashes
// a dump of kubelet's Go types, and a hint needs no proof.
func readAllocatedPods(path string) ([]string, error) {
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	var outer struct {
		Data *string `json:"data"`
	}
	if err := json.Unmarshal(data, &outer); err != nil || outer.Data == nil {
		return nil, errors.New("unknown format: want {\"data\": \"...\", \"checksum\": N}")
	}
	var inner struct {
		Entries map[string]json.RawMessage `json:"entries"`
	}
	if err := json.Unmarshal([]byte(*outer.Data), &inner); err != nil || inner.Entries == nil {
		return nil, errors.New("unknown format: data has no \"entries\" map")
	}
	return sortedKeys(inner.Entries), nil
}

// readDeviceCheckpoint reads the device manager's checkpoint:
// {"Data":{"PodDeviceEntries":[{"PodUID":...}],...},"Checksum":N}.
func readDeviceCheckpoint(path string) ([]string, error) {
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	var cp struct {
		Data *struct {
			PodDeviceEntries []struct {
				PodUID string `json:"PodUID"`
			} `json:"PodDeviceEntries"`
		} `json:"Data"`
	}
	if err := json.Unmarshal(data, &cp); err != nil || cp.Data == nil {
		return nil, errors.New("unknown format: want {\"Data\": {\"PodDeviceEntries\": [...]}, \"Checksum\": N}")
	}
	seen := map[string]bool{}
	var uids []string
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID != "" && !seen[e.PodUID] {
			seen[e.PodUID] = true
			uids = append(uids, e.PodUID)
		}
	}
	sort.Strings(uids)
	return uids, nil
}

// cniCacheKind is the kind libcni writes in its result cache.
const cniCacheKind = "cniCacheV1"

// PluginType is the type of enid's plugin in a network list (the binary's
// name): a runtime's cache record is enid's when the config it ran names it.
const PluginType = "enid-cni"

// readCNIResults reads libcni's cache files <network>-<containerID>-<ifName>
// and returns the records of enid's network only: the runtime records every
// network it runs for a sandbox there, and containerd's CRI runs its own
// loopback network (cni-loopback-<containerID>-lo) beside enid's for every
// one; a record of another network says nothing about enid's attachment.
// Records whose file identity is unchanged are taken from r's cache.
func (r *HintReader) readCNIResults(dir string) ([]RuntimeAttachment, []string) {
	dirents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		r.cni = nil
		return nil, nil
	}
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", dir, unwrapPath(err))}
	}
	var atts []RuntimeAttachment
	var problems []string
	seen := make(map[string]bool, len(dirents))
	for _, de := range dirents {
		if !de.Type().IsRegular() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, de.Name())
		var id fileID
		var idOK bool
		if fi, err := os.Lstat(p); err == nil {
			id, idOK = fileIDOf(fi)
		}
		if c, ok := r.cni[p]; ok && idOK && c.id == id {
			seen[p] = true
			if c.ours {
				atts = append(atts, c.att)
			}
			continue
		}
		a, ours, err := readCNIResult(p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", p, unwrapPath(err)))
			continue
		}
		if idOK {
			if r.cni == nil {
				r.cni = map[string]cachedRecord{}
			}
			r.cni[p] = cachedRecord{id: id, att: a, ours: ours}
			seen[p] = true
		}
		if ours {
			atts = append(atts, a)
		}
	}
	for p := range r.cni {
		if !seen[p] {
			delete(r.cni, p)
		}
	}
	sort.Slice(atts, func(i, j int) bool {
		a, b := atts[i], atts[j]
		if a.ContainerID != b.ContainerID {
			return a.ContainerID < b.ContainerID
		}
		if a.IfName != b.IfName {
			return a.IfName < b.IfName
		}
		return a.Network < b.Network
	})
	return atts, problems
}

// readCNIResult reads one cache record; ours says whether it is a record of
// enid's network (isEnidConfig).
func readCNIResult(path string) (a RuntimeAttachment, ours bool, err error) {
	data, err := readLimited(path)
	if err != nil {
		return RuntimeAttachment{}, false, err
	}
	var c struct {
		Kind        string `json:"kind"`
		ContainerID string `json:"containerId"`
		IfName      string `json:"ifName"`
		NetworkName string `json:"networkName"`
		// Config is the network list (or single network config) libcni
		// ran, as bytes: base64 in JSON.
		Config []byte `json:"config"`
		Result struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return RuntimeAttachment{}, false, fmt.Errorf("not a libcni cache record: %v", err)
	}
	if c.Kind != cniCacheKind {
		return RuntimeAttachment{}, false, fmt.Errorf("unknown cache kind %q (want %s)", c.Kind, cniCacheKind)
	}
	if c.ContainerID == "" || c.IfName == "" {
		return RuntimeAttachment{}, false, errors.New("cache record without containerId or ifName")
	}
	a = RuntimeAttachment{Network: c.NetworkName, ContainerID: c.ContainerID, IfName: c.IfName}
	for _, ip := range c.Result.IPs {
		// A result from an old CNI version may carry IPs in another shape;
		// the attachment is still a useful hint without them.
		if p, err := netip.ParsePrefix(ip.Address); err == nil {
			a.IPs = append(a.IPs, p)
		}
	}
	return a, isEnidConfig(c.Config), nil
}

// isEnidConfig reports whether a record's config is enid's network: a
// network list with a plugin of type PluginType (chained plugins after it
// are fine), or a single network config of that type. A record without a
// config, or with one that does not parse, counts as enid's: which network
// it is cannot be told, and a hint may only err on the side of "alive".
func isEnidConfig(conf []byte) bool {
	if len(conf) == 0 {
		return true
	}
	var c struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &c); err != nil {
		return true
	}
	if c.Type == PluginType {
		return true
	}
	for _, p := range c.Plugins {
		if p.Type == PluginType {
			return true
		}
	}
	return false
}

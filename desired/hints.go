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
	"time"

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
	return KubeletHintSources(DefaultKubeletRootDir, DefaultCNIResultsDir)
}

// KubeletHintSources returns the hint sources of a kubelet whose
// --root-dir is rootDir and of a runtime whose libcni cache is
// cniResultsDir (its results directory); an empty argument skips its
// sources.
func KubeletHintSources(rootDir, cniResultsDir string) HintSources {
	var src HintSources
	if rootDir != "" {
		src.AllocatedPodsState = filepath.Join(rootDir, "allocated_pods_state")
		src.DeviceCheckpoint = filepath.Join(rootDir, "device-plugins", "kubelet_internal_checkpoint")
	}
	src.CNIResultsDir = cniResultsDir
	return src
}

// maxHintFile bounds each hint file read; kubelet's checkpoints for a full
// node are a few MiB at most.
const maxHintFile = 32 << 20

// ReadHints reads every hint source. It never fails: a missing file adds
// nothing (a kubelet file is named in Hints.Absent), and a file in an
// unknown format adds a HintProblem.
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
	id  fileread.ID
	att RuntimeAttachment
	// ours: the record is of enid's network (isEnidConfig); others are
	// kept here only so that a re-read skips them for one lstat too.
	ours bool
}

// Read reads every hint source (see ReadHints).
func (r *HintReader) Read(src HintSources) Hints {
	var h Hints
	uids := map[string]bool{}
	for _, s := range []struct {
		source HintSource
		path   string
		read   func([]byte) ([]string, error)
	}{
		{SourceAllocatedPods, src.AllocatedPodsState, parseAllocatedPods},
		{SourceDeviceCheckpoint, src.DeviceCheckpoint, parseDeviceCheckpoint},
	} {
		if s.path == "" {
			continue
		}
		got, mtime, err := readCheckpoint(s.path, s.read)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			h.Absent = append(h.Absent, s.path)
			continue
		case err != nil:
			h.Problems = append(h.Problems, HintProblem{Source: s.source, Path: s.path, Err: unwrapPath(err).Error()})
			h.AdmittedPartial = true
			continue
		}
		if mtime.After(h.AdmittedAt) {
			h.AdmittedAt = mtime
		}
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

// readCheckpoint reads one kubelet checkpoint with parse, and returns the
// file's modification time with what parse found. The time is the open
// file's: a rename over the path after the open does not mix two versions.
func readCheckpoint(path string, parse func([]byte) ([]string, error)) ([]string, time.Time, error) {
	f, err := fileread.Open(path, fileread.Follow)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close() //nolint:errcheck // read-only: nothing to flush
	st, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, err
	}
	data, err := fileread.ReadFrom(f, maxHintFile)
	if err != nil {
		return nil, time.Time{}, err
	}
	uids, err := parse(data)
	return uids, st.ModTime(), err
}

func readLimited(path string) ([]byte, error) {
	return fileread.Read(path, maxHintFile, fileread.Follow)
}

// parseAllocatedPods parses kubelet's allocation checkpoint
// (allocated_pods_state; actuated_pods_state has the same format):
// {"data":"<JSON string>","checksum":N}, where the inner JSON maps pod UIDs
// under "entries" (kubelet >= 1.33). The kubelet omits an empty map, so
// data "{}" lists no pod. The checksum is not verified: it hashes a dump
// of kubelet's Go types, and a hint needs no proof.
func parseAllocatedPods(data []byte) ([]string, error) {
	var outer struct {
		Data *string `json:"data"`
	}
	if err := json.Unmarshal(data, &outer); err != nil || outer.Data == nil {
		return nil, errors.New("unknown format: want {\"data\": \"...\", \"checksum\": N}")
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal([]byte(*outer.Data), &inner); err != nil || inner == nil {
		return nil, errors.New("unknown format: data is not a JSON object")
	}
	raw, ok := inner["entries"]
	if !ok {
		if len(inner) == 0 {
			return nil, nil
		}
		return nil, errors.New("unknown format: data has no \"entries\" map")
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, errors.New("unknown format: data's \"entries\" is not a map")
	}
	return sortedKeys(entries), nil
}

// parseDeviceCheckpoint parses the device manager's checkpoint:
// {"Data":{"PodDeviceEntries":[{"PodUID":...}],...},"Checksum":N}.
func parseDeviceCheckpoint(data []byte) ([]string, error) {
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
func (r *HintReader) readCNIResults(dir string) ([]RuntimeAttachment, []HintProblem) {
	dirents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		r.cni = nil
		return nil, nil
	}
	if err != nil {
		return nil, []HintProblem{{Source: SourceCNIResults, Path: dir, Err: unwrapPath(err).Error()}}
	}
	var atts []RuntimeAttachment
	var problems []HintProblem
	seen := make(map[string]bool, len(dirents))
	for _, de := range dirents {
		if !de.Type().IsRegular() || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, de.Name())
		var id fileread.ID
		var idOK bool
		if fi, err := os.Lstat(p); err == nil {
			id, idOK = fileread.IDOf(fi)
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
			problems = append(problems, HintProblem{Source: SourceCNIResults, Path: p, Err: unwrapPath(err).Error()})
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

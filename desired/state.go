package desired

import (
	"net/netip"
	"time"
)

// State is everything the node is asked to achieve, as read from files.
type State struct {
	// Config is the effective config: the last good one, with per-node
	// overrides applied and defaults filled in.
	Config Config
	// ConfigProblems lists what is wrong with the config on disk when it
	// could not be loaded (Config is then the last good one).
	ConfigProblems []string
	// Entries holds every valid pod attachment entry, sorted by key.
	Entries []Entry
	// EntryProblems reports each entry file that could not be used.
	EntryProblems []EntryProblem
	// Deleted are the attachments the runtime deleted (CNI DEL or GC) whose
	// deletion records are still on disk, sorted. Without an entry of the
	// same key, their kernel state and status are torn down at once,
	// whatever the hints say. A key with an entry is live: the entry wins.
	Deleted []Key
	// Hints are the kubelet's and the runtime's records: demand hints and a
	// second source that an attachment is alive. Never a reason to release.
	Hints Hints
}

// EntryProblem is one entry file that could not be used and why.
type EntryProblem struct {
	// File is the entry's file name (not a path).
	File string
	// ContainerID and IfName are filled when they could be parsed from the
	// file name, so the agent can publish a Failed status for it.
	ContainerID string
	IfName      string
	Err         string
	// Code is the reason code of the Failed status published for it
	// (planner's ReasonCode); "" means "entry-invalid".
	Code string
}

// Key returns the attachment the problem names (zero halves when they could
// not be parsed from the file name).
func (p EntryProblem) Key() Key { return Key{ContainerID: p.ContainerID, IfName: p.IfName} }

// EntryAPIVersion is the version written in every pod entry.
const EntryAPIVersion = "enid.dev/v1alpha1"

// Entry is one pod attachment the CNI plugin asked for: the file
// /run/enid/pods/<containerID>_<ifName>.json.
type Entry struct {
	APIVersion  string `json:"apiVersion"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	// NetNS is the absolute path of the pod's network namespace.
	NetNS        string            `json:"netns"`
	PodNamespace string            `json:"podNamespace"`
	PodName      string            `json:"podName"`
	PodUID       string            `json:"podUID,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	// Bandwidth is the requested rate limit; nil means none.
	Bandwidth *Bandwidth `json:"bandwidth,omitempty"`
	// Created is when the CNI plugin wrote the entry.
	Created time.Time `json:"created"`

	// Revision identifies this exact content of the entry (a hash of the
	// file's bytes, filled when read or written, never stored). A status
	// names the revision it answers, so the plugin never mistakes an old
	// answer for a new one.
	Revision string `json:"-"`
}

// Bandwidth is a rate limit in bits per second, bursts in bits, as the CNI
// bandwidth capability carries them. Zero means unlimited in that direction.
type Bandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// Hints are node-local records of pods; see package docs for what they may
// and may not be used for.
type Hints struct {
	// AdmittedPodUIDs are pods kubelet admitted (allocated_pods_state and
	// the device-manager checkpoint), sorted. The kubelet forgets a deleted
	// pod only in memory and rewrites the files at its next admission, so
	// they also list pods deleted since: a listed pod without an entry is
	// demand only while it may still be coming (see planner.Memory.Admitted).
	AdmittedPodUIDs []string
	// AdmittedAt is the latest modification time of the files
	// AdmittedPodUIDs was read from (zero when none exists): the kubelet
	// rewrites them at each admission, so every listed pod was admitted at
	// or before it.
	AdmittedAt time.Time
	// AdmittedPartial is set when a source of AdmittedPodUIDs exists but
	// could not be read (see Problems): the list may lack pods it names.
	AdmittedPartial bool
	// RuntimeAttachments are the runtime's libcni cache records
	// (/var/lib/cni/results) of enid's network: attachments the runtime
	// believes are alive. Records of other networks (containerd's
	// cni-loopback beside every sandbox) are not among them.
	RuntimeAttachments []RuntimeAttachment
	// Problems lists hint files that could not be read (never fatal), in
	// source order.
	Problems []HintProblem
	// Absent lists the kubelet's files that do not exist (the runtime's
	// cache directory is not one: it is absent until a pod has a network).
	// Before its first admission the kubelet writes no file; on a node
	// whose pods have entries, an absent allocated_pods_state means the
	// kubelet writes it elsewhere (another --root-dir) or not at all.
	Absent []string
}

// HintSource names one kind of hint file, as metrics and the heartbeat
// label it.
type HintSource string

// The hint sources.
const (
	SourceAllocatedPods    HintSource = "allocated_pods_state"
	SourceDeviceCheckpoint HintSource = "device_checkpoint"
	SourceCNIResults       HintSource = "cni_results"
)

// AllHintSources lists every HintSource, in the order they are read.
func AllHintSources() []HintSource {
	return []HintSource{SourceAllocatedPods, SourceDeviceCheckpoint, SourceCNIResults}
}

// HintProblem is one hint file that exists but could not be used: a
// format the reader does not know (a kubelet or runtime that changed it),
// a file too large, not a regular file, or unreadable.
type HintProblem struct {
	Source HintSource
	// Path is the file (or, for a listing that failed, the directory).
	Path string
	Err  string
}

// String is "path: error", the form logs and `enid status` show.
func (p HintProblem) String() string { return p.Path + ": " + p.Err }

// RuntimeAttachment is one libcni cache record.
type RuntimeAttachment struct {
	Network     string
	ContainerID string
	IfName      string
	IPs         []netip.Prefix
}

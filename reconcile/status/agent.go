package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/enidnet/enid/internal/fileread"
	"github.com/enidnet/enid/internal/podkey"
)

// Agent is the agent heartbeat and readiness, the file /run/enid/agent.json.
// The agent rewrites it on every pass that changes what it says and at
// least every heartbeat period; a reader judges liveness by Heartbeat, not
// by the file's mtime.
type Agent struct {
	APIVersion string `json:"apiVersion"`
	// PID is the agent's process ID, in its own pid namespace
	// (PIDNamespace).
	PID int `json:"pid"`
	// Lock names the file, in the heartbeat's directory, on which the
	// agent holds a lock for as long as it runs (LockFileName; see
	// LockAgent): free, it says the writer is gone, however fresh
	// Heartbeat is. Empty in an older agent's heartbeat.
	Lock string `json:"lock,omitempty"`
	// PIDNamespace ("pid:[4026531836]") and PIDStart (the process's start
	// time in clock ticks after boot, /proc/<pid>/stat) identify the
	// process beyond PID for a reader that cannot open Lock: in the same
	// pid namespace, a process of that pid and start time is the agent.
	PIDNamespace string `json:"pidNamespace,omitempty"`
	PIDStart     uint64 `json:"pidStart,omitempty"`
	// Version is the agent build's version string.
	Version string `json:"version"`
	// Started is when the agent process started.
	Started time.Time `json:"started"`
	// Heartbeat is when the agent wrote this file.
	Heartbeat time.Time `json:"heartbeat"`
	// Ready is true when the agent can serve new attachments (config
	// loaded, cloud reachable, first observation complete).
	Ready bool `json:"ready"`
	// Reason says why the agent is not ready; may also explain a degraded
	// but ready state.
	Reason string `json:"reason,omitempty"`
	// Stopped is set in the agent's last heartbeat as it exits: nobody
	// acts on entries until an agent starts again, however fresh
	// Heartbeat is.
	Stopped bool        `json:"stopped,omitempty"`
	Pool    PoolSummary `json:"pool"`
	// Sets is the pool of each security-group set when the node has more
	// than the default set (absent otherwise); Pool is their sum.
	Sets []SetSummary `json:"sets,omitempty"`
	// LastErrors are the most recent errors (the last 10), oldest first,
	// repeats kept, for operators.
	LastErrors []string `json:"lastErrors,omitempty"`
	// Pods counts attachment statuses by phase.
	Pods map[Phase]int `json:"pods,omitempty"`
	// Kube is the state of the agent's link to the Kubernetes API server
	// ("connected", "degraded: ..."); empty when it has none.
	Kube string `json:"kube,omitempty"`
	// Degraded is set while the cloud cannot be observed: the agent serves
	// new pods from the idle addresses it provably holds, and growth and
	// release wait. Ready stays true while pods can be served.
	Degraded *Degraded `json:"degraded,omitempty"`
	// Hints reports the kubelet's and the runtime's files the agent reads
	// as demand hints (absent when it reads none, and in heartbeats of
	// agents older than this field).
	Hints *Hints `json:"hints,omitempty"`
	// Process is not in the file: it is whether the process that wrote it
	// still ran when ReadAgent read it (ProcessUnknown for a value that
	// ReadAgent did not read).
	Process Process `json:"-"`
}

// Hints is what the agent made of the kubelet's and the runtime's files
// (docs/files.md, "Hints the agent reads but does not own").
type Hints struct {
	// Admitted counts the pods the kubelet's files list (deleted pods
	// included until the kubelet rewrites them); Expected, those of them
	// counted as demand about to arrive: no entry yet, and still coming.
	Admitted int `json:"admitted"`
	Expected int `json:"expected"`
	// Problems are the hint files that exist but could not be used (an
	// unknown format after a kubelet or runtime upgrade, a file too large
	// or not a regular file): their pods are not counted.
	Problems []HintProblem `json:"problems,omitempty"`
	// NotFound is set when no kubelet file exists where the agent looks
	// although pods have entries (the kubelet writes one at every
	// admission): it says where the agent looked and what to check.
	NotFound string `json:"notFound,omitempty"`
}

// HintProblem is one hint file that could not be used.
type HintProblem struct {
	// Source is allocated_pods_state, device_checkpoint or cni_results.
	Source string `json:"source"`
	Path   string `json:"path"`
	Error  string `json:"error"`
}

// Degraded describes degraded mode (docs/design.md, "Degraded mode").
type Degraded struct {
	// Since is when the agent first failed to observe the cloud.
	Since time.Time `json:"since"`
	// LastObserved is when the cloud was last observed in full: the
	// addresses served are those of that observation, as the agent's own
	// actions changed them since.
	LastObserved time.Time `json:"lastObserved"`
	// Idle is how many idle addresses the agent can still hand out.
	Idle int `json:"idle"`
	// Reason is the first thing that could not be observed.
	Reason string `json:"reason"`
}

// PoolSummary is the shape of the shared-mode IP pool. Counts are IPs,
// except ENIs.
type PoolSummary struct {
	// Total is every secondary IP held on owned ENIs.
	Total int `json:"total"`
	// Used is the IPs bound to pods.
	Used int `json:"used"`
	// Idle is the IPs ready for new pods.
	Idle int `json:"idle"`
	// Cooldown is the released IPs not yet reusable.
	Cooldown int `json:"cooldown"`
	// Sticky is the IPs held for sticky pods that may come back.
	Sticky int `json:"sticky"`
	// ENIs is the number of owned secondary ENIs attached.
	ENIs int `json:"enis"`
	// Capacity is the most pod addresses the node can hold under its
	// instance type's limits and the config (ENIs in exclusive mode); 0
	// until known. It is what the node advertises as enid.dev/pod-ips.
	Capacity int `json:"capacity,omitempty"`
}

// SetSummary is one security-group set's pool on the node.
type SetSummary struct {
	// Name is "default" (eni.securityGroups), a name of
	// eni.securityGroupSets, or empty for a set only pods' annotations name.
	Name string `json:"name,omitempty"`
	// SecurityGroups are the set's groups, sorted.
	SecurityGroups []string `json:"securityGroups"`
	// ENIs are the owned attached ENIs serving the set.
	ENIs []string `json:"enis,omitempty"`
	// Pods counts the attachments asking for the set; Waiting, those of
	// them without an address yet.
	Pods    int `json:"pods"`
	Waiting int `json:"waiting"`
	// Total, Used, Idle, Cooldown and Sticky count IPs as in PoolSummary.
	Total    int `json:"total"`
	Used     int `json:"used"`
	Idle     int `json:"idle"`
	Cooldown int `json:"cooldown"`
	Sticky   int `json:"sticky"`
}

// WriteAgent writes the heartbeat atomically to path, creating its
// directory. An empty APIVersion is filled with Version.
func WriteAgent(path string, a Agent) error {
	if a.APIVersion == "" {
		a.APIVersion = Version
	}
	if a.APIVersion != Version {
		return fmt.Errorf("write heartbeat: %w %q", ErrVersion, a.APIVersion)
	}
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("encode heartbeat: %w", err)
	}
	return podkey.WriteFileAtomicMkdir(path, append(data, '\n'), 0o644, 0o755)
}

// ReadAgent reads the heartbeat at path and checks whether its writer
// still runs (Process): its lock beside the file, else its pid in /proc.
// The error wraps fs.ErrNotExist when there is none (the agent never ran
// since boot), and ErrVersion for an unknown apiVersion.
func ReadAgent(path string) (Agent, error) {
	data, err := fileread.Read(path, MaxFileSize, fileread.NoFollow)
	if err != nil {
		return Agent{}, fmt.Errorf("read heartbeat: %w", err)
	}
	var a Agent
	if err := decode(data, &a); err != nil {
		return Agent{}, fmt.Errorf("decode heartbeat %s: %w", path, err)
	}
	if a.APIVersion != Version {
		return Agent{}, fmt.Errorf("heartbeat %s: %w %q (want %q)", path, ErrVersion, a.APIVersion, Version)
	}
	if !a.Stopped {
		a.Process = a.probe(path)
	}
	return a, nil
}

// ErrNotServing is wrapped by Agent.Serving when the agent cannot take new
// attachments.
var ErrNotServing = errors.New("agent not serving")

// Serving reports whether a heartbeat read at now shows an agent able to
// serve new attachments: not stopped, its process not known to be gone
// (Process), ready, and with a heartbeat no older than maxAge.
// The error wraps ErrNotServing and says why.
func (a Agent) Serving(now time.Time, maxAge time.Duration) error {
	if a.Stopped {
		return fmt.Errorf("%w: agent pid %d stopped at %s", ErrNotServing, a.PID, a.Heartbeat.Format(time.RFC3339))
	}
	if a.Process == ProcessGone {
		return fmt.Errorf("%w: agent process not running (pid %d, last heartbeat %s)", ErrNotServing, a.PID, a.Heartbeat.Format(time.RFC3339))
	}
	if age := now.Sub(a.Heartbeat); age > maxAge {
		return fmt.Errorf("%w: heartbeat is %s old (bound %s), pid %d", ErrNotServing, age.Round(time.Millisecond), maxAge, a.PID)
	}
	if !a.Ready {
		reason := a.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return fmt.Errorf("%w: not ready: %s", ErrNotServing, reason)
	}
	return nil
}

// Alive reports whether a heartbeat read at now shows a running agent,
// ready or not: not stopped, its process not known to be gone, and no
// older than maxAge. A running agent still tears down attachments whose
// entries are gone.
func (a Agent) Alive(now time.Time, maxAge time.Duration) bool {
	return !a.Stopped && a.Process != ProcessGone && now.Sub(a.Heartbeat) <= maxAge
}

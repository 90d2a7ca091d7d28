package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// PodStatus is one attachment status the agent published, with the pod it
// belongs to.
type PodStatus struct {
	Namespace, Name, UID string
	// Attachment is the attachment's key (<containerID>_<ifName>).
	Attachment string
	// Phase is Pending, Ready or Failed.
	Phase string
	// ReasonCode is the status's stable reason (planner reason codes, e.g.
	// vswitch-exhausted); Reason its text.
	ReasonCode string
	Reason     string
	// Addresses are the pod's addresses when Ready.
	Addresses []string
}

// Status phases (the values of reconcile/status).
const (
	phasePending = "Pending"
	phaseReady   = "Ready"
	phaseFailed  = "Failed"
)

// warnWhilePending are the reasons a Pending pod waits for that a person
// must hear of: the pod will not get an address until something changes
// (a vSwitch, a limit, the config, the cloud, the kernel). The ordinary
// waits (waiting-for-attach, waiting-for-ips, ips-in-cooldown) are a warm
// pool catching up, and say nothing.
var warnWhilePending = map[string]bool{ //nolint:gochecknoglobals // constant set
	"vswitch-exhausted":      true,
	"instance-eni-limit":     true,
	"ip-limit":               true,
	"config-invalid":         true,
	"entry-invalid":          true,
	"address-conflict":       true,
	"observation-incomplete": true,
	"setup-failed":           true,
}

// Event reasons enid records (UpperCamelCase, as Kubernetes asks).
const (
	// ReasonNetworkReady is the Normal event of a pod that got its address
	// after a Warning.
	ReasonNetworkReady = "NetworkReady"
	// ReasonAttachFailed is the Warning of a Failed attachment whose code
	// has no name of its own.
	ReasonAttachFailed = "AttachFailed"
)

// event is one event to record.
type event struct {
	Type, Reason, Message string
}

// podMemory is what the event logic remembers of a pod attachment: the
// last warning it raised.
type podMemory struct {
	code string
}

// decide turns a published status into at most one event, given what was
// remembered of the attachment (had is false when nothing was). It returns
// the memory to keep (keep false: forget the attachment). Events follow
// status transitions only: a status published again with the same reason
// raises nothing.
func decide(prev podMemory, had bool, s PodStatus) (ev *event, next podMemory, keep bool) {
	switch {
	case s.Phase == phaseReady:
		if !had {
			return nil, podMemory{}, false
		}
		msg := "pod network ready"
		if len(s.Addresses) > 0 {
			msg += ": " + strings.Join(s.Addresses, ", ")
		}
		return &event{corev1.EventTypeNormal, ReasonNetworkReady, msg + " (after " + prev.code + ")"}, podMemory{}, false
	case s.Phase == phaseFailed || (s.Phase == phasePending && warnWhilePending[s.ReasonCode]):
		code := s.ReasonCode
		if code == "" {
			code = "failed"
		}
		if had && prev.code == code {
			return nil, prev, true
		}
		reason := camel(code)
		if s.ReasonCode == "" {
			reason = ReasonAttachFailed
		}
		msg := s.Reason
		if msg == "" {
			msg = code
		}
		return &event{corev1.EventTypeWarning, reason, msg}, podMemory{code: code}, true
	}
	// An ordinary wait: keep the last warning, so Ready is announced.
	return nil, prev, had
}

// camel turns a reason code into an event reason: "vswitch-exhausted" ->
// "VSwitchExhausted", "ip-limit" -> "IPLimit".
func camel(code string) string {
	var b strings.Builder
	for w := range strings.SplitSeq(code, "-") {
		switch {
		case acronyms[w] != "":
			b.WriteString(acronyms[w])
		case w != "":
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// acronyms are the words of reason codes that camel spells in capitals.
var acronyms = map[string]string{"ip": "IP", "ips": "IPs", "eni": "ENI", "enis": "ENIs", "vswitch": "VSwitch"} //nolint:gochecknoglobals // constant table

// maxRemembered bounds the attachments the event logic remembers (only
// those with a raised warning and no Ready since). A pod deleted while it
// waited is forgotten when the bound is reached: at worst its successor's
// Ready goes unannounced.
const maxRemembered = 4096

// eventer records the events of published statuses; it is used by the
// Link's worker goroutine only.
type eventer struct {
	rec record.EventRecorder
	mem map[string]podMemory
}

func newEventer(rec record.EventRecorder) *eventer {
	return &eventer{rec: rec, mem: map[string]podMemory{}}
}

func (e *eventer) observe(s PodStatus) {
	if s.Namespace == "" || s.Name == "" {
		return
	}
	prev, had := e.mem[s.Attachment]
	ev, next, keep := decide(prev, had, s)
	switch {
	case keep && len(e.mem) >= maxRemembered && !had:
		clear(e.mem)
		e.mem[s.Attachment] = next
	case keep:
		e.mem[s.Attachment] = next
	default:
		delete(e.mem, s.Attachment)
	}
	if ev == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: s.Namespace, Name: s.Name, UID: types.UID(s.UID)}
	e.rec.Event(ref, ev.Type, ev.Reason, ev.Message)
}

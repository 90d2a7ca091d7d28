package reconcile

import (
	"fmt"
	"slices"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// hintsView is what the agent says about the hints it read: the
// heartbeat's Hints without the planner's count, and what was last logged,
// so each change is logged once, not on every pass.
type hintsView struct {
	// admitted counts the pods the kubelet's files list.
	admitted int
	problems []desired.HintProblem
	notFound string
}

// noteHints logs each hint problem once when it appears and once when it
// goes, and likewise that no kubelet file is found; it sets the hint
// metrics and reports whether the heartbeat's view of the hints changed.
// Only the Run goroutine calls it.
func (a *Agent) noteHints(d desired.State) bool {
	h := d.Hints
	v := hintsView{admitted: len(h.AdmittedPodUIDs), problems: h.Problems, notFound: hintsNotFound(a.cfg.Paths.Hints, d)}
	old := a.hintsView
	for _, p := range v.problems {
		if !slices.Contains(old.problems, p) {
			a.log.Warn("hint file unusable: its pods are not counted as demand", "source", p.Source, "file", p.Path, "err", p.Err)
		}
	}
	for _, p := range old.problems {
		if !slices.Contains(v.problems, p) {
			a.log.Info("hint file usable again", "source", p.Source, "file", p.Path)
		}
	}
	switch {
	case v.notFound != "" && old.notFound == "":
		a.log.Warn(v.notFound)
	case v.notFound == "" && old.notFound != "":
		a.log.Info("kubelet hint file found", "file", a.cfg.Paths.Hints.AllocatedPodsState)
	}
	bySource := map[desired.HintSource]int{}
	for _, p := range v.problems {
		bySource[p.Source]++
	}
	for _, s := range desired.AllHintSources() {
		a.metrics.hintProblems.WithLabelValues(string(s)).Set(float64(bySource[s]))
	}
	nf := 0.0
	if v.notFound != "" {
		nf = 1
	}
	a.metrics.hintsNotFound.Set(nf)
	a.hintsView = v
	return v.admitted != old.admitted || v.notFound != old.notFound || !slices.Equal(v.problems, old.problems)
}

// hintsNotFound says why the kubelet's files are missing when that
// matters: neither exists where the agent looks although pods have
// entries. The kubelet writes allocated_pods_state at its first admission
// (1.33 and later), so a node with pods has it, unless the kubelet's
// --root-dir is another. Empty otherwise.
func hintsNotFound(src desired.HintSources, d desired.State) string {
	if src.AllocatedPodsState == "" || !slices.Contains(d.Hints.Absent, src.AllocatedPodsState) {
		return ""
	}
	if src.DeviceCheckpoint != "" && !slices.Contains(d.Hints.Absent, src.DeviceCheckpoint) {
		return ""
	}
	pods := 0
	for _, e := range d.Entries {
		if e.PodUID != "" {
			pods++
		}
	}
	if pods == 0 {
		return ""
	}
	return fmt.Sprintf("no kubelet hint file at %s although %d pods have entries: admitted pods are not counted as demand "+
		"(is the kubelet's --root-dir another? set `enid run --kubelet-root-dir`; kubelets before 1.33 write none)", src.AllocatedPodsState, pods)
}

// hintsStatus is the heartbeat's Hints (nil when the agent reads no hint
// source); expected is the last plan's count of pods about to arrive.
func (a *Agent) hintsStatus(expected int) *status.Hints {
	src := a.cfg.Paths.Hints
	if src.AllocatedPodsState == "" && src.DeviceCheckpoint == "" && src.CNIResultsDir == "" {
		return nil
	}
	v := a.hintsView
	hs := &status.Hints{Admitted: v.admitted, Expected: expected, NotFound: v.notFound}
	for _, p := range v.problems {
		hs.Problems = append(hs.Problems, status.HintProblem{Source: string(p.Source), Path: p.Path, Error: p.Err})
	}
	return hs
}

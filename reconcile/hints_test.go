package reconcile

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/podkey"
	"github.com/enidnet/enid/reconcile/status"
)

// kubeletFiles are the files a real kubelet v1.37.2 wrote
// (desired/testdata/kubelet/README.md): it admitted static pods a, b, c,
// then b and c were deleted, then it admitted d.
const kubeletFiles = "../desired/testdata/kubelet"

// Their UIDs (desired/testdata/kubelet/*/pods.txt).
const (
	uidA = "eea131a259ae0c927046366d7fcddf57"
	uidB = "2885a1ad1a3a92f2368c2d501aad0180"
	uidC = "1228b553593586e1e1e8d1dcb1a18225"
)

// logBuffer is a log sink safe for the agent's goroutines.
type logBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count counts the log lines that contain s.
func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// putKubeletFile installs src as the kubelet's allocated_pods_state in dir
// the way the kubelet replaces it: a new file renamed over the old.
func putKubeletFile(t *testing.T, dir, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := podkey.WriteFileAtomic(filepath.Join(dir, "allocated_pods_state"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// addPodUID adds pod i's entry with the given pod UID.
func (w *world) addPodUID(i int, uid string) desired.Key {
	w.t.Helper()
	e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: fmt.Sprintf("%064x", i+1), IfName: "eth0",
		NetNS: fmt.Sprintf("/var/run/netns/pod%d", i), PodNamespace: "default", PodName: fmt.Sprintf("pod-%d", i),
		PodUID: uid, Created: time.Now()}
	if _, err := desired.NewEntryStore(w.paths.Entries).Write(e); err != nil {
		w.t.Fatal(err)
	}
	return e.Key()
}

// delPod is CNI DEL: a deletion record, then the entry's removal.
func (w *world) delPod(k desired.Key) {
	w.t.Helper()
	store := desired.NewEntryStore(w.paths.Entries)
	if err := store.MarkDeleted(k, time.Now()); err != nil {
		w.t.Fatal(err)
	}
	if err := store.Remove(k); err != nil {
		w.t.Fatal(err)
	}
}

// labelled reads the gauge name{label=value} from the agent's registry
// (-1 when there is none).
func labelled(t *testing.T, m *Metrics, name, label, value string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mm := range f.GetMetric() {
			for _, l := range mm.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return mm.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// Issue #28 item 6: a kubelet file in a format the agent does not know is
// said once in the log (not on every pass), in agent.json, and in
// enid_hint_problems{source}; once the file is readable again, that is
// said once too.
func TestHintProblemsReported(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n  batch: 2\n")
	kdir := filepath.Join(w.dir, "kubelet")
	w.paths.Hints = desired.KubeletHintSources(kdir, "")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		t.Fatal(err)
	}
	alloc := filepath.Join(kdir, "allocated_pods_state")
	if err := os.WriteFile(alloc, []byte(`{"data":"{\"podResources\":{}}","checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	w.log = slog.New(slog.NewTextHandler(&logs, nil))
	stop := w.start(NewNoDatapathMust(t))
	defer stop()

	// Many passes: pods come, become ready and go.
	for i := range 4 {
		k := w.addPodUID(i, fmt.Sprintf("uid-%d", i))
		w.waitFor("pod ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
		if i%2 == 1 {
			w.delPod(k)
		}
	}
	var hb status.Agent
	w.waitFor("agent.json naming the problem", 10*time.Second, func() bool {
		var err error
		hb, err = status.ReadAgent(w.paths.AgentFile)
		return err == nil && hb.Hints != nil && len(hb.Hints.Problems) == 1
	})
	want := status.HintProblem{Source: "allocated_pods_state", Path: alloc, Error: `unknown format: data has no "entries" map`}
	if hb.Hints.Problems[0] != want {
		t.Errorf("agent.json hints.problems[0] = %+v, want %+v", hb.Hints.Problems[0], want)
	}
	if passes := gauge(t, w.agent.Metrics(), "enid_reconcile_passes_total"); passes < 5 {
		t.Errorf("only %v passes: the test needs several", passes)
	}
	if n := logs.count("hint file unusable"); n != 1 {
		t.Errorf("the problem was logged %d times, want once:\n%s", n, logs.b.String())
	}
	for src, want := range map[string]float64{"allocated_pods_state": 1, "device_checkpoint": 0, "cni_results": 0} {
		if got := labelled(t, w.agent.Metrics(), "enid_hint_problems", "source", src); got != want {
			t.Errorf("enid_hint_problems{source=%q} = %v, want %v", src, got, want)
		}
	}

	// The kubelet writes its real format: the problem goes, once.
	putKubeletFile(t, kdir, filepath.Join(kubeletFiles, "1-admitted", "allocated_pods_state"))
	w.waitFor("agent.json without the problem", 10*time.Second, func() bool {
		var err error
		hb, err = status.ReadAgent(w.paths.AgentFile)
		return err == nil && hb.Hints != nil && len(hb.Hints.Problems) == 0 && hb.Hints.Admitted == 3
	})
	if got := labelled(t, w.agent.Metrics(), "enid_hint_problems", "source", "allocated_pods_state"); got != 0 {
		t.Errorf("enid_hint_problems{source=allocated_pods_state} = %v after the fix, want 0", got)
	}
	k := w.addPodUID(9, uidA)
	w.waitFor("pod ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
	if n, m := logs.count("hint file unusable"), logs.count("hint file usable again"); n != 1 || m != 1 {
		t.Errorf("logged unusable %d and usable again %d times, want once each", n, m)
	}
}

// A kubelet whose --root-dir is not the one the agent reads gives no
// hints: the agent says so once, in agent.json and enid_hints_not_found,
// while pods have entries, and stops saying it once the file is found.
func TestHintsNotFoundSaid(t *testing.T) {
	w := newWorld(t, ecssim.Config{}, "pool:\n  minIdle: 1\n  maxIdle: 4\n  batch: 2\n")
	kdir := filepath.Join(w.dir, "kubelet") // nothing there
	w.paths.Hints = desired.KubeletHintSources(kdir, "")
	var logs logBuffer
	w.log = slog.New(slog.NewTextHandler(&logs, nil))
	stop := w.start(NewNoDatapathMust(t))
	defer stop()

	var hb status.Agent
	var err error
	w.waitFor("a heartbeat", 10*time.Second, func() bool {
		hb, err = status.ReadAgent(w.paths.AgentFile)
		return err == nil
	})
	if hb.Hints == nil || hb.Hints.NotFound != "" {
		t.Errorf("before any pod: hints %+v, want present and no notFound (the kubelet writes nothing before its first admission)", hb.Hints)
	}
	for i := range 3 {
		k := w.addPodUID(i, fmt.Sprintf("uid-%d", i))
		w.waitFor("pod ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
	}
	w.waitFor("agent.json saying no kubelet file is found", 10*time.Second, func() bool {
		hb, err = status.ReadAgent(w.paths.AgentFile)
		return err == nil && hb.Hints != nil && hb.Hints.NotFound != ""
	})
	if !strings.Contains(hb.Hints.NotFound, filepath.Join(kdir, "allocated_pods_state")) || !strings.Contains(hb.Hints.NotFound, "--kubelet-root-dir") {
		t.Errorf("notFound = %q: want the path looked at and the flag to set", hb.Hints.NotFound)
	}
	if got := gauge(t, w.agent.Metrics(), "enid_hints_not_found"); got != 1 {
		t.Errorf("enid_hints_not_found = %v, want 1", got)
	}
	if n := logs.count("no kubelet hint file at"); n != 1 {
		t.Errorf("logged %d times, want once", n)
	}

	putKubeletFile(t, kdir, filepath.Join(kubeletFiles, "1-admitted", "allocated_pods_state"))
	w.waitFor("agent.json with the kubelet's pods", 10*time.Second, func() bool {
		hb, err = status.ReadAgent(w.paths.AgentFile)
		return err == nil && hb.Hints != nil && hb.Hints.NotFound == "" && hb.Hints.Admitted == 3
	})
	if got := gauge(t, w.agent.Metrics(), "enid_hints_not_found"); got != 0 {
		t.Errorf("enid_hints_not_found = %v once found, want 0", got)
	}
	if n := logs.count("kubelet hint file found"); n != 1 {
		t.Errorf("found logged %d times, want once", n)
	}
}

// Issue #28 item 10 with a real kubelet's files: after pods are deleted
// the kubelet's allocated_pods_state still lists them, and neither the
// agent nor an agent restarted after the deletions grows the pool for them.
func TestDeletedPodsListedByKubeletDoNotGrowPool(t *testing.T) {
	w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond}},
		"pool:\n  minIdle: 0\n  maxIdle: 10\n  batch: 1\n  cooldown: 100ms\n")
	kdir := filepath.Join(w.dir, "kubelet")
	w.paths.Hints = desired.KubeletHintSources(kdir, "")
	putKubeletFile(t, kdir, filepath.Join(kubeletFiles, "1-admitted", "allocated_pods_state"))
	stop := w.start(NewNoDatapathMust(t))
	keys := []desired.Key{w.addPodUID(0, uidA), w.addPodUID(1, uidB), w.addPodUID(2, uidC)}
	w.waitFor("a, b, c ready and the pool steady", 20*time.Second, func() bool {
		st := w.statuses()
		for _, k := range keys {
			if st[k.String()].Phase != status.Ready {
				return false
			}
		}
		return w.steady()
	})
	before, enis := w.ownedIPs()
	if before != 3 {
		t.Fatalf("%d addresses for 3 pods with minIdle 0, batch 1", before)
	}

	// b and c deleted; the kubelet's file is as it left it (2-deleted
	// holds the same bytes as 1-admitted).
	putKubeletFile(t, kdir, filepath.Join(kubeletFiles, "2-deleted", "allocated_pods_state"))
	w.delPod(keys[1])
	w.delPod(keys[2])
	w.waitFor("b and c torn down and the pool steady", 20*time.Second, func() bool {
		st := w.statuses()
		_, b := st[keys[1].String()]
		_, c := st[keys[2].String()]
		return !b && !c && w.steady()
	})
	if ips, _ := w.ownedIPs(); ips != before {
		t.Errorf("after deleting b and c: %d addresses, want %d (deleted pods the kubelet still lists are no demand)\n%s", ips, before, w.planNow())
	}

	stop()
	stop = w.start(NewNoDatapathMust(t))
	defer stop()
	w.waitFor("the restarted agent steady", 20*time.Second, func() bool {
		hb, err := status.ReadAgent(w.paths.AgentFile)
		return err == nil && hb.Ready && hb.Started.After(time.Now().Add(-time.Minute)) && w.steady()
	})
	time.Sleep(200 * time.Millisecond) // a few more passes
	if ips, e := w.ownedIPs(); ips != before || e != enis {
		t.Errorf("after a restart: %d addresses on %d ENIs, want %d on %d\n%s", ips, e, before, enis, w.planNow())
	}
	hb, err := status.ReadAgent(w.paths.AgentFile)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Hints == nil || hb.Hints.Admitted != 3 || hb.Hints.Expected != 0 {
		t.Errorf("agent.json hints = %+v, want 3 admitted, 0 expected", hb.Hints)
	}
}

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// staleEntries is how many entries TestStaleEntries leaves without a pod
// (the outside testers' runs had 200 to 2,000).
const staleEntries = 2000

// TestStaleEntries: thousands of entries whose network namespace no longer
// exists (a runtime that lost its DELs, then an agent restart) sort before
// the live pods' (issue 28 items 1-3, DESIGN.md invariants 11 and 12). The
// live pods are served at once (before the fix they failed with ip-limit,
// the stale entries having taken the node's 42 addresses); the stale ones
// are Pending with netns-gone and hold nothing; while nothing changes they
// cost no cloud call (before, each failed setup re-read the cloud); the
// agent's peak RSS stays under 100 MiB; `enid status` says so; past
// staleEntryTimeout they are Failed; the runtime's GC of their entries
// removes their statuses, and the node settles.
func TestStaleEntries(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool + "staleEntryTimeout: 15s\n", addTimeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store := desired.NewEntryStore(filepath.Join(n.runDir, "pods"))
	keys := make([]desired.Key, staleEntries)
	for i := range staleEntries {
		e := desired.Entry{APIVersion: desired.EntryAPIVersion, ContainerID: fmt.Sprintf("0000stale%06d", i), IfName: "eth0",
			NetNS:        fmt.Sprintf("/run/netns/enid-e2e-gone-%06d", i), // never created: the pod is gone
			PodNamespace: "stale", PodName: fmt.Sprintf("stale-%d", i), Created: time.Now().UTC()}
		if _, err := store.Write(e); err != nil {
			t.Fatal(err)
		}
		keys[i] = e.Key()
	}
	agent := n.startAgent()
	n.waitReady(60 * time.Second)

	pods := []*pod{n.newPod("live0"), n.newPod("live1"), n.newPod("live2"), n.newPod("live3"), n.newPod("live4")}
	t0 := time.Now()
	n.addAll(ctx, pods)
	t.Logf("%d live pods Ready in %s beside %d stale entries", len(pods), time.Since(t0).Round(time.Millisecond), staleEntries)
	n.checkBindings(pods)

	waitFor(t, 10*time.Second, "every stale entry Pending with netns-gone", func() (bool, string) {
		sts := n.statuses()
		pending, other := staleCount(sts, status.Pending)
		return pending == staleEntries, fmt.Sprintf("%d Pending netns-gone, %d otherwise (%s)", pending, other, sampleStale(sts))
	})
	code, out, _ := n.enid(ctx, "status", "--run-dir", n.runDir)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("Stale:     %d entries whose pod network namespace is gone", staleEntries)) {
		t.Errorf("enid status (exit %d) does not count the stale entries:\n%s", code, firstLines(out, 12))
	}

	// Nothing changes now: the agent must not call the cloud for the stale
	// entries (a full observation at most, for the resync of 2 minutes
	// that does not fall in this window, or one confirmation of the live
	// pods' assign).
	n.sn.Sim.ResetCounters()
	time.Sleep(8 * time.Second)
	calls := 0
	for action, byOutcome := range n.sn.Sim.Counters() {
		for _, c := range byOutcome {
			calls += c
		}
		t.Logf("cloud calls in 8 s: %s %v", action, byOutcome)
	}
	if calls > 4 {
		t.Errorf("%d cloud calls in 8 s with %d stale entries and nothing changing: want at most 4", calls, staleEntries)
	}
	if hwm := vmHWMKiB(t, agent.cmd.Process.Pid); hwm > 100<<10 {
		t.Errorf("agent peak RSS %d MiB with %d entries: want < 100 MiB", hwm>>10, staleEntries+len(pods))
	} else {
		t.Logf("agent peak RSS %d MiB with %d entries", hwm>>10, staleEntries+len(pods))
	}

	// Past staleEntryTimeout (15 s after they were first seen): Failed.
	waitFor(t, 30*time.Second, "every stale entry Failed with netns-gone", func() (bool, string) {
		failed, other := staleCount(n.statuses(), status.Failed)
		return failed == staleEntries, fmt.Sprintf("%d Failed netns-gone, %d otherwise", failed, other)
	})
	if code, out, _ := n.plan(ctx, "--detailed-exitcode"); code != 0 {
		t.Errorf("enid plan --detailed-exitcode = %d with the stale entries given up, want 0:\n%s", code, firstLines(out, 20))
	}

	// The runtime's CNI GC removes them (a deletion record, then the entry,
	// as enid-cni's GC does): their statuses go.
	for _, k := range keys {
		if err := store.MarkDeleted(k, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := store.Remove(k); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "the stale entries' statuses removed", func() (bool, string) {
		left := len(n.statuses())
		return left == len(pods), fmt.Sprintf("%d statuses (%d live pods)", left, len(pods))
	})
	n.checkBindings(pods)
	n.delAll(ctx, pods)
	n.waitSettled(2, 6, 30*time.Second)
}

// staleCount counts the statuses with reason netns-gone in phase ph, and
// the others of stale entries.
func staleCount(sts []status.Attachment, ph status.Phase) (match, other int) {
	for _, s := range sts {
		if !strings.HasPrefix(s.ContainerID, "0000stale") {
			continue
		}
		if s.Phase == ph && s.ReasonCode == "netns-gone" {
			match++
		} else {
			other++
		}
	}
	return match, other
}

// vmHWMKiB reads a process's peak resident set size.
func vmHWMKiB(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kib
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}

// sampleStale describes one stale entry's status, for a failure message.
func sampleStale(sts []status.Attachment) string {
	for _, s := range sts {
		if strings.HasPrefix(s.ContainerID, "0000stale") {
			return fmt.Sprintf("e.g. %s: %s %s: %s", s.ContainerID, s.Phase, s.ReasonCode, s.Reason)
		}
	}
	return "no stale status"
}

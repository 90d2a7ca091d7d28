package status_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/reconcile/status"
)

// The lock beside the heartbeat tells a running writer from a dead one's
// heartbeat, and excludes a second writer; readers never take it.
func TestAgentLockTellsTheWriterRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "agent.json")
	name, release, err := status.LockAgent(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { release() }()
	hb := status.Agent{PID: 1 << 30, Lock: name, Heartbeat: time.Now(), Ready: true}
	if err := status.WriteAgent(path, hb); err != nil {
		t.Fatal(err)
	}
	read := func() status.Agent {
		t.Helper()
		a, err := status.ReadAgent(path)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for range 3 { // readers leave the lock as they found it
		if a := read(); a.Process != status.ProcessRunning || a.Serving(time.Now(), time.Minute) != nil {
			t.Fatalf("lock held: process %s, serving %v; want running and serving", a.Process, a.Serving(time.Now(), time.Minute))
		}
	}
	if _, _, err := status.LockAgent(path); !errors.Is(err, status.ErrAgentLocked) {
		t.Fatalf("second LockAgent while held: %v, want refused", err)
	}
	release()
	a := read()
	if a.Process != status.ProcessGone || a.Alive(time.Now(), time.Minute) {
		t.Fatalf("lock free: process %s, alive %v; want not running", a.Process, a.Alive(time.Now(), time.Minute))
	}
	if err := a.Serving(time.Now(), time.Minute); err == nil || !strings.Contains(err.Error(), "agent process not running (pid 1073741824") {
		t.Fatalf("Serving with the lock free: %v", err)
	}
	// The next agent takes it again.
	_, release, err = status.LockAgent(path)
	if err != nil {
		t.Fatalf("LockAgent after release: %v", err)
	}
	if a := read(); a.Process != status.ProcessRunning {
		t.Fatalf("lock taken again: process %s", a.Process)
	}
	// A stopped agent's heartbeat is not probed: stopped says more.
	if err := status.WriteAgent(path, status.Agent{PID: 7, Lock: name, Heartbeat: time.Now(), Stopped: true}); err != nil {
		t.Fatal(err)
	}
	if a := read(); a.Process != status.ProcessUnknown || !strings.Contains(a.Serving(time.Now(), time.Minute).Error(), "stopped") {
		t.Fatalf("stopped heartbeat: process %s, serving %v", a.Process, a.Serving(time.Now(), time.Minute))
	}
}

// Without a lock to open (a heartbeat naming none, as an older agent's, or
// a lock file the reader cannot see), the pid tells, but only in the
// writer's pid namespace and only as the process that started when the
// heartbeat says: a pid reused by another process, a zombie and a reaped
// process are all gone.
func TestAgentPIDFallback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.json")
	pidNS, selfStart := status.SelfProcess()
	if pidNS == "" || selfStart == 0 {
		t.Fatalf("SelfProcess() = %q, %d: /proc does not tell", pidNS, selfStart)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	defer func() {
		if !reaped {
			child.Process.Kill() // the test failed early; the error is moot
			child.Wait()         //nolint:errcheck // killed
		}
	}()
	childStart := startOf(t, child.Process.Pid)
	probe := func(a status.Agent) status.Process {
		t.Helper()
		a.Heartbeat, a.Ready = time.Now(), true
		if err := status.WriteAgent(path, a); err != nil {
			t.Fatal(err)
		}
		got, err := status.ReadAgent(path)
		if err != nil {
			t.Fatal(err)
		}
		return got.Process
	}
	self := os.Getpid()
	for _, tc := range []struct {
		name string
		a    status.Agent
		want status.Process
	}{
		{"this process", status.Agent{PID: self, PIDNamespace: pidNS, PIDStart: selfStart}, status.ProcessRunning},
		{"a lock file that is not there", status.Agent{PID: self, PIDNamespace: pidNS, PIDStart: selfStart, Lock: "agent.lock"}, status.ProcessRunning},
		{"a lock name that is a path", status.Agent{PID: self, PIDNamespace: pidNS, PIDStart: selfStart, Lock: "../agent.lock"}, status.ProcessRunning},
		{"pid reused", status.Agent{PID: self, PIDNamespace: pidNS, PIDStart: selfStart + 1}, status.ProcessGone},
		{"another pid namespace", status.Agent{PID: self, PIDNamespace: "pid:[1]", PIDStart: selfStart + 1}, status.ProcessUnknown},
		{"an older agent's heartbeat", status.Agent{PID: self}, status.ProcessUnknown},
		{"the child", status.Agent{PID: child.Process.Pid, PIDNamespace: pidNS, PIDStart: childStart}, status.ProcessRunning},
	} {
		if got := probe(tc.a); got != tc.want {
			t.Errorf("%s: process %s, want %s", tc.name, got, tc.want)
		}
	}
	of := status.Agent{PID: child.Process.Pid, PIDNamespace: pidNS, PIDStart: childStart}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Killed, not yet reaped: a zombie is no agent.
	deadline := time.Now().Add(5 * time.Second)
	for got := probe(of); got != status.ProcessGone; got = probe(of) {
		if time.Now().After(deadline) {
			t.Fatalf("killed child (zombie): process %s, want not running", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	child.Wait() //nolint:errcheck // killed
	reaped = true
	if got := probe(of); got != status.ProcessGone {
		t.Errorf("reaped child: process %s, want not running", got)
	}
}

// startOf reads a process's start time (field 22 of /proc/<pid>/stat).
func startOf(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.Fields(data[bytes.LastIndexByte(data, ')')+1:])
	n, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

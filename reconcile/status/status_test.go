package status_test

import (
	"errors"
	"flag"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/enidnet/enid/reconcile/status"
)

// netipEqual compares netip values by ==.
var netipEqual = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

var t0 = time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)

func readyAttachment() status.Attachment {
	return status.Attachment{
		APIVersion:  status.Version,
		ContainerID: "c0ffee",
		IfName:      "eth0",
		Revision:    "r1",
		Phase:       status.Ready,
		IPs: []status.IPConfig{
			{Address: netip.MustParsePrefix("192.168.1.10/32"), Gateway: netip.MustParseAddr("169.254.1.1")},
			{Address: netip.MustParsePrefix("fd00::a/128")},
		},
		Routes:    []status.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("169.254.1.1")}},
		Interface: status.Interface{Name: "eth0", MAC: "02:00:00:00:00:01", Sandbox: "/var/run/netns/p1"},
		ENIID:     "eni-1",
		ENIMAC:    "00:16:3e:00:00:01",
		Updated:   t0,
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got), run with -update if intended:\n%s", name, d)
	}
}

func TestAttachmentRoundTripAndFormat(t *testing.T) {
	s := status.NewStore(filepath.Join(t.TempDir(), "status"))
	for _, a := range []status.Attachment{
		readyAttachment(),
		{ContainerID: "c2", IfName: "eth0", Revision: "r9", Phase: status.Failed, Reason: "vSwitch vsw-1 has no free address", ReasonCode: "VSwitchExhausted", Updated: t0},
	} {
		if err := s.Write(a); err != nil {
			t.Fatal(err)
		}
		got, err := s.Read(a.ContainerID, a.IfName)
		if err != nil {
			t.Fatal(err)
		}
		a.APIVersion = status.Version
		if d := cmp.Diff(a, got, netipEqual); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
	}
	data, err := os.ReadFile(s.Path("c0ffee", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "attachment-ready.json", data)
	data, err = os.ReadFile(s.Path("c2", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "attachment-failed.json", data)
	fi, err := os.Stat(s.Path("c2", "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
}

func TestReadAbsentAndRemove(t *testing.T) {
	s := status.NewStore(t.TempDir())
	if _, err := s.Read("nope", "eth0"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read absent: %v, want fs.ErrNotExist", err)
	}
	if err := s.Remove("nope", "eth0"); err != nil {
		t.Fatalf("Remove absent: %v", err)
	}
	if err := s.Write(readyAttachment()); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("c0ffee", "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read("c0ffee", "eth0"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read after Remove: %v, want fs.ErrNotExist", err)
	}
	if err := s.Remove("../x", "eth0"); err == nil {
		t.Fatal("Remove accepted a path-like container ID")
	}
}

func TestReadAllReportsProblems(t *testing.T) {
	dir := t.TempDir()
	s := status.NewStore(dir)
	a := readyAttachment()
	if err := s.Write(a); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("bad_eth0.json", "{not json")
	write("old_eth0.json", `{"apiVersion":"enid.dev/v0","containerID":"old","ifName":"eth0","phase":"Pending"}`)
	write("moved_eth0.json", `{"apiVersion":"enid.dev/v1alpha1","containerID":"other","ifName":"eth0","phase":"Pending"}`)
	write(".c0ffee_eth0.json.123.tmp", "{partial")
	write("README", "not a status")
	got, problems, err := s.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]status.Attachment{a}, got, netipEqual); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	var files []string
	for _, p := range problems {
		files = append(files, p.File)
	}
	if d := cmp.Diff([]string{"bad_eth0.json", "moved_eth0.json", "old_eth0.json"}, files); d != "" {
		t.Errorf("problem files (-want +got):\n%s", d)
	}
	for _, p := range problems {
		if p.File == "old_eth0.json" && !errors.Is(p, status.ErrVersion) {
			t.Errorf("old version problem %v does not wrap ErrVersion", p)
		}
	}
	if _, _, err := status.NewStore(filepath.Join(dir, "missing")).ReadAll(); err != nil {
		t.Errorf("ReadAll of a missing dir: %v", err)
	}
}

// TestReadAllSeesEveryChange: ReadAll keeps what it decoded by file
// identity, so a status rewritten by the agent (a rename: a new inode), one
// edited in place (same size: the change time moves), one removed and one
// damaged must each show at the next ReadAll, never the cached content.
func TestReadAllSeesEveryChange(t *testing.T) {
	dir := t.TempDir()
	s := status.NewStore(dir)
	a, b := readyAttachment(), readyAttachment()
	b.ContainerID = "beef"
	for _, x := range []status.Attachment{a, b} {
		if err := s.Write(x); err != nil {
			t.Fatal(err)
		}
	}
	readAll := func(want ...status.Attachment) {
		t.Helper()
		got, problems, err := s.ReadAll()
		if err != nil || len(problems) > 0 {
			t.Fatalf("ReadAll: %v %v", problems, err)
		}
		if d := cmp.Diff(want, got, netipEqual, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("statuses (-want +got):\n%s", d)
		}
	}
	readAll(b, a) // sorted by file name: beef_ before c0ffee_
	readAll(b, a) // from the cache
	a.Phase, a.Reason = status.Failed, "no address"
	a.IPs, a.Routes = nil, nil
	if err := s.Write(a); err != nil {
		t.Fatal(err)
	}
	readAll(b, a)
	// In place, same length: "r1" -> "r2" in the revision.
	path := s.Path(b.ContainerID, b.IfName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the file system's timestamp granularity
	edited := []byte(strings.Replace(string(data), `"revision": "r1"`, `"revision": "r2"`, 1))
	if len(edited) != len(data) || string(edited) == string(data) {
		t.Fatalf("test setup: the edit must keep the size and change the content")
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(edited, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b.Revision = "r2"
	readAll(b, a)
	if err := s.Remove(a.ContainerID, a.IfName); err != nil {
		t.Fatal(err)
	}
	readAll(b)
	if err := os.WriteFile(path, []byte("{damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, problems, err := s.ReadAll()
	if err != nil || len(got) != 0 || len(problems) != 1 {
		t.Errorf("after damaging %s: %d statuses, problems %v, %v; want none and one problem", path, len(got), problems, err)
	}
}

func TestValidate(t *testing.T) {
	mod := func(f func(*status.Attachment)) status.Attachment {
		a := readyAttachment()
		f(&a)
		return a
	}
	for _, tc := range []struct {
		name string
		a    status.Attachment
		ok   bool
	}{
		{"ready", readyAttachment(), true},
		{"pending without IPs", mod(func(a *status.Attachment) { a.Phase, a.IPs = status.Pending, nil }), true},
		{"ready without IPs", mod(func(a *status.Attachment) { a.IPs = nil }), false},
		{"failed without reason", mod(func(a *status.Attachment) { a.Phase = status.Failed }), false},
		{"unknown phase", mod(func(a *status.Attachment) { a.Phase = "Done" }), false},
		{"wrong version", mod(func(a *status.Attachment) { a.APIVersion = "v2" }), false},
		{"slash in container", mod(func(a *status.Attachment) { a.ContainerID = "a/b" }), false},
		{"dot-dot ifname", mod(func(a *status.Attachment) { a.IfName = ".." }), false},
		{"underscore in ifname", mod(func(a *status.Attachment) { a.IfName = "eth_0" }), false},
		{"long ifname", mod(func(a *status.Attachment) { a.IfName = "abcdefghijklmnop" }), false},
		{"invalid address", mod(func(a *status.Attachment) { a.IPs[0].Address = netip.Prefix{} }), false},
		{"gateway family", mod(func(a *status.Attachment) { a.IPs[0].Gateway = netip.MustParseAddr("fe80::1") }), false},
		{"invalid route", mod(func(a *status.Attachment) { a.Routes[0].Dst = netip.Prefix{} }), false},
	} {
		err := tc.a.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestAgentRoundTripAndServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "agent.json")
	if _, err := status.ReadAgent(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadAgent absent: %v, want fs.ErrNotExist", err)
	}
	a := status.Agent{
		PID: 42, Version: "v0.1.0", Started: t0, Heartbeat: t0.Add(time.Minute), Ready: true,
		Pool:       status.PoolSummary{Total: 20, Used: 5, Idle: 12, Cooldown: 2, Sticky: 1, ENIs: 2},
		LastErrors: []string{"AssignPrivateIpAddresses: Throttling"},
		Pods:       map[status.Phase]int{status.Ready: 5, status.Pending: 1},
	}
	if err := status.WriteAgent(path, a); err != nil {
		t.Fatal(err)
	}
	got, err := status.ReadAgent(path)
	if err != nil {
		t.Fatal(err)
	}
	a.APIVersion = status.Version
	if d := cmp.Diff(a, got, netipEqual); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "agent.json", data)

	hb := a.Heartbeat
	for _, tc := range []struct {
		name  string
		a     status.Agent
		now   time.Time
		serve bool
	}{
		{"fresh", a, hb.Add(time.Second), true},
		{"at the bound", a, hb.Add(30 * time.Second), true},
		{"stale", a, hb.Add(31 * time.Second), false},
		{"not ready", status.Agent{Heartbeat: hb, Reason: "config invalid"}, hb, false},
		{"stopped", status.Agent{Heartbeat: hb, Ready: true, Stopped: true}, hb, false},
	} {
		alive := tc.now.Sub(tc.a.Heartbeat) <= 30*time.Second && !tc.a.Stopped
		if got := tc.a.Alive(tc.now, 30*time.Second); got != alive {
			t.Errorf("%s: Alive = %v, want %v", tc.name, got, alive)
		}
		err := tc.a.Serving(tc.now, 30*time.Second)
		if (err == nil) != tc.serve {
			t.Errorf("%s: Serving = %v, want serving=%v", tc.name, err, tc.serve)
		}
		if err != nil && !errors.Is(err, status.ErrNotServing) {
			t.Errorf("%s: %v does not wrap ErrNotServing", tc.name, err)
		}
	}
	if err := os.WriteFile(path, []byte(`{"apiVersion":"enid.dev/v2","ready":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := status.ReadAgent(path); !errors.Is(err, status.ErrVersion) {
		t.Errorf("ReadAgent of a v2 file: %v, want ErrVersion", err)
	}
}

// The hints field is optional within the apiVersion: a heartbeat with it
// round-trips (golden agent-hints.json shows the shape), and one written
// before it existed (agent.json) reads with no hints.
func TestAgentHintsOptional(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.json")
	a := status.Agent{
		APIVersion: status.Version, PID: 42, Version: "v0.1.0", Started: t0, Heartbeat: t0.Add(time.Minute), Ready: true,
		Pool: status.PoolSummary{Total: 20, Used: 5, Idle: 12, ENIs: 2},
		Hints: &status.Hints{Admitted: 7, Expected: 1, Problems: []status.HintProblem{{
			Source: "allocated_pods_state", Path: "/var/lib/kubelet/allocated_pods_state",
			Error: `unknown format: data has no "entries" map`,
		}}},
	}
	if err := status.WriteAgent(path, a); err != nil {
		t.Fatal(err)
	}
	got, err := status.ReadAgent(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "agent-hints.json", data)

	old, err := status.ReadAgent(filepath.Join("testdata", "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	if old.Hints != nil {
		t.Errorf("a heartbeat without hints read with %+v", old.Hints)
	}
}

// TestWriteFileAtomicReadersSeeWholeFiles rewrites one file while readers
// read it: a reader must only ever see one of the complete contents, and no
// temporary file may be left behind.
func TestWriteFileAtomicReadersSeeWholeFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	small := []byte("small\n")
	big := make([]byte, 256<<10)
	for i := range big {
		big[i] = 'x'
	}
	if err := status.WriteFileAtomic(path, small, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := os.ReadFile(path)
				if err != nil {
					errs <- err
					return
				}
				if string(got) != string(small) && string(got) != string(big) {
					errs <- errors.New("reader saw a partial file")
					return
				}
			}
		})
	}
	for i := range 50 {
		data := small
		if i%2 == 0 {
			data = big
		}
		if err := status.WriteFileAtomic(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries, want only f.json (temporary files left behind?)", len(ents))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := status.WriteFileAtomic(filepath.Join(dir, "missing", "f"), small, 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write into a missing dir: %v, want fs.ErrNotExist", err)
	}
}

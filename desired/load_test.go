package desired

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadAssemblesState(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "etc", "config.yaml"), DropInDir: filepath.Join(dir, "etc", "config.d")}
	writeFile(t, src.Main, configWithMinIdle(3))
	store := NewEntryStore(filepath.Join(dir, "pods"))
	e := validEntry()
	rev, err := store.Write(e)
	if err != nil {
		t.Fatal(err)
	}
	e.Revision = rev
	writeFile(t, filepath.Join(store.Dir(), "bad_eth0.json"), "{")
	hints := HintSources{AllocatedPodsState: "testdata/hints/allocated_pods_state"}
	loader := NewConfigLoader(src, NodeFacts{})

	st := Load(loader, store, hints)
	fi, err := os.Stat(hints.AllocatedPodsState)
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := DefaultConfig()
	wantCfg.Pool.MinIdle, wantCfg.Pool.MaxIdle = 3, 20
	wantCfg.ENI.VSwitches = map[string][]string{"cn-hangzhou-k": {"vsw-1"}}
	wantCfg.ENI.SecurityGroups = []string{"sg-1"}
	want := State{
		Config:        wantCfg,
		Entries:       []Entry{e},
		EntryProblems: []EntryProblem{{File: "bad_eth0.json", ContainerID: "bad", IfName: "eth0", Err: "invalid entry: not valid JSON: unexpected EOF"}},
		Hints:         Hints{AdmittedPodUIDs: []string{"0f2e4d6c-8a1b-4c3d-9e5f-7a6b5c4d3e2f", "7c3f9a2e-1b4d-4e8f-9a6b-2d5c8e1f0a3b"}, AdmittedAt: fi.ModTime()},
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// A broken edit: the last good config stays, with the reasons. A
	// problem about a value no file sets names no file.
	writeFile(t, src.Main, "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\nmode: fast\n")
	st = Load(loader, store, hints)
	want.ConfigProblems = []string{
		src.Main + `: mode: must be one of shared-eni, exclusive-eni (got "fast")`,
		"eni.vSwitches: at least one vSwitch is required: list the vSwitches pods may use under their zone, e.g. eni.vSwitches: {cn-hangzhou-k: [vsw-xxxx]}",
		"eni.securityGroups: at least one security group is required: list the ones every ENI gets, e.g. eni.securityGroups: [sg-xxxx] (at most 10)",
	}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("after a broken edit (-want +got):\n%s", diff)
	}
}

func TestLoadReportsUnreadableEntriesDir(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "pods")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st := Load(NewConfigLoader(ConfigSource{}, NodeFacts{}), NewEntryStore(notDir), HintSources{})
	if len(st.EntryProblems) != 1 || st.EntryProblems[0].File != notDir {
		t.Errorf("entry problems %v, want one naming %s", st.EntryProblems, notDir)
	}
	if len(st.ConfigProblems) == 0 {
		t.Error("no config problems for a missing config")
	}
}

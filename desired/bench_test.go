package desired

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReadAll200 reads a directory of 200 entries, as every agent pass
// does on a full node.
func BenchmarkReadAll200(b *testing.B) {
	s := NewEntryStore(b.TempDir())
	for i := range 200 {
		e := validEntry()
		e.ContainerID = fmt.Sprintf("c%03d", i)
		if _, err := s.Write(e); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		entries, problems, err := s.ReadAll()
		if err != nil || len(problems) > 0 || len(entries) != 200 {
			b.Fatalf("%d entries, %v, %v", len(entries), problems, err)
		}
	}
}

// BenchmarkLoadConfig loads the full example plus two drop-ins.
func BenchmarkLoadConfig(b *testing.B) {
	dir := b.TempDir()
	full, err := os.ReadFile("../examples/config/full.yaml")
	if err != nil {
		b.Fatal(err)
	}
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	if err := os.MkdirAll(src.DropInDir, 0o755); err != nil {
		b.Fatal(err)
	}
	files := map[string]string{
		src.Main:                                string(full),
		filepath.Join(src.DropInDir, "10.yaml"): "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\npool: {minIdle: 3}\n",
		filepath.Join(src.DropInDir, "20.yaml"): "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\neni: {tags: {x: y1}}\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	facts := NodeFacts{Zone: "cn-hangzhou-j", InstanceType: "ecs.g7.large"}
	for b.Loop() {
		if _, err := LoadConfig(src, facts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScan1000 scans a directory of 1,000 entries on tmpfs (as /run
// is on a node), every file unchanged since the last Scan: what the agent
// pays after each change to the entries on a node with a thousand pods
// (docs/benchmarks.md, node scale), beside the work for the changed file.
// untracked lists the directory and checks every file's identity (one
// fstatat each); tracked is the agent's case, a watcher having named the
// files that changed (none here): no listing, a copy of the last one.
func BenchmarkScan1000(b *testing.B) {
	for _, tracked := range []bool{false, true} {
		name := "untracked"
		if tracked {
			name = "tracked"
		}
		b.Run(name, func(b *testing.B) { benchScan1000(b, tracked) })
	}
}

func benchScan1000(b *testing.B, tracked bool) {
	dir := b.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "enid-scan-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	s := NewEntryStore(filepath.Join(dir, "pods"))
	for i := range 1000 {
		e := validEntry()
		e.ContainerID = fmt.Sprintf("%064d", i)
		if _, err := s.Write(e); err != nil {
			b.Fatal(err)
		}
	}
	if tracked {
		s.Track()
		if _, err := s.Scan(); err != nil { // what changed before the watch began
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		l, err := s.Scan()
		if err != nil || len(l.Problems) > 0 || len(l.Entries) != 1000 {
			b.Fatalf("%d entries, %v, %v", len(l.Entries), l.Problems, err)
		}
	}
}

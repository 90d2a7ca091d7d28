package desired

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
)

const testDebounce = 40 * time.Millisecond

// startWatcher runs a watcher until the test ends and returns it once its
// watches are in place.
func startWatcher(t *testing.T, dirs ...string) *Watcher {
	t.Helper()
	return startWatcherWith(t, func(*Watcher) {}, dirs...)
}

// startWatcherWith is startWatcher with set applied to the watcher before
// it runs.
func startWatcherWith(t *testing.T, set func(*Watcher), dirs ...string) *Watcher {
	t.Helper()
	w, err := NewWatcher(slog.New(slog.DiscardHandler), dirs...)
	if err != nil {
		t.Fatal(err)
	}
	w.Debounce = testDebounce
	set(w)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not ready")
	}
	return w
}

// waitSignal waits for one signal.
func waitSignal(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(5 * time.Second):
		t.Fatalf("no signal after %s", what)
	}
}

// settle takes the signals that come until none has for a while.
func settle(w *Watcher) {
	for {
		select {
		case <-w.C():
		case <-time.After(8 * testDebounce):
			return
		}
	}
}

// noSignal checks that no further signal arrives for a while.
func noSignal(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.C():
		t.Fatalf("unexpected extra signal after %s", what)
	case <-time.After(8 * testDebounce):
	}
}

// atomicWrite replays kubelet's AtomicWriter on a ConfigMap volume dir:
// a new "..<timestamp>" dir with the files, a "..data_tmp" symlink to it,
// renamed over "..data", per-key symlinks into "..data" (first time only),
// and removal of the old timestamped dir. pause spaces the steps, as a slow
// disk would, so that only event filtering (not debouncing) can make one
// swap one signal.
func atomicWrite(t *testing.T, dir string, files map[string]string, pause time.Duration) {
	t.Helper()
	ts, err := os.MkdirTemp(dir, "..2026_11_30_01_02_03.")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(pause)
	old, _ := os.Readlink(filepath.Join(dir, "..data")) // absent on the first write
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(pause)
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func configWithMinIdle(n int) string {
	return fmt.Sprintf("apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\npool: {minIdle: %d, maxIdle: 20}\neni: {vSwitches: {cn-hangzhou-k: [vsw-1]}, securityGroups: [sg-1]}\n", n)
}

// TestConfigMapSwapReloadsOncePerSwap mounts a fake ConfigMap volume, swaps
// its content the way kubelet does, and checks that each swap wakes the
// caller exactly once and that the reload sees the new content; then a broken
// config is swapped in: the reload fails and the old config stays in force.
func TestConfigMapSwapReloadsOncePerSwap(t *testing.T) {
	vol := t.TempDir()
	src := ConfigSource{Main: filepath.Join(vol, "config.yaml"), DropInDir: filepath.Join(vol, "config.d")}
	atomicWrite(t, vol, map[string]string{"config.yaml": configWithMinIdle(1)}, 0)
	loader := NewConfigLoader(src, NodeFacts{})
	if cfg, changed, err := loader.Load(); err != nil || !changed || cfg.Pool.MinIdle != 1 {
		t.Fatalf("first load: minIdle %d changed %v err %v", cfg.Pool.MinIdle, changed, err)
	}
	w := startWatcher(t, vol, src.DropInDir)

	for i := 2; i <= 4; i++ {
		atomicWrite(t, vol, map[string]string{"config.yaml": configWithMinIdle(i)}, 3*testDebounce)
		waitSignal(t, w, fmt.Sprintf("swap %d", i))
		cfg, changed, err := loader.Load()
		if err != nil || !changed || cfg.Pool.MinIdle != i {
			t.Fatalf("swap %d: minIdle %d changed %v err %v", i, cfg.Pool.MinIdle, changed, err)
		}
		noSignal(t, w, fmt.Sprintf("swap %d", i))
	}

	atomicWrite(t, vol, map[string]string{"config.yaml": "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\npool: {minIdle: 9, maxIdle: 3}\n"}, 0)
	waitSignal(t, w, "broken swap")
	cfg, changed, err := loader.Load()
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("broken config: want *ConfigError, got %v", err)
	}
	if changed || cfg.Pool.MinIdle != 4 {
		t.Errorf("broken config: got minIdle %d changed %v, want the last good config (minIdle 4) unchanged", cfg.Pool.MinIdle, changed)
	}
	if cur, ok := loader.Current(); !ok || cur.Pool.MinIdle != 4 {
		t.Errorf("Current() = minIdle %d, %v; want 4, true", cur.Pool.MinIdle, ok)
	}
	wantProblem := Problem{File: src.Main, Path: "pool.maxIdle", Message: "must be >= pool.minIdle (got 3 < 9)"}
	if len(ce.Problems) == 0 || ce.Problems[0] != wantProblem {
		t.Errorf("problems: %v, want first %v", ce.Problems, wantProblem)
	}
	noSignal(t, w, "broken swap")

	// Fixing it recovers without a restart.
	atomicWrite(t, vol, map[string]string{"config.yaml": configWithMinIdle(5)}, 0)
	waitSignal(t, w, "fixed swap")
	if cfg, changed, err := loader.Load(); err != nil || !changed || cfg.Pool.MinIdle != 5 {
		t.Fatalf("fixed: minIdle %d changed %v err %v", cfg.Pool.MinIdle, changed, err)
	}
}

func TestLoaderBeforeAnyGoodConfig(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml")}
	writeFile(t, src.Main, "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\nmode: x\n")
	l := NewConfigLoader(src, NodeFacts{})
	cfg, changed, err := l.Load()
	if err == nil || changed {
		t.Fatalf("want error, got changed=%v err=%v", changed, err)
	}
	if diff := cmp.Diff(Config{}, cfg); diff != "" {
		t.Errorf("want the zero config before any good one (-want +got):\n%s", diff)
	}
	if _, ok := l.Current(); ok {
		t.Error("Current reports a good config before any loaded")
	}
	writeFile(t, src.Main, configWithMinIdle(2))
	if _, changed, err := l.Load(); err != nil || !changed {
		t.Fatalf("good config: changed=%v err=%v", changed, err)
	}
	if _, changed, err := l.Load(); err != nil || changed {
		t.Errorf("same config again: changed=%v err=%v, want unchanged", changed, err)
	}
}

func TestWatcherSeesDropInsAndEditorWrites(t *testing.T) {
	dir := t.TempDir()
	drop := filepath.Join(dir, "config.d")
	w := startWatcher(t, dir, drop)

	writeFile(t, filepath.Join(dir, "config.yaml"), "a")
	waitSignal(t, w, "write of config.yaml")
	noSignal(t, w, "write of config.yaml")

	// The drop-in dir appears later: its creation signals, and so do writes
	// inside it once it exists.
	if err := os.Mkdir(drop, 0o755); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "mkdir config.d")
	writeFile(t, filepath.Join(drop, "10.yaml"), "b")
	waitSignal(t, w, "write of a drop-in")

	// Chmod and dot-files (editor swap files, temp files) are ignored.
	if err := os.Chmod(filepath.Join(drop, "10.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(drop, ".10.yaml.swp"), "x")
	noSignal(t, w, "chmod and a swap file")

	// Editors that save by rename.
	writeFile(t, filepath.Join(dir, ".config.yaml.tmp"), "c")
	if err := os.Rename(filepath.Join(dir, ".config.yaml.tmp"), filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "rename over config.yaml")

	// The dir is removed and created again: both are seen, and the new dir
	// is watched.
	if err := os.RemoveAll(drop); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "removal of config.d")
	if err := os.Mkdir(drop, 0o755); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "re-creation of config.d")
	writeFile(t, filepath.Join(drop, "20.yaml"), "d")
	waitSignal(t, w, "write in the re-created config.d")
}

func TestWatcherWaitsForDeepMissingDir(t *testing.T) {
	base := t.TempDir()
	pods := filepath.Join(base, "run", "enid", "pods")
	w := startWatcher(t, pods)
	s, e := writeIntoNewDir(t, w, pods)
	if err := s.Remove(e.Key()); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "an entry removed")
}

// writeIntoNewDir writes an entry into pods, which does not exist yet
// (the write creates it), then a second one, waiting for w's signal after
// each; it returns the store and the second entry.
func writeIntoNewDir(t *testing.T, w *Watcher, pods string) (*EntryStore, Entry) {
	t.Helper()
	s := NewEntryStore(pods)
	if _, err := s.Write(validEntry()); err != nil { // creates the dir
		t.Fatal(err)
	}
	waitSignal(t, w, "the entries dir appeared")
	e := validEntry()
	e.ContainerID = "second"
	if _, err := s.Write(e); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "an entry written in the new dir")
	return s, e
}

func TestWatcherCoalescesBursts(t *testing.T) {
	dir := t.TempDir()
	w := startWatcher(t, dir)
	s := NewEntryStore(dir)
	start := time.Now()
	const n = 100
	for i := range n {
		e := validEntry()
		e.ContainerID = fmt.Sprintf("c%d", i)
		if _, err := s.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	burst := time.Since(start)
	// Collect signals until none has come for a while.
	signals := 0
	quiet := 10 * testDebounce
	timeout := time.After(10 * time.Second)
loop:
	for {
		wait := quiet
		if signals == 0 {
			wait = 5 * time.Second
		}
		select {
		case <-w.C():
			signals++
		case <-time.After(wait):
			break loop
		case <-timeout:
			break loop
		}
	}
	// One signal per 5*Debounce of burst at most (plus the trailing one),
	// and never one per write.
	most := int(burst/(5*testDebounce)) + 2
	if signals < 1 || signals > most || signals >= n {
		t.Errorf("%d signals for %d writes in %v, want 1..%d", signals, n, burst, most)
	}
}

// TestWatcherPromptSignalsAtOnce: with a debounce of an hour, a change
// Prompt names (a pod entry) still signals at once, and a change it does
// not name (a config file) waits for the debounce.
func TestWatcherPromptSignalsAtOnce(t *testing.T) {
	entries, cfg := t.TempDir(), t.TempDir()
	w := startWatcherWith(t, func(w *Watcher) {
		w.Debounce = time.Hour
		w.Prompt = func(path string) bool { return filepath.Dir(path) == entries }
	}, entries, cfg)
	s := NewEntryStore(entries)
	for i := range 3 {
		e := validEntry()
		e.ContainerID = fmt.Sprintf("c%d", i)
		if _, err := s.Write(e); err != nil {
			t.Fatal(err)
		}
		waitSignal(t, w, fmt.Sprintf("entry %d written (the debounce is an hour)", i))
	}
	if _, _, err := s.Delete(Key{ContainerID: "c0", IfName: validEntry().IfName}, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, w, "an entry removed (the debounce is an hour)")
	// A delete is two prompt changes (the deletion record, the entry's
	// removal): on a loaded machine the second may signal after the first
	// was taken. Let them pass before the config write.
	settle(w)
	writeFile(t, filepath.Join(cfg, "config.yaml"), configWithMinIdle(2))
	noSignal(t, w, "a config write, which waits for the debounce")
}

func TestWatcherOverflowSignalsAtOnce(t *testing.T) {
	w, err := NewWatcher(slog.New(slog.DiscardHandler), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close() //nolint:errcheck // test cleanup
	s := &watchState{fw: fw, dirs: w.dirs, log: w.log, watched: map[string]bool{}}
	if !w.handleError(s, fmt.Errorf("read: %w", fsnotify.ErrEventOverflow)) {
		t.Error("overflow did not ask for an immediate re-read")
	}
	if w.handleError(s, errors.New("some other error")) {
		t.Error("an ordinary error asked for a re-read")
	}
}

// The loader skips parsing unchanged files, but an in-place edit of the
// same size, a new drop-in and new node facts are all seen.
func TestLoaderSeesEveryChangeDespiteItsCache(t *testing.T) {
	dir := t.TempDir()
	src := ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	writeFile(t, src.Main, configWithMinIdle(2))
	l := NewConfigLoader(src, NodeFacts{})
	if cfg, _, err := l.Load(); err != nil || cfg.Pool.MinIdle != 2 {
		t.Fatalf("first load: minIdle %d err %v", cfg.Pool.MinIdle, err)
	}
	writeFile(t, src.Main, configWithMinIdle(3)) // same size, in place
	if cfg, changed, err := l.Load(); err != nil || !changed || cfg.Pool.MinIdle != 3 {
		t.Fatalf("in-place edit: minIdle %d changed %v err %v", cfg.Pool.MinIdle, changed, err)
	}
	writeFile(t, filepath.Join(src.DropInDir, "10-pool.yaml"), "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\npool:\n  maxIdle: 30\n")
	if cfg, changed, err := l.Load(); err != nil || !changed || cfg.Pool.MaxIdle != 30 {
		t.Fatalf("new drop-in: maxIdle %d changed %v err %v", cfg.Pool.MaxIdle, changed, err)
	}
	writeFile(t, filepath.Join(src.DropInDir, "10-pool.yaml"), "apiVersion: enid.dev/v1alpha1\nkind: AgentConfig\npool:\n  maxIdle: -1\n")
	if _, _, err := l.Load(); err == nil {
		t.Fatal("broken drop-in accepted")
	}
	if _, _, err := l.Load(); err == nil {
		t.Fatal("broken drop-in accepted on the second load (cached as good?)")
	}
}

// TestWatcherNamesChanges: Changed hears the path of each change it
// signals, before the signal; Lost hears that a watched directory
// appeared (its files came with no event of their own).
func TestWatcherNamesChanges(t *testing.T) {
	pods := filepath.Join(t.TempDir(), "pods")
	var mu sync.Mutex
	var named []string
	lost := 0
	w := startWatcherWith(t, func(w *Watcher) {
		w.Changed = func(p string) { mu.Lock(); named = append(named, p); mu.Unlock() }
		w.Lost = func() { mu.Lock(); lost++; mu.Unlock() }
	}, pods)
	_, e := writeIntoNewDir(t, w, pods)
	mu.Lock()
	defer mu.Unlock()
	if lost == 0 {
		t.Error("Lost not called when the watched directory appeared")
	}
	if want := filepath.Join(pods, EntryFileName(e.Key())); !slices.Contains(named, want) {
		t.Errorf("Changed heard %v, not %s", named, want)
	}
	for _, p := range named {
		if strings.HasPrefix(filepath.Base(p), ".") {
			t.Errorf("Changed heard a temp file %s, which signals nothing", p)
		}
	}
}

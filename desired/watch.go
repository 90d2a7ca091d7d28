package desired

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/enidnet/enid/internal/clock"
)

// DefaultDebounce is how long the watcher waits for a burst of changes to
// end before it signals.
const DefaultDebounce = 100 * time.Millisecond

// Watcher wakes its caller when a file in one of its directories changes.
// It only signals; the caller re-reads everything (level-triggered), so a
// signal carries no detail and several changes may share one signal.
//
// It watches directories, never files: an editor's or kubelet's atomic
// replace gives the file a new inode, which a file watch would lose. Inside a
// kubelet ConfigMap volume only the "..data" symlink swap counts (one signal
// per update); other dot-files (kubelet's "..<timestamp>" dirs, editor swap
// files, enid's own ".tmp-" files) are ignored. A directory that does not
// exist yet is waited for by watching its nearest existing parent, and
// signals when it appears. A kernel queue overflow signals at once, since
// events were lost.
type Watcher struct {
	// Debounce is the quiet time after the last change before C fires;
	// a steady stream of changes still fires at least every 5*Debounce.
	// Set it before Run; zero means DefaultDebounce.
	Debounce time.Duration
	// Clock times the debounce (clock.Real when nil): the owner's clock.
	// The file events themselves come from the kernel, when they happen.
	// Set it before Run.
	Clock clock.Clock
	// Changed, when set, is called from Run's goroutine with the path of
	// every change it reports (a file created, written, renamed or removed
	// in a watched directory), before the signal that change brings; Lost
	// when changes may have gone unreported (an overflow of the kernel's
	// queue, a watched directory that came or went). An EntryStore's
	// Changed and Unsure are made for them. Set them before Run.
	Changed func(path string)
	Lost    func()
	// Prompt, when set, names the changes someone waits on: one of them
	// signals at once instead of after the debounce (with whatever else is
	// pending). A pod entry is one: a CNI ADD or DEL waits for its pass,
	// and an entry is written whole (a rename), so nothing of it is left
	// to wait for. The caller's loop coalesces signals that come while it
	// is busy, so a burst of entries still costs one pass per pass time.
	// Set it before Run.
	Prompt func(path string) bool

	log   *slog.Logger
	dirs  []string
	c     chan struct{}
	ready chan struct{}
}

// NewWatcher returns a watcher for dirs, which need not exist yet. Nothing
// is watched until Run.
func NewWatcher(logger *slog.Logger, dirs ...string) (*Watcher, error) {
	if len(dirs) == 0 {
		return nil, errors.New("new watcher: no directories")
	}
	w := &Watcher{log: logger, c: make(chan struct{}, 1), ready: make(chan struct{})}
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("new watcher: %w", err)
		}
		w.dirs = append(w.dirs, abs)
	}
	return w, nil
}

// C delivers one coalesced signal per burst of changes. It is buffered (one)
// and the watcher never blocks on it; it is never closed.
func (w *Watcher) C() <-chan struct{} { return w.c }

// Ready is closed once Run has set up its watches. A caller that reads
// everything after Ready misses no change.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Run watches until ctx is done, then returns nil. It returns an error only
// when the watch cannot be set up or the kernel watch fails for good. Run
// must be called once.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewBufferedWatcher(1024)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer fw.Close() //nolint:errcheck // closing on the way out; events no longer matter

	debounce := w.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	s := &watchState{fw: fw, dirs: w.dirs, log: w.log, watched: map[string]bool{}, lost: w.Lost}
	s.refresh()
	close(w.ready)

	clk := clock.OrReal(w.Clock)
	timer := clk.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time // start of the pending burst; zero when none
	arm := func() {
		now := clk.Now()
		if first.IsZero() {
			first = now
		}
		wait := min(debounce, first.Add(5*debounce).Sub(now))
		timer.Reset(max(wait, 0))
	}
	fire := func() {
		first = time.Time{}
		timer.Stop()
		select {
		case w.c <- struct{}{}:
		default: // a signal is already pending: it covers this change too
		}
	}
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("watch: event channel closed")
			}
			if s.handle(ev) {
				if w.Changed != nil {
					w.Changed(ev.Name)
				}
				if w.Prompt != nil && w.Prompt(ev.Name) {
					fire()
				} else {
					arm()
				}
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("watch: error channel closed")
			}
			if w.handleError(s, err) {
				fire()
			}
		case <-timer.C():
			fire()
		}
	}
}

// handleError logs a watch error and reports whether the caller must be
// signalled at once: an overflow means events were lost, so everything must
// be re-read now.
func (w *Watcher) handleError(s *watchState, err error) bool {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		w.log.Warn("file watch overflowed; re-reading everything", "err", err)
		s.refresh()
		s.reportLost()
		return true
	}
	w.log.Warn("file watch error", "err", err)
	return false
}

// watchState is the set of kernel watches; Run's goroutine owns it.
type watchState struct {
	fw   *fsnotify.Watcher
	dirs []string
	log  *slog.Logger
	// watched holds every path added to fw: wanted dirs and the
	// ancestors of wanted dirs that do not exist yet.
	watched map[string]bool
	// lost is Watcher.Lost.
	lost func()
}

// reportLost says that changes may have gone unreported.
func (s *watchState) reportLost() {
	if s.lost != nil {
		s.lost()
	}
}

// refresh adds a watch on every wanted dir that exists and on the nearest
// existing parent of each one that does not, and drops parent watches no
// longer needed. It reports whether the set of watched wanted dirs changed.
func (s *watchState) refresh() bool {
	changed := false
	need := map[string]bool{}
	for _, d := range s.dirs {
		p, ok := s.watchNearest(d)
		if p == d {
			if !s.watched[d] {
				changed = true
			}
		} else if s.watched[d] {
			changed = true
			delete(s.watched, d)
		}
		if ok {
			s.watched[p] = true
			need[p] = true
		}
	}
	for p := range s.watched {
		if !need[p] {
			delete(s.watched, p)
			// The path may already be gone, which removes the watch anyway.
			_ = s.fw.Remove(p)
		}
	}
	return changed
}

// watchNearest watches d or, when it does not exist, its nearest existing
// parent, and returns the path watched. A directory on the way down may be
// created between the failed watch and the parent's watch (mkdir -p races
// with us); its creation event is then lost, so after watching a parent it
// looks again for the next directory down and retries when it is there.
func (s *watchState) watchNearest(d string) (string, bool) {
	for range 64 {
		if err := s.fw.Add(d); err == nil {
			return d, true
		}
		child := d
		p := filepath.Dir(d)
		for {
			if err := s.fw.Add(p); err == nil {
				break
			}
			if p == filepath.Dir(p) {
				s.log.Warn("cannot watch any parent of a directory", "dir", d)
				return "", false
			}
			child, p = p, filepath.Dir(p)
		}
		if _, err := os.Lstat(child); err != nil {
			return p, true // still absent: its creation will be an event in p
		}
	}
	return "", false
}

// handle decides whether an event is a change the caller must see.
func (s *watchState) handle(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	// A wanted dir, or a parent of one, was created, removed or renamed.
	for _, d := range s.dirs {
		if ev.Name == d || strings.HasPrefix(d, ev.Name+string(filepath.Separator)) {
			if s.refresh() {
				// A directory that came or went: what it holds changed
				// with no event of its own.
				s.reportLost()
				return true
			}
		}
	}
	dir, base := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	wanted := false
	for _, d := range s.dirs {
		if d == dir {
			wanted = true
		}
	}
	if !wanted {
		return false
	}
	if strings.HasPrefix(base, ".") {
		// kubelet's AtomicWriter: the rename of "..data_tmp" to "..data"
		// is the one event that means "new content".
		return base == "..data" && ev.Has(fsnotify.Create)
	}
	return true
}

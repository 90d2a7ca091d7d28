package desired

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
)

// This file keeps the last good config: ConfigLoader reads the files again
// when they change and keeps what it had when they are invalid.

// ConfigLoader loads the config and keeps the last good one, so that a
// broken edit never replaces a working config: Load returns the last good
// config together with the error, and the caller just keeps using what Load
// returned. It is safe for concurrent use.
type ConfigLoader struct {
	src ConfigSource

	mu sync.Mutex // guards the fields below
	// facts select per-node overrides; SetFacts changes them.
	facts NodeFacts
	// last is the last config that loaded and validated; valid says
	// whether there has been one.
	last  Config
	valid bool
	// seen fingerprints the files (and facts) of the last load and
	// seenErr is its error: an agent loads on every pass, and parsing and
	// validating unchanged files each time is wasted work.
	seen    string
	seenErr error
}

// NewConfigLoader returns a loader for src; nothing is read until Load.
func NewConfigLoader(src ConfigSource, facts NodeFacts) *ConfigLoader {
	return &ConfigLoader{src: src, facts: facts}
}

// Source returns the files the loader reads.
func (l *ConfigLoader) Source() ConfigSource { return l.src }

// SetFacts changes the node facts used for overrides from the next Load on
// (e.g. when the node's labels become known).
func (l *ConfigLoader) SetFacts(f NodeFacts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.facts = f
}

// Load reads the config files again. On success it returns the new config
// and whether it differs from the previous good one (true on the first
// success). On error it returns the last good config, changed=false and the
// error (a *ConfigError); before any success that config is the zero value:
// check Current's ok, or use Load's error, before acting on it.
func (l *ConfigLoader) Load() (cfg Config, changed bool, err error) {
	l.mu.Lock()
	facts := l.facts
	l.mu.Unlock()

	fp := fingerprint(l.src, facts)
	l.mu.Lock()
	if fp != "" && fp == l.seen {
		defer l.mu.Unlock()
		return l.last, false, l.seenErr
	}
	l.mu.Unlock()

	loaded, err := LoadConfig(l.src, facts)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen, l.seenErr = fp, err
	if err != nil {
		return l.last, false, err
	}
	changed = !l.valid || !reflect.DeepEqual(loaded, l.last)
	l.last, l.valid = loaded, true
	return loaded, changed, nil
}

// Current returns the last good config and whether there is one.
func (l *ConfigLoader) Current() (Config, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.valid
}

// fingerprint identifies what LoadConfig would read: every config file's
// identity (device, inode, size, change times; symlinks followed, so a
// ConfigMap's ..data swap changes it) and the node facts. "" means it could
// not be taken, and the files are read again.
func fingerprint(src ConfigSource, facts NodeFacts) string {
	files, problems := configFiles(src)
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems;%+v;", len(problems), facts)
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return ""
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return ""
		}
		fmt.Fprintf(&b, "%s:%d:%d:%d:%d:%d;", f, sys.Dev, sys.Ino, sys.Size, sys.Mtim.Nano(), sys.Ctim.Nano())
	}
	return b.String()
}

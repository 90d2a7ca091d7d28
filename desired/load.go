package desired

import "errors"

// This file assembles desired.State from all its files: the config (through
// the loader), the pod entries and deletion records, the hints (Load).

// Sources are all the files desired state is read from.
type Sources struct {
	Config     ConfigSource
	EntriesDir string
	Hints      HintSources
}

// DefaultSources returns the standard locations on a node.
func DefaultSources() Sources {
	return Sources{Config: DefaultConfigSource(), EntriesDir: DefaultEntriesDir, Hints: DefaultHintSources()}
}

// Load reads everything once and assembles the desired state. It never
// fails: a config that does not load leaves the loader's last good config
// in State.Config and the reasons in ConfigProblems; an entries directory
// that cannot be listed is reported as an EntryProblem with File set to
// the directory; hint problems are in Hints.Problems.
func Load(l *ConfigLoader, s *EntryStore, h HintSources) State {
	var st State
	cfg, _, err := l.Load()
	st.Config = cfg
	if err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			st.ConfigProblems = ce.Strings()
		} else {
			st.ConfigProblems = []string{err.Error()}
		}
	}
	st = LoadEntries(st, s)
	st.Hints = ReadHints(h)
	return st
}

// LoadEntries returns st with its entries, entry problems and deletion
// records read again from s, the rest (the config, the hints) as it was:
// what a change to the entries alone asks for.
func LoadEntries(st State, s *EntryStore) State {
	ls, err := s.Scan()
	if err != nil {
		ls.Problems = append(ls.Problems, EntryProblem{File: s.Dir(), Err: err.Error()})
	}
	st.Entries, st.EntryProblems, st.Deleted = ls.Entries, ls.Problems, ls.Deleted
	return st
}

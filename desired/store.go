package desired

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/internal/fileread"
	"github.com/enidnet/enid/internal/podkey"
)

// EntryStore keeps pod entries as files in one directory, one file per
// attachment. Writes are atomic, so a reader sees the old entry or the new
// one, never a torn file. Any number of processes may use the same
// directory at once: the only state a store keeps is a cache of parsed
// entries, checked against each file's identity on every ReadAll, and,
// when a watcher reports the directory's changes (Track), the last
// listing, brought up to date name by name.
type EntryStore struct {
	dir string

	mu sync.Mutex // guards the fields below
	// cache holds the parsed entry of each file by name, with the identity
	// of the file it came from. Every write replaces a file by rename (a new
	// inode), so an unchanged identity means unchanged bytes; a listing
	// then costs one fstatat per entry instead of an open, read, parse and
	// validation (48 µs each, measured with BenchmarkReadAll).
	cache map[string]cachedEntry
	// last is the last Scan's listing (its slices are the store's: Scan
	// returns copies); listed says there is one.
	last   Listing
	listed bool
	// tracked: a watcher reports every change to the directory's files
	// (Track), so Scan does not list the directory at all: it looks again
	// only at the names reported since the last Scan (changed) and takes
	// the rest from last. On a node with a thousand pods a listing with a
	// check of every file's identity was most of what a change cost the
	// agent (BenchmarkScan1000). unsure asks the next Scan to list the
	// directory (tracking just began, or events may have been lost).
	tracked, unsure bool
	changed         map[string]bool
}

// Track tells the store that from now on a watcher reports every change
// to the files of its directory (Changed) and every time it may have
// missed one (Unsure). The next Scan checks every file: what changed
// before the watch began.
func (s *EntryStore) Track() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tracked, s.unsure = true, true
}

// Changed reports that the file name (a base name in the directory) was
// created, written, renamed or removed: the next Scan checks it.
func (s *EntryStore) Changed(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changedLocked(name)
}

// changedLocked is Changed with s.mu held. The store's own writes call it
// too: a tracked Scan sees them without waiting for the watcher's event,
// and a caller that reports the other changes itself (no watcher) need
// not report the store's.
func (s *EntryStore) changedLocked(name string) {
	if s.changed == nil {
		s.changed = map[string]bool{}
	}
	s.changed[name] = true
}

// noteWrite reports a change the store itself made to the file name, when
// tracked (an untracked Scan lists the directory, and a store that only
// writes, as the CNI plugin's, keeps nothing).
func (s *EntryStore) noteWrite(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tracked {
		s.changedLocked(name)
	}
}

// Unsure reports that changes may have gone unreported (a watch
// overflowed, a directory came or went, a caller changed files behind the
// watcher): the next Scan checks every file.
func (s *EntryStore) Unsure() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsure = true
}

// cachedEntry is a parsed entry and the identity of its file.
type cachedEntry struct {
	id    fileread.ID
	entry Entry
}

// statAt returns the identity of the regular file name in the directory
// open as dfd, without following a symlink: one fstatat, no path walk.
func statAt(dfd int, name string) (fileread.ID, bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fileread.ID{}, false
	}
	return fileread.NewID(st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()), true
}

// NewEntryStore returns a store for dir (e.g. /run/enid/pods). The directory
// is created on the first Write.
func NewEntryStore(dir string) *EntryStore { return &EntryStore{dir: dir} }

// Dir returns the store's directory.
func (s *EntryStore) Dir() string { return s.dir }

// Write validates e and stores it atomically: a temp file (0600) in the same
// directory, fsync, rename over the entry, fsync of the directory (0700,
// created if needed). It returns the revision of the bytes written. The
// entry is stored as given: Write sets no field.
func (s *EntryStore) Write(e Entry) (revision string, err error) {
	if err := e.Validate(); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode entry %s: %w", e.Key(), err)
	}
	data = append(data, '\n')
	if len(data) > MaxEntrySize {
		return "", fmt.Errorf("%w: %s: %d bytes, more than the %d allowed", ErrInvalidEntry, e.Key(), len(data), MaxEntrySize)
	}
	if err := s.ensureDir(); err != nil {
		return "", err
	}
	name := EntryFileName(e.Key())
	defer s.noteWrite(name)
	if err := podkey.WriteFileAtomic(filepath.Join(s.dir, name), data, 0o600); err != nil {
		return "", fmt.Errorf("write entry %s: %w", e.Key(), err)
	}
	return Revision(data), nil
}

// ensureDir creates the directory 0700 and refuses one that is a symlink.
func (s *EntryStore) ensureDir() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create entries dir: %w", err)
	}
	st, err := os.Lstat(s.dir)
	if err != nil {
		return fmt.Errorf("create entries dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("entries dir %s is not a directory (a symlink?)", s.dir)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(s.dir, 0o700); err != nil {
			return fmt.Errorf("entries dir: %w", err)
		}
	}
	return nil
}

// Read returns the entry for key. errors.Is(err, fs.ErrNotExist) reports
// that there is none; a bad file gives an error wrapping ErrInvalidEntry.
func (s *EntryStore) Read(key Key) (Entry, error) {
	if err := validKey(key); err != nil {
		return Entry{}, err
	}
	e, err := s.readFile(EntryFileName(key))
	if err != nil {
		return Entry{}, fmt.Errorf("read entry %s: %w", key, err)
	}
	return e, nil
}

// readFile opens name (an entry file name; never a path) without following symlinks and without blocking on a
// FIFO, insists on a regular file, and reads at most MaxEntrySize bytes.
func (s *EntryStore) readFile(name string) (Entry, error) {
	path := filepath.Join(s.dir, name)
	data, err := fileread.Read(path, MaxEntrySize, fileread.NoFollow)
	if errors.Is(err, fileread.ErrSymlink) || errors.Is(err, fileread.ErrNotRegular) || errors.Is(err, fileread.ErrTooLarge) {
		// Name the file as the other entry problems do, not by its path.
		return Entry{}, fmt.Errorf("%w: %s%s", ErrInvalidEntry, name, strings.TrimPrefix(err.Error(), path))
	}
	if err != nil {
		return Entry{}, err
	}
	e, err := ParseEntry(data)
	if err != nil {
		return Entry{}, err
	}
	if want := EntryFileName(e.Key()); want != name {
		return Entry{}, fmt.Errorf("%w: %s holds the entry for %s (file name must be %s)", ErrInvalidEntry, name, e.Key(), want)
	}
	return e, nil
}

// ReadAll returns every valid entry, sorted by key, and one problem for each
// file that could not be used; a bad file never hides the others. Dot-files
// (temp files of writes in progress) and deletion records are skipped. The
// error is only for a directory that cannot be listed; a missing directory
// has no entries.
func (s *EntryStore) ReadAll() ([]Entry, []EntryProblem, error) {
	l, err := s.Scan()
	return l.Entries, l.Problems, err
}

// Listing is what the entries directory holds.
type Listing struct {
	// Entries are the valid entries, sorted by key.
	Entries []Entry
	// Deleted are the keys with a deletion record (MarkDeleted), sorted.
	// A key may be in both lists: an ADD after the DEL, or a DEL that has
	// written its record and not yet removed the entry; the entry wins.
	Deleted []Key
	// Problems are the files that could not be used.
	Problems []EntryProblem
}

// Scan returns what the directory holds: the entries (as ReadAll) and the
// deletion records. A deletion record is never read: its name is its
// content, and only a regular file counts.
//
// Untracked (or unsure), Scan lists the directory. A file seen before
// under the same name costs one fstatat relative to the open directory
// (no path walk, no name parsing) while its identity is unchanged: an
// agent pass on a node with hundreds of pods re-reads the directory for
// each change. Tracked, it does not list the directory: it looks at the
// names reported since the last Scan, one fstatat each (and a read when
// the file is new), and takes everything else from the last Scan.
func (s *EntryStore) Scan() (Listing, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// What is reported from now on is for the next Scan.
	changed := s.changed
	s.changed = nil
	if s.tracked && !s.unsure && s.listed {
		if dfd, err := unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			defer unix.Close(dfd) //nolint:errcheck // read-only
			s.lookAgain(dfd, changed)
			return s.last.clone(), nil
		}
		// The directory went (the watcher says so too), is no longer
		// one, or cannot be opened: the names reported are not looked
		// at, so list.
	}
	l, err := s.list()
	if err != nil {
		s.unsure = true // what was reported is lost with this Scan
		return Listing{}, err
	}
	s.unsure = false
	s.last, s.listed = l, true
	return l.clone(), nil
}

// list reads the whole directory into the store's state and returns the
// listing (the store's; Scan copies it).
func (s *EntryStore) list() (Listing, error) {
	dir, err := os.Open(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		clear(s.cache)
		return Listing{}, nil
	}
	if err != nil {
		return Listing{}, fmt.Errorf("list entries: %w", err)
	}
	defer dir.Close() //nolint:errcheck // read-only
	dirents, err := dir.ReadDir(-1)
	if err != nil {
		return Listing{}, fmt.Errorf("list entries: %w", err)
	}
	dfd := int(dir.Fd())
	// Sized once: appending a thousand entries one by one copies them over
	// and over (a third of a listing's time at 1,000 pods).
	entries := make([]Entry, 0, len(dirents))
	var problems []EntryProblem
	var deleted []Key
	seen := make(map[string]bool, len(dirents))
	for _, de := range dirents {
		name := de.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if k, ok := KeyFromDeletionFileName(name); ok {
			if de.Type().IsRegular() {
				deleted = append(deleted, k)
			}
			continue
		}
		seen[name] = true
		e, p, ok := s.look(dfd, name)
		switch {
		case p != nil:
			problems = append(problems, *p)
		case ok:
			entries = append(entries, e)
		}
	}
	for name := range s.cache {
		if !seen[name] {
			delete(s.cache, name)
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return compareKeys(a.Key(), b.Key()) })
	slices.SortFunc(deleted, compareKeys)
	sort.Slice(problems, func(i, j int) bool { return problems[i].File < problems[j].File })
	return Listing{Entries: entries, Deleted: deleted, Problems: problems}, nil
}

// look reads the file name (not a deletion record) of the directory open
// as dfd: its entry (ok), a problem, or neither (it is gone). It keeps the
// store's cache up to date.
func (s *EntryStore) look(dfd int, name string) (Entry, *EntryProblem, bool) {
	c, cached := s.cache[name] // only valid entry names are cached
	if !cached {
		if _, ok := KeyFromFileName(name); !ok {
			var st unix.Stat_t
			if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
				return Entry{}, nil, false
			}
			return Entry{}, &EntryProblem{File: name, Err: "not an entry file name: want <containerID>_<ifName>.json"}, false
		}
	}
	id, idOK := statAt(dfd, name)
	if cached && idOK && c.id == id {
		return c.entry, nil, true
	}
	e, err := s.readFile(name)
	switch {
	case err == nil && idOK:
		if s.cache == nil {
			s.cache = map[string]cachedEntry{}
		}
		s.cache[name] = cachedEntry{id: id, entry: e}
	case err != nil:
		// What was cached under this name is no longer the file: a
		// tracked Scan must not take it back once the change that broke
		// the file has been seen.
		delete(s.cache, name)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, nil, false // removed since the listing
	}
	if err != nil {
		p := EntryProblem{File: name, Err: err.Error()}
		if k, ok := KeyFromFileName(name); ok {
			p.ContainerID, p.IfName = k.ContainerID, k.IfName
		}
		return Entry{}, &p, false
	}
	return e, nil, true
}

// lookAgain brings s.last up to date with the changed names, each looked
// at again in the directory open as dfd; the rest of the listing stands.
func (s *EntryStore) lookAgain(dfd int, changed map[string]bool) {
	byKey := func(x Entry) Key { return x.Key() }
	byFile := func(x EntryProblem) string { return x.File }
	self := func(k Key) Key { return k }
	for name := range changed {
		if strings.HasPrefix(name, ".") || strings.ContainsRune(name, '/') {
			continue
		}
		if k, ok := KeyFromDeletionFileName(name); ok {
			var st unix.Stat_t
			if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				s.last.Deleted = upsert(s.last.Deleted, k, compareKeys, self)
			} else {
				s.last.Deleted = remove(s.last.Deleted, k, compareKeys, self)
			}
			continue
		}
		e, p, ok := s.look(dfd, name)
		if ok {
			s.last.Entries = upsert(s.last.Entries, e, compareKeys, byKey)
		} else if k, valid := KeyFromFileName(name); valid {
			s.last.Entries = remove(s.last.Entries, k, compareKeys, byKey)
		}
		if p != nil {
			s.last.Problems = upsert(s.last.Problems, *p, strings.Compare, byFile)
		} else {
			s.last.Problems = remove(s.last.Problems, name, strings.Compare, byFile)
		}
	}
}

// upsert puts v into the sorted list l (by key(v) and cmp), replacing the
// value of the same key.
func upsert[T, K any](l []T, v T, cmp func(K, K) int, key func(T) K) []T {
	i, found := slices.BinarySearchFunc(l, key(v), func(x T, k K) int { return cmp(key(x), k) })
	if found {
		l[i] = v
		return l
	}
	return slices.Insert(l, i, v)
}

// remove drops the value of key k from the sorted list l.
func remove[T, K any](l []T, k K, cmp func(K, K) int, key func(T) K) []T {
	if i, found := slices.BinarySearchFunc(l, k, func(x T, k K) int { return cmp(key(x), k) }); found {
		return slices.Delete(l, i, i+1)
	}
	return l
}

// clone copies the listing's lists, the caller's to change; an empty list
// is nil, however it came to be empty.
func (l Listing) clone() Listing {
	return Listing{Entries: cloneOrNil(l.Entries), Deleted: cloneOrNil(l.Deleted), Problems: cloneOrNil(l.Problems)}
}

func cloneOrNil[T any](l []T) []T {
	if len(l) == 0 {
		return nil
	}
	return slices.Clone(l)
}

// compareKeys orders keys as their strings "<containerID>_<ifName>" order,
// without building the strings unless one container ID is a prefix of the
// other.
func compareKeys(a, b Key) int {
	ac, bc := a.ContainerID, b.ContainerID
	switch {
	case ac == bc:
		return strings.Compare(a.IfName, b.IfName)
	case !strings.HasPrefix(ac, bc) && !strings.HasPrefix(bc, ac):
		return strings.Compare(ac, bc)
	}
	return strings.Compare(a.String(), b.String())
}

// Remove deletes the entry for key; an absent entry is success.
func (s *EntryStore) Remove(key Key) error {
	if err := validKey(key); err != nil {
		return err
	}
	defer s.noteWrite(EntryFileName(key))
	err := os.Remove(filepath.Join(s.dir, EntryFileName(key)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove entry %s: %w", key, err)
	}
	if err := podkey.SyncDir(s.dir); err != nil {
		return fmt.Errorf("remove entry %s: %w", key, err)
	}
	return nil
}

// deletionRecord is the content of a deletion record. Readers use only the
// file's name; the content is for people looking at the directory.
type deletionRecord struct {
	APIVersion  string    `json:"apiVersion"`
	Kind        string    `json:"kind"`
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
	Deleted     time.Time `json:"deleted"`
}

// MarkDeleted records that the runtime deleted the attachment (CNI DEL, or
// GC naming it invalid): <containerID>_<ifName>.del in the entries dir,
// written atomically. The CNI plugin writes it before it removes the entry
// (Delete), so the agent can tell an authoritative removal, which it tears
// down at once, from an entry file that vanished otherwise, which it keeps
// while other evidence says the attachment lives. The agent removes the
// record once nothing of the attachment is left (ForgetDeletion); an ADD of
// the same key removes it too.
//
// Only the record's name is read, so when the file system has no room for
// its content (ENOSPC, EDQUOT: a full /run) the record is an empty file,
// which needs an inode and no data; one that exists already is kept.
func (s *EntryStore) MarkDeleted(key Key, now time.Time) error {
	if err := validKey(key); err != nil {
		return err
	}
	data, err := json.Marshal(deletionRecord{APIVersion: EntryAPIVersion, Kind: "Deletion",
		ContainerID: key.ContainerID, IfName: key.IfName, Deleted: now.UTC()})
	if err != nil {
		return fmt.Errorf("encode deletion of %s: %w", key, err)
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	path := filepath.Join(s.dir, DeletionFileName(key))
	defer s.noteWrite(DeletionFileName(key))
	err = podkey.WriteFileAtomic(path, append(data, '\n'), 0o600)
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		if eerr := s.markEmpty(path); eerr != nil {
			return fmt.Errorf("record deletion of %s: %w (empty record: %w)", key, err, eerr)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("record deletion of %s: %w", key, err)
	}
	return nil
}

// markEmpty creates the deletion record at path with no content, or keeps
// the regular file already there, and makes it durable.
func (s *EntryStore) markEmpty(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		st, lerr := os.Lstat(path)
		if lerr == nil && st.Mode().IsRegular() {
			return podkey.SyncDir(s.dir)
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return podkey.SyncDir(s.dir)
}

// Delete records the runtime's deletion of key and removes its entry, in
// the order that keeps DEL both authoritative and possible on a full file
// system: the record first (MarkDeleted); if it cannot be written, the
// entry's removal (which frees its inode and its bytes) and the record
// again. recorded is false when the record still could not be written: the
// entry is gone all the same, and the agent then takes it for an entry that
// vanished without a DEL, kept while the runtime's own record of it (libcni
// removes that after DEL returns) names it, and torn down when that goes.
// recordErr says why there is no record. err is for an entry that could not
// be removed, the one failure the runtime must retry.
func (s *EntryStore) Delete(key Key, now time.Time) (recorded bool, recordErr, err error) {
	recordErr = s.MarkDeleted(key, now)
	if err := s.Remove(key); err != nil {
		if recordErr != nil {
			return false, recordErr, fmt.Errorf("%w (after: %w)", err, recordErr)
		}
		return true, nil, err
	}
	if recordErr == nil {
		return true, nil, nil
	}
	if err := s.MarkDeleted(key, now); err != nil {
		return false, fmt.Errorf("%w; again after removing the entry: %w", recordErr, err), nil
	}
	return true, nil, nil
}

// ForgetDeletion removes the key's deletion record; an absent one is
// success. It does not sync the directory: a record that comes back after a
// crash is forgotten again, and one lost only makes a later vanished entry
// count as one without a DEL, which is the cautious reading.
func (s *EntryStore) ForgetDeletion(key Key) error {
	if err := validKey(key); err != nil {
		return err
	}
	// Only a regular file is a record (Scan): an unlink, not os.Remove,
	// which tries rmdir after a failed unlink.
	path := filepath.Join(s.dir, DeletionFileName(key))
	defer s.noteWrite(DeletionFileName(key))
	err := syscall.Unlink(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forget deletion of %s: %w", key, &os.PathError{Op: "remove", Path: path, Err: err})
	}
	return nil
}

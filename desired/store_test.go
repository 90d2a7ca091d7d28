package desired

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/internal/roottest"
)

func TestStoreWriteReadRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "pods")
	s := NewEntryStore(dir)
	e := validEntry()
	rev, err := s.Write(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(e.Key())
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != rev {
		t.Errorf("read revision %q, write returned %q", got.Revision, rev)
	}
	e.Revision = rev
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	data, err := os.ReadFile(filepath.Join(dir, EntryFileName(e.Key())))
	if err != nil {
		t.Fatal(err)
	}
	if Revision(data) != rev {
		t.Errorf("revision is not the hash of the file's bytes")
	}
	for path, want := range map[string]fs.FileMode{dir: 0o700, filepath.Join(dir, EntryFileName(e.Key())): 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode().Perm(), want)
		}
	}
	names := dirNames(t, dir)
	if diff := cmp.Diff([]string{EntryFileName(e.Key())}, names); diff != "" {
		t.Errorf("files left in the dir (-want +got):\n%s", diff)
	}

	// Rewriting with other content gives another revision.
	e.PodUID = "other"
	rev2, err := s.Write(e)
	if err != nil || rev2 == rev {
		t.Errorf("rewrite: rev %q (was %q), err %v", rev2, rev, err)
	}

	if err := s.Remove(e.Key()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(e.Key()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read after remove: want fs.ErrNotExist, got %v", err)
	}
	if err := s.Remove(e.Key()); err != nil {
		t.Errorf("removing an absent entry: %v", err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestStoreRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	s := NewEntryStore(dir)
	e := validEntry()
	e.IfName = "../../x"
	if _, err := s.Write(e); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("write with traversal in ifName: want ErrInvalidEntry, got %v", err)
	}
	for _, k := range []Key{{ContainerID: "../etc", IfName: "eth0"}, {ContainerID: "c1", IfName: "../x"}, {ContainerID: "c1", IfName: ""}} {
		if _, err := s.Read(k); !errors.Is(err, ErrInvalidEntry) {
			t.Errorf("Read(%v): want ErrInvalidEntry, got %v", k, err)
		}
		if err := s.Remove(k); !errors.Is(err, ErrInvalidEntry) {
			t.Errorf("Remove(%v): want ErrInvalidEntry, got %v", k, err)
		}
	}
	if len(dirNames(t, dir)) != 0 {
		t.Errorf("bad writes left files: %v", dirNames(t, dir))
	}
}

func TestStoreRefusesSymlinkedDir(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := NewEntryStore(filepath.Join(base, "link")).Write(validEntry()); err == nil {
		t.Error("write through a symlinked dir succeeded")
	}
}

// TestStoreReadAllReportsBadFilesAlone writes good entries next to every
// kind of bad file and checks that each bad file is one problem and every
// good entry is still read.
func TestStoreReadAllReportsBadFilesAlone(t *testing.T) {
	dir := t.TempDir()
	s := NewEntryStore(dir)
	var want []Entry
	for _, id := range []string{"aaa", "ccc", "eee"} {
		e := validEntry()
		e.ContainerID = id
		rev, err := s.Write(e)
		if err != nil {
			t.Fatal(err)
		}
		e.Revision = rev
		want = append(want, e)
	}
	good, err := os.ReadFile(filepath.Join(dir, "ccc_eth0.json"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put("bbb_eth0.json", good[:len(good)/2])                                                 // truncated
	put("ddd_eth0.json", []byte("\x00\xff garbage"))                                         // garbage
	put("fff_eth0.json", good)                                                               // content for ccc under another name
	put("notes.txt", []byte("hello"))                                                        // not an entry name
	put(".tmp-ggg_eth0.json-123", good[:10])                                                 // a write in progress
	if err := os.Symlink("ccc_eth0.json", filepath.Join(dir, "hhh_eth0.json")); err != nil { // symlink
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "iii_eth0.json"), 0o600); err != nil { // a FIFO must not hang the reader
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "jjj_eth0.json"), 0o700); err != nil {
		t.Fatal(err)
	}

	got, problems, err := s.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	type short struct{ File, ContainerID, IfName, Err string }
	var gotP []short
	for _, p := range problems {
		gotP = append(gotP, short{p.File, p.ContainerID, p.IfName, p.Err})
	}
	wantP := []short{
		{"bbb_eth0.json", "bbb", "eth0", "invalid entry: not valid JSON: unexpected EOF"},
		{"ddd_eth0.json", "ddd", "eth0", "invalid entry: not valid JSON: invalid character '\\x00' looking for beginning of value"},
		{"fff_eth0.json", "fff", "eth0", "invalid entry: fff_eth0.json holds the entry for ccc_eth0 (file name must be ccc_eth0.json)"},
		{"hhh_eth0.json", "hhh", "eth0", "invalid entry: hhh_eth0.json is a symlink; want a regular file"},
		{"iii_eth0.json", "iii", "eth0", "invalid entry: iii_eth0.json is not a regular file (a FIFO)"},
		{"jjj_eth0.json", "jjj", "eth0", "invalid entry: jjj_eth0.json is not a regular file (a directory)"},
		{"notes.txt", "", "", "not an entry file name: want <containerID>_<ifName>.json"},
	}
	if diff := cmp.Diff(wantP, gotP); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestStoreReadAllMissingDir(t *testing.T) {
	got, problems, err := NewEntryStore(filepath.Join(t.TempDir(), "absent")).ReadAll()
	if got != nil || problems != nil || err != nil {
		t.Errorf("missing dir: %v %v %v", got, problems, err)
	}
}

// TestStoreConcurrentWrites writes 200 entries from 200 goroutines, some
// keys twice, and reads every one back intact.
func TestStoreConcurrentWrites(t *testing.T) {
	dir := t.TempDir()
	s := NewEntryStore(dir)
	const n = 200
	want := make([]Entry, n)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		e := validEntry()
		e.ContainerID = fmt.Sprintf("c%03d", i)
		e.PodName = fmt.Sprintf("pod-%d", i)
		e.Annotations = map[string]string{"x": strings.Repeat(string(rune('a'+i%26)), 1000+i)}
		want[i] = e
		for range 2 { // the same content twice, racing on one name
			wg.Go(func() {
				if _, err := s.Write(e); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, problems, err := s.ReadAll()
	if err != nil || len(problems) > 0 {
		t.Fatalf("ReadAll: %v %v", problems, err)
	}
	for i := range got {
		got[i].Revision = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if names := dirNames(t, dir); len(names) != n {
		t.Errorf("%d files in the dir, want %d (temp files left?)", len(names), n)
	}
}

// ReadAll caches parsed entries; a rewrite (even to the same size) or a
// removal must never be hidden by the cache.
func TestStoreReadAllSeesRewrites(t *testing.T) {
	s := NewEntryStore(filepath.Join(t.TempDir(), "pods"))
	e := validEntry()
	e.Annotations = map[string]string{"a": "1"}
	if _, err := s.Write(e); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"2", "3", "4"} {
		if _, _, err := s.ReadAll(); err != nil {
			t.Fatal(err)
		}
		e.Annotations["a"] = v // same size: only the identity of the file changes
		rev, err := s.Write(e)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := s.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Annotations["a"] != v || got[0].Revision != rev {
			t.Fatalf("after rewrite to %q ReadAll gave %+v (want revision %s)", v, got, rev)
		}
	}
	if err := s.Remove(e.Key()); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.ReadAll(); len(got) != 0 {
		t.Fatalf("removed entry still read: %+v", got)
	}
}

func TestStoreDeletionRecords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	s := NewEntryStore(dir)
	e := validEntry()
	if _, err := s.Write(e); err != nil {
		t.Fatal(err)
	}
	other := Key{ContainerID: "other", IfName: "eth1"}
	for _, k := range []Key{e.Key(), other} {
		if err := s.MarkDeleted(k, time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	// A directory named like a record is not one.
	if err := os.Mkdir(filepath.Join(dir, "dir_eth0.del"), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Key{e.Key(), other}, l.Deleted); d != "" {
		t.Errorf("deleted (-want +got):\n%s", d)
	}
	if len(l.Entries) != 1 || len(l.Problems) != 0 {
		t.Errorf("entries %d, problems %v; want 1 entry and no problem (records are not entries)", len(l.Entries), l.Problems)
	}
	if es, ps, err := s.ReadAll(); err != nil || len(es) != 1 || len(ps) != 0 {
		t.Errorf("ReadAll: %d entries, problems %v, err %v", len(es), ps, err)
	}
	for _, k := range []Key{e.Key(), e.Key(), other} { // twice: absent is success
		if err := s.ForgetDeletion(k); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := s.Scan(); err != nil || len(l.Deleted) != 0 {
		t.Errorf("after ForgetDeletion: %v (%v)", l.Deleted, err)
	}
	if err := s.MarkDeleted(Key{ContainerID: "a/b", IfName: "eth0"}, time.Now()); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("MarkDeleted of an invalid key: %v", err)
	}
}

// Delete on a full file system (a tmpfs filled to its last byte, and to
// its last inode in two cases): the entry is always removed, and the
// deletion record is written where it can be: empty when only the bytes are
// full, with its content after the entry's removal freed an inode, and not
// at all when there was no entry to free.
func TestDeleteOnFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name          string
		inodes, entry bool
		recorded      bool
		content       bool // the record holds its JSON, not nothing
	}{
		{name: "bytes full", entry: true, recorded: true},
		{name: "bytes and inodes full", inodes: true, entry: true, recorded: true, content: true},
		{name: "bytes and inodes full, no entry", inodes: true},
		{name: "bytes full, no entry", recorded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := roottest.Tmpfs(t, 256<<10, 32)
			s := NewEntryStore(filepath.Join(dir, "pods"))
			e := validEntry()
			if tc.entry {
				if _, err := s.Write(e); err != nil {
					t.Fatal(err)
				}
			} else if err := s.ensureDir(); err != nil {
				t.Fatal(err)
			}
			roottest.Fill(t, dir, tc.inodes)
			recorded, recordErr, err := s.Delete(e.Key(), time.Unix(0, 0))
			if err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if recorded != tc.recorded || (recordErr == nil) != recorded {
				t.Fatalf("Delete: recorded %v (%v), want %v", recorded, recordErr, tc.recorded)
			}
			if recordErr != nil && !errors.Is(recordErr, syscall.ENOSPC) {
				t.Errorf("record error %v, want ENOSPC", recordErr)
			}
			if _, err := s.Read(e.Key()); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("entry after Delete: %v", err)
			}
			l, err := s.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if got := len(l.Deleted) == 1; got != tc.recorded {
				t.Fatalf("records after Delete: %v, want recorded=%v", l.Deleted, tc.recorded)
			}
			if !tc.recorded {
				return
			}
			data, err := os.ReadFile(filepath.Join(s.Dir(), DeletionFileName(e.Key())))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(data) > 0; got != tc.content {
				t.Errorf("record content %q, want content=%v", data, tc.content)
			}
		})
	}
}

func TestCompareKeysAsStrings(t *testing.T) {
	ids := []string{"ab", "ab_x", "ab-x", "abc", "a", "b", "ab.c"}
	ifs := []string{"eth0", "eth1", "e", "net-1"}
	var keys []Key
	for _, id := range ids {
		for _, f := range ifs {
			keys = append(keys, Key{ContainerID: id, IfName: f})
		}
	}
	for _, a := range keys {
		for _, b := range keys {
			if got, want := compareKeys(a, b), strings.Compare(a.String(), b.String()); got != want {
				t.Errorf("compareKeys(%s, %s) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// TestTrackedScanReadsOnlyWhatChanged: once a watcher reports the
// directory's changes (Track), Scan takes a cached entry whose name was
// not reported as it is, and reads again what Changed names, and every
// file after Unsure (and the first Scan after Track). A store nobody
// tracks checks every file's identity on every Scan, and so sees even an
// in-place rewrite (same inode) at once.
func TestTrackedScanReadsOnlyWhatChanged(t *testing.T) {
	dir := t.TempDir()
	s := NewEntryStore(dir)
	a, b := validEntry(), validEntry()
	b.ContainerID = "b123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, e := range []Entry{a, b} {
		if _, err := s.Write(e); err != nil {
			t.Fatal(err)
		}
	}
	podName := func(st *EntryStore) string {
		t.Helper()
		l, err := st.Scan()
		if err != nil || len(l.Entries) != 2 || len(l.Problems) > 0 {
			t.Fatalf("scan: %d entries, %v, %v", len(l.Entries), l.Problems, err)
		}
		for _, e := range l.Entries {
			if e.Key() == a.Key() {
				return e.PodName
			}
		}
		t.Fatal("entry a not listed")
		return ""
	}
	// An in-place rewrite (same inode), which a watcher reports as a write.
	name := EntryFileName(a.Key())
	inPlace := func(pod string) {
		t.Helper()
		e := a
		e.PodName = pod
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	podName(s)
	s.Track()
	inPlace("web-1")
	if got := podName(s); got != "web-1" {
		t.Errorf("the first scan after Track read %q, want every file checked (web-1)", got)
	}
	inPlace("web-2")
	if got := podName(s); got != "web-1" {
		t.Errorf("a tracked scan read %q although no change was reported, want the cached web-1", got)
	}
	s.Changed(name)
	if got := podName(s); got != "web-2" {
		t.Errorf("after Changed: %q, want web-2", got)
	}
	inPlace("web-3")
	s.Unsure()
	if got := podName(s); got != "web-3" {
		t.Errorf("after Unsure: %q, want web-3", got)
	}
	// A change that breaks the file is a problem until the file is
	// fixed, in later tracked scans too (not the entry cached before it).
	if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Changed(name)
	for i := range 2 {
		l, err := s.Scan()
		if err != nil || len(l.Entries) != 1 || len(l.Problems) != 1 {
			t.Errorf("scan %d after a broken rewrite: %d entries, problems %v, %v; want the other entry and one problem", i, len(l.Entries), l.Problems, err)
		}
	}
	inPlace("web-3")
	s.Changed(name)
	u := NewEntryStore(dir)
	podName(u)
	inPlace("web-4")
	if got := podName(u); got != "web-4" {
		t.Errorf("an untracked store read %q after an in-place rewrite, want web-4", got)
	}
}

// TestTrackedScanMatchesAListing: a tracked store does not list its
// directory; it looks again only at the names reported since its last Scan
// and at those it wrote itself. Told of every change, it must find what a
// listing finds, whatever the change: entries written, rewritten and
// removed by it or by another process, deletion records made and
// forgotten, junk, broken files, symlinks and directories where entries
// belong. The lists it returns are the caller's to change.
func TestTrackedScanMatchesAListing(t *testing.T) {
	dir := t.TempDir()
	s, other := NewEntryStore(dir), NewEntryStore(dir)
	s.Track()
	keys := make([]Key, 0, 8)
	for i := range 4 {
		for _, ifName := range []string{"eth0", "eth1"} {
			keys = append(keys, Key{ContainerID: fmt.Sprintf("%064x", i+1), IfName: ifName})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	path := func(name string) string { return filepath.Join(dir, name) }
	clearName := func(name string) {
		if err := os.RemoveAll(path(name)); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 600 {
		k := keys[rng.IntN(len(keys))]
		e := validEntry()
		e.ContainerID, e.IfName, e.PodName = k.ContainerID, k.IfName, fmt.Sprintf("web-%d", step)
		entry, record := EntryFileName(k), DeletionFileName(k)
		var did string
		var reported []string // what a watcher would report; the store's own writes need not be
		switch op := rng.IntN(12); op {
		case 0, 1:
			did = "write through the store"
			clearName(entry)
			if _, err := s.Write(e); err != nil {
				t.Fatal(err)
			}
		case 2:
			did = "write by another process"
			clearName(entry)
			if _, err := other.Write(e); err != nil {
				t.Fatal(err)
			}
			reported = []string{entry}
		case 3:
			did = "remove through the store"
			if err := s.Remove(k); err != nil && !strings.Contains(err.Error(), "directory") {
				t.Fatal(err)
			}
		case 4:
			did = "delete (record, then removal) by another process"
			clearName(record)
			if _, _, err := other.Delete(k, now); err != nil && !strings.Contains(err.Error(), "directory") {
				t.Fatal(err)
			}
			reported = []string{record, entry}
		case 5:
			did = "record a deletion through the store"
			clearName(record)
			if err := s.MarkDeleted(k, now); err != nil {
				t.Fatal(err)
			}
		case 6:
			did = "forget a deletion through the store"
			if err := s.ForgetDeletion(k); err != nil && !errors.Is(err, syscall.EISDIR) && !errors.Is(err, syscall.EPERM) {
				t.Fatal(err)
			}
		case 7:
			did = "break an entry file"
			clearName(entry)
			if err := os.WriteFile(path(entry), []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
			reported = []string{entry}
		case 8:
			did = "a symlink or a directory where an entry or a record belongs"
			name := []string{entry, record}[rng.IntN(2)]
			clearName(name)
			var err error
			if rng.IntN(2) == 0 {
				err = os.Symlink("/etc/hostname", path(name))
			} else {
				err = os.Mkdir(path(name), 0o700)
			}
			if err != nil {
				t.Fatal(err)
			}
			reported = []string{name}
		case 9:
			did = "junk comes or goes"
			name := fmt.Sprintf("junk-%d.txt", rng.IntN(3))
			if _, err := os.Lstat(path(name)); err == nil {
				clearName(name)
			} else if err := os.WriteFile(path(name), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			reported = []string{name}
		case 10:
			did = "an entry removed by another process"
			clearName(entry)
			reported = []string{entry}
		case 11:
			did = "a write in progress (dot-file)"
			if err := os.WriteFile(path(fmt.Sprintf(".%s.tmp", entry)), []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
			reported = []string{"." + entry + ".tmp"}
		}
		for _, name := range reported {
			s.Changed(name)
		}
		got, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		want, err := NewEntryStore(dir).Scan()
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("step %d (%s on %s): the tracked scan differs from a listing (-listing +tracked):\n%s", step, did, k, d)
		}
		// The caller's to change: the next Scan must not see it.
		for i := range got.Entries {
			got.Entries[i].PodName = "scribbled"
		}
		for i := range got.Deleted {
			got.Deleted[i].IfName = "scribbled"
		}
	}
}

// TestTrackedScanDoesNotList: what nobody reported is not seen by a
// tracked Scan until it is reported (or the store is told it may have
// missed something): the listing is what a tracked Scan saves.
func TestTrackedScanDoesNotList(t *testing.T) {
	dir := t.TempDir()
	s, other := NewEntryStore(dir), NewEntryStore(dir)
	s.Track()
	if _, err := s.Scan(); err != nil {
		t.Fatal(err)
	}
	e := validEntry()
	if _, err := other.Write(e); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		l, err := s.Scan()
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Entries)
	}
	if n := count(); n != 0 {
		t.Errorf("a tracked scan found %d entries nobody reported, want 0 (it listed the directory)", n)
	}
	s.Changed(EntryFileName(e.Key()))
	if n := count(); n != 1 {
		t.Errorf("after Changed: %d entries, want 1", n)
	}
	if _, _, err := other.Delete(e.Key(), time.Now()); err != nil {
		t.Fatal(err)
	}
	s.Unsure()
	l, err := s.Scan()
	if err != nil || len(l.Entries) != 0 || len(l.Deleted) != 1 {
		t.Errorf("after Unsure: %d entries, %d records, %v; want the listing's 0 and 1", len(l.Entries), len(l.Deleted), err)
	}
}

// TestTrackedScanListsAfterAFailedOne: a Scan that cannot list the
// directory has taken the names reported before it; the next Scan lists,
// so nothing that changed meanwhile is missed.
func TestTrackedScanListsAfterAFailedOne(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	s, other := NewEntryStore(dir), NewEntryStore(dir)
	s.Track()
	if _, err := s.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // not a directory: no listing
		t.Fatal(err)
	}
	s.Changed("anything")
	if _, err := s.Scan(); err == nil {
		t.Fatal("a Scan of a file that is not a directory succeeded")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	e := validEntry()
	if _, err := other.Write(e); err != nil { // unreported
		t.Fatal(err)
	}
	l, err := s.Scan()
	if err != nil || len(l.Entries) != 1 {
		t.Errorf("the Scan after a failed one: %d entries, %v; want the entry written meanwhile (a listing)", len(l.Entries), err)
	}
}

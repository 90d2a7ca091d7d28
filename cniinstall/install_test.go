package cniinstall

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/enidnet/enid/internal/podkey"
)

// fakeELF is content checkExecutable accepts.
func fakeELF(tag string) []byte {
	return append([]byte("\x7fELF"), bytes.Repeat([]byte(tag), 1<<16)...)
}

const conflist = `{"cniVersion": "1.0.0", "name": "enid", "plugins": [{"type": "enid-cni"}]}`

// setup writes a source plugin and list and makes the destination dirs.
func setup(t *testing.T) (src, bin, conf string) {
	t.Helper()
	root := t.TempDir()
	src, bin, conf = filepath.Join(root, "src"), filepath.Join(root, "bin"), filepath.Join(root, "net.d")
	for _, d := range []string{src, bin, conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(src, PluginName), fakeELF("a"), 0o755)
	write(t, filepath.Join(src, ConflistName), []byte(conflist), 0o644)
	return src, bin, conf
}

func write(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		t.Fatal(err)
	}
}

func ensure(t *testing.T, f File) Change {
	t.Helper()
	ch, err := Ensure(f)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestEnsureIdempotent: the first run installs, the next ones change
// nothing (not even the mtime), a new source replaces, a wrong mode is put
// right.
func TestEnsureIdempotent(t *testing.T) {
	src, bin, conf := setup(t)
	plugin, list := Plugin(filepath.Join(src, PluginName), bin), Conflist(filepath.Join(src, ConflistName), conf)
	dst := filepath.Join(bin, PluginName)
	for _, f := range []File{plugin, list} {
		if ch := ensure(t, f); ch.Action != "installed" {
			t.Errorf("first run on %s: %s, want installed", f.Name, ch.Action)
		}
	}
	st, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("plugin mode %v, want 0755", st.Mode().Perm())
	}
	old := time.Unix(1_000_000, 0)
	if err := os.Chtimes(dst, old, old); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if ch := ensure(t, plugin); ch.Action != "unchanged" {
			t.Errorf("run %d: %s, want unchanged", i+2, ch.Action)
		}
		if ch := ensure(t, list); ch.Action != "unchanged" {
			t.Errorf("list run %d: %s, want unchanged", i+2, ch.Action)
		}
	}
	if st, err := os.Stat(dst); err != nil || !st.ModTime().Equal(old) {
		t.Errorf("an unchanged install rewrote the file (mtime %v, err %v)", st.ModTime(), err)
	}
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
	if ch := ensure(t, plugin); ch.Action != "replaced" {
		t.Errorf("after chmod 0644: %s, want replaced", ch.Action)
	}
	write(t, filepath.Join(src, PluginName), fakeELF("b"), 0o755)
	ch := ensure(t, plugin)
	got, _ := os.ReadFile(dst)
	if ch.Action != "replaced" || !bytes.Equal(got, fakeELF("b")) {
		t.Errorf("after a new source: %s, content new %v", ch.Action, bytes.Equal(got, fakeELF("b")))
	}
	left, _ := filepath.Glob(filepath.Join(bin, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestRenameIsTheOnlyChange watches the destination dir with inotify
// while the plugin is installed and replaced: the final name must appear
// only by a rename onto it (IN_MOVED_TO), never be created, opened for
// writing, written or chmodded in place, which is what a runtime exec'ing
// it could catch half done.
func TestRenameIsTheOnlyChange(t *testing.T) {
	src, bin, _ := setup(t)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, bin, unix.IN_CREATE|unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO|unix.IN_DELETE); err != nil {
		t.Fatal(err)
	}
	plugin := Plugin(filepath.Join(src, PluginName), bin)
	ensure(t, plugin) // installed
	ensure(t, plugin) // unchanged
	write(t, filepath.Join(src, PluginName), fakeELF("c"), 0o755)
	ensure(t, plugin) // replaced

	events := map[string][]uint32{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			events[name] = append(events[name], ev.Mask)
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	final := events[PluginName]
	if want := []uint32{unix.IN_MOVED_TO, unix.IN_MOVED_TO}; !slices.Equal(final, want) {
		t.Errorf("events on %s: %#x, want exactly two IN_MOVED_TO (install, replace; none for the unchanged run)", PluginName, final)
	}
	temps := 0
	for name, evs := range events {
		if name == PluginName {
			continue
		}
		if !strings.HasPrefix(name, "."+PluginName+".") || !strings.HasSuffix(name, ".tmp") {
			t.Errorf("unexpected file %q changed in the bin dir (%#x)", name, evs)
		}
		temps++
	}
	if temps != 2 {
		t.Errorf("%d temporary files were written, want 2 (one per write)", temps)
	}
}

// TestLeftoversOfAnInterruptedRunAreRemoved: a run killed before its
// rename leaves a partial temporary file; the final path still holds the
// old, complete binary, and the next run removes the leftover.
func TestLeftoversOfAnInterruptedRunAreRemoved(t *testing.T) {
	src, bin, _ := setup(t)
	plugin := Plugin(filepath.Join(src, PluginName), bin)
	ensure(t, plugin)
	leftover := filepath.Join(bin, strings.Replace(podkey.TempGlob(PluginName), "*", "123456", 1))
	write(t, leftover, fakeELF("a")[:100], 0o600) // what a killed copy leaves
	other := filepath.Join(bin, ".other.123.tmp")
	write(t, other, []byte("not ours"), 0o600)
	ch := ensure(t, plugin)
	if ch.Action != "unchanged" || !slices.Equal(ch.Removed, []string{leftover}) {
		t.Errorf("got %s, removed %v; want unchanged, removed [%s]", ch.Action, ch.Removed, leftover)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover %s still there: %v", leftover, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file not ours was removed: %v", err)
	}
	if !strings.Contains(ch.String(), "removed leftovers") {
		t.Errorf("the change does not say it removed a leftover: %s", ch)
	}
}

// TestErrorsNameThePathAndTheFix feeds every kind of wrong input.
func TestErrorsNameThePathAndTheFix(t *testing.T) {
	src, bin, conf := setup(t)
	notELF := filepath.Join(src, "script")
	write(t, notELF, []byte("#!/bin/sh\n"), 0o755)
	badList := filepath.Join(src, "bad.conflist")
	write(t, badList, []byte(`{"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "bridge"}]}`), 0o644)
	notJSON := filepath.Join(src, "broken.conflist")
	write(t, notJSON, []byte(`{"cniVersion": `), 0o644)
	if err := os.Mkdir(filepath.Join(conf, ConflistName), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(src, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		f    File
		want []string
	}{
		{"missing source", Plugin(filepath.Join(src, "nope"), bin), []string{filepath.Join(src, "nope"), "run this from the enid image"}},
		{"source is a FIFO", Plugin(fifo, bin), []string{fifo, "regular file"}},
		{"source is not a binary", Plugin(notELF, bin), []string{notELF, "not an ELF executable"}},
		{"list without enid-cni", Conflist(badList, conf), []string{badList, `no entry of "type": "enid-cni"`}},
		{"list not JSON", Conflist(notJSON, conf), []string{notJSON, "not JSON"}},
		{"missing dir", Plugin(filepath.Join(src, PluginName), filepath.Join(bin, "nope")), []string{filepath.Join(bin, "nope"), "does not exist", "bin_dir"}},
		{"dir is a file", Plugin(filepath.Join(src, PluginName), filepath.Join(src, ConflistName)), []string{"is not a directory"}},
		{"destination is a dir", Conflist(filepath.Join(src, ConflistName), conf), []string{filepath.Join(conf, ConflistName), "is a directory: remove it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Ensure(tt.f)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if verr := tt.f.Validate(); verr == nil && !strings.Contains(tt.name, "destination") {
				t.Errorf("Validate accepts what Ensure refuses")
			}
		})
	}
	t.Run("read-only dir", func(t *testing.T) {
		ro := readOnlyDir(t)
		_, err := Ensure(Plugin(filepath.Join(src, PluginName), ro))
		if err == nil {
			t.Fatal("no error writing into a read-only dir")
		}
		// Root meets the read-only mount (EROFS), others the mode (EACCES).
		msg := err.Error()
		if !strings.Contains(msg, ro) || !(strings.Contains(msg, "is read-only: mount the host directory read-write") ||
			strings.Contains(msg, "no permission to write "+ro)) {
			t.Errorf("error %q does not name %s and the fix", err, ro)
		}
		if left, _ := filepath.Glob(filepath.Join(ro, ".*")); len(left) > 0 {
			t.Errorf("left %v", left)
		}
	})
}

// readOnlyDir returns a directory no write succeeds in: a read-only bind
// mount as root (root ignores permission bits), else mode 0555.
func readOnlyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) }) // so TempDir's cleanup can remove it
		return dir
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount for a read-only dir: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Skipf("remount %s read-only: %v", dir, err)
	}
	return dir
}

func TestCheckConflistOnTheShippedList(t *testing.T) {
	b, err := os.ReadFile("../examples/cni/" + ConflistName)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckConflist(b); err != nil {
		t.Errorf("examples/cni/%s: %v", ConflistName, err)
	}
}

package podkey

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces path with data so that a reader sees either the
// old content or the new, never a mix, and the new content survives a crash
// once the call returns: it writes a temporary file in the same directory,
// fsyncs it, renames it over path and fsyncs the directory. The temporary
// file's name starts with a dot and ends in ".tmp" so directory readers can
// skip it. perm is applied to the file whatever the umask.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, TempGlob(base))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			// Best effort: the temporary file is garbage either way, and the
			// write error already returned says what went wrong.
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	ok = true
	return SyncDir(dir)
}

// TempGlob is the name pattern of WriteFileAtomic's temporary files for a
// file named base: a dot, base, a random part, ".tmp". os.CreateTemp
// replaces the "*", and filepath.Glob matches the leftovers of writes that
// were killed before their rename.
func TempGlob(base string) string { return "." + base + ".*.tmp" }

// SyncDir makes a rename or removal in dir durable (fsync of the directory).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, serr)
	}
	if cerr != nil {
		return fmt.Errorf("close dir %s: %w", dir, cerr)
	}
	return nil
}

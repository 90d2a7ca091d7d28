package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// layerFile is one regular file of the layer.
type layerFile struct {
	// path is absolute, slash-separated.
	path string
	mode fs.FileMode
	data []byte
}

// layerTar writes files as one uncompressed tar, the same bytes for the
// same files whatever their order or the clock: every parent directory
// gets its own entry (0755), entries are sorted by path, every entry is
// owned by root and stamped with epoch, in the USTAR format (no PAX
// records with access or change times).
func layerTar(files []layerFile, epoch time.Time) ([]byte, error) {
	type entry struct {
		name string
		file *layerFile
	}
	seen := map[string]bool{}
	var entries []entry
	for i := range files {
		f := &files[i]
		if !strings.HasPrefix(f.path, "/") || path.Clean(f.path) != f.path {
			return nil, fmt.Errorf("layer path %q: want a clean absolute path", f.path)
		}
		name := strings.TrimPrefix(f.path, "/")
		if seen[name] {
			return nil, fmt.Errorf("layer path %q twice", f.path)
		}
		seen[name] = true
		entries = append(entries, entry{name: name, file: f})
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if !seen[dir+"/"] {
				seen[dir+"/"] = true
				entries = append(entries, entry{name: dir + "/"})
			}
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, ModTime: epoch, Format: tar.FormatUSTAR, Uid: 0, Gid: 0}
		if e.file == nil {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		} else {
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, int64(e.file.mode.Perm()), int64(len(e.file.data))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if e.file != nil {
			if _, err := w.Write(e.file.data); err != nil {
				return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

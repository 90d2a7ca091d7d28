// Package ociimage writes one-layer OCI images from files in memory, the
// same bytes for the same files and time: the layer tar, the image on an
// empty base, and the docker-archive tarball (what `docker save` writes,
// what `ctr images import` and `docker load` read). The image builder
// (./image) and the real-cluster harness's test images use it. A leaf over
// go-containerregistry.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one regular file of a layer.
type File struct {
	// Path is absolute, slash-separated.
	Path string
	Mode fs.FileMode
	Data []byte
}

// LayerTar writes files as one uncompressed tar, the same bytes for the
// same files whatever their order or the clock: every parent directory
// gets its own entry (0755), entries are sorted by path, every entry is
// owned by root and stamped with epoch, in the USTAR format (no PAX
// records with access or change times).
func LayerTar(files []File, epoch time.Time) ([]byte, error) {
	type entry struct {
		name string
		file *File
	}
	seen := map[string]bool{}
	var entries []entry
	for i := range files {
		f := &files[i]
		if !strings.HasPrefix(f.Path, "/") || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("layer path %q: want a clean absolute path", f.Path)
		}
		name := strings.TrimPrefix(f.Path, "/")
		if seen[name] {
			return nil, fmt.Errorf("layer path %q twice", f.Path)
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
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, int64(e.file.Mode.Perm()), int64(len(e.file.Data))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if e.file != nil {
			if _, err := w.Write(e.file.Data); err != nil {
				return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Spec is what an image says besides its files.
type Spec struct {
	// Arch is the GOARCH the image is for (the OS is linux).
	Arch string
	// Epoch is stamped on the layer's entries and as the image's creation.
	Epoch time.Time
	// Config is the runtime config (entrypoint, env, labels).
	Config v1.Config
	// CreatedBy is the history line of the layer.
	CreatedBy string
}

// Assemble makes the one-layer OCI image of files on an empty base.
func Assemble(files []File, s Spec) (v1.Image, error) {
	tarBytes, err := LayerTar(files, s.Epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	created := v1.Time{Time: s.Epoch}
	cfg := &v1.ConfigFile{Architecture: s.Arch, OS: "linux", Created: created, Config: s.Config,
		RootFS: v1.RootFS{Type: "layers"}}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: created, CreatedBy: s.CreatedBy}})
}

// WriteTarball writes img as a docker-archive (what `docker save` writes:
// manifest.json naming tag, the config, the layer) to path, by rename.
func WriteTarball(path string, tag name.Reference, img v1.Image) (int64, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // gone after the rename; a leftover otherwise
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return 0, err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	return st.Size(), nil
}

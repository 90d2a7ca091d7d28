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
	"compress/gzip"
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

// File is one entry of a layer: a regular file, or a directory when Mode
// has fs.ModeDir, or a symbolic link when Link is set.
type File struct {
	// Path is absolute, slash-separated.
	Path string
	// Mode's permission bits are the entry's; of its other bits only
	// fs.ModeDir (a directory with no files, such as a mount point) and,
	// on a directory, fs.ModeSticky count.
	Mode fs.FileMode
	// Data is a regular file's content.
	Data []byte
	// Link, when set, makes the entry a symbolic link to Link (Mode and
	// Data are then unused): one binary under many names, as busybox is.
	Link string
}

// LayerTar writes files as one uncompressed tar, the same bytes for the
// same files whatever their order or the clock: every parent directory
// gets its own entry (0755 unless files name it), entries are sorted by
// path, every entry is owned by root and stamped with epoch, in the USTAR
// format (no PAX records with access or change times).
func LayerTar(files []File, epoch time.Time) ([]byte, error) {
	type entry struct {
		name string
		file *File // nil for a parent no file names
	}
	byName := map[string]bool{}
	var entries []entry
	for i := range files {
		f := &files[i]
		if !strings.HasPrefix(f.Path, "/") || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("layer path %q: want a clean absolute path", f.Path)
		}
		name := strings.TrimPrefix(f.Path, "/")
		if f.Link == "" && f.Mode.IsDir() {
			name += "/"
		}
		if byName[strings.TrimSuffix(name, "/")] {
			return nil, fmt.Errorf("layer path %q twice", f.Path)
		}
		byName[strings.TrimSuffix(name, "/")] = true
		entries = append(entries, entry{name: name, file: f})
	}
	for _, e := range slices.Clone(entries) {
		for dir := path.Dir(strings.TrimSuffix(e.name, "/")); dir != "."; dir = path.Dir(dir) {
			if !byName[dir] {
				byName[dir] = true
				entries = append(entries, entry{name: dir + "/"})
			}
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	// Sized once: a layer of the upstream suite's images is hundreds of
	// megabytes, and a buffer grown by doubling copies and clears it over
	// and over. A tar entry is a 512-byte header and its data padded to
	// 512 bytes; the end is two zero blocks (USTAR: no extended headers).
	size := 1024
	for _, e := range entries {
		size += 512
		if e.file != nil && e.file.Link == "" && !e.file.Mode.IsDir() {
			size += (len(e.file.Data) + 511) &^ 511
		}
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	w := tar.NewWriter(buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, ModTime: epoch, Format: tar.FormatUSTAR, Uid: 0, Gid: 0}
		switch {
		case e.file == nil:
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case e.file.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.file.Link, 0o777
		case e.file.Mode.IsDir():
			h.Typeflag, h.Mode = tar.TypeDir, int64(e.file.Mode.Perm())
			if e.file.Mode&fs.ModeSticky != 0 { // /tmp: anyone writes, only owners delete
				h.Mode |= 0o1000
			}
		default:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, int64(e.file.Mode.Perm()), int64(len(e.file.Data))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if h.Typeflag == tar.TypeReg {
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
	// Stored writes the layer's gzip stream without compressing it
	// (deflate's stored blocks: a valid tar+gzip layer as large as its
	// tar). For the test beds' images, which a local containerd imports
	// at once: compressing them costs time and saves nothing, and under
	// the race detector, which instruments compress/flate, minutes (the
	// upstream suite's images: 276 s for two builds with compression, by
	// docs/testing.md). A release image (image/) is compressed.
	Stored bool
}

// Assemble makes the one-layer OCI image of files on an empty base.
func Assemble(files []File, s Spec) (v1.Image, error) {
	tarBytes, err := LayerTar(files, s.Epoch)
	if err != nil {
		return nil, err
	}
	opts := []tarball.LayerOption{tarball.WithMediaType(types.OCILayer)}
	if s.Stored {
		opts = append(opts, tarball.WithCompressionLevel(gzip.NoCompression))
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, opts...)
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

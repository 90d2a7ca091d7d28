package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// result is what build made.
type result struct {
	src source
	// tag names the image in the tarball; pushed is the pushed reference
	// (nil: not pushed).
	tag, pushed name.Reference
	img         v1.Image
	// manifest and config are the image's digests (config's is what
	// `docker images` shows as the image ID).
	manifest, config v1.Hash
	// tarSize is the tarball's size in bytes (0: none written).
	tarSize int64
}

// build builds the binaries, assembles the image and writes and pushes it
// as o says.
func build(ctx context.Context, o options) (*result, error) {
	src, err := readSource(ctx, o)
	if err != nil {
		return nil, err
	}
	tag, err := name.NewTag(o.repo + ":" + src.version)
	if err != nil {
		return nil, fmt.Errorf("--repo %s: %w", o.repo, err)
	}
	var pushTo name.Reference
	if o.push != "" {
		if pushTo, err = name.NewTag(o.push + ":" + src.version); err != nil {
			return nil, fmt.Errorf("--push %s: want REGISTRY/REPO: %w", o.push, err)
		}
	}
	tmp, err := os.MkdirTemp("", "enid-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bins, err := buildBinaries(ctx, o, src, tmp)
	if err != nil {
		return nil, err
	}
	files, err := imageFiles(o, bins)
	if err != nil {
		return nil, err
	}
	img, err := assemble(files, src, o.arch)
	if err != nil {
		return nil, err
	}
	r := &result{src: src, tag: tag, img: img}
	if r.manifest, err = img.Digest(); err != nil {
		return nil, err
	}
	if r.config, err = img.ConfigName(); err != nil {
		return nil, err
	}
	if o.output != "" {
		if r.tarSize, err = writeTarball(o.output, tag, img); err != nil {
			return nil, err
		}
	}
	if pushTo != nil {
		if err := r.push(ctx, pushTo); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// push sends the image to ref, with the credentials docker login stored.
func (r *result) push(ctx context.Context, ref name.Reference) error {
	if err := remote.Write(ref, r.img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w (log in with `docker login %s`, or check the name)", ref, err, ref.Context().RegistryStr())
	}
	r.pushed = ref
	return nil
}

// assemble makes the one-layer OCI image of files on an empty base.
func assemble(files []layerFile, src source, arch string) (v1.Image, error) {
	tarBytes, err := layerTar(files, src.epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	created := v1.Time{Time: src.epoch}
	labels := map[string]string{
		"org.opencontainers.image.title":   "enid",
		"org.opencontainers.image.version": src.version,
		"org.opencontainers.image.source":  "https://github.com/enidnet/enid",
		"org.opencontainers.image.created": src.epoch.Format(time.RFC3339),
	}
	if src.revision != "" {
		labels["org.opencontainers.image.revision"] = src.revision
	}
	cfg := &v1.ConfigFile{
		Architecture: arch, OS: "linux", Created: created,
		Config: v1.Config{
			// `docker run IMAGE version`, `ctr run IMAGE ID enid version`;
			// the manifests name the command (`enid run`).
			Entrypoint: []string{binDir + "/enid"},
			Env:        []string{"PATH=" + binDir},
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	base, err = mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: created, CreatedBy: "go run ./image (enid " + src.version + ")"}})
}

// writeTarball writes img as a docker-archive (what `docker save` writes:
// manifest.json naming tag, the config, the layer) to path, by rename.
func writeTarball(path string, tag name.Reference, img v1.Image) (int64, error) {
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

// print says what was built and how to use it.
func (r *result) print(w io.Writer, o options) {
	fmt.Fprintf(w, "enid image %s (linux/%s, enid %s", r.tag, o.arch, r.src.version)
	if r.src.revision != "" {
		fmt.Fprintf(w, " at %s", r.src.revision)
	}
	fmt.Fprintf(w, ")\n  manifest %s\n  config   %s (the image ID docker shows)\n", r.manifest, r.config)
	if o.output != "" {
		fmt.Fprintf(w, "  wrote %s (%.1f MB)\n\nLoad it on a node:\n  ctr -n k8s.io images import %s\n  docker load -i %s\n",
			o.output, float64(r.tarSize)/1e6, o.output, o.output)
	}
	if r.pushed != nil {
		fmt.Fprintf(w, "  pushed %s@%s\n", r.pushed, r.manifest)
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/enidnet/enid/internal/ociimage"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
		if r.tarSize, err = ociimage.WriteTarball(o.output, tag, img); err != nil {
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
func assemble(files []ociimage.File, src source, arch string) (v1.Image, error) {
	labels := map[string]string{
		"org.opencontainers.image.title":   "enid",
		"org.opencontainers.image.version": src.version,
		"org.opencontainers.image.source":  "https://github.com/enidnet/enid",
		"org.opencontainers.image.created": src.epoch.Format(time.RFC3339),
	}
	if src.revision != "" {
		labels["org.opencontainers.image.revision"] = src.revision
	}
	return ociimage.Assemble(files, ociimage.Spec{Arch: arch, Epoch: src.epoch,
		Config: v1.Config{
			// `docker run IMAGE version`, `ctr run IMAGE ID enid version`;
			// the manifests name the command (`enid run`).
			Entrypoint: []string{binDir + "/enid"},
			Env:        []string{"PATH=" + binDir},
			WorkingDir: "/",
			Labels:     labels,
		},
		CreatedBy: "go run ./image (enid " + src.version + ")"})
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

package main

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/enidnet/enid/cniinstall"
	"github.com/enidnet/enid/internal/ociimage"
)

// defaultRepo is where enid's images are named; examples/kubernetes names
// defaultRepo:<VERSION> (TestManifestsNameTheImage).
const defaultRepo = "ghcr.io/enidnet/enid"

// defaultCACerts is Debian's and Ubuntu's CA bundle, at the first path Go's
// crypto/x509 looks at on Linux: the agent finds it there in the image.
const defaultCACerts = "/etc/ssl/certs/ca-certificates.crt"

// binDir is where the image carries enid and enid-cni (on its PATH).
const binDir = "/usr/local/bin"

// options are the builder's inputs (main fills them from flags).
type options struct {
	// src is the module root to build.
	src string
	// version overrides the VERSION file ("": use it).
	version string
	// repo names the tarball's image; output is the tarball ("": none).
	repo, output string
	// push is a REGISTRY/REPO to push to ("": none).
	push string
	// arch is the GOARCH to build for.
	arch string
	// caCerts is the CA bundle to carry ("none": none).
	caCerts string
	// epoch is the time stamped on everything; nil: the commit's time.
	epoch *time.Time
}

// source is what the image is built from, read from the tree.
type source struct {
	version string
	// revision is the commit ("" outside git), with "-dirty" when the tree
	// has changes.
	revision string
	// epoch is the time stamped on the image.
	epoch time.Time
}

// versionRE is a tag an OCI registry accepts (the distribution spec's).
var versionRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// readSource reads the version, revision and time of the tree at o.src.
func readSource(ctx context.Context, o options) (source, error) {
	s := source{version: o.version}
	if s.version == "" {
		b, err := os.ReadFile(filepath.Join(o.src, "VERSION"))
		if err != nil {
			return s, fmt.Errorf("read the version: %w (run from the repository's root, pass --src, or --version)", err)
		}
		s.version = strings.TrimSpace(string(b))
	}
	if !versionRE.MatchString(s.version) {
		return s, fmt.Errorf("version %q is not a valid image tag (letters, digits, _ . -, at most 128)", s.version)
	}
	rev, err := git(ctx, o.src, "rev-parse", "HEAD")
	if err == nil {
		s.revision = rev
		if st, err := git(ctx, o.src, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
			s.revision += "-dirty"
		}
	}
	switch {
	case o.epoch != nil:
		s.epoch = *o.epoch
	case s.revision != "":
		ct, err := git(ctx, o.src, "log", "-1", "--format=%ct")
		if err != nil {
			return s, err
		}
		sec, err := strconv.ParseInt(ct, 10, 64)
		if err != nil {
			return s, fmt.Errorf("commit time %q: %w", ct, err)
		}
		s.epoch = time.Unix(sec, 0).UTC()
	default:
		s.epoch = time.Unix(0, 0).UTC() // no commit to date it by: a fixed time all the same
	}
	return s, nil
}

// git runs git in dir and returns its trimmed stdout.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// buildBinaries builds enid and enid-cni for linux/arch into dir, static
// and reproducible, with the version and commit linked in, and returns
// their contents.
func buildBinaries(ctx context.Context, o options, src source, dir string) (map[string][]byte, error) {
	// -trimpath: no path of this machine in the binaries. -s -w: no symbol
	// table or DWARF (a third of the size; panics keep their stacks).
	// -buildvcs=false: whether Go stamps VCS facts depends on the checkout
	// (none in a git worktree) and the machine's go env; the commit is
	// linked in by name instead, for `enid version`.
	ldflags := "-s -w -X main.version=" + src.version
	if src.revision != "" {
		ldflags += " -X main.revision=" + src.revision
	}
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", dir + string(filepath.Separator),
		"./cmd/enid", "./cmd/" + cniinstall.PluginName}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.src
	cmd.Env = buildEnv(os.Environ(), o.arch)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), o.src, err, out.String())
	}
	bins := map[string][]byte{}
	for _, name := range []string{"enid", cniinstall.PluginName} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if err := checkStatic(name, b); err != nil {
			return nil, err
		}
		bins[name] = b
	}
	return bins, nil
}

// buildEnv is env for a static, reproducible linux/arch build: cgo off (no
// libc to find in an empty image), and none of the caller's GOFLAGS, which
// could change what is built (-race, -cover, tags).
func buildEnv(env []string, arch string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "CGO_ENABLED", "GOOS", "GOARCH", "GOFLAGS":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
}

// checkStatic refuses a binary that asks for a dynamic loader: in an image
// without libc it could not start.
func checkStatic(name string, b []byte) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: not an ELF binary: %w", name, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0", name)
		}
	}
	return nil
}

// imageFiles are the files of the image's one layer.
func imageFiles(o options, bins map[string][]byte) ([]ociimage.File, error) {
	list, err := os.ReadFile(filepath.Join(o.src, "examples", "cni", cniinstall.ConflistName))
	if err != nil {
		return nil, fmt.Errorf("read the CNI network list: %w", err)
	}
	if err := cniinstall.CheckConflist(list); err != nil {
		return nil, fmt.Errorf("examples/cni/%s: %w", cniinstall.ConflistName, err)
	}
	files := []ociimage.File{
		{Path: binDir + "/enid", Mode: 0o755, Data: bins["enid"]},
		{Path: binDir + "/" + cniinstall.PluginName, Mode: 0o755, Data: bins[cniinstall.PluginName]},
		{Path: cniinstall.ImageConflist, Mode: 0o644, Data: list},
	}
	if o.caCerts != "none" {
		ca, err := readCACerts(o.caCerts)
		if err != nil {
			return nil, err
		}
		files = append(files, ociimage.File{Path: defaultCACerts, Mode: 0o644, Data: ca})
	}
	return files, nil
}

// readCACerts reads a PEM CA bundle.
func readCACerts(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CA bundle %s does not exist: install ca-certificates (apt-get install ca-certificates), "+
			"pass --ca-certs FILE, or --ca-certs none for an image that cannot reach the ECS API over HTTPS", path)
	}
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("CA bundle %s: %w", path, err)
	}
	if !bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate: pass a PEM bundle with --ca-certs", path)
	}
	return b, nil
}

package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/enidnet/enid/internal/ociimage"
)

// The pod images the cluster imports: the sandbox ("pause") image
// containerd's CRI starts first in every pod, and the workload the tests
// run (testbed/podserver). No registry is reachable: both are built here.
const (
	PauseImage     = "enid.test/pause:1"
	PodServerImage = "enid.test/podserver:1"
)

// EnidRepo is the repository ./image names its image in.
const EnidRepo = "ghcr.io/enidnet/enid"

// ModuleRoot is the enid module's root (where go.mod is), found from the
// test's working directory.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		t.Fatalf("find the module root: %v %s", err, out)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func goTool() string { return filepath.Join(runtime.GOROOT(), "bin", "go") }

// buildPodImages builds podserver static and writes the pause and
// podserver images, and returns their tarballs.
func (c *Cluster) buildPodImages() []string {
	c.t.Helper()
	dir := filepath.Join(c.Dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	bin := filepath.Join(dir, "podserver")
	cmd := exec.Command(goTool(), "build", "-trimpath", "-o", bin, "./testbed/podserver")
	cmd.Dir = ModuleRoot(c.t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("build podserver: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		c.t.Fatal(err)
	}
	pause := filepath.Join(dir, "pause.tar")
	server := filepath.Join(dir, "podserver.tar")
	for _, im := range []struct{ path, tag, mode string }{{pause, PauseImage, "pause"}, {server, PodServerImage, "serve"}} {
		if err := writeImage(im.path, im.tag, data, im.mode); err != nil {
			c.t.Fatal(err)
		}
	}
	return []string{pause, server}
}

// writeImage writes a one-file image of podserver running in mode.
func writeImage(path, tag string, podserver []byte, mode string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	img, err := ociimage.Assemble([]ociimage.File{{Path: "/podserver", Mode: 0o755, Data: podserver}},
		ociimage.Spec{Arch: runtime.GOARCH, Epoch: time.Unix(0, 0).UTC(), CreatedBy: "testbed/cluster", Stored: true,
			Config: v1.Config{Entrypoint: []string{"/podserver", mode}, WorkingDir: "/"}})
	if err != nil {
		return fmt.Errorf("image %s: %w", tag, err)
	}
	_, err = ociimage.WriteTarball(path, ref, img)
	return err
}

// EnidImage builds the image of the enid tree at src with `go run ./image`
// (the builder of this tree) tagged version ("": the tree's VERSION, as an
// operator builds it) into dir, and returns the tarball and the image's
// name. It takes seconds with a warm Go cache, minutes cold.
func EnidImage(t testing.TB, src, version, dir string) (tarball, image string) {
	t.Helper()
	root := ModuleRoot(t)
	tarball = filepath.Join(dir, "enid-"+filepath.Base(src)+".tar")
	args := []string{"run", "./image", "--src", src, "--output", tarball}
	if version != "" {
		args = append(args, "--version", version)
	}
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./image --src %s: %v\n%s", src, err, out)
	}
	if version == "" {
		b, err := os.ReadFile(filepath.Join(src, "VERSION"))
		if err != nil {
			t.Fatal(err)
		}
		version = strings.TrimSpace(string(b))
	}
	return tarball, EnidRepo + ":" + version
}

// Checkout writes the tree of an earlier commit of the repository at root
// into dir (git archive: no .git, nothing of the work tree's) and returns
// its path.
func Checkout(t testing.TB, root, commit, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, "src-"+commit)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive --format=tar %q | tar -x -C %q", root, commit, dst))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("check out %s: %v\n%s", commit, err, out)
	}
	return dst
}

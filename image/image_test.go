package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

// built is one build of the image from this tree, shared by the tests
// that need one (a build links enid and enid-cni: seconds warm, minutes
// on a cold Go cache).
type built struct {
	once sync.Once
	res  *result
	tar  string
	err  error
}

var shared built //nolint:gochecknoglobals // built once per test binary, read-only after

// buildOnce builds the image from the repository (..) into a temp tarball.
func buildOnce(t *testing.T) (*result, string) {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "enid-image-test-")
		if err != nil {
			shared.err = err
			return
		}
		// Left for the process: every test of this binary may read it.
		shared.tar = filepath.Join(dir, "enid-image.tar")
		shared.res, shared.err = build(context.Background(), testOptions(shared.tar))
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.res, shared.tar
}

func testOptions(output string) options {
	return options{src: "..", repo: defaultRepo, output: output, arch: runtime.GOARCH, caCerts: caCertsForTest()}
}

// caCertsForTest is the default bundle where the machine has one.
func caCertsForTest() string {
	if _, err := os.Stat(defaultCACerts); err != nil {
		return "none"
	}
	return defaultCACerts
}

// TestBuildIsReproducible builds the image a second time, into another
// place at another time: the tarball must be the same bytes. The binaries
// must be static and hold no path of this machine (-trimpath), and the
// version linked in must be VERSION.
func TestBuildIsReproducible(t *testing.T) {
	res, tarPath := buildOnce(t)
	again := filepath.Join(t.TempDir(), "again.tar")
	res2, err := build(context.Background(), testOptions(again))
	if err != nil {
		t.Fatal(err)
	}
	if res.manifest != res2.manifest || res.config != res2.config {
		t.Errorf("two builds of one tree: manifest %s and %s, config %s and %s", res.manifest, res2.manifest, res.config, res2.config)
	}
	if a, b := fileSum(t, tarPath), fileSum(t, again); a != b {
		t.Errorf("two builds of one tree wrote different tarballs (sha256 %x, %x)", a, b)
	}
	v, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if res.src.version != strings.TrimSpace(string(v)) {
		t.Errorf("version %q, VERSION says %q", res.src.version, v)
	}
	abs, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range layerFiles(t, tarPath) {
		if !strings.HasPrefix(f.name, "usr/local/bin/") || f.typ != tar.TypeReg {
			continue
		}
		if bytes.Contains(f.data, []byte(abs)) {
			t.Errorf("%s holds the build machine's path %s: built without -trimpath?", f.name, abs)
		}
		ef, err := elf.NewFile(bytes.NewReader(f.data))
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		for _, p := range ef.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", f.name)
			}
		}
		if f.name == "usr/local/bin/enid" && !bytes.Contains(f.data, []byte(res.src.version)) {
			t.Errorf("enid does not carry its version %s", res.src.version)
		}
	}
	if err := checkStatic("x", []byte("not elf")); err == nil {
		t.Error("checkStatic accepts a non-ELF file")
	}
}

// TestTarballIsADockerArchive reads the tarball back as docker load and
// ctr import do: manifest.json names the tag, the config says what runs,
// the layer holds exactly the image's files.
func TestTarballIsADockerArchive(t *testing.T) {
	res, tarPath := buildOnce(t)
	manifest := tarEntry(t, tarPath, "manifest.json")
	var m []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{res.tag.String()}) || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json %s: want one image tagged %s with one layer", manifest, res.tag)
	}
	tag, err := name.NewTag(res.tag.String())
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/enid"}) || !slices.Contains(cf.Config.Env, "PATH=/usr/local/bin") ||
		cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("config: entrypoint %q env %q platform %s/%s", cf.Config.Entrypoint, cf.Config.Env, cf.OS, cf.Architecture)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != res.src.version || !cf.Created.Time.Equal(res.src.epoch) {
		t.Errorf("labels %v created %v, want version %s and the commit's time %v", cf.Config.Labels, cf.Created, res.src.version, res.src.epoch)
	}
	var names []string
	for _, f := range layerFiles(t, tarPath) {
		if f.typ == tar.TypeReg {
			names = append(names, f.name)
		}
	}
	want := []string{"usr/local/bin/enid", "usr/local/bin/enid-cni", "usr/share/enid/cni/10-enid.conflist"}
	if caCertsForTest() != "none" {
		want = append([]string{"etc/ssl/certs/ca-certificates.crt"}, want...)
	}
	if !slices.Equal(names, want) {
		t.Errorf("files %q, want %q", names, want)
	}
	shipped, err := os.ReadFile("../examples/cni/10-enid.conflist")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range layerFiles(t, tarPath) {
		if f.name == "usr/share/enid/cni/10-enid.conflist" && !bytes.Equal(f.data, shipped) {
			t.Error("the image's conflist is not examples/cni/10-enid.conflist")
		}
	}
}

// TestPushToARegistry pushes to a registry (go-containerregistry's, in
// process, over HTTP) and pulls the image back by its tag.
func TestPushToARegistry(t *testing.T) {
	res, _ := buildOnce(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/team/enid"
	ref, err := name.NewTag(repo + ":" + res.src.version)
	if err != nil {
		t.Fatal(err)
	}
	pushed := *res // the shared result stays unpushed
	if err := pushed.push(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	o := testOptions("")
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if d, _ := img.Digest(); d != res.manifest {
		t.Errorf("pulled %s, pushed %s", d, res.manifest)
	}
	var out bytes.Buffer
	pushed.print(&out, o)
	if !strings.Contains(out.String(), "pushed "+ref.String()+"@"+res.manifest.String()) {
		t.Errorf("output does not say what was pushed:\n%s", out.String())
	}
}

// TestManifestsNameTheImage: every image examples/kubernetes names is the
// one this builder tags by default, defaultRepo:<VERSION>.
func TestManifestsNameTheImage(t *testing.T) {
	v, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	want := defaultRepo + ":" + strings.TrimSpace(string(v))
	files, err := filepath.Glob("../examples/kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			img, ok := strings.CutPrefix(strings.TrimSpace(line), "image: ")
			if !ok {
				continue
			}
			found++
			if img != want {
				t.Errorf("%s names image %s, the builder tags %s", f, img, want)
			}
		}
	}
	if found < 3 {
		t.Errorf("found %d images in examples/kubernetes, want the agent's, install-cni's and the sweep's", found)
	}
	var k struct {
		Images []struct{ Name, NewName, NewTag string }
	}
	b, err := os.ReadFile("../examples/kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	for _, i := range k.Images {
		if got := i.Name + ":" + i.NewTag; i.NewName != "" || got != want {
			t.Errorf("kustomization images: %s (newName %q), the builder tags %s", got, i.NewName, want)
		}
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// tarEntry returns one file of a tar.
func tarEntry(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if err != nil {
			t.Fatalf("%s in %s: %v", name, path, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

type tarFile struct {
	name string
	typ  byte
	data []byte
}

// layerFiles lists the files of the tarball's one layer.
func layerFiles(t *testing.T, tarPath string) []tarFile {
	t.Helper()
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out []tarFile
	r := tar.NewReader(rc)
	for {
		h, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarFile{name: h.Name, typ: h.Typeflag, data: b})
	}
}

package clusterdns

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/enidnet/enid/kube/kubetest"
)

// TestImage builds the image from build.sh's coredns and reads it back as
// containerd's import would: the tag, the entrypoint and arguments, and
// /coredns byte for byte the binary. Built twice, it is the same bytes.
func TestImage(t *testing.T) {
	bin := corednsBin(t)
	ctx := context.Background()
	dir := t.TempDir()
	path, image, err := Image(ctx, dir, kubetest.BinDir())
	if err != nil {
		t.Fatal(err)
	}
	version, err := Version(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if image != Repository+":"+version {
		t.Errorf("image %s, want %s:%s", image, Repository, version)
	}
	tag, err := name.NewTag(image)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("the tarball has no image %s: %v", image, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"/coredns", "-conf", "/etc/coredns/Corefile"}, append(cfg.Config.Entrypoint, cfg.Config.Cmd...)); d != "" {
		t.Errorf("entrypoint and command (-want +got):\n%s", d)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(rc)
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if h.Name != "coredns" && h.Name != "/coredns" {
			continue
		}
		got, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		found = bytes.Equal(got, want) && h.Mode&0o111 != 0
		if !found {
			t.Errorf("/coredns in the image: %d bytes, mode %o; want the %d bytes of %s, executable", len(got), h.Mode, len(want), bin)
		}
	}
	if !found {
		t.Error("the image has no /coredns")
	}

	again, _, err := Image(ctx, filepath.Join(dir, "again"), kubetest.BinDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err1 := os.ReadFile(path)
	b, err2 := os.ReadFile(again)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two builds of the image from one binary differ")
	}
}

// TestVersion reads what a binary says to -version.
func TestVersion(t *testing.T) {
	for _, tc := range []struct {
		name, out, want string
	}{
		{"coredns", "CoreDNS-1.14.6\nlinux/amd64, go1.26.8, \n", "v1.14.6"},
		{"other", "etcd Version: 3.7.0\n", ""},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "coredns")
			script := "#!/bin/sh\nprintf '%s' '" + tc.out + "'\n"
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := Version(context.Background(), bin)
			if tc.want == "" {
				if err == nil {
					t.Errorf("Version = %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Version = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

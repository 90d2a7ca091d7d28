package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"testing"
	"time"
)

// TestLayerIsDeterministic: the same files in another order give the same
// bytes; parents come first, sorted, owned by root, stamped with epoch.
func TestLayerIsDeterministic(t *testing.T) {
	epoch := time.Unix(1_700_000_000, 0).UTC()
	files := []File{
		{Path: "/usr/local/bin/enid", Mode: 0o755, Data: []byte("agent")},
		{Path: "/usr/share/enid/cni/10-enid.conflist", Mode: 0o644, Data: []byte("{}")},
		{Path: "/usr/local/bin/enid-cni", Mode: 0o755, Data: []byte("plugin")},
	}
	a, err := LayerTar(files, epoch)
	if err != nil {
		t.Fatal(err)
	}
	rev := slices.Clone(files)
	slices.Reverse(rev)
	b, err := LayerTar(rev, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the layer depends on the order the files are given in")
	}
	var names []string
	r := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v uid %d gid %d %q/%q, want epoch and root", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if want := map[string]int64{"usr/local/bin/enid": 0o755, "usr/share/enid/cni/10-enid.conflist": 0o644}[h.Name]; want != 0 && h.Mode != want {
			t.Errorf("%s mode %o, want %o", h.Name, h.Mode, want)
		}
	}
	want := []string{"usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/enid", "usr/local/bin/enid-cni",
		"usr/share/", "usr/share/enid/", "usr/share/enid/cni/", "usr/share/enid/cni/10-enid.conflist"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %q,\nwant %q", names, want)
	}
	if _, err := LayerTar([]File{{Path: "relative"}}, epoch); err == nil {
		t.Error("a relative path was accepted")
	}
}

// TestLayerLinksAndDirs: a symbolic link is written as one, not as a file;
// a directory a file names keeps its mode whether it comes before or after
// the files under it; a path given twice (as a file and a link) is refused.
func TestLayerLinksAndDirs(t *testing.T) {
	epoch := time.Unix(0, 0).UTC()
	files := []File{
		{Path: "/bin/sh", Link: "busybox"},
		{Path: "/tmp/x", Mode: 0o644, Data: []byte("x")},
		{Path: "/bin/busybox", Mode: 0o755, Data: []byte("bb")},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/uploads", Mode: fs.ModeDir | 0o755},
	}
	b, err := LayerTar(files, epoch)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		typ  byte
		mode int64
		link string
	}
	entries := map[string]got{}
	var names []string
	r := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		entries[h.Name] = got{h.Typeflag, h.Mode, h.Linkname}
	}
	want := []string{"bin/", "bin/busybox", "bin/sh", "tmp/", "tmp/x", "uploads/"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %q,\nwant %q", names, want)
	}
	for name, w := range map[string]got{
		"bin/sh":   {tar.TypeSymlink, 0o777, "busybox"},
		"tmp/":     {tar.TypeDir, 0o1777, ""},
		"uploads/": {tar.TypeDir, 0o755, ""},
		"bin/":     {tar.TypeDir, 0o755, ""},
	} {
		if entries[name] != w {
			t.Errorf("%s: %+v, want %+v", name, entries[name], w)
		}
	}
	if _, err := LayerTar([]File{{Path: "/bin/sh", Link: "busybox"}, {Path: "/bin/sh", Mode: 0o755}}, epoch); err == nil {
		t.Error("a path given twice was accepted")
	}
}

// TestLayerSizedOnce: the layer's buffer is allocated at its final size
// (a buffer grown by doubling copied the upstream suite's images over and
// over): files of every padding case, a link, directories made and named.
func TestLayerSizedOnce(t *testing.T) {
	epoch := time.Unix(0, 0).UTC()
	var files []File
	for i, n := range []int{0, 1, 511, 512, 513, 1024, 100_003} {
		files = append(files, File{Path: fmt.Sprintf("/data/f%d", i), Mode: 0o644, Data: bytes.Repeat([]byte{'x'}, n)})
	}
	files = append(files, File{Path: "/bin/sh", Link: "/bin/busybox"}, File{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777})
	out, err := LayerTar(files, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != cap(out) {
		t.Errorf("layer of %d bytes in a buffer of %d: sized wrong, so grown or oversized", len(out), cap(out))
	}
}

// TestStoredLayer: a Stored layer is a gzip stream of the same tar,
// uncompressed (as large as the tar), where the default compresses.
func TestStoredLayer(t *testing.T) {
	files := []File{{Path: "/zeros", Mode: 0o644, Data: make([]byte, 1<<20)}}
	size := func(stored bool) (compressed int64, tarball []byte) {
		img, err := Assemble(files, Spec{Arch: "amd64", Epoch: time.Unix(0, 0).UTC(), Stored: stored})
		if err != nil {
			t.Fatal(err)
		}
		ls, err := img.Layers()
		if err != nil || len(ls) != 1 {
			t.Fatalf("layers %d, %v", len(ls), err)
		}
		if compressed, err = ls[0].Size(); err != nil {
			t.Fatal(err)
		}
		rc, err := ls[0].Compressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		zr, err := gzip.NewReader(rc)
		if err != nil {
			t.Fatalf("stored %v: not gzip: %v", stored, err)
		}
		if tarball, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
		return compressed, tarball
	}
	cz, ctar := size(false)
	sz, star := size(true)
	if !bytes.Equal(ctar, star) {
		t.Error("the stored and the compressed layer hold different tars")
	}
	if sz < int64(len(star)) || cz >= int64(len(ctar))/10 {
		t.Errorf("stored layer %d bytes, compressed %d, tar %d: want the stored one at least the tar, the compressed one far less",
			sz, cz, len(ctar))
	}
}

package ociimage

import (
	"archive/tar"
	"bytes"
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

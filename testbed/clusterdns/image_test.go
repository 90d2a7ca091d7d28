package clusterdns

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/enidnet/enid/kube/kubetest"
	"github.com/enidnet/enid/testbed/ctrtest"
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

// TestImageRunsAsThePod runs the image in a containerd of the test's own
// as the Deployment runs it: its own entrypoint and arguments, the
// Corefile mounted read-only at /etc/coredns, a read-only root, every
// capability dropped but NET_BIND_SERVICE, serving port 53. Host
// networking (there is no CNI here) on an address of 127/8 of its own,
// so no resolver of the machine's is in the way.
func TestImageRunsAsThePod(t *testing.T) {
	corednsBin(t) // skips or fails without the binary Image reads
	c := ctrtest.Start(t, "clusterdns-test")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path, image, err := Image(ctx, t.TempDir(), kubetest.BinDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, "images", "import", path); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.53.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250))
	conf := t.TempDir()
	corefile := ".:53 {\n    bind " + addr + "\n    errors\n    hosts {\n        192.0.2.7 probe.test\n    }\n}\n"
	if err := os.WriteFile(filepath.Join(conf, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	id := "coredns-" + strconv.Itoa(rand.IntN(1e6))
	log := filepath.Join(t.TempDir(), "coredns.log")
	args := []string{"run", "-d", "--runc-root", c.RuncRoot, "--log-uri", "file://" + log, "--net-host", "--read-only",
		"--mount", "type=bind,src=" + conf + ",dst=/etc/coredns,options=rbind:ro"}
	// ctr 1.6 knows no "ALL": drop each of its default capabilities but
	// NET_BIND_SERVICE; the check below reads what the process holds.
	for _, cp := range []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
		"SETFCAP", "SETPCAP", "SYS_CHROOT", "KILL", "AUDIT_WRITE"} {
		args = append(args, "--cap-drop", "CAP_"+cp)
	}
	if _, err := c.Run(ctx, append(args, image, id)...); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// SIGKILL: nothing to save; then the task and container go, and
		// what is left is an error.
		_, _ = c.Run(ctx, "task", "kill", "-s", "SIGKILL", id) // a task already gone is fine
		deadline := time.Now().Add(20 * time.Second)
		for {
			_, err := c.Run(ctx, "task", "rm", "-f", id)
			if err == nil || strings.Contains(err.Error(), "not found") {
				break
			}
			if time.Now().After(deadline) {
				t.Error(err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, err := c.Run(ctx, "containers", "rm", id); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			b, _ := os.ReadFile(log) // best effort: it only explains the failure
			t.Logf("coredns's output:\n%s", b)
		}
	}()
	server := net.JoinHostPort(addr, "53")
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := exchange(server, "probe.test.", dnsmessage.TypeA)
		if err == nil {
			if got := addrs(m); !slices.Equal(got, []string{"192.0.2.7"}) {
				t.Fatalf("probe.test from the container: %v (%s), want [192.0.2.7]", got, m.RCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer from the container on %s after 30s: %v", server, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// It served port 53 with NET_BIND_SERVICE (bit 10) alone.
	out, err := c.Run(ctx, "task", "ls")
	if err != nil {
		t.Fatal(err)
	}
	pid := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid = f[1]
		}
	}
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("the task's status (pid %q): %v", pid, err)
	}
	if !strings.Contains(string(status), "\nCapEff:\t0000000000000400\n") {
		t.Errorf("coredns's capabilities, want NET_BIND_SERVICE (0x400) alone:\n%s", status)
	}
}

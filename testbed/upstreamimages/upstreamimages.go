// Package upstreamimages builds the container images Kubernetes' own e2e
// suite (e2e.test, built by kube/kubetest/build.sh network-e2e) runs in its
// [sig-network] tests, under the exact names the suite asks for, because no
// registry is reachable here. Each image is made from real programs: agnhost
// and CoreDNS built from their modules, the pause program compiled from the
// kubernetes module's C source, busybox, nginx and the tools the suite runs
// in its pods (sh, curl, nc, wget, ss, ip, bash, dig, getent) from this
// machine's Debian packages, with the shared libraries they load.
//
// It sits beside the real-cluster harness (testbed/cluster), which imports
// the tarballs Build writes into each node's containerd; it does not import
// the harness. Nothing here runs a container: images_test.go does, in a
// containerd of its own.
package upstreamimages

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/enidnet/enid/internal/ociimage"
)

// KubernetesVersion is the version of k8s.io/kubernetes whose suite these
// images serve: the names below are its test/utils/image/manifest.go's,
// and agnhost and pause are built from its source.
const KubernetesVersion = "v1.37.2"

// The images, named as e2e.test of KubernetesVersion names them (its
// --list-images prints them).
const (
	// Agnhost is the suite's workhorse: netexec, serve-hostname, porter,
	// connect and pause are its subcommands, and the suite's exec pods run
	// curl, nc, wget, ss and sh in it. Upstream: agnhost on alpine.
	Agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	// BusyBox is the default test image of e2epod.MakePod and the conntrack
	// tests' init and client containers. Upstream: busybox 1.37.
	BusyBox = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	// Pause is the suite's name for the sandbox image, which some tests
	// also run as a container (service latency, jobs).
	Pause = "registry.k8s.io/pause:3.10.2"
	// GlibcDNSTesting is the DNS tests' glibc prober (dig and getent on
	// Debian bookworm, as upstream's image is) and carries CoreDNS.
	GlibcDNSTesting = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"
	// RegressionIssue74839 is the conntrack test's server: it answers a
	// TCP connection on port 9000 with an out-of-window packet and logs
	// whether the client reset. Upstream: on Debian's debian-base.
	RegressionIssue74839 = "registry.k8s.io/e2e-test-images/regression-issue-74839:1.5"
	// DistrolessIptables is kube_proxy.go's host exec image: a privileged
	// hostNetwork pod that reads the node's conntrack table (conntrack,
	// or /proc/net/nf_conntrack) with sh, test, cat, grep and which.
	// Upstream: iptables, conntrack and their tools on distroless Debian.
	DistrolessIptables = "registry.k8s.io/build-image/distroless-iptables:v0.9.9"
	// Nginx serves HTTP on port 80; the Endpoints and EndpointSlice tests
	// run it as their pods' container. Upstream: the official nginx 1.27
	// image; here Debian bookworm's nginx (1.22).
	Nginx = "registry.k8s.io/e2e-test-images/nginx:1.27.0-2"
)

// Names returns the names of the images Build writes, in the order of its
// tarballs.
func Names() []string {
	return []string{Agnhost, BusyBox, Pause, Nginx, GlibcDNSTesting, RegressionIssue74839, DistrolessIptables}
}

// pauseVersion is what the pause program prints for -v (upstream stamps
// v<tag>-<git describe>; there is no git here).
const pauseVersion = "v3.10.2"

// epoch stamps every layer entry and image: the same inputs give the same
// image bytes.
var epoch = time.Unix(0, 0).UTC()

// pathEnv is alpine's and busybox's default PATH, which the upstream
// images inherit.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Build writes the images of Names into dir as docker-archive tarballs
// (what `ctr -n k8s.io images import` reads) and returns their paths in
// the same order. kubeBin is build.sh's cache directory, which holds
// agnhost and coredns. It needs gcc with a static libc (libc6-dev),
// Debian's busybox-static, dash, curl, netcat-openbsd, wget, iproute2,
// bash, bind9-dnsutils and nginx (or nginx unpacked where .ci/run puts
// it), and the kubernetes module in the Go module cache; an error names
// what is missing. It takes a few seconds.
func Build(ctx context.Context, dir, kubeBin string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	src, err := kubernetesSource(ctx, dir)
	if err != nil {
		return nil, err
	}
	host, err := findHostTools()
	if err != nil {
		return nil, err
	}
	agnhost, err := os.ReadFile(filepath.Join(kubeBin, "agnhost"))
	if err != nil {
		return nil, fmt.Errorf("agnhost (sh kube/kubetest/build.sh DIR network-e2e builds it): %w", err)
	}
	coredns, err := os.ReadFile(filepath.Join(kubeBin, "coredns"))
	if err != nil {
		return nil, fmt.Errorf("coredns (sh kube/kubetest/build.sh DIR network-e2e builds it): %w", err)
	}
	boom, err := os.ReadFile(filepath.Join(kubeBin, "regression-issue-74839"))
	if err != nil {
		return nil, fmt.Errorf("regression-issue-74839 (sh kube/kubetest/build.sh DIR network-e2e builds it): %w", err)
	}
	debianBase, err := debianFiles(ctx, host)
	if err != nil {
		return nil, err
	}
	busybox, err := busyboxFiles(ctx, host.busybox, "/bin", nil)
	if err != nil {
		return nil, err
	}
	pause, err := compilePause(ctx, src, dir)
	if err != nil {
		return nil, err
	}
	agnhostFiles, err := agnhostImage(ctx, src, host, agnhost, coredns)
	if err != nil {
		return nil, err
	}
	glibcDNSFiles, err := glibcDNSImage(ctx, host, coredns)
	if err != nil {
		return nil, err
	}
	nginxFiles, err := nginxImage(ctx, host)
	if err != nil {
		return nil, err
	}
	iptablesFiles, err := iptablesImage(ctx, host)
	if err != nil {
		return nil, err
	}
	images := []struct {
		name  string
		file  string
		files []ociimage.File
		cfg   v1.Config
	}{
		{Agnhost, "agnhost.tar", agnhostFiles, v1.Config{
			Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}, Env: []string{pathEnv}, WorkingDir: "/",
			// The ports upstream's Dockerfile exposes (netexec, porter,
			// serve-hostname, ...): documentation only, as in the original.
			ExposedPorts: map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}}},
		{BusyBox, "busybox.tar", append(busybox, baseFiles("", "")...), v1.Config{
			Cmd: []string{"sh"}, Env: []string{pathEnv}, WorkingDir: "/"}},
		{Pause, "pause.tar", []ociimage.File{{Path: "/pause", Mode: 0o755, Data: pause}}, v1.Config{
			Entrypoint: []string{"/pause"}, User: "65535:65535", WorkingDir: "/"}},
		{Nginx, "nginx.tar", nginxFiles, v1.Config{
			Cmd: []string{"nginx", "-g", "daemon off;"}, Env: []string{pathEnv}, WorkingDir: "/",
			ExposedPorts: map[string]struct{}{"80/tcp": {}},
			// nginx's graceful stop, as the official image has it.
			StopSignal: "SIGQUIT"}},
		{GlibcDNSTesting, "glibc-dns-testing.tar", glibcDNSFiles, v1.Config{
			Cmd: []string{"bash"}, Env: []string{pathEnv}, WorkingDir: "/"}},
		{RegressionIssue74839, "regression-issue-74839.tar",
			append(debianBase, ociimage.File{Path: "/regression-issue-74839", Mode: 0o755, Data: boom}), v1.Config{
				Entrypoint: []string{"/regression-issue-74839"}, Env: []string{pathEnv}, WorkingDir: "/"}},
		{DistrolessIptables, "distroless-iptables.tar", iptablesFiles, v1.Config{Env: []string{pathEnv}, WorkingDir: "/"}},
	}
	var tarballs []string
	for _, im := range images {
		path := filepath.Join(dir, im.file)
		if err := writeImage(path, im.name, im.files, im.cfg); err != nil {
			return nil, err
		}
		tarballs = append(tarballs, path)
	}
	return tarballs, nil
}

// agnhostImage lays out the agnhost image as upstream's Dockerfile does on
// alpine: /agnhost (and /agnhost-2, the name the entrypoint tests use),
// /coredns, busybox's applets as the base's small tools, the tools it
// installs from packages (curl, netcat-openbsd, iproute2, bash, bind-tools),
// /uploads for netexec, porter's TLS pair, and the user and group one test
// expects. Two things
// differ from alpine, both because of how Debian builds busybox-static:
// /bin/sh is dash, since Debian's busybox shell runs its own applets before
// any program on PATH (its nc has no -u, -v or -t, which the suite passes
// to nc), and wget is GNU wget, since Debian's static busybox wget crashes
// (SIGSEGV) on -T, which the suite passes to wget.
func agnhostImage(ctx context.Context, src string, host hostTools, agnhost, coredns []byte) ([]ociimage.File, error) {
	files := []ociimage.File{
		{Path: "/agnhost", Mode: 0o755, Data: agnhost},
		// The DNS tests run it as a pod's DNS server (/coredns -conf ...).
		{Path: "/coredns", Mode: 0o755, Data: coredns},
		{Path: "/agnhost-2", Link: "agnhost"},
		{Path: "/uploads", Mode: fs.ModeDir | 0o755},
	}
	for _, f := range []string{"localhost.crt", "localhost.key"} {
		b, err := os.ReadFile(filepath.Join(src, "test/images/agnhost/porter", f))
		if err != nil {
			return nil, fmt.Errorf("porter's %s: %w", f, err)
		}
		files = append(files, ociimage.File{Path: "/" + f, Mode: 0o644, Data: b})
	}
	tools, err := dynamicFiles(ctx, []placed{
		{host.dash, "/bin/sh"},
		{host.curl, "/usr/bin/curl"},
		{host.nc, "/usr/bin/nc"},
		{host.wget, "/usr/bin/wget"},
		{host.ss, "/sbin/ss"},
		{host.ip, "/sbin/ip"},
		{host.bash, "/bin/bash"},
		// bind-tools on alpine; glibc's getent where alpine has musl's.
		{host.dig, "/usr/bin/dig"},
		{host.nslookup, "/usr/bin/nslookup"},
		{host.host, "/usr/bin/host"},
		{host.getent, "/usr/bin/getent"},
	})
	if err != nil {
		return nil, err
	}
	files = append(files, tools...)
	files = append(files, nsswitch)
	// Where alpine has a real tool, busybox's applet of that name is not
	// installed: one program per name, the one upstream's image runs.
	shadowed := map[string]bool{}
	for _, f := range tools {
		shadowed[filepath.Base(f.Path)] = true
	}
	bb, err := busyboxFiles(ctx, host.busybox, "/bin", shadowed)
	if err != nil {
		return nil, err
	}
	files = append(files, bb...)
	// The user and group agnhost's Dockerfile adds (adduser -u 1000,
	// addgroup -g 50000) for a supplemental-groups test.
	return append(files, baseFiles("user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n",
		"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n")...), nil
}

// nginxImage lays out Debian's nginx with its libraries, a shell (busybox,
// as the base image's), a configuration of ours that serves a page on port
// 80 as the official image's default does, logs to the container's
// standard output and error, and the nginx user it runs its workers as.
func nginxImage(ctx context.Context, host hostTools) ([]ociimage.File, error) {
	files, err := dynamicFiles(ctx, []placed{{host.nginx, "/usr/sbin/nginx"}})
	if err != nil {
		return nil, err
	}
	bb, err := busyboxFiles(ctx, host.busybox, "/bin", nil)
	if err != nil {
		return nil, err
	}
	files = append(files, bb...)
	files = append(files, nsswitch)
	conf := `user nginx;
worker_processes auto;
error_log /dev/stderr notice;
pid /run/nginx.pid;

events {
    worker_connections 1024;
}

http {
    types {
        text/html html htm;
        text/plain txt;
    }
    default_type application/octet-stream;
    access_log /dev/stdout;
    sendfile on;
    keepalive_timeout 65;

    server {
        listen 80;
        listen [::]:80;
        server_name localhost;
        location / {
            root /usr/share/nginx/html;
            index index.html;
        }
    }
}
`
	page := "<!DOCTYPE html>\n<html><head><title>nginx</title></head>\n<body><p>nginx serves this page.</p></body></html>\n"
	files = append(files,
		ociimage.File{Path: "/etc/nginx/nginx.conf", Mode: 0o644, Data: []byte(conf)},
		ociimage.File{Path: "/usr/share/nginx/html/index.html", Mode: 0o644, Data: []byte(page)},
		ociimage.File{Path: "/var/log/nginx/access.log", Link: "/dev/stdout"},
		ociimage.File{Path: "/var/log/nginx/error.log", Link: "/dev/stderr"},
		ociimage.File{Path: "/var/lib/nginx", Mode: fs.ModeDir | 0o755},
		ociimage.File{Path: "/run", Mode: fs.ModeDir | 0o755},
	)
	return append(files, baseFiles("nginx:x:101:101:nginx:/nonexistent:/bin/false\n", "nginx:x:101:\n")...), nil
}

// debianFiles stand in for a Debian base image with programs added: dash
// as /bin/sh, the programs with their libraries (each once), busybox for
// coreutils and grep under the names the programs leave free, the account
// files.
func debianFiles(ctx context.Context, host hostTools, programs ...placed) ([]ociimage.File, error) {
	files, err := dynamicFiles(ctx, append([]placed{{host.dash, "/bin/sh"}}, programs...))
	if err != nil {
		return nil, err
	}
	shadowed := map[string]bool{}
	for _, f := range files {
		shadowed[filepath.Base(f.Path)] = true
	}
	bb, err := busyboxFiles(ctx, host.busybox, "/bin", shadowed)
	if err != nil {
		return nil, err
	}
	return append(append(files, bb...), baseFiles("", "")...), nil
}

// iptablesImage lays out Debian's iptables (the nft and legacy xtables
// programs under their usual names, with every extension they may load)
// and conntrack, on a stand-in for debian-base. Upstream picks nft or
// legacy per node with its iptables-wrapper script; here iptables is the
// nft one, Debian's default.
func iptablesImage(ctx context.Context, host hostTools) ([]ociimage.File, error) {
	programs := []placed{
		{host.conntrack, "/usr/sbin/conntrack"},
		{host.xtablesNft, "/usr/sbin/xtables-nft-multi"},
		{host.xtablesLegacy, "/usr/sbin/xtables-legacy-multi"},
	}
	for _, m := range host.xtablesModules {
		programs = append(programs, placed{m, path.Join(xtablesDir, filepath.Base(m))})
	}
	files, err := debianFiles(ctx, host, programs...)
	if err != nil {
		return nil, err
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			files = append(files,
				ociimage.File{Path: "/usr/sbin/" + fam + suffix, Link: "xtables-nft-multi"},
				ociimage.File{Path: "/usr/sbin/" + fam + "-nft" + suffix, Link: "xtables-nft-multi"},
				ociimage.File{Path: "/usr/sbin/" + fam + "-legacy" + suffix, Link: "xtables-legacy-multi"})
		}
	}
	return append(files, nsswitch), nil
}

// glibcDNSImage lays out the DNS tests' glibc prober as upstream's image
// has it on Debian bookworm-slim: dash as /bin/sh, bash, dnsutils (dig,
// nslookup, host), glibc's getent, and /coredns; busybox stands in for
// coreutils (the probes need only seq, sleep and test).
func glibcDNSImage(ctx context.Context, host hostTools, coredns []byte) ([]ociimage.File, error) {
	files, err := debianFiles(ctx, host,
		placed{host.bash, "/bin/bash"},
		placed{host.dig, "/usr/bin/dig"},
		placed{host.nslookup, "/usr/bin/nslookup"},
		placed{host.host, "/usr/bin/host"},
		placed{host.getent, "/usr/bin/getent"})
	if err != nil {
		return nil, err
	}
	return append(files, nsswitch, ociimage.File{Path: "/coredns", Mode: 0o755, Data: coredns}), nil
}

// nsswitch makes the glibc programs (curl, wget, nginx) read /etc/hosts
// before asking DNS, as Debian's default file says and as alpine's musl
// does; without the file glibc asks DNS first.
var nsswitch = ociimage.File{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")}

// baseFiles are the account files and /tmp every base image (alpine,
// busybox) has, with the accounts an image adds (passwd and group lines).
func baseFiles(passwd, group string) []ociimage.File {
	passwd = "root:x:0:0:root:/root:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/:/sbin/nologin\n" + passwd
	group = "root:x:0:root\n" +
		"nogroup:x:65534:\n" + group
	return []ociimage.File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
	}
}

// writeImage writes the one-layer image of files named tag to path.
func writeImage(path, tag string, files []ociimage.File, cfg v1.Config) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	img, err := ociimage.Assemble(files, ociimage.Spec{Arch: runtime.GOARCH, Epoch: epoch,
		CreatedBy: "testbed/upstreamimages", Config: cfg, Stored: true})
	if err != nil {
		return fmt.Errorf("image %s: %w", tag, err)
	}
	if _, err := ociimage.WriteTarball(path, ref, img); err != nil {
		return fmt.Errorf("image %s: %w", tag, err)
	}
	return nil
}

// Command image builds enid's container image: `go run ./image` at the root
// of this repository writes enid-image.tar, which `ctr images import` and
// `docker load` accept, and --push sends the same image to a registry.
//
// It is a program of its own, beside ./bench, rather than an `enid image`
// subcommand: building needs the Go toolchain and this source tree, which a
// node never has, and it links go-containerregistry, which the agent has no
// use for. A newcomer finds it where they look first, at the top level,
// and runs it the way the README's quick start runs everything else.
//
// The image holds what a node needs and nothing else, on an empty base (no
// base image to pull, no shell, no package manager):
//
//	/usr/local/bin/enid                    the agent and CLI (static, CGO_ENABLED=0)
//	/usr/local/bin/enid-cni                the CNI plugin (static)
//	/usr/share/enid/cni/10-enid.conflist   examples/cni/10-enid.conflist
//	/etc/ssl/certs/ca-certificates.crt     the build machine's CA bundle (HTTPS to the ECS API)
//
// It is reproducible: the binaries are built with -trimpath and a fixed
// version, the layer's entries are sorted and stamped with one time (the
// commit's, or $SOURCE_DATE_EPOCH), owners are root, and nothing of the
// build machine but the CA bundle and the Go toolchain enters it. The same
// commit, toolchain and CA bundle give the same image digest (the tests
// check it).
//
// The tag is the version `enid version` prints: the VERSION file at the
// root (the release this tree is), linked in with -X main.version, unless
// --version says otherwise. The default name, ghcr.io/enidnet/enid:<VERSION>,
// is what examples/kubernetes names (checked by this package's tests).
// This file holds flags and wiring only.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

func main() {
	o := options{}
	fs := flag.NewFlagSet("image", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Build enid's container image (docs/deploy.md, "Install on a cluster").

Usage: go run ./image [flags]

  go run ./image                                  # writes enid-image.tar
  ctr -n k8s.io images import enid-image.tar      # on a containerd node
  docker load -i enid-image.tar                   # or into Docker
  go run ./image --push registry.example.com/team/enid   # also push REPO:<version>

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.src, "src", ".", "the enid source tree to build (the module root; an earlier commit's checkout builds that commit)")
	fs.StringVar(&o.version, "version", "", "the version to link in and tag with (default: the VERSION file of --src)")
	fs.StringVar(&o.repo, "repo", defaultRepo, "the repository the tarball's image is named in (REPO:<version>)")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "the architecture to build for (GOARCH; the OS is linux)")
	fs.StringVar(&o.output, "output", "enid-image.tar", `the docker-archive tarball to write ("" for none)`)
	fs.StringVar(&o.push, "push", "", "also push the image to this REGISTRY/REPO as REGISTRY/REPO:<version> (credentials from ~/.docker/config.json)")
	fs.StringVar(&o.caCerts, "ca-certs", defaultCACerts, `the CA bundle the agent trusts for HTTPS to the ECS API ("none" for an image without one)`)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected arguments %q (see -h)\n", fs.Args())
		os.Exit(2)
	}
	// SOURCE_DATE_EPOCH is the reproducible-builds convention for "the time
	// to stamp on what is built"; without it the commit's time is used.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "image: SOURCE_DATE_EPOCH=%q: want seconds since 1970\n", s)
			os.Exit(2)
		}
		t := time.Unix(sec, 0).UTC()
		o.epoch = &t
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	res.print(os.Stdout, o)
}

#!/bin/sh
# build.sh builds kube-apiserver, kubectl and etcd (and, when asked, the
# kubelet, kube-scheduler, kube-controller-manager, kube-proxy, the upstream
# e2e suite e2e.test, its test program agnhost and CoreDNS) from the Go module
# proxy into a cache directory, once per machine, for the tests in
# kube/kubetest and examples/kubernetes (kubectl renders the kustomizations),
# for the real-cluster harness testbed/cluster (all six), for the upstream
# [sig-network] e2e tests (network-e2e) and for
# desired/testdata/kubelet/capture.sh (the kubelet writes the checkpoint
# files enid reads as hints). Prebuilt binaries cannot
# be downloaded in our CI, but all of them build from modules: kubernetes' own
# go.mod replaces its staging modules with ./staging paths the module zip
# lacks, so a wrapper module replaces each of them with the published v0.x
# release.
#
# Usage: build.sh [DIR [PROGRAM...]]
#   DIR      default: $ENID_KUBE_BIN, else $XDG_CACHE_HOME/enid-kube, else
#            $HOME/.cache/enid-kube. Prints DIR on success.
#   PROGRAM  any of kube-apiserver kubectl etcd kubelet kube-scheduler
#            kube-controller-manager kube-proxy e2e.test ginkgo agnhost coredns
#            regression-issue-74839, or a group: "all" for the first six,
#            "network-e2e" for the last six (what Kubernetes' own
#            [sig-network] e2e tests need beside a cluster: kube-proxy on
#            each node, the upstream suite binary e2e.test and ginkgo's
#            runner that runs it in parallel, agnhost, the program in the
#            suite's test images, CoreDNS, which the DNS tests run in them
#            and a cluster serves its DNS with, and the conntrack test's
#            server; see testbed/upstreamimages); default: the first three (the other
#            three of "all" cost another ~20 min on 2 loaded cores, and only
#            the real-cluster harness and the capture script need them).
# Cost on a 2-core machine: ~5 min, ~3 GB peak RSS the first time for the
# first three, ~25 min for all six; seconds after. network-e2e once all is
# built (nice -n 10 on 2 loaded cores, 2026-12-03, wall time): the first
# time kube-proxy 17 s and agnhost 9 s (most of their packages are the
# six's), e2e.test 3 min 46 s with 2.9 GB peak RSS (the suite's own
# packages); with a warm Go build cache 6 s, 10 s and 3 s (a relink each,
# go mod tidy included). coredns, its own module like etcd: 4 min 33 s and
# 1.1 GB peak RSS the first time (module downloads included), 10 s warm.
# regression-issue-74839 (stdlib only) 1 s. e2e.test is 118 MB, kube-proxy
# 79 MB, coredns 75 MB, agnhost 64 MB.
# Since the three modules build side by side and Kubernetes' programs in
# one go build, the suite without vet: all and network-e2e cold in 29 min
# 29 s on a fresh machine, beside CI's tools and a cold go vet of enid
# (docs/testing.md, "What CI costs", CI68; 33 min 24 s with the suite
# vetted, CI67).
# A binary already built for these versions is not built again: each binary
# has its own stamp, DIR/.version-PROGRAM (DIR/VERSION, the stamp of older
# caches, still counts for the first three).
set -eu

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
# The CoreDNS kubeadm deploys with this Kubernetes (cmd/kubeadm's
# CoreDNSVersion).
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.6}
DIR=${1:-${ENID_KUBE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/enid-kube}}
[ $# -gt 0 ] && shift
STAGING=v0.${K8S_VERSION#v1.}

PROGRAMS=""
for p in ${*:-kube-apiserver kubectl etcd}; do
	case $p in
	all) PROGRAMS="$PROGRAMS kube-apiserver kubectl etcd kubelet kube-scheduler kube-controller-manager" ;;
	network-e2e) PROGRAMS="$PROGRAMS kube-proxy e2e.test ginkgo agnhost coredns regression-issue-74839" ;;
	kube-apiserver | kubectl | etcd | kubelet | kube-scheduler | kube-controller-manager | kube-proxy | e2e.test | ginkgo | agnhost | coredns | regression-issue-74839)
		PROGRAMS="$PROGRAMS $p" ;;
	*) echo "build.sh: unknown program $p (want kube-apiserver, kubectl, etcd, kubelet, kube-scheduler, kube-controller-manager, kube-proxy, e2e.test, ginkgo, agnhost, coredns, regression-issue-74839, all or network-e2e)" >&2; exit 2 ;;
	esac
done

version() {
	case $1 in
	etcd) echo "$ETCD_VERSION" ;;
	coredns) echo "$COREDNS_VERSION" ;;
	*) echo "$K8S_VERSION" ;;
	esac
}
built() {
	[ -x "$DIR/$1" ] || return 1
	[ "$(cat "$DIR/.version-$1" 2>/dev/null)" = "$(version "$1")" ] && return 0
	case $1 in kube-apiserver | kubectl | etcd) ;; *) return 1 ;; esac
	[ "$(cat "$DIR/VERSION" 2>/dev/null)" = "$K8S_VERSION $ETCD_VERSION" ]
}
stamp() { version "$1" >"$DIR/.version-$1"; }

mkdir -p "$DIR"
KUBE=""
ETCD=""
COREDNS=""
for p in $PROGRAMS; do
	built "$p" && continue
	case $p in
	etcd) ETCD=etcd ;;
	coredns) COREDNS=coredns ;;
	*) KUBE="$KUBE $p" ;;
	esac
done
if [ -z "$KUBE" ] && [ -z "$ETCD" ] && [ -z "$COREDNS" ]; then
	echo "$DIR"
	exit 0
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The three modules (Kubernetes', etcd's, CoreDNS's) are built side by side:
# each is a chain of steps that leave a core idle (module downloads waiting
# on the network, go mod tidy, a link that runs on one core), and their
# packages are not shared, so a second build fills those gaps instead of
# waiting for them. Each program lands in $WORK first and is moved into DIR
# with its stamp only once built, so a failed or killed build leaves no
# half-written binary behind.

# The Kubernetes programs: one wrapper module, one build cache.
build_kube() {
mkdir -p "$WORK/k8s"
cd "$WORK/k8s"
cat >go.mod <<EOM
module enidkubetest/k8s

go 1.26.8

require k8s.io/kubernetes $K8S_VERSION
EOM
# The tools file imports every program the script knows, so that go.mod is the
# same whichever of them this run builds.
cat >tools.go <<EOM
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/regression-issue-74839"
	_ "github.com/onsi/ginkgo/v2/ginkgo"
)
EOM
GOMOD=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -n "$GOMOD" ] || { echo "build.sh: cannot find kubernetes' go.mod" >&2; return 1; }
# Every "k8s.io/x => ./staging/src/k8s.io/x" becomes "k8s.io/x => k8s.io/x v0.N.M".
grep -E '=>[[:space:]]*\./staging/' "$GOMOD" | sed -E 's/^[[:space:]]*(replace[[:space:]]+)?//' |
	awk -v v="$STAGING" '{print "replace " $1 " => " $1 " " v}' >>go.mod
go mod tidy
MAJOR=${K8S_VERSION#v}; MAJOR=${MAJOR%%.*}
MINOR=${K8S_VERSION#v*.}; MINOR=${MINOR%%.*}
LD="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=$MAJOR -X k8s.io/component-base/version.gitMinor=$MINOR"
# Every program but the suite in one go build: it links one program while
# it compiles the next, where one go build per program left a core idle
# through each link. (The linker ignores -X for a variable a program lacks,
# as ginkgo's runner does.)
pkgs=""
e2e=""
for cmd in $KUBE; do
	case $cmd in
	e2e.test) e2e=1 ;;
	agnhost | regression-issue-74839) pkgs="$pkgs k8s.io/kubernetes/test/images/$cmd" ;;
	# ginkgo's runner, at the version the suite was built with (kubernetes'
	# go.mod pins it): it runs e2e.test in parallel processes.
	ginkgo) pkgs="$pkgs github.com/onsi/ginkgo/v2/ginkgo" ;;
	*) pkgs="$pkgs k8s.io/kubernetes/cmd/$cmd" ;;
	esac
done
# None of them needs cgo (kubelet-node.md): static binaries run in any
# mount namespace the harness makes (agnhost in an image with no libc), and
# one CGO_ENABLED for all lets the programs share their compiled packages.
mkdir -p "$WORK/k8s/out"
if [ -n "$pkgs" ]; then
	# shellcheck disable=SC2086 # one argument per package
	CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "$LD" -o "$WORK/k8s/out/" $pkgs
fi
# The suite is a test binary: its specs are registered by its _test.go
# files, so it is built with go test -c, after the programs, whose packages
# it mostly reuses; -vet=off, since go test would otherwise vet the suite
# and every package under it (vet's facts) on our CPU: upstream's code is
# vetted upstream.
if [ -n "$e2e" ]; then
	CGO_ENABLED=0 nice -n 10 go test -c -vet=off -trimpath -ldflags "$LD" -o "$WORK/k8s/out/e2e.test" k8s.io/kubernetes/test/e2e
fi
for cmd in $KUBE; do
	mv "$WORK/k8s/out/$cmd" "$DIR/$cmd"
	stamp "$cmd"
done
}

# etcd
build_etcd() {
mkdir -p "$WORK/etcd"
cd "$WORK/etcd"
cat >go.mod <<EOM
module enidkubetest/etcd

go 1.26.8

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOM
cat >tools.go <<EOM
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
EOM
go mod tidy
nice -n 10 go build -trimpath -ldflags "-s -w" -o "$WORK/etcd/etcd" go.etcd.io/etcd/server/v3
mv "$WORK/etcd/etcd" "$DIR/etcd"
stamp etcd
}

# CoreDNS: its own module, like etcd. The DNS tests run it (as /coredns in
# agnhost's image, see testbed/upstreamimages) and a cluster serves its
# DNS with it.
build_coredns() {
mkdir -p "$WORK/coredns"
cd "$WORK/coredns"
cat >go.mod <<EOM
module enidkubetest/coredns

go 1.26.8

require github.com/coredns/coredns $COREDNS_VERSION
EOM
cat >tools.go <<EOM
//go:build tools

package tools

import _ "github.com/coredns/coredns"
EOM
go mod tidy
CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$WORK/coredns/coredns" github.com/coredns/coredns
mv "$WORK/coredns/coredns" "$DIR/coredns"
stamp coredns
}

# Each build in a subshell of its own (set -e holds inside, and a cd stays
# there); the script fails, naming the module, if any of them does.
pids=""
[ -n "$KUBE" ] && { (build_kube) & pids="$pids $!:kubernetes"; }
[ -n "$ETCD" ] && { (build_etcd) & pids="$pids $!:etcd"; }
[ -n "$COREDNS" ] && { (build_coredns) & pids="$pids $!:coredns"; }
failed=""
for p in $pids; do
	wait "${p%%:*}" || failed="$failed ${p#*:}"
done
if [ -n "$failed" ]; then
	echo "build.sh: the build of$failed failed (its go command's error is above); nothing of it was put in $DIR" >&2
	exit 1
fi

# The stamp older scripts and caches know, once all three of theirs are built.
if built kube-apiserver && built kubectl && built etcd; then
	echo "$K8S_VERSION $ETCD_VERSION" >"$DIR/VERSION"
fi
echo "$DIR"

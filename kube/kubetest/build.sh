#!/bin/sh
# build.sh builds kube-apiserver, kubectl and etcd from the Go module proxy into a
# cache directory, once per machine, for the tests in kube/kubetest and
# examples/kubernetes (kubectl renders the kustomizations). Prebuilt binaries
# cannot be downloaded in our CI, but both build from modules: kubernetes' own
# go.mod replaces its staging modules with ./staging paths the module zip lacks,
# so a wrapper module replaces each of them with the published v0.x release.
#
# Usage: build.sh [DIR]   (default: $ENID_KUBE_BIN, else $XDG_CACHE_HOME/enid-kube,
#                          else $HOME/.cache/enid-kube). Prints DIR on success.
# Cost on a 2-core machine: ~5 min, ~3 GB peak RSS the first time; seconds after.
# A binary already built for these versions is not built again.
set -eu

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
DIR=${1:-${ENID_KUBE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/enid-kube}}
STAGING=v0.${K8S_VERSION#v1.}

mkdir -p "$DIR"
built() { [ -x "$DIR/$1" ] && [ "$(cat "$DIR/VERSION" 2>/dev/null)" = "$K8S_VERSION $ETCD_VERSION" ]; }
if built kube-apiserver && built kubectl && built etcd; then
	echo "$DIR"
	exit 0
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# kube-apiserver and kubectl
if ! built kube-apiserver || ! built kubectl; then
mkdir -p "$WORK/k8s"
cd "$WORK/k8s"
cat >go.mod <<EOM
module enidkubetest/k8s

go 1.26.8

require k8s.io/kubernetes $K8S_VERSION
EOM
cat >tools.go <<EOM
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOM
GOMOD=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
[ -n "$GOMOD" ] || { echo "build.sh: cannot find kubernetes' go.mod" >&2; exit 1; }
# Every "k8s.io/x => ./staging/src/k8s.io/x" becomes "k8s.io/x => k8s.io/x v0.N.M".
grep -E '=>[[:space:]]*\./staging/' "$GOMOD" | sed -E 's/^[[:space:]]*(replace[[:space:]]+)?//' |
	awk -v v="$STAGING" '{print "replace " $1 " => " $1 " " v}' >>go.mod
go mod tidy
MAJOR=${K8S_VERSION#v}; MAJOR=${MAJOR%%.*}
MINOR=${K8S_VERSION#v*.}; MINOR=${MINOR%%.*}
LD="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=$MAJOR -X k8s.io/component-base/version.gitMinor=$MINOR"
for cmd in kube-apiserver kubectl; do
	built "$cmd" && continue
	nice -n 10 go build -trimpath -ldflags "$LD" -o "$DIR/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
	mv "$DIR/$cmd.tmp" "$DIR/$cmd"
done
fi

# etcd
if ! built etcd; then
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
nice -n 10 go build -trimpath -ldflags "-s -w" -o "$DIR/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$DIR/etcd.tmp" "$DIR/etcd"
fi

echo "$K8S_VERSION $ETCD_VERSION" >"$DIR/VERSION"
echo "$DIR"

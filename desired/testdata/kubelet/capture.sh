#!/bin/sh
# capture.sh runs a real kubelet (standalone: static pods, no API server)
# against a private containerd and copies the checkpoint files it writes
# under its --root-dir at three moments:
#
#   0-started     after the kubelet started, before any pod
#   1-admitted    after admitting three static pods (a, b, c)
#   2-deleted     after deleting b and c (their pods, sandboxes and
#                 containers are gone)
#   3-readmitted  after admitting a new pod, d
#
# Each directory gets allocated_pods_state and actuated_pods_state when they
# exist, files.txt (every file under the root dir that is not a pod's own,
# so the presence of device-plugins/kubelet_internal_checkpoint is
# recorded), pods.txt (pod name and UID of each pod the kubelet has a
# directory for) and changes.txt (whether each checkpoint was rewritten
# since the previous snapshot, by its modification time). The tests in desired/ and
# planner/ read these exact files.
#
# Usage (as root, from the repository root):
#   sh desired/testdata/kubelet/capture.sh [OUTDIR]   (default: this directory)
# Needs: the kubelet (KUBELET=path, else built and cached by
# kube/kubetest/build.sh /var/cache/enid-kube kubelet), containerd 1.6, ctr,
# runc (Debian: apt-get install containerd runc), go, unshare.
#
# It leaves nothing behind on the host: containerd and the kubelet run in a
# private mount namespace with their own /run, so their mounts go with it;
# the kubelet's writes to host sysctls are answered by read-only files that
# already hold its values (shared/reference/kubelet-node.md); the pods' cgroups
# live under a parent of the script's own, removed at the end; the pods are
# hostNetwork (no CNI, no netns); makeIPTablesUtilChains is off. The script
# checks sysctls, iptables rules, cgroups and processes at the end and fails
# if any changed.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE}
[ "$(id -u)" = 0 ] || { echo "capture.sh: run as root" >&2; exit 1; }

if [ "${CAPTURE_INNER:-}" = 1 ]; then
	# --- inside the private mount namespace -------------------------------
	W=$CAPTURE_WORK
	# Our own /run: containerd 1.6 puts its shims' sockets in
	# /run/containerd/s whatever its config says.
	mount -t tmpfs -o mode=755 tmpfs /run
	# A fixed manifest path: a static pod's UID hashes the pod, the node
	# name and the file's path, so every capture names the pods alike.
	M=/run/enid-capture/manifests
	mkdir -p "$M"
	# The kubelet sets these sysctls when they differ from what it wants;
	# read-only files holding its values make it find them set.
	for kv in vm/overcommit_memory=1 kernel/panic=10 kernel/panic_on_oops=1 vm/panic_on_oom=0; do
		k=${kv%%=*}
		f="$W/sysctl-$(echo "$k" | tr / _)"
		echo "${kv#*=}" >"$f"
		mount --bind "$f" "/proc/sys/$k"
		mount -o remount,bind,ro "/proc/sys/$k"
	done

	containerd --config "$W/containerd.toml" >"$W/containerd.log" 2>&1 &
	CD=$!
	KL=""
	stop() {
		[ -n "$KL" ] && kill "$KL" 2>/dev/null && wait "$KL" 2>/dev/null
		kill "$CD" 2>/dev/null && wait "$CD" 2>/dev/null
		# Shims of this containerd still running (a failed run): by socket.
		for p in /proc/[0-9]*; do
			if cat "$p/cmdline" 2>/dev/null | tr '\0' ' ' | grep -q "containerd-shim.*$W/containerd.sock"; then
				kill -9 "${p#/proc/}" 2>/dev/null || true
			fi
		done
		return 0
	}
	trap stop EXIT
	ctr() { command ctr --address "$W/containerd.sock" -n k8s.io "$@"; }
	i=0
	until ctr version >/dev/null 2>&1; do
		i=$((i + 1)); [ $i -lt 100 ] || { echo "containerd did not start" >&2; tail "$W/containerd.log" >&2; exit 1; }
		sleep 0.1
	done
	ctr images import "$W/pause.tar" >/dev/null

	"$KUBELET" --config "$W/kubelet.yaml" --root-dir "$W/root" --hostname-override enid-capture \
		>"$W/kubelet.log" 2>&1 &
	KL=$!

	running() { ctr tasks ls 2>/dev/null | grep -c RUNNING || true; }
	# waitfor N: N tasks running (a pod is its sandbox and one container).
	waitfor() {
		i=0
		until [ "$(running)" = "$1" ]; do
			i=$((i + 1))
			if [ $i -ge 600 ] || ! kill -0 "$KL" 2>/dev/null; then
				echo "capture.sh: waiting for $1 running tasks, have $(running)" >&2
				tail -20 "$W/kubelet.log" >&2
				exit 1
			fi
			sleep 0.1
		done
	}
	snap() {
		d="$OUT/$1"
		rm -rf "$d"
		mkdir -p "$d"
		: >"$d/changes.txt"
		for f in allocated_pods_state actuated_pods_state; do
			t=absent
			if [ -f "$W/root/$f" ]; then
				cp "$W/root/$f" "$d/$f"
				t=$(stat -c %y "$W/root/$f")
			fi
			prev=$(cat "$W/mtime-$f" 2>/dev/null || echo absent)
			case "$prev/$t" in
			absent/absent) echo "$f absent" >>"$d/changes.txt" ;;
			absent/*) echo "$f written" >>"$d/changes.txt" ;;
			*/absent) echo "$f removed" >>"$d/changes.txt" ;;
			*) if [ "$prev" = "$t" ]; then echo "$f unchanged" >>"$d/changes.txt"; else echo "$f rewritten" >>"$d/changes.txt"; fi ;;
			esac
			echo "$t" >"$W/mtime-$f"
		done
		# Every file of the root dir but the pods' own and sockets.
		(cd "$W/root" && find . -path ./pods -prune -o -type f -print | sort) >"$d/files.txt"
		: >"$d/pods.txt"
		for u in "$W"/root/pods/*; do
			[ -d "$u/containers" ] || continue
			for c in "$u"/containers/*; do
				echo "$(basename "$c") $(basename "$u")" >>"$d/pods.txt"
			done
		done
		sort -o "$d/pods.txt" "$d/pods.txt"
	}
	pod() { sed "s/NAME/$1/g" "$W/pod.yaml.in" >"$M/$1.yaml"; }

	# Started: its first state files written, no pod yet.
	i=0
	until [ -f "$W/root/cpu_manager_state" ] || [ $i -ge 300 ]; do i=$((i + 1)); sleep 0.1; done
	sleep 3
	snap 0-started

	pod a; pod b; pod c
	waitfor 6
	sleep 2 # the kubelet writes the checkpoint at admission; let it settle
	snap 1-admitted

	rm "$M/b.yaml" "$M/c.yaml"
	waitfor 2
	# The kubelet removes a deleted pod's state once its cleanup has run
	# (housekeeping every 2s): wait for its pod directory to go.
	i=0
	while [ "$(ls "$W/root/pods" | wc -l)" -gt 1 ] && [ $i -lt 300 ]; do i=$((i + 1)); sleep 0.1; done
	sleep 3
	snap 2-deleted

	pod d
	waitfor 4
	sleep 2
	snap 3-readmitted

	rm -f "$M"/*.yaml
	waitfor 0
	exit 0
fi

# --- on the host ----------------------------------------------------------
KUBELET=${KUBELET:-}
if [ -z "$KUBELET" ]; then
	REPO=$(cd "$HERE/../../.." && pwd)
	KUBELET=$(nice -n 10 sh "$REPO/kube/kubetest/build.sh" /var/cache/enid-kube kubelet)/kubelet
fi
for tool in containerd ctr runc go unshare; do
	command -v $tool >/dev/null || { echo "capture.sh: $tool not found" >&2; exit 1; }
done

W=$(mktemp -d /tmp/enid-kcap.XXXXXX) # short: unix socket paths are limited
CG=enid-capture-$$
sysctls() { for k in vm/overcommit_memory kernel/panic kernel/panic_on_oops vm/panic_on_oom kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do echo "$k=$(cat /proc/sys/$k)"; done; }
rules() { iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' || true; }
sysctls >"$W/sysctls.before"
rules >"$W/iptables.before"
cleanup() {
	rc=$?
	# cgroups of ours, deepest first, in every hierarchy.
	for h in /sys/fs/cgroup/*; do
		[ -d "$h/$CG" ] && find "$h/$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
		[ -d "$h/$CG" ] && { echo "capture.sh: cgroup $h/$CG left" >&2; rc=1; }
	done
	sysctls >"$W/sysctls.after"
	if ! cmp -s "$W/sysctls.before" "$W/sysctls.after"; then
		echo "capture.sh: host sysctls changed:" >&2; diff "$W/sysctls.before" "$W/sysctls.after" >&2; rc=1
	fi
	rules >"$W/iptables.after"
	if ! cmp -s "$W/iptables.before" "$W/iptables.after"; then
		echo "capture.sh: iptables rules changed:" >&2; diff "$W/iptables.before" "$W/iptables.after" >&2; rc=1
	fi
	for p in /proc/[0-9]*; do
		if cat "$p/cmdline" 2>/dev/null | tr '\0' ' ' | grep -q "$W"; then
			echo "capture.sh: process ${p#/proc/} left: $(cat "$p/cmdline" 2>/dev/null | tr '\0' ' ')" >&2; rc=1
		fi
	done
	if grep -q "$W" /proc/self/mountinfo; then echo "capture.sh: mounts under $W left" >&2; rc=1; fi
	if [ $rc -ne 0 ] && [ -f "$W/kubelet.log" ]; then
		echo "capture.sh: kubelet log kept in $W" >&2
	else
		rm -rf "$W"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

for h in /sys/fs/cgroup/*; do
	# Every hierarchy the kubelet and runc use, v1 controllers and the named
	# systemd one alike; the unified one only when it is a cgroup2 mount.
	mountpoint -q "$h" || continue
	mkdir "$h/$CG"
	# A new cpuset cgroup has no CPUs and memory nodes: give it its parent's.
	if [ -f "$h/cpuset.cpus" ]; then
		cat "$h/cpuset.cpus" >"$h/$CG/cpuset.cpus"
		cat "$h/cpuset.mems" >"$h/$CG/cpuset.mems"
	fi
done

# The image of every sandbox and container: one static binary that waits
# for SIGTERM, in a docker-archive that `ctr images import` loads.
mkdir -p "$W/pause-src" "$W/image/layer" "$W/cni" "$W/logs"
cat >"$W/pause-src/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
EOF
printf 'module pause\n\ngo 1.22\n' >"$W/pause-src/go.mod"
(cd "$W/pause-src" && CGO_ENABLED=0 GOWORK=off GOFLAGS= go build -o "$W/image/layer/pause" .)
(cd "$W/image/layer" && tar --owner=0 --group=0 --mtime=@0 -cf ../layer.tar pause)
LAYER=$(sha256sum "$W/image/layer.tar" | cut -d' ' -f1)
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
	"$(go env GOARCH)" "$LAYER" >"$W/image/config.json"
printf '[{"Config":"config.json","RepoTags":["enid.test/pause:capture"],"Layers":["layer.tar"]}]' >"$W/image/manifest.json"
(cd "$W/image" && tar -cf "$W/pause.tar" manifest.json config.json layer.tar)

cat >"$W/containerd.toml" <<EOF
version = 2
root = "$W/containerd/root"
state = "$W/containerd/state"
[grpc]
  address = "$W/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$W/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "enid.test/pause:capture"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$W/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$W/cni"
    conf_dir = "$W/cni"
    max_conf_num = 1
EOF

cat >"$W/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: /run/enid-capture/manifests
fileCheckFrequency: 1s
syncFrequency: 5s
containerRuntimeEndpoint: unix://$W/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$CG
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
makeIPTablesUtilChains: false
enableServer: false
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
podLogsDir: $W/logs
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
localStorageCapacityIsolation: false
EOF

cat >"$W/pod.yaml.in" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: NAME
  namespace: default
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: NAME
    image: enid.test/pause:capture
    imagePullPolicy: Never
EOF

CAPTURE_INNER=1 CAPTURE_WORK="$W" KUBELET="$KUBELET" OUT="$OUT" \
	unshare -m --propagation private sh "$HERE/capture.sh" "$OUT"
echo "captured into $OUT"

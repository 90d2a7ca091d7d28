#!/bin/sh
# candidate.sh OVERLAY OUTDIR renders a kustomize overlay and writes the enid
# config files exactly as the agent would see them under /etc/enid: each key
# of the enid-config ConfigMap at the path the DaemonSet's config volume
# gives it (config.yaml, config.d/<drop-in>). It fails when a ConfigMap key
# is not projected, since the agent would never see that file.
#
# Needs kubectl (for "kubectl kustomize") and yq; the filters are the subset
# that both yq implementations (mikefarah's v4 and the jq wrapper) accept.
# Then, on a node: enid plan --config OUTDIR/config.yaml --config-dir OUTDIR/config.d --detailed-exitcode
set -eu

if [ $# -ne 2 ]; then
	echo "usage: $0 OVERLAY OUTDIR" >&2
	exit 64
fi
overlay=$1
out=$2

rendered=$(mktemp)
trap 'rm -f "$rendered"' EXIT
kubectl kustomize "$overlay" >"$rendered"

cm='select(.kind == "ConfigMap" and .metadata.name == "enid-config")'
ds='select(.kind == "DaemonSet" and .metadata.name == "enid")'

projected=$(yq -r "$ds | .spec.template.spec.volumes[] | select(.name == \"config\") | .configMap.items[] | .key + \" \" + .path" "$rendered")
keys=$(yq -r "$cm | .data | keys | .[]" "$rendered")
if [ -z "$keys" ]; then
	echo "$overlay: no enid-config ConfigMap" >&2
	exit 1
fi

status=0
for key in $keys; do
	if ! printf '%s\n' "$projected" | grep -q "^$key "; then
		echo "$overlay: ConfigMap key $key is not in the DaemonSet's config volume items; the agent would not see it" >&2
		status=1
	fi
done
[ "$status" -eq 0 ] || exit 1

mkdir -p "$out"
printf '%s\n' "$projected" | while read -r key path; do
	[ -n "$key" ] || continue
	mkdir -p "$out/$(dirname "$path")"
	yq -r "$cm | .data[\"$key\"]" "$rendered" >"$out/$path"
	echo "$out/$path"
done

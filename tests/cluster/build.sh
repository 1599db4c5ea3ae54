#!/usr/bin/env bash
# Builds the control plane the tests start -- etcd, kube-apiserver,
# kube-controller-manager, kube-proxy, kubectl and the crmanager workload --
# from the Go module in go/ and prints the directory holding the binaries.
#
# The binaries are cached outside the clone, under a key made of the pinned
# Kubernetes version and a hash of everything that decides the result (go.mod,
# go.sum, our Go sources, this script, the Go version), so a second run and a
# fresh clone on the same machine reuse them; a change to any input builds a
# new set beside the old one.  Concurrent callers (two make targets, xdist
# workers) serialise on a lock and the loser finds the finished set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/go"

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' go.mod)
[ -n "$version" ] || { echo "build.sh: no k8s.io/kubernetes version in go.mod" >&2; exit 1; }
key=$( { go version; cat "$here/build.sh" go.mod go.sum; find . -name '*.go' | LC_ALL=C sort | xargs cat; } |
	sha256sum | cut -c1-16)
root=${XDG_CACHE_HOME:-$HOME/.cache}/pid1-supervisor
dir=$root/kube-$version-$key
mkdir -p "$root"

exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/bin/.complete" ]; then
	echo "build.sh: building Kubernetes $version control plane into $dir (the first build takes about 7 min on 2 cores)" >&2
	rm -rf "$dir/bin.partial"
	start=$(date +%s)
	# One go build for every binary: the packages they share (client-go,
	# apimachinery, apiserver, etcd's client) are compiled once.  CGO off as
	# in Kubernetes' own release builds: static binaries, no C toolchain.
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$dir/bin.partial/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-proxy \
		k8s.io/kubernetes/cmd/kubectl \
		./cmd/etcd ./cmd/crmanager
	echo "$version $(( $(date +%s) - start ))s" >"$dir/bin.partial/.complete"
	rm -rf "$dir/bin"
	mv "$dir/bin.partial" "$dir/bin"
	echo "build.sh: built in $(( $(date +%s) - start )) s" >&2
fi
# Mark this set as used, and drop sets nobody has used for a week (each
# change to the inputs leaves one of about 400 MB behind).
touch "$dir/bin/.complete"
find "$root" -mindepth 3 -maxdepth 3 -path "$root/kube-*/bin/.complete" -mtime +7 -printf '%h\n' 2>/dev/null |
	while read -r stale; do rm -rf "$(dirname "$stale")" "$(dirname "$stale").lock"; done
echo "$dir/bin"

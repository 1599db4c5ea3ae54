#!/usr/bin/env bash
# Builds the cluster the tests start and prints the directory holding it:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
# kubelet, kubectl and the crmanager workload from the Go module in go/;
# containerd, its runc shim and ctr from the Go module in containerd/; and the
# pause image (the sandbox every pod's namespaces hang on) from the pause.c of
# the pinned k8s.io/kubernetes module, as a docker-archive tarball that
# `ctr images import` reads.
#
# The result is cached outside the clone, under a key made of the pinned
# Kubernetes version and a hash of everything that decides it (both modules'
# go.mod and go.sum, our Go sources, this script, the Go and gcc versions), so
# a second run and a fresh clone on the same machine reuse it; a change to any
# input builds a new set beside the old one.  Concurrent callers (two make
# targets, xdist workers) serialise on a lock and the loser finds the
# finished set.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/go"

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' go.mod)
[ -n "$version" ] || { echo "build.sh: no k8s.io/kubernetes version in go.mod" >&2; exit 1; }
containerd_version=$(awk '$1 == "require" && $2 == "github.com/containerd/containerd/v2" {print $3; exit}' ../containerd/go.mod)
[ -n "$containerd_version" ] || { echo "build.sh: no containerd version in containerd/go.mod" >&2; exit 1; }
key=$( { go version; gcc --version | head -1; cat "$here/build.sh" go.mod go.sum ../containerd/go.mod ../containerd/go.sum
	find . ../containerd -name '*.go' | LC_ALL=C sort | xargs cat; } | sha256sum | cut -c1-16)
root=${XDG_CACHE_HOME:-$HOME/.cache}/pid1-supervisor
dir=$root/kube-$version-$key
mkdir -p "$root"

# The pause image: pause.c linked statically (the image has nothing else in
# it), one layer, written as the docker-archive `podman save` makes; tar's
# fixed owner and mtime make the layer, and so the image ID, reproducible.
pause_image() {
	local src=$1 out=$2 tmp
	tmp=$(mktemp -d)
	gcc -Os -static -DVERSION="\"$PAUSE_VERSION\"" -o "$tmp/pause" "$src"
	strip "$tmp/pause"
	tar -C "$tmp" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$tmp/layer.tar" pause
	local layer config
	layer=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},' >"$tmp/config.json"
	printf '"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$layer" >>"$tmp/config.json"
	config=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
	mkdir "$tmp/image" "$tmp/image/$layer"
	mv "$tmp/layer.tar" "$tmp/image/$layer/layer.tar"
	mv "$tmp/config.json" "$tmp/image/$config.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config" "$PAUSE_IMAGE" "$layer" \
		>"$tmp/image/manifest.json"
	tar -C "$tmp/image" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$out/pause.tar" .
	rm -rf "$tmp"
}
# The tag containerd v2.3 uses as its sandbox image by default, so the node's
# config names the same image users' nodes run.
PAUSE_VERSION=3.10.2
PAUSE_IMAGE=registry.k8s.io/pause:$PAUSE_VERSION

exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/bin/.complete" ]; then
	echo "build.sh: building Kubernetes $version and containerd $containerd_version into $dir (the first build takes about 8 min on 2 cores)" >&2
	rm -rf "$dir/bin.partial"
	start=$(date +%s)
	# One go build for every binary: the packages they share (client-go,
	# apimachinery, apiserver, etcd's client) are compiled once.  CGO off as
	# in Kubernetes' own release builds: static binaries, no C toolchain.
	# The -X flags are what Kubernetes' release build stamps: without them
	# every component reports v0.0.0-master, the Node's kubeletVersion too.
	minor=${version#v1.}
	minor=${minor%%.*}
	kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
	kube_ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
	kube_ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
	CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="$kube_ldflags" -o "$dir/bin.partial/" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-proxy \
		k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kubectl \
		./cmd/etcd ./cmd/crmanager
	kube_done=$(date +%s)
	# containerd static as well; with CGO off its btrfs snapshotter (the one
	# part that needs C headers) is left out by its own build constraint.
	(cd ../containerd && CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
		-o "$dir/bin.partial/" \
		github.com/containerd/containerd/v2/cmd/containerd \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
		github.com/containerd/containerd/v2/cmd/ctr)
	containerd_done=$(date +%s)
	pause_image "$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c" "$dir/bin.partial"
	echo "build.sh: kubernetes $(( kube_done - start )) s, containerd $(( containerd_done - kube_done )) s," \
		"pause $(( $(date +%s) - containerd_done )) s" >&2
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

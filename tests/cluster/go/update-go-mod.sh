#!/usr/bin/env bash
# Regenerates go.mod/go.sum for one pinned Kubernetes version.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, client-go, ...)
# at v0.0.0 and resolves them with `replace => ./staging/...` lines that only
# work inside its own repository.  A module that requires k8s.io/kubernetes
# must map each of them to the published v0.X.Y tag itself.  The list is read
# from the kubernetes module's own go.mod in the module cache, so it is exactly
# the set that version needs.  Run it by hand after changing a version below;
# go.mod and go.sum are committed, the build never runs this script.
set -euo pipefail
cd "$(dirname "$0")"

KUBE_VERSION=v1.35.4
CONTROLLER_RUNTIME_VERSION=v0.23.3
ETCD_VERSION=v3.6.5 # what k8s.io/kubernetes v1.35.4's go.mod requires

staging=v0.${KUBE_VERSION#v1.}
kube_mod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
	sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
[ -n "$kube_mod" ] || { echo "update-go-mod: no GoMod path for k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }

[ -f go.mod ] || go mod init pid1-supervisor/tests/cluster
args=()
while read -r module; do
	args+=("-replace=$module=$module@$staging")
done < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$kube_mod")
[ ${#args[@]} -gt 0 ] || { echo "update-go-mod: no staging replaces in $kube_mod" >&2; exit 1; }
go mod edit "${args[@]}"
go get "k8s.io/kubernetes@$KUBE_VERSION" \
	"sigs.k8s.io/controller-runtime@$CONTROLLER_RUNTIME_VERSION" \
	"go.etcd.io/etcd/server/v3@$ETCD_VERSION"
go mod tidy
echo "update-go-mod: $(grep -c '=> k8s.io/' go.mod) staging replaces at $staging"

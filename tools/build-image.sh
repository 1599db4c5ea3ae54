#!/usr/bin/env bash
# `make image`: build the container image with podman and report its size.
#
#   make image                                 # from python:3.12-slim-bookworm
#   PLUGINS="kubernetes libvirt" make image    # with the optional plugins
#   LOCAL_BASE=1 make image                    # no registry: a debootstrap base
#   BASE_IMAGE=registry.example/python:3.12-slim-bookworm make image
#   tools/build-image.sh --no-cache            # extra arguments go to podman build
#
# Environment:
#   BASE_IMAGE   base of both stages (default python:3.12-slim-bookworm)
#   LOCAL_BASE   1: build the base with tools/local-base.sh instead (root,
#                debootstrap, reaches only a Debian mirror)
#   IMAGE        name to tag (default localhost/pid1-supervisor); tagged
#                :<version> and :latest
#   PLUGINS      optional plugins to include: kubernetes, libvirt
#   BUILD_CA_BUNDLE  CA certificates pip trusts during the build (mounted for
#                the RUN steps, never stored in the image), for networks whose
#                proxy re-signs TLS; default: $PIP_CERT, $REQUESTS_CA_BUNDLE,
#                $SSL_CERT_FILE or the host's system bundle; empty: none
#   PODMAN_*     see tools/podman
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
podman="$here/podman"

log() { echo "build-image: $*" >&2; }

# A typo in PLUGINS fails here, in one line, not minutes into the build.
optional=$("$here/image/stage.sh" optional)
for name in ${PLUGINS:-}; do
    if [[ " $optional " != *" $name "* ]]; then
        log "unknown plugin '$name' in PLUGINS: choose from $optional (the others are always included)"
        exit 2
    fi
done

command -v "${PODMAN:-podman}" >/dev/null || {
    log "podman is not installed (apt-get install podman runc; or build with any OCI builder: docker build .)"
    exit 1
}

if [[ ${LOCAL_BASE:-0} == 1 ]]; then
    BASE_IMAGE=$("$here/local-base.sh")
fi
# Fully qualified, so that podman never asks which registry "python" means.
base=${BASE_IMAGE:-docker.io/library/python:3.12-slim-bookworm}
image=${IMAGE:-localhost/pid1-supervisor}
plugins=${PLUGINS:-}
version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/pyproject.toml" | head -n 1)

if ! "$podman" image exists "$base"; then
    log "pulling $base"
    if ! "$podman" pull "$base" >&2; then
        cat >&2 <<MSG
build-image: cannot pull the base image $base.
  Without access to a registry that has it, build a local Debian bookworm
  base with debootstrap (as root; needs only a Debian mirror):
      LOCAL_BASE=1 make image
  or name any base you have that provides python3 (>= 3.11) with venv:
      BASE_IMAGE=<image> make image
MSG
        exit 1
    fi
fi

ca_args=()
if [[ -z ${BUILD_CA_BUNDLE+set} ]]; then
    BUILD_CA_BUNDLE=
    for candidate in "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}" \
        /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
        if [[ -n $candidate && -f $candidate ]]; then
            BUILD_CA_BUNDLE=$candidate
            break
        fi
    done
fi
if [[ -n $BUILD_CA_BUNDLE ]]; then
    ca_args=(--volume "$(realpath "$BUILD_CA_BUNDLE"):/run/build-ca.crt:ro,z"
        --build-arg PIP_CERT=/run/build-ca.crt)
fi

log "building $image:$version from $base${plugins:+ with plugins: $plugins}"
"$podman" build \
    --build-arg BASE_IMAGE="$base" \
    --build-arg PLUGINS="$plugins" \
    --build-arg VERSION="$version" \
    "${ca_args[@]}" \
    --tag "$image:$version" --tag "$image:latest" \
    --file "$root/Dockerfile" "$@" "$root" >&2

size=$("$podman" image inspect --format '{{.Size}}' "$image:$version")
base_size=$("$podman" image inspect --format '{{.Size}}' "$base")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "$image:$version: $(mib "$size") ($(mib $((size - base_size))) on top of $base)"

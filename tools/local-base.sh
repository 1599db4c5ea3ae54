#!/usr/bin/env bash
# Build a Debian bookworm base image with Python 3 without any registry:
# debootstrap a minimal root filesystem from the Debian mirror, keep it as a
# tarball (so later runs skip the ~20 s debootstrap) and import it into podman.
# Prints the image name on stdout; progress goes to stderr.
#
#   tools/local-base.sh                 # -> localhost/bookworm-python3:<key>
#   BASE_IMAGE=$(tools/local-base.sh) make image
#
# Environment:
#   LOCAL_BASE_NAME   image name (default localhost/bookworm-python3)
#   ARTIFACTS         where the tarball is kept (default tests/.artifacts)
#   DEBIAN_MIRROR     default http://deb.debian.org/debian
#
# Needs root (debootstrap) and the debootstrap package.  The image is the same
# shape as python:3.12-slim-bookworm as far as the Dockerfile cares: a
# `python3` on PATH with the venv module, apt configured, empty apt lists.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
name=${LOCAL_BASE_NAME:-localhost/bookworm-python3}
artifacts=${ARTIFACTS:-$root/tests/.artifacts}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
packages=python3,python3-venv,ca-certificates

log() { echo "local-base: $*" >&2; }

if [[ $(id -u) != 0 ]]; then
    log "needs root (debootstrap creates device nodes and chowns files)"
    exit 1
fi
command -v debootstrap >/dev/null || {
    log "debootstrap is not installed: apt-get install debootstrap"
    exit 1
}

# The tag names what went into the rootfs, so a change of suite or packages
# builds a new one instead of reusing a stale tarball.
key=$(printf '%s\n' "$suite" "$packages" "$(uname -m)" | sha256sum | cut -c1-12)
image="$name:$key"
tarball="$artifacts/$suite-python3-$key.tar"

mkdir -p "$artifacts"
exec 9>"$artifacts/.local-base.lock"
flock 9 # one builder at a time (make image and a test run may overlap)

if "$here/podman" image exists "$image"; then
    log "$image already present"
    echo "$image"
    exit 0
fi

if [[ ! -s $tarball ]]; then
    rootfs=$(mktemp -d "$artifacts/rootfs.XXXXXX")
    trap 'rm -rf "$rootfs" "$tarball.tmp"' EXIT
    log "debootstrap $suite ($packages) from $mirror ..."
    debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" \
        >"$artifacts/debootstrap.log" 2>&1 || {
        log "debootstrap failed; last lines of $artifacts/debootstrap.log:"
        tail -n 20 "$artifacts/debootstrap.log" >&2
        exit 1
    }
    # Like Debian's official slim images: no documentation, manual pages or
    # translations (now or in later apt-get installs), no package cache, no
    # apt lists (a Dockerfile runs apt-get update first), no logs.
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'SLIM'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
SLIM
    find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$rootfs"/usr/share/{groff,info,linda,lintian,locale,man}/* \
        "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/var/log/* "$rootfs"/tmp/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
    trap - EXIT
fi

log "importing $tarball as $image"
"$here/podman" import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL org.pid1-supervisor.local-base=$key" \
    "$tarball" "$image" >/dev/null
echo "$image"

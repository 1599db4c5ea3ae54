#!/bin/sh
# The steps of the Dockerfile that need more than one line of shell, kept in
# one POSIX sh script so that the Dockerfile stays readable and the same rules
# (which plugin needs which Debian package) live in one place.
#
#   stage.sh build-deps      apt packages to compile the wheels (build stage)
#   stage.sh core-deps       the core's runtime dependencies into the venv
#   stage.sh install SRC     the project and the chosen plugins into the venv
#   stage.sh runtime-deps    shared libraries the venv needs, the compiled stdlib
#                            (runtime stage)
#   stage.sh optional        the names PLUGINS accepts (for tools/build-image.sh)
#
# PLUGINS (build arg) names optional plugins by their directory under
# plugins/; every plugin not listed in OPTIONAL_PLUGINS is always installed.
set -eu

VENV=${VENV:-/opt/supervisor}
# The interpreter flags of the supervisor's script, so of PID 1 (see install).
# benchmarks/_bench.py measures the supervisor with the same -OO (not -I).
PID1_FLAGS=-IOO
OPTIONAL_PLUGINS="kubernetes libvirt"
PLUGINS=${PLUGINS:-}

export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# An empty build arg would make pip look for a CA bundle named "".
[ -n "${PIP_CERT:-}" ] || unset PIP_CERT
# python-prctl's setup.py compares kernel versions as strings.
export PRCTL_SKIP_KERNEL_CHECK=1

die() { echo "stage.sh: $*" >&2; exit 1; }

wants() { case " $PLUGINS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

apt_install() {
    missing=""
    for package in "$@"; do
        dpkg -s "$package" >/dev/null 2>&1 || missing="$missing $package"
    done
    [ -n "$missing" ] || return 0
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
}

build_deps() {
    packages="gcc libc6-dev libcap-dev"
    # python:3.x images carry the C headers of their own Python in
    # /usr/local/include; Debian's python3 needs python3-dev for them.
    include=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    [ -e "$include/Python.h" ] || packages="$packages python3-dev"
    if wants libvirt; then packages="$packages libvirt-dev pkg-config"; fi
    # shellcheck disable=SC2086
    apt_install $packages
}

core_deps() {
    # Only the dependencies, read from pyproject.toml: this layer (and the
    # compiled python-prctl wheel in it) stays cached while the sources change.
    python3 -m venv "$VENV"
    # The pip that came with the base's Python may predate building every
    # sdist as a PEP 517 wheel (python-prctl has no pyproject.toml); derived
    # images use this pip too.
    "$VENV/bin/pip" install -q --upgrade pip
    python3 -c '
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
' "$1/pyproject.toml" >/tmp/core-requirements.txt
    "$VENV/bin/pip" install -q --no-compile -r /tmp/core-requirements.txt
    rm /tmp/core-requirements.txt
}

install() {
    src=$1
    for name in $PLUGINS; do
        case " $OPTIONAL_PLUGINS " in
            *" $name "*) ;;
            *) die "unknown optional plugin '$name' in PLUGINS (choose from: $OPTIONAL_PLUGINS)" ;;
        esac
        [ -f "$src/plugins/$name/pyproject.toml" ] || die "plugins/$name/pyproject.toml is missing"
    done
    set -- "$src"
    for project in "$src"/plugins/*/pyproject.toml; do
        [ -f "$project" ] || continue
        dir=${project%/pyproject.toml}
        name=${dir##*/}
        case " $OPTIONAL_PLUGINS " in
            *" $name "*) wants "$name" || continue ;;
        esac
        set -- "$@" "$dir"
    done
    echo "installing: $*"
    "$VENV/bin/pip" install -q --no-compile "$@"
    # Compiled once here: a non-root user cannot write .pyc files into the
    # root-owned venv, and without them every start pays for compiling trio.
    # Both levels: -OO for the supervisor (below), the plain one for any
    # other use of the venv's interpreter.  unchecked-hash: the files never
    # change in the image, so skip the stat.
    "$VENV/bin/python" -m compileall -q -j 0 -o 0 -o 2 --invalidation-mode unchecked-hash "$VENV/lib" >/dev/null
    # pip writes the interpreter's path alone into the script; the flags
    # are the image's (one word: the kernel passes the rest of the line as
    # one argument).
    #   -I   isolated from the first byte: no PYTHONPATH, no user site
    #        directory, no sitecustomize from either, for PID 1 and every
    #        exec probe.
    #   -OO  no docstrings and no asserts: about 1.1 MiB less in every
    #        pod's orchestrator (trio's and attrs' docstrings are most of
    #        it).  Nothing of the supervisor's behaviour rests on either.
    sed -i "1s|^#!$VENV/bin/python[0-9.]*\$|& $PID1_FLAGS|" "$VENV/bin/supervisor"
    head -n 1 "$VENV/bin/supervisor" | grep -q -- " $PID1_FLAGS\$" \
        || die "the supervisor script's first line has no $PID1_FLAGS"
    "$VENV/bin/supervisor" --version >/dev/null || die "the installed supervisor does not start"
}

# The base's standard library, compiled for -OO as the venv is.  The
# official python images ship no .pyc at all, Debian's python3 only the
# plain level; as user 65532 the supervisor could write neither, and would
# compile every module it imports from the stdlib again at every start.
compile_stdlib() {
    stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
    # Not the test suites, IDLE or lib2to3 (whose test data is not valid
    # Python 3), never imported; nor the base's own packages (pip).
    python3 -m compileall -q -j 0 -o 0 -o 2 -x '/(test|tests|idle_test|idlelib|lib2to3|site-packages|dist-packages)/' "$stdlib" >/dev/null
}

runtime_deps() {
    packages="libcap2"
    if wants libvirt; then packages="$packages libvirt0"; fi
    # shellcheck disable=SC2086
    apt_install $packages
    compile_stdlib
}

case ${1:-} in
    build-deps) build_deps ;;
    core-deps) core_deps "${2:?source directory}" ;;
    install) install "${2:?source directory}" ;;
    runtime-deps) runtime_deps ;;
    optional) echo "$OPTIONAL_PLUGINS" ;;
    *) die "usage: stage.sh build-deps|core-deps SRC|install SRC|runtime-deps|optional" ;;
esac

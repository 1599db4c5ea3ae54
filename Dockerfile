# The supervisor as a container's PID 1.
#
#   make image                                   # tools/build-image.sh: podman build + size
#   podman build -t pid1-supervisor .            # any OCI builder (docker: BuildKit, the default)
#   podman build --build-arg PLUGINS="kubernetes libvirt" -t pid1-supervisor:full .
#   podman run --rm pid1-supervisor -- sh -c 'exit 3'     # exits 3
#
# BASE_IMAGE: any Debian-bookworm-like image with a `python3` (>= 3.11) that has
# the venv module; the official python:*-slim-bookworm images keep Python in
# /usr/local, Debian's own python3 lives in /usr -- the venv is made with
# whichever `python3` the base provides, and both stages use the same base so
# the venv's interpreter link stays valid.  Without a registry:
# LOCAL_BASE=1 make image (a debootstrap base, tools/local-base.sh).
#
# PLUGINS: optional plugins (directories under plugins/) to add to the
# built-in ones: "kubernetes", "libvirt" or both.  Your own plugins go into an
# image derived from this one (docs/container-image.md).
ARG BASE_IMAGE=python:3.12-slim-bookworm

# --------------------------------------------------------------------------
# build: compilers, wheels (python-prctl is sdist-only), the virtualenv
# --------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS build
ARG PLUGINS=""
# A CA bundle for pip behind a TLS-intercepting proxy, mounted by
# tools/build-image.sh for the RUN steps only (it never enters a layer).
ARG PIP_CERT=""
ENV PYTHONDONTWRITEBYTECODE=1
COPY tools/image/stage.sh /usr/local/lib/pid1-supervisor/stage.sh
RUN /usr/local/lib/pid1-supervisor/stage.sh build-deps
# The dependencies first, from pyproject.toml alone, so that editing the
# sources keeps that layer.  pip's cache (with the wheels built from sdists:
# python-prctl, libvirt-python) is a cache mount, outside every layer, so
# that a plugin's dependencies are not compiled again either.
COPY pyproject.toml /src/pyproject.toml
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    /usr/local/lib/pid1-supervisor/stage.sh core-deps /src
COPY . /src
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    /usr/local/lib/pid1-supervisor/stage.sh install /src

# --------------------------------------------------------------------------
# runtime: the base, shared libraries, the venv -- no compilers, no sources
# --------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS runtime
ARG PLUGINS=""
ARG VERSION=unknown
# The link puts `supervisor` on PATH, where `pip install pid1-supervisor`
# outside a venv would put it (manifests may name /usr/local/bin/supervisor).
COPY tools/image/stage.sh /usr/local/lib/pid1-supervisor/stage.sh
RUN /usr/local/lib/pid1-supervisor/stage.sh runtime-deps \
    && rm -rf /usr/local/lib/pid1-supervisor \
    && ln -s /opt/supervisor/bin/supervisor /usr/local/bin/supervisor
COPY --from=build /opt/supervisor /opt/supervisor

LABEL org.opencontainers.image.title="pid1-supervisor" \
      org.opencontainers.image.description="A PID 1 for Kubernetes pods: reaps, forwards signals, and turns SIGTERM into a graceful termination plan" \
      org.opencontainers.image.licenses="GPL-3.0-or-later" \
      org.opencontainers.image.version="${VERSION}" \
      org.pid1-supervisor.plugins="${PLUGINS}"

# The venv stays off PATH: the processes the supervisor runs keep the base's
# own `python3` and `pip`, and the supervisor's dependencies never meet the
# app's.  Plugins go in with /opt/supervisor/bin/pip.  Unbuffered, so that
# the log lines of Python processes reach `kubectl logs` as they happen.
ENV PYTHONUNBUFFERED=1

# Numeric, so that runAsNonRoot can verify it without a passwd entry.
USER 65532:65532
# What the kubelet and `podman stop` send first; the supervisor turns it into
# its shutdown plan.  Exec form: the supervisor itself is PID 1, not `sh -c`.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/opt/supervisor/bin/supervisor"]

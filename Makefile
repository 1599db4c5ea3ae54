# Every target sets itself up: `make test` and `make demo` work as root on a
# fresh Debian bookworm machine with nothing prepared.  Setup steps leave stamp
# files in .venv/ so a second run does not repeat them.

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CORE_STAMP := $(VENV)/.core-stamp
DEMO_STAMP := $(VENV)/.demo-stamp
TEST_APT_STAMP := $(VENV)/.test-apt-stamp
DEV_STAMP := $(VENV)/.dev-stamp
DIST_STAMP := $(VENV)/.dist-stamp

# Debian packages for the supervisor itself: the venv, python-prctl's build
# deps (gcc, libcap-dev), util-linux's unshare for PID namespaces.
APT_CORE := python3 python3-venv python3-dev gcc make libcap-dev pkg-config util-linux procps ca-certificates
# ...and for the whole test suite: libvirt + QEMU and the guest's parts for
# the VM tests, podman/runc/debootstrap for the image tests, the benchmarks'
# anchors (tini, dumb-init, catatonit, supervisord); iptables for kube-proxy
# on the real node (tests/realnode).
APT_TEST := psmisc iproute2 curl \
	libvirt-daemon-system libvirt-dev qemu-system-x86 qemu-utils busybox-static cpio \
	podman runc debootstrap \
	tini dumb-init catatonit supervisor \
	iptables

PLUGINS := $(wildcard plugins/*/pyproject.toml)
DEMO_PLUGINS := plugins/sleep plugins/exec plugins/http

.PHONY: all setup dev test test-loaded lint typecheck demo image bench clean kube-bin cluster node dist

all: test

define apt_install
	@if [ "$$(id -u)" != 0 ]; then echo "make: run as root (apt-get is needed once)" >&2; exit 1; fi
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(1) >/dev/null
endef

# An editable install leaves a PROJECT.egg-info in each source directory; the
# installed metadata lives in the venv, so these are litter.
define clean_egg_info
	rm -rf *.egg-info plugins/*/*.egg-info
endef

$(CORE_STAMP):
	$(call apt_install,$(APT_CORE))
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	touch $@

$(DEMO_STAMP): $(CORE_STAMP) pyproject.toml
	$(PIP) install -q -e . $(addprefix -e ,$(DEMO_PLUGINS))
	$(clean_egg_info)
	$(PY) -m compileall -q supervisor plugins >/dev/null
	touch $@

$(TEST_APT_STAMP): $(CORE_STAMP)
	$(call apt_install,$(APT_TEST))
	touch $@

$(DEV_STAMP): $(TEST_APT_STAMP) pyproject.toml $(PLUGINS) requirements-dev.txt
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q -e . $(addprefix -e ,$(dir $(PLUGINS)))
	$(clean_egg_info)
	$(PY) -m compileall -q supervisor plugins >/dev/null
	touch $@

setup: $(DEV_STAMP)

# The distributions: a wheel and an sdist of the core and of every plugin
# into dist/, checked as an index would check them (twine check --strict,
# each README as its package's description, no link that breaks there, the
# plugins' dependency on the core), then installed into a fresh virtualenv
# that runs `supervisor --version` and `supervisor plugins`.  The builds run
# in a temporary copy of the sources, so the tree gets no build/ or egg-info
# from them.  Needs only the build tools (and libvirt-dev, to install the
# libvirt plugin's libvirt-python), not the test suite's packages.
APT_DIST := libvirt-dev pkg-config
$(DIST_STAMP): $(CORE_STAMP) requirements-dev.txt
	$(if $(shell dpkg -s $(APT_DIST) >/dev/null 2>&1 || echo missing),$(call apt_install,$(APT_DIST)))
	$(PIP) install -q -r requirements-dev.txt
	touch $@

dist: $(DIST_STAMP)
	$(PY) tools/dist.py --out dist

# The Kubernetes control plane the tests start (etcd, kube-apiserver,
# kube-controller-manager, kube-proxy, kubectl and the controller-runtime
# workload), built from the pinned Go module in tests/cluster/go.  The
# binaries are cached outside the clone, keyed by version and a hash of the
# inputs: the first build takes about 7 minutes on 2 cores, later runs (and
# fresh clones on the same machine) reuse it in a second.
kube-bin:
	@tests/cluster/build.sh >/dev/null

# A control plane for a developer, until Ctrl-C; prints the KUBECONFIG.
cluster: $(DEV_STAMP) kube-bin
	$(PY) -m tests.cluster

# The whole cluster with a real kubelet and containerd in a network namespace
# of its own (tests/realnode), until Ctrl-C; prints the KUBECONFIG.
node: $(DEV_STAMP) kube-bin
	$(PY) -m tests.realnode

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check supervisor plugins tests examples benchmarks tools
	$(VENV)/bin/ruff format --check supervisor plugins tests examples benchmarks tools
	$(VENV)/bin/mypy --strict supervisor tools/dist.py
	$(VENV)/bin/mypy --strict plugins/sleep/supervisor_sleep.py plugins/exec/supervisor_exec plugins/http/supervisor_http \
		plugins/kubernetes/supervisor_kubernetes plugins/libvirt/supervisor_libvirt
	$(VENV)/bin/mypy --strict --follow-imports=silent -p tests.node -p tests.cluster -p tests.realnode -m benchmarks.scenarios.rollout

typecheck: lint

# Lint and type errors fail the run, but only after the tests have run, so
# one stray long line does not hide the state of the whole suite.  `make dist`
# (40 s; under 2 minutes on a busy machine) goes first: its fresh install of
# the wheels is also the regular install the benchmarks' smoke test measures.
test: $(DEV_STAMP) kube-bin
	@status=0; \
	$(MAKE) --no-print-directory dist || status=1; \
	$(VENV)/bin/pytest -n 2 --dist loadgroup -p no:cacheprovider tests $(wildcard plugins/*/tests) $(wildcard examples/plugins/*/tests) || status=$$?; \
	$(MAKE) --no-print-directory lint || status=1; \
	exit $$status

# `make test` on a busy machine, made so on purpose: the same suite, while
# CPU burners of its own (pytest's --burn-cpu, tests/conftest.py: one per
# core plus one, each ending by itself after 40 minutes at most, and killed
# by PID when pytest ends, passed or failed) keep every core busy.  The
# machines are shared; a suite that passes only when idle fails at random.
test-loaded:
	@PYTEST_ADDOPTS="$(PYTEST_ADDOPTS) --burn-cpu" $(MAKE) --no-print-directory test

demo: $(DEMO_STAMP)
	@examples/demo.sh

image: $(TEST_APT_STAMP)
	@tools/build-image.sh

bench: $(DEV_STAMP) kube-bin
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist
	$(clean_egg_info)

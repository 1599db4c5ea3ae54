"""The project's image in the real node's containerd.

The image is the one users build: ``tools/build-image.sh`` with the
kubernetes plugin (``tests/image``'s ``build_image``, podman's layer cache
keeps a second build short).  ``examples/kubernetes`` runs a controller at
``/manager``; a derived image adds the controller-runtime manager the tests
build (``tests/cluster/go/cmd/crmanager``, which takes the flags a
kubebuilder-made controller takes), as a user's Dockerfile adds their
controller ``FROM`` the project's image.  No registry: ``podman save`` writes
a docker-archive that ``ctr images import`` reads.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tests.image.image_tools import LABEL, build_image, podman

from ._cluster import RealNode

__all__ = [
    "APP_IMAGE",
    "DISTROLESS_IMAGE",
    "EXAMPLE_IMAGE",
    "QUIT_IMAGE",
    "load_app_image",
    "load_distroless_image",
    "load_example_image",
    "load_quit_image",
]

# Not `:latest`: pods then default to imagePullPolicy IfNotPresent, so the
# example's manifests need nothing but the image name changed.
EXAMPLE_IMAGE = "localhost/pid1-supervisor-example-controller:test"
# The rolling update's app (tests/node/app.py) under the supervisor.
APP_IMAGE = "localhost/pid1-supervisor-rollout-app:test"
APP = Path(__file__).resolve().parents[1] / "node" / "app.py"
# The same app in an image with no shell and no coreutils (no `sleep`).
DISTROLESS_IMAGE = "localhost/pid1-supervisor-distroless-app:test"
# The same app in an image whose stop signal is SIGQUIT.
QUIT_IMAGE = "localhost/pid1-supervisor-quit-app:test"
_SAVE_TIMEOUT = 300.0


def _derive(node: RealNode, tag: str, steps: str, files: dict[str, Path]) -> str:
    """An image ``FROM`` the project's (with the kubernetes plugin), as a
    user's Containerfile makes it: ``steps`` after the FROM line, ``files``
    (name in the build context: source) to COPY; imported into the node."""
    base = build_image(plugins=("kubernetes",))
    with tempfile.TemporaryDirectory(prefix="pid1-derived-image-") as tmp:
        context = Path(tmp)
        for name, source in files.items():
            shutil.copy2(source, context / name)
        (context / "Containerfile").write_text(f"FROM {base.name}\n{steps}")
        podman("build", "--label", LABEL, "--tag", tag, "--file", str(context / "Containerfile"), tmp)
        archive = context / "image.tar"
        podman("save", "--format", "docker-archive", "--output", str(archive), tag, timeout=_SAVE_TIMEOUT)
        node.import_image(archive)
    return tag


def load_example_image(node: RealNode) -> str:
    """The example controller's image: the controller at /manager."""
    # World-readable and executable: the example runs as 65532.
    return _derive(node, EXAMPLE_IMAGE, "COPY --chmod=0755 manager /manager\n", {"manager": node.bin_dir / "crmanager"})


def _app_image(node: RealNode, tag: str, steps: str = "") -> str:
    """The app at /app/app.py (run by the base's python3), then ``steps``."""
    return _derive(node, tag, f"COPY --chmod=0644 app.py /app/app.py\n{steps}", {"app.py": APP})


def load_app_image(node: RealNode) -> str:
    """The rolling update's app."""
    return _app_image(node, APP_IMAGE)


def load_distroless_image(node: RealNode) -> str:
    """The app's image with every program but the interpreter removed, as a
    distroless image has it: no shell, no ``sleep``, no coreutils.  The
    supervisor is a Python program and needs nothing else."""
    return _app_image(
        node,
        DISTROLESS_IMAGE,
        "USER 0\n"
        # The RUN's own shell is among what goes: it is already running.
        "RUN find /usr/bin /usr/sbin /usr/local/sbin -mindepth 1 ! -name 'python3*' -delete\n"
        "USER 65532:65532\n",
    )


def load_quit_image(node: RealNode) -> str:
    """The app's image with ``STOPSIGNAL SIGQUIT`` (as nginx's image has):
    the kubelet stops its containers with SIGQUIT."""
    return _app_image(node, QUIT_IMAGE, "STOPSIGNAL SIGQUIT\n")

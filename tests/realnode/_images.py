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

__all__ = ["APP_IMAGE", "EXAMPLE_IMAGE", "load_app_image", "load_example_image"]

# Not `:latest`: pods then default to imagePullPolicy IfNotPresent, so the
# example's manifests need nothing but the image name changed.
EXAMPLE_IMAGE = "localhost/pid1-supervisor-example-controller:test"
# The rolling update's app (tests/node/app.py) under the supervisor.
APP_IMAGE = "localhost/pid1-supervisor-rollout-app:test"
APP = Path(__file__).resolve().parents[1] / "node" / "app.py"
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


def load_app_image(node: RealNode) -> str:
    """The rolling update's app at /app/app.py, run by the base's python3."""
    return _derive(node, APP_IMAGE, "COPY --chmod=0644 app.py /app/app.py\n", {"app.py": APP})

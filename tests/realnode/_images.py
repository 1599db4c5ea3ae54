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

__all__ = ["EXAMPLE_IMAGE", "load_example_image"]

# Not `:latest`: pods then default to imagePullPolicy IfNotPresent, so the
# example's manifests need nothing but the image name changed.
EXAMPLE_IMAGE = "localhost/pid1-supervisor-example-controller:test"
_SAVE_TIMEOUT = 300.0


def load_example_image(node: RealNode) -> str:
    """Build the example controller's image and import it into the node."""
    base = build_image(plugins=("kubernetes",))
    with tempfile.TemporaryDirectory(prefix="pid1-example-image-") as tmp:
        context = Path(tmp)
        shutil.copy2(node.bin_dir / "crmanager", context / "manager")
        (context / "Containerfile").write_text(
            f"FROM {base.name}\n"
            # World-readable and executable: the example runs as 65532.
            "COPY --chmod=0755 manager /manager\n"
        )
        podman("build", "--label", LABEL, "--tag", EXAMPLE_IMAGE, "--file", str(context / "Containerfile"), tmp)
        archive = context / "image.tar"
        podman("save", "--format", "docker-archive", "--output", str(archive), EXAMPLE_IMAGE, timeout=_SAVE_TIMEOUT)
        node.import_image(archive)
    return EXAMPLE_IMAGE

"""``python -m tests.cluster``: a control plane for a developer, until Ctrl-C.

Builds (or reuses) the binaries, starts etcd, kube-apiserver and
kube-controller-manager on loopback and prints the admin KUBECONFIG; the
kubectl built from the same module is next to the other binaries.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ._controlplane import ControlPlane, ControlPlaneError
from ._interactive import interrupted, wait_until_set
from .kubelet import Kubelet


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="pid1-cluster-"))
    stop = interrupted()
    try:
        plane = ControlPlane(workdir).start()
    except ControlPlaneError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1
    try:
        with plane.admin_client() as api:
            Kubelet(api, "default")  # registers the Node the tests' pods are bound to
        print(f"export KUBECONFIG={plane.admin_kubeconfig}")
        print(f"export PATH={plane.bin_dir}:$PATH   # kubectl {plane.bin_dir / 'kubectl'}")
        print(f"# logs in {workdir}; Ctrl-C stops the cluster", flush=True)
        wait_until_set(stop)
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m tests.realnode``: the whole cluster with a real node, until Ctrl-C.

Builds (or reuses) the binaries, starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, containerd, kubelet and kube-proxy in
a network namespace of their own, and prints the admin KUBECONFIG (the API
server is reached through a relay on 127.0.0.1).  Needs root.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.cluster import ControlPlaneError
from tests.cluster._interactive import interrupted, wait_until_set

from ._cluster import RealNode


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realnode", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="work directory for logs and certificates (default: a new one)")
    parser.add_argument("--image", type=Path, action="append", default=[], help="an image archive to import")
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="pid1-realnode-"))
    stop = interrupted()
    try:
        node = RealNode(workdir).start()
    except ControlPlaneError as exc:
        print(f"realnode: {exc}", file=sys.stderr)
        return 1
    try:
        for image in args.image:
            node.import_image(image)
        print(f"export KUBECONFIG={node.admin_kubeconfig}")
        print(f"export PATH={node.bin_dir}:$PATH")
        print(f"# network namespace {node.name} (enter: nsenter --net=/run/netns/{node.name})")
        print(f"# logs in {workdir} and {node.dir}; Ctrl-C stops and removes the cluster", flush=True)
        wait_until_set(stop)
    finally:
        node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

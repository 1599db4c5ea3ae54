"""What every component of the node needs: the API client, the node's name
and network namespace, the API server's CA, and a directory for its files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._netns import NodeNetwork

__all__ = ["NodeSite"]


@dataclass(frozen=True)
class NodeSite:
    api: Any  # kubernetes.client.ApiClient with admin rights
    name: str  # the Node's name (the network namespace's too)
    network: NodeNetwork
    ca_file: Path
    workdir: Path

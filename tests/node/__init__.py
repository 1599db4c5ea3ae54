"""What the real node (``tests/realnode``) is built from and measured with,
on the network side: network namespaces, the relay that reaches a cluster
inside one, kube-proxy's rules read back (``RulesWatch``), the load
generator (``loadgen.py``, run by ``Load``) and the app the rolling update
runs (``app.py``).  See README.md in this directory."""

from ._load import Load
from ._netns import NetnsError, in_netns
from ._relay import Relay
from ._rules import RulesWatch, routed_ips

__all__ = ["Load", "NetnsError", "Relay", "RulesWatch", "in_netns", "routed_ips"]

"""``python -m benchmarks [--smoke] [--only SCENARIO ...]``."""

from __future__ import annotations

import sys

from ._cli import main

sys.exit(main(sys.argv[1:]))

"""Configuration files the security tests share."""

from __future__ import annotations

import json
from pathlib import Path

from tests.control._ctl import write_config


def pre_stop_request(tmp_path: Path, url: str, body_yaml: str = "") -> str:
    """A main ``sleep 60`` and one ``pre_stop`` request of the http plugin to
    ``url``; ``body_yaml`` (lines of YAML) is its ``json:`` body, if given."""
    body = "json:\n" + "\n".join(" " * 10 + line for line in body_yaml.splitlines()) if body_yaml else ""
    return write_config(
        tmp_path,
        f"""\
processes:
  - name: app
    main: true
    command: [sleep, "60"]
plugins:
  http:
    requests:
      - phase: pre_stop
        url: {json.dumps(url)}
        {body}
""",
    )

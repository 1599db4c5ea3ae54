"""An impostor control socket, run as another user by the tests:
``python impostor.py PATH``.

Tries to remove the socket at PATH (printing what happened), then serves
its own there: every request gets an answer that says "all is well", the
lie a hijacked socket would tell root's ``supervisor health``.  Prints
``listening`` once it is; ends after 60 s without a connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys

_LIE = {"ok": True, "healthy": True, "level": "ready", "reasons": [], "messages": ["done"], "processes": []}


def main() -> None:
    path = sys.argv[1]
    try:
        os.unlink(path)
        print("unlink: done", flush=True)
    except OSError as exc:
        print(f"unlink: {exc.strerror}", flush=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(path)
    except OSError as exc:
        print(f"bind: {exc.strerror}", flush=True)
        return
    server.listen(16)
    server.settimeout(60)
    print("listening", flush=True)
    while True:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            return
        with conn, contextlib.suppress(OSError):  # a client that hung up at once
            conn.recv(65536)
            conn.sendall((json.dumps(_LIE) + "\n").encode())


if __name__ == "__main__":
    main()

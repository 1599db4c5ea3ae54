"""A slowloris against a local port: ``python slowloris.py PORT COUNT SECONDS``.

Holds COUNT connections, each of which sends the start of a request head
and never finishes it; a connection the server drops is opened again at
once.  Stops after SECONDS (and never opens more than 50 times COUNT in
all), then prints one JSON line: connections opened, and how many the
server dropped.  Its own process, so that the test's probes, timed to the
millisecond, do not share an interpreter (and its lock) with it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import resource
import selectors
import socket
import sys
import time

_PARTIAL_HEAD = b"GET /livez HTTP/1.1\r\nHost: x\r\n"


class _Crowd:
    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.selector = selectors.DefaultSelector()
        self.opened = self.dropped = 0
        self.budget = 50 * count

    def fill(self) -> None:
        while len(self.selector.get_map()) < self.count and self.opened < self.budget:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            if sock.connect_ex(("127.0.0.1", self.port)) not in (0, errno.EINPROGRESS):
                sock.close()
                return
            self.opened += 1
            self.selector.register(sock, selectors.EVENT_WRITE, "connecting")

    def step(self) -> None:
        for key, _ in self.selector.select(timeout=0.05):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if key.data == "connecting":
                with contextlib.suppress(OSError):
                    sock.send(_PARTIAL_HEAD)
                    self.selector.modify(sock, selectors.EVENT_READ, "holding")
                    continue
                self._drop(sock)
                continue
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed (or reset) by the server: open another
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        self.selector.unregister(sock)
        sock.close()
        self.dropped += 1

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]


def main() -> None:
    port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    crowd = _Crowd(port, count)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        crowd.fill()
        crowd.step()
    holding = len(crowd.selector.get_map())
    print(json.dumps({"opened": crowd.opened, "dropped": crowd.dropped, "holding": holding}), flush=True)
    crowd.close()


if __name__ == "__main__":
    main()

"""A TCP relay between network namespaces, carried by threads of the test
process: a cluster that lives entirely in a network namespace
(``tests/realnode``) is reached from the test process through a listener on
the host's loopback whose connections are made inside that namespace
(``target_netns``).  The host's network stays untouched: no interface,
route or rule is added to it.  TLS passes through unchanged: the client
verifies the API server's own certificate.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

from ._netns import in_netns

__all__ = ["Relay"]


@dataclass
class Relay:
    target: tuple[str, int]
    target_netns: str | None = None  # connect to the target from inside this namespace
    _listeners: dict[str, socket.socket] = field(default_factory=dict)
    _connections: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def listen(self, netns: str | None, port: int | None = None) -> int:
        """Listen on 127.0.0.1 inside ``netns`` (the host's when None; on the
        target's port unless given); returns the port."""
        wanted = self.target[1] if port is None else port

        def bind() -> socket.socket:
            listener = socket.create_server(("127.0.0.1", wanted), backlog=64)
            return listener

        listener = bind() if netns is None else in_netns(netns, bind)
        with self._lock:
            self._listeners[netns or ""] = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name=f"relay-{netns}").start()
        return int(listener.getsockname()[1])

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._join, args=(client,), daemon=True).start()

    def _join(self, client: socket.socket) -> None:
        def connect() -> socket.socket:
            return socket.create_connection(self.target, timeout=5)

        try:
            upstream = connect() if self.target_netns is None else in_netns(self.target_netns, connect)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            if self._closed:
                client.close()
                upstream.close()
                return
            self._connections.update((client, upstream))
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
        self._pump(client, upstream)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            # Either side gone: drop both, as a dropped TCP path would.
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                for sock in (source, sink):
                    if sock in self._connections:
                        self._connections.discard(sock)
                        sock.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = [*self._listeners.values(), *self._connections]
            self._listeners.clear()
            self._connections.clear()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

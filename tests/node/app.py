"""The pods' workload: a small HTTP service that behaves at SIGTERM the way a
typical app does (Go's ``http.Server.Shutdown``, gunicorn, uvicorn): it
closes its listening socket at once, so new connections are refused, lets the
requests already accepted finish, and exits 0.

    python app.py [--port 8080] [--delay SECONDS]

``GET /`` answers ``200`` with the pod's name (``POD_NAME``, else the host
name), after ``--delay`` (a request that takes time, so that a shutdown can
meet one in flight); ``GET /healthz`` answers at once.  Run as a script (the
pod's command), it imports nothing from the repository.
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import socket
import socketserver
import sys
import threading
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pod-app/1"
    delay = 0.0
    name = socket.gethostname()

    def do_GET(self) -> None:
        if self.path != "/healthz" and self.delay:
            time.sleep(self.delay)
        body = f"{self.name}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the requests in flight
    request_queue_size = 128

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks DNS for the address's FQDN: a pod here
        # has no DNS, and the lookup's timeout would delay the start by seconds.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", self.server_address[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    Handler.delay = args.delay
    Handler.name = os.environ.get("POD_NAME") or socket.gethostname()
    # SIGTERM is blocked before any thread starts (every thread inherits the
    # mask) and taken with sigwait() by the main thread.  A Python handler
    # runs only when the main thread next executes bytecode, and a main
    # thread asleep in Event.wait() while request threads came and went was
    # seen never to run it: under load the app served on through its SIGTERM
    # until the SIGKILL.  A blocked signal stays pending until sigwait()
    # takes it, so none can be lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    server = Server(("0.0.0.0", args.port), Handler)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    print(f"listening on :{args.port} as {Handler.name}", flush=True)
    signal.sigwait({signal.SIGTERM})
    # Stop listening now: shutdown() of a listening socket puts it in CLOSE,
    # so the kernel refuses (RST) every connection that arrives from here on
    # and the ones queued but not yet accepted, as for any app that has closed
    # its port.
    server.socket.shutdown(socket.SHUT_RDWR)
    print("SIGTERM: not listening any more", flush=True)
    server.shutdown()
    server.server_close()  # waits for the requests already accepted
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

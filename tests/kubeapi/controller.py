"""A fake controller process: holds a leader Lease until SIGTERM, then exits
*without* releasing it (a crash, or a manager without ReleaseOnCancel), so
the supervisor's plugin has to hand it over.  Appends ``<event> <monotonic
time> <pid>`` lines (leading, sigterm, exit) to ``--report``::

    python -m tests.kubeapi.controller --namespace ns --lease name --identity pod_1234 \\
        --report events.txt [--service-account-dir DIR | --kubeconfig FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ._leader import LeaderElector, client_from


def main() -> int:
    parser = argparse.ArgumentParser(description="A fake controller that holds a leader Lease.")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--lease", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--report", required=True, help="file to append 'event monotonic-time' lines to")
    parser.add_argument("--service-account-dir")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--retry-period", type=float, default=0.5)
    parser.add_argument("--lease-duration", type=int, default=15)
    parser.add_argument("--exit-delay", type=float, default=0.2, help="time to 'finish work' after SIGTERM")
    args = parser.parse_args()
    report = Path(args.report)

    def note(event: str) -> None:
        with report.open("a") as f:
            f.write(f"{event} {time.monotonic():.6f} {os.getpid()}\n")

    terminated = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    elector = LeaderElector(
        client_from(service_account_dir=args.service_account_dir, kubeconfig=args.kubeconfig),
        args.namespace,
        args.lease,
        args.identity,
        lease_duration=args.lease_duration,
        retry_period=args.retry_period,
    ).start()
    elector.wait_until_leading(30)
    note("leading")
    terminated.wait()
    note("sigterm")
    elector.stop()  # no ReleaseOnCancel: the supervisor must hand the Lease over
    time.sleep(args.exit_delay)
    note("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())

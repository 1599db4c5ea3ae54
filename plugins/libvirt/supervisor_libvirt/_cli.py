"""``supervisor libvirt ...``: operators' commands for shutdown requests.

``request-shutdown`` marks domains the way a provider does (``requested-at``
in their live metadata) and sends the first graceful request; the running
supervisor's enforcer then re-sends it and destroys the domain once the grace
has passed.  A repeated request keeps the first ``requested-at`` (as repeated
deletes keep their deletion time) unless ``--reset`` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from supervisor import format_duration, parse_duration

from . import _domains as ops
from ._actions import FINAL
from ._binding import LibvirtFailure, guarded, libvirt_module
from ._metadata import ShutdownRequest, format_time
from ._settings import DEFAULT_URI

__all__ = ["add_commands"]

EXIT_FAILURE = 1
_IN_DEFINITION = "request in its persistent definition only: ignored (cancel-shutdown removes it)"
_CARRIED = "request in its persistent definition: every start carries it (cancel-shutdown removes it)"
T = TypeVar("T")


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "libvirt",
        help="libvirt guests: request, cancel and list shutdown requests",
        # Not the module's docstring: the image runs the supervisor with
        # python -OO, which drops it.
        description="Operators' commands for the shutdown requests of libvirt guests.",
    )
    commands = parser.add_subparsers(dest="libvirt_command", metavar="COMMAND", required=True)

    request = commands.add_parser(
        "request-shutdown",
        help="mark domains for shutdown; the enforcer destroys them after --grace",
    )
    request.add_argument("domains", nargs="+", metavar="DOMAIN")
    _uri(request)
    request.add_argument(
        "--grace",
        type=_duration,
        help="time the guest gets before it is destroyed (default: the enforcer's grace)",
    )
    request.add_argument(
        "--guest-agent",
        action="store_true",
        help="shut down through the QEMU guest agent (ACPI as fallback)",
    )
    request.add_argument(
        "--reset",
        action="store_true",
        help="restart the grace from now instead of keeping the first request's time",
    )
    request.add_argument(
        "--no-press",
        action="store_true",
        help="only mark the domain; let the enforcer send the request",
    )
    request.set_defaults(handler=request_shutdown)

    cancel = commands.add_parser("cancel-shutdown", help="remove domains' shutdown requests")
    cancel.add_argument("domains", nargs="+", metavar="DOMAIN")
    _uri(cancel)
    cancel.set_defaults(handler=cancel_shutdown)

    show = commands.add_parser("requests", help="list running domains with a shutdown request and their time left")
    _uri(show)
    show.set_defaults(handler=list_requests)


def _uri(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--uri",
        "-c",
        default=os.environ.get("LIBVIRT_DEFAULT_URI", DEFAULT_URI),
        help="libvirt connection URI (default: $LIBVIRT_DEFAULT_URI or %(default)s)",
    )


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _call(conn: Any, op: Callable[[Any], T]) -> T:
    """Run a domain operation on ``conn``; libvirt errors become LibvirtFailure."""
    return guarded(functools.partial(op, conn))


def _connected(args: argparse.Namespace, action: Callable[[Any], int]) -> int:
    try:
        libvirt = libvirt_module()
        conn = guarded(functools.partial(libvirt.open, args.uri))
    except LibvirtFailure as exc:
        print(f"supervisor libvirt: cannot connect to {args.uri}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        return action(conn)
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()


def request_shutdown(args: argparse.Namespace) -> int:
    def action(conn: Any) -> int:
        status = 0
        for name in args.domains:
            if not _request_one(conn, name, args):
                status = EXIT_FAILURE
        return status

    return _connected(args, action)


def _request_one(conn: Any, name: str, args: argparse.Namespace) -> bool:
    try:
        view = _call(conn, ops.get_request(name))
    except LibvirtFailure as exc:
        print(f"supervisor libvirt: {name}: {exc}", file=sys.stderr)
        return False
    if not view.active:
        # Written now, the request would land in the persistent definition
        # and every later start would be destroyed for it.
        print(f"supervisor libvirt: {name}: not running: nothing to shut down, no request written", file=sys.stderr)
        return False
    if view.in_definition:
        # A request in the persistent definition (written by something else
        # while the domain was off) is stale: drop it, start afresh.
        _call(conn, ops.remove_request(name))
        print(f"{name}: removed a request from its persistent definition")
    old = view.request
    keep = old is not None and old.requested_at is not None and not args.reset
    now = time.time()
    request = ShutdownRequest(
        requested_at=old.requested_at if keep and old is not None else now,
        grace=args.grace if args.grace is not None else (old.grace if old else None),
        guest_agent=args.guest_agent or (old is not None and old.guest_agent),
    )
    try:
        _call(conn, ops.set_request(name, request))
    except LibvirtFailure as exc:
        print(f"supervisor libvirt: {name}: cannot write the request: {exc}", file=sys.stderr)
        return False
    when = format_time(request.requested_at or now)
    grace = "the enforcer's grace" if request.grace is None else format_duration(request.grace)
    print(f"{name}: shutdown requested at {when}, grace {grace}")
    if not args.no_press:
        _press(conn, name, view.uuid, agent=request.guest_agent)
    return True


def _press(conn: Any, name: str, uuid: str, *, agent: bool) -> None:
    try:
        _call(conn, ops.request_shutdown(uuid, ops.shutdown_flags(agent=agent)))
    except LibvirtFailure as exc:
        if exc.code not in FINAL:
            print(f"supervisor libvirt: {name}: shutdown request failed: {exc}", file=sys.stderr)


def cancel_shutdown(args: argparse.Namespace) -> int:
    def action(conn: Any) -> int:
        status = 0
        for name in args.domains:
            try:
                removed = _call(conn, ops.remove_request(name))
            except LibvirtFailure as exc:
                print(f"supervisor libvirt: {name}: {exc}", file=sys.stderr)
                status = EXIT_FAILURE
                continue
            print(f"{name}: shutdown request removed" if removed else f"{name}: no shutdown request")
        return status

    return _connected(args, action)


def list_requests(args: argparse.Namespace) -> int:
    def action(conn: Any) -> int:
        try:
            domains = _call(conn, ops.list_domains())
            stale = _call(conn, ops.requests_in_definitions())
        except LibvirtFailure as exc:
            print(f"supervisor libvirt: cannot list domains: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        now = time.time()
        for domain in domains:
            request = domain.request
            if domain.request_error is not None:
                print(f"{domain.name}\tinvalid request: {domain.request_error}")
            elif domain.definition_only:
                print(f"{domain.name}\t{_IN_DEFINITION}")
            elif request.requested_at is not None:
                grace = "default grace" if request.grace is None else f"grace {format_duration(request.grace)}"
                age = format_duration(max(0.0, now - request.requested_at))
                when = format_time(request.requested_at)
                print(f"{domain.name}\trequested at {when} ({age} ago, {grace})")
        for name, _xml in stale:
            print(f"{name}\tshut off; {_CARRIED}")
        return 0

    return _connected(args, action)

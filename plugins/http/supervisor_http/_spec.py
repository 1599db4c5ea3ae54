"""The http plugin's settings: a list of requests, each bound to a phase."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from supervisor import (
    PHASES,
    PROCESS_PHASES,
    Config,
    HttpRequest,
    Settings,
    http_url_problem,
    plan_entries,
    read_entries,
    read_phase,
)

__all__ = ["PHASES", "PROCESS_PHASES", "Expect", "HttpSettings", "Request", "parse"]

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

_KEYS = (
    "phase",
    "process",
    "url",
    "method",
    "body",
    "json",
    "headers",
    "timeout",
    "attempt_timeout",
    "retry_interval",
    "expect",
    "tls_verify",
    "ca_file",
    "name",
)
_STATUS_CLASS = re.compile(r"^[1-5]xx$", re.IGNORECASE)
_USER_AGENT = "pid1-supervisor-http"


@dataclass(frozen=True, slots=True)
class Expect:
    """Accepted statuses, as inclusive ranges: ``2xx`` is (200, 299)."""

    ranges: tuple[tuple[int, int], ...] = ((200, 299),)

    def __contains__(self, status: int) -> bool:
        return any(low <= status <= high for low, high in self.ranges)

    def __str__(self) -> str:
        return ", ".join(f"{low // 100}xx" if high - low == 99 else str(low) for low, high in self.ranges)


@dataclass(frozen=True, slots=True)
class Request:
    """One request, retried until its status is in ``expect`` or ``timeout``
    (None: as long as the phase allows) runs out.  ``http`` is what each
    attempt sends; its ``timeout`` is the attempt's."""

    phase: str
    name: str
    http: HttpRequest
    process: str | None = None
    timeout: float | None = None
    retry_interval: float = 1.0
    expect: Expect = Expect()


@dataclass(frozen=True, slots=True)
class HttpSettings:
    requests: tuple[Request, ...]

    def plan(self) -> dict[str, str]:
        """Where ``supervisor check`` shows this plugin: the phases with requests."""
        return plan_entries(self.requests)


def parse(settings: Settings, config: Config) -> HttpSettings:
    """Read ``plugins.http``; every problem is recorded on ``settings``."""
    return HttpSettings(read_entries(settings, config, "requests", "a list of requests to make", _parse_request))


def _parse_request(entry: Settings, config: Config) -> Request | None:
    entry.check_keys(_KEYS)
    phase, process = read_phase(entry, config, noun="requests")
    url = _parse_url(entry)
    method = (entry.string("method") or "").upper() or ("POST" if _has_body(entry) else "GET")
    if method not in METHODS:
        entry.error("method", f"unknown method {method!r} (use one of {', '.join(METHODS)})")
    headers = dict(entry.mapping("headers"))
    body = _parse_body(entry, headers)
    headers.setdefault("User-Agent", _USER_AGENT)
    timeout = entry.duration("timeout")
    attempt_timeout = entry.duration("attempt_timeout", 5.0)
    retry_interval = entry.duration("retry_interval", 1.0)
    expect = _parse_expect(entry)
    tls_verify = entry.boolean("tls_verify", True)
    ca_file = entry.string("ca_file")
    name = entry.string("name")
    if phase is None or url is None:
        return None
    http = HttpRequest(
        url=url,
        method=method,
        headers=tuple(headers.items()),
        body=body,
        timeout=attempt_timeout,
        tls_verify=tls_verify,
        ca_file=ca_file,
    )
    return Request(
        phase=phase,
        name=name or str(http),
        http=http,
        process=process,
        timeout=timeout,
        retry_interval=retry_interval,
        expect=expect,
    )


def _parse_url(entry: Settings) -> str | None:
    url = entry.string("url", required=True)
    if url is None:
        return None
    problem = http_url_problem(url)
    if problem is not None:
        entry.error("url", problem)
        return None
    return url


def _has_body(entry: Settings) -> bool:
    return "body" in entry or "json" in entry


def _parse_body(entry: Settings, headers: dict[str, str]) -> bytes | None:
    if "body" in entry and "json" in entry:
        entry.error("json", "give either 'body' or 'json', not both")
        return None
    if "json" in entry:
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        return json.dumps(entry.raw("json")).encode()
    body = entry.string("body")
    return None if body is None else body.encode()


def _parse_expect(entry: Settings) -> Expect:
    ranges = []
    for item in entry.string_list("expect", ["2xx"]):
        text = item.strip()
        if text.isdigit() and 100 <= int(text) <= 599:
            ranges.append((int(text), int(text)))
        elif _STATUS_CLASS.match(text):
            low = int(text[0]) * 100
            ranges.append((low, low + 99))
        else:
            entry.error(
                "expect",
                f"invalid status {item!r}: use a code (200), a class (2xx) or a list of them",
            )
    return Expect(tuple(ranges)) if ranges else Expect()

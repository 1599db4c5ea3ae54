"""Secrets out of what we print: plans and logs end up in CI output and tickets.

A URL can carry two: the password of its user information and the values
of its query (``?token=...``).  Both are shown as ``***`` — also in a URL
that does not parse, whose error message would otherwise print it whole
(a password with ``/``, ``?`` or ``#`` in it, which should have been
percent-encoded, is such a URL or, worse, one that parses differently).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["http_url_problem", "redact_url"]

# scheme://user:PASSWORD@ up to the last @: what a person meant as user
# information, even when a reserved character in the password makes the
# URL parse otherwise.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#\s]*):(?P<password>[^\s]*)@")
_HIDDEN = "***"
_ENCODE = "percent-encode '/', '?', '#' and '@' in a user name or password (%2F, %3F, %23, %40)"


def redact_url(url: str) -> str:
    """``url`` with its password and its query's values replaced by ``***``.
    Errs on the side of hiding: an ``@`` after a port and a path may hide
    the path too."""
    match = _USERINFO.match(url)
    if match:
        url = f"{match['head']}:{_HIDDEN}@{url[match.end() :]}"
    before, hash_mark, fragment = url.partition("#")
    base, question_mark, query = before.partition("?")
    if not question_mark:
        return url
    items = [f"{item.partition('=')[0]}={_HIDDEN}" if "=" in item else _HIDDEN for item in query.split("&") if item]
    return f"{base}?{'&'.join(items)}{hash_mark}{fragment}"


def http_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as an ``http://`` or ``https://`` URL, in
    one line that shows it redacted; None if nothing."""
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for an invalid port
    except ValueError as exc:
        # The parser's reason may quote a piece of the password.
        reason = str(exc) if not _USERINFO.match(url) else _ENCODE
        return f"invalid URL {shown!r}: {reason}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"expected an http:// or https:// URL such as http://127.0.0.1:8080/healthz, got {shown!r}"
    return None

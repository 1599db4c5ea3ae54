"""``${VAR}`` expansion in configuration strings, from the supervisor's environment.

The syntax is the POSIX shell's parameter expansion, restricted to the forms a
deployment file needs (as docker compose does): ``${VAR}``, ``${VAR:-default}``
(unset or empty), ``${VAR-default}`` (unset only), ``${VAR:?message}`` and
``${VAR?message}`` (required), and ``$$`` for a literal ``$``.  A ``$`` followed
by anything else is kept as it is, so ``sh -c 'echo $HOME'`` still reaches the
shell unchanged.  Defaults may themselves contain ``${...}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["ExpansionError", "expand"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Anything(dict[str, str]):
    """An environment in which every variable is set (to ""), for parsing only."""

    def get(self, key: str, default: object = None) -> str:
        return ""


_ANY = _Anything()


class ExpansionError(ValueError):
    """A reference that cannot be expanded; the message says why and how to fix it."""


def expand(text: str, environ: Mapping[str, str]) -> str:
    """Return ``text`` with every reference replaced; raise ExpansionError."""
    if "$" not in text:
        return text
    result, end = _expand(text, 0, environ, nested=False)
    assert end == len(text)
    return result


def _expand(text: str, start: int, environ: Mapping[str, str], *, nested: bool) -> tuple[str, int]:
    """Expand from ``start`` up to the end, or up to the ``}`` closing a nested default.

    Returns the expansion and the index just past what was consumed (the
    closing brace itself is left for the caller).
    """
    out: list[str] = []
    i = start
    while i < len(text):
        char = text[i]
        if nested and char == "}":
            return "".join(out), i
        if char != "$" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "{":
            value, i = _reference(text, i, environ)
            out.append(value)
        else:
            out.append(char)
            i += 1
    if nested:
        raise ExpansionError(f"unterminated variable reference in {text!r}: missing '}}'")
    return "".join(out), i


def _reference(text: str, dollar: int, environ: Mapping[str, str]) -> tuple[str, int]:
    """Expand the ``${...}`` starting at ``dollar``; return it and the index after ``}``."""
    name_match = _NAME.match(text, dollar + 2)
    if name_match is None:
        raise ExpansionError(
            f"invalid variable reference in {text!r} at '{text[dollar : dollar + 12]}': "
            "use ${NAME} or ${NAME:-default} with a name of letters, digits and _, "
            "or $$ for a literal $"
        )
    name = name_match.group()
    i = name_match.end()
    value = environ.get(name)
    if text.startswith("}", i):
        if value is None:
            raise ExpansionError(
                f"environment variable {name} is not set and ${{{name}}} has no default: "
                f"set it or write ${{{name}:-default}}"
            )
        return value, i + 1
    for operator in (":-", "-", ":?", "?"):
        if text.startswith(operator, i):
            break
    else:
        raise ExpansionError(
            f"invalid variable reference in {text!r} after ${{{name}: expected '}}', ':-default' or '-default'"
        )
    missing = value is None or (operator.startswith(":") and value == "")
    # Like a shell, an unused default is only parsed, never evaluated: an
    # unset variable inside it is not an error.
    word, close = _expand(text, i + len(operator), environ if missing else _ANY, nested=True)
    if not missing:
        assert value is not None
        return value, close + 1
    if operator.endswith("-"):
        return word, close + 1
    raise ExpansionError(f"environment variable {name} is required: {word or 'not set'}")

"""Label and field selectors, parsed the way the API server parses them.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``,
``a`` and ``!a``, joined by commas.  Field selectors: ``path=value``,
``path==value`` and ``path!=value`` on the fields a resource supports (for
most resources only ``metadata.name`` and ``metadata.namespace``); anything
else is a 400, as on a real cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SelectorError", "parse_field_selector", "parse_label_selector"]

Matcher = Callable[[Mapping[str, Any]], bool]

_SET_TERM = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


class SelectorError(ValueError):
    """A selector the API server would reject with 400 Bad Request."""


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside ``in (...)`` parentheses."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    if match := _SET_TERM.match(term):
        key, op, values_text = match.groups()
        values = {v.strip() for v in values_text.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQ_TERM.match(term):
        key, op, value = match.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS_TERM.match(term):
        negate, key = match.groups()
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {term.strip()!r}")


def parse_label_selector(text: str | None) -> Matcher:
    """A predicate on whole objects (their ``metadata.labels``)."""
    if not text:
        return lambda obj: True
    terms = [_label_term(t) for t in _split_terms(text)]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(term(labels) for term in terms)

    return matches


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    return "" if node is None else str(node)


def parse_field_selector(text: str | None, supported: frozenset[str]) -> Matcher:
    """A predicate on whole objects; ``supported`` lists the field paths the
    resource allows (the API server rejects others)."""
    if not text:
        return lambda obj: True
    checks: list[tuple[str, bool, str]] = []
    for term in _split_terms(text):
        match = _EQ_TERM.match(term)
        if match is None:
            raise SelectorError(f"invalid selector: {term.strip()!r}; can't understand it")
        path, op, value = match.groups()
        if path not in supported:
            raise SelectorError(f'field label not supported: "{path}"')
        checks.append((path, op != "!=", value))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in checks)

    return matches

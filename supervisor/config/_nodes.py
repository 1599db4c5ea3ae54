"""The parsed YAML tree that validation reads: plain values with positions.

Produced by ``_source`` from PyYAML's composed nodes, after tags, duplicate keys
and ``${VAR}`` references have been dealt with, so readers only check types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._position import Position

__all__ = ["Node", "Scalar", "child_path", "one_line"]

Scalar = None | bool | int | float | str


@dataclass(eq=False, slots=True)
class Node:
    """A value from the file and where it was written.

    ``text`` is a scalar as written (after ``${VAR}`` expansion): ``8080``,
    ``yes`` or ``1.10`` where a string is wanted means what the user typed, not
    YAML 1.1's reading of it.  ``keys`` holds the position of each mapping key.
    ``bad`` marks a value whose problem is already reported, so readers stay
    silent about it instead of reporting a second, confusing problem.
    """

    value: Scalar | list[Node] | dict[str, Node]
    position: Position
    text: str = ""
    keys: dict[str, Position] = field(default_factory=dict)
    bad: bool = False

    @property
    def is_scalar(self) -> bool:
        return not isinstance(self.value, list | dict)

    def kind(self) -> str:
        """The type's name as a YAML user knows it, for messages."""
        value = self.value
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "a boolean"
        if isinstance(value, int | float):
            return "a number"
        if isinstance(value, str):
            return "a string"
        if isinstance(value, list):
            return "a list"
        return "a mapping"

    def describe(self) -> str:
        """The value for a message: ``'abc'``, ``42``, ``true``, ``a list``."""
        value = self.value
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return _shorten(self.text or repr(value))
        if isinstance(value, str):
            return repr(_shorten(value))
        return self.kind()

    def to_python(self) -> object:
        """Plain dicts, lists and scalars (shared sub-trees stay shared)."""
        return _to_python(self, {})


def _to_python(node: Node, memo: dict[int, object]) -> object:
    done = memo.get(id(node))
    if done is not None:
        return done
    value = node.value
    if isinstance(value, list):
        items: list[object] = []
        memo[id(node)] = items
        items.extend(_to_python(item, memo) for item in value)
        return items
    if isinstance(value, dict):
        mapping: dict[str, object] = {}
        memo[id(node)] = mapping
        mapping.update((key, _to_python(item, memo)) for key, item in value.items())
        return mapping
    return value


def child_path(path: str, key: str) -> str:
    """``path.key`` for messages; a key that would read ambiguously is quoted."""
    if key and key.isprintable() and not any(c in key for c in " .[]'\""):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def one_line(message: str) -> str:
    """A message that stays on one line, whatever text from the file it quotes."""
    lines = message.splitlines()
    if len(lines) <= 1 and not message.endswith(("\n", "\r")):
        return message
    return " ".join(line.strip() for line in lines)


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."

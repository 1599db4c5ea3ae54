"""``Settings``: typed, position-aware reading of one section of the YAML.

Used for plugin sections (``plugins: {name: {...}}``) and, inside this
package, for every other section too, so that the file's own keys and the
plugins' keys are checked the same way and reported in the same words.
Problems are recorded, not raised: the caller reports all of them at once.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import overload

from .._units import parse_duration, parse_signal
from ._errors import Problem
from ._nodes import Node, child_path
from ._position import Position

__all__ = ["HOOK_TIMEOUT_KEY", "HOST_KEYS", "Settings"]

# The plugin host's own key, allowed in every plugin's section: the limit the
# host puts on each of that plugin's hook calls.  Spelled once, here, where
# sections are checked; the host reads the value under the same name.
HOOK_TIMEOUT_KEY = "hook_timeout"
# Keys the host reads in every plugin section, so no plugin's check_keys
# calls them unknown.
HOST_KEYS = (HOOK_TIMEOUT_KEY,)


class Settings:
    """One mapping of the configuration, read with type checks.

    Every reader takes a key and a default: a missing key (or one whose value
    is null) gives the default; a value of the wrong type or form records a
    problem at its ``FILE:LINE:COLUMN`` and also gives the default, so that a
    plugin can go on and report its other problems in the same run.
    ``${VAR}`` references are already expanded in every string.

    ``problems`` is shared with the nested sections (``section()``,
    ``sections()``); whoever created the top section raises ``ConfigError``
    from it.
    """

    def __init__(
        self,
        node: Node | None,
        *,
        path: str,
        problems: list[Problem] | None = None,
        reserved: Iterable[str] = HOST_KEYS,
    ) -> None:
        self.path = path
        self.position: Position | None = node.position if node is not None else None
        self.problems: list[Problem] = [] if problems is None else problems
        self._values: dict[str, Node] = node.value if node is not None and isinstance(node.value, dict) else {}
        self._keys: dict[str, Position] = node.keys if node is not None else {}
        self._reserved = tuple(reserved)

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], *, path: str = "plugins.test") -> Settings:
        """Settings from plain Python data, without positions (for tests and embedders)."""
        return cls(_node_from_python(data, Position("<memory>", 1, 1)), path=path)

    def __repr__(self) -> str:
        return f"Settings({self.path!r}, keys={self.keys()!r})"

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def keys(self) -> list[str]:
        return list(self._values)

    def position_of(self, key: str) -> Position | None:
        """Where the key's value is written (the section's position if it is absent)."""
        node = self._values.get(key)
        return node.position if node is not None else self.position

    def key_position(self, key: str) -> Position | None:
        """Where the key itself is written (the section's position if it is absent)."""
        return self._keys.get(key, self.position)

    def name(self, key: str | None) -> str:
        """The dotted path of ``key`` in this section, for messages."""
        if key is None:
            return self.path
        return child_path(self.path, key)

    def error(self, key: str | None, message: str) -> None:
        """Record a problem at the key's value (``None``: at the section)."""
        position = self.position if key is None else self.position_of(key)
        self.problems.append(Problem(position, f"{self.name(key)}: {message}"))

    def error_at_key(self, key: str, message: str) -> None:
        """Record a problem at the key itself (for a key that should not be there)."""
        self.problems.append(Problem(self.key_position(key), message))

    def check_keys(self, allowed: Iterable[str]) -> None:
        """Record a problem for each key not in ``allowed``, with a "did you mean" hint."""
        known = [*allowed, *self._reserved]
        where = f" in {self.path}" if self.path else ""
        for key in self._values:
            if key in known:
                continue
            import difflib  # only for a wrong key: not in the memory of every run

            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            if close:
                hint = f"did you mean {close[0]!r}?"
            elif known:
                hint = "expected one of: " + ", ".join(sorted(known))
            else:
                hint = "this section takes no keys"
            self.error_at_key(key, f"unknown key {key!r}{where} ({hint})")

    def _get(self, key: str, required: bool) -> Node | None:
        """The key's node, or None if absent, null, or already reported as bad."""
        node = self._values.get(key)
        if node is None or node.value is None:
            if required and (node is None or not node.bad):
                if node is None:
                    self.error(None, f"missing required key {key!r}")
                else:
                    self.error(key, "a value is required")
            return None
        if node.bad:
            return None
        return node

    def raw(self, key: str, default: object = None) -> object:
        """The value as plain Python data (dicts, lists, str, int, float, bool, None)."""
        node = self._values.get(key)
        if node is None or node.bad:
            return default
        return node.to_python()

    @overload
    def string(
        self,
        key: str,
        default: str,
        *,
        required: bool = False,
        choices: Iterable[str] | None = None,
    ) -> str: ...
    @overload
    def string(
        self,
        key: str,
        default: None = None,
        *,
        required: bool = False,
        choices: Iterable[str] | None = None,
    ) -> str | None: ...
    def string(
        self,
        key: str,
        default: str | None = None,
        *,
        required: bool = False,
        choices: Iterable[str] | None = None,
    ) -> str | None:
        """A string; a number is taken as written (``8080``, ``1.10``)."""
        node = self._get(key, required)
        if node is None:
            return default
        options = list(choices) if choices is not None else None
        if options is not None and isinstance(node.value, bool):
            # `restart: no` is YAML 1.1's false: say what is expected instead.
            self.error(key, f"expected one of {', '.join(options)}, got {node.describe()}")
            return default
        text = self._text(key, node, "a string")
        if text is None:
            return default
        if options is not None and text not in options:
            self.error(key, f"expected one of {', '.join(options)}, got {node.describe()}")
            return default
        return text

    def _text(self, key: str, node: Node, expected: str) -> str | None:
        if isinstance(node.value, str):
            return node.value
        if isinstance(node.value, bool):
            self.error(key, f"expected {expected}, got {node.describe()} (quote it: '{node.text}')")
            return None
        if isinstance(node.value, int | float):
            return node.text
        self.error(key, f"expected {expected}, got {node.describe()}")
        return None

    def boolean(self, key: str, default: bool = False) -> bool:
        """true or false."""
        node = self._get(key, False)
        if node is None:
            return default
        if not isinstance(node.value, bool):
            self.error(key, f"expected true or false, got {node.describe()}")
            return default
        return node.value

    @overload
    def integer(self, key: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int: ...
    @overload
    def integer(
        self,
        key: str,
        default: None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None: ...
    def integer(
        self,
        key: str,
        default: int | None = None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        """A whole number, optionally within ``minimum``..``maximum``."""
        node = self._get(key, False)
        if node is None:
            return default
        value = node.value
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, f"expected a whole number, got {node.describe()}")
            return default
        if not self._in_range(key, value, minimum, maximum):
            return default
        return value

    @overload
    def number(self, key: str, default: float, *, minimum: float | None = None) -> float: ...
    @overload
    def number(self, key: str, default: None = None, *, minimum: float | None = None) -> float | None: ...
    def number(self, key: str, default: float | None = None, *, minimum: float | None = None) -> float | None:
        """A finite number (whole or decimal), optionally at least ``minimum``."""
        node = self._get(key, False)
        if node is None:
            return default
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(key, f"expected a number, got {node.describe()}")
            return default
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            self.error(key, f"expected a finite number, got {node.describe()}")
            return default
        if not self._in_range(key, number, minimum, None):
            return default
        return number

    def _in_range(self, key: str, value: float, minimum: float | None, maximum: float | None) -> bool:
        if minimum is not None and value < minimum:
            self.error(key, f"must be at least {minimum:g}, got {value:g}")
            return False
        if maximum is not None and value > maximum:
            self.error(key, f"must be at most {maximum:g}, got {value:g}")
            return False
        return True

    @overload
    def duration(self, key: str, default: float, *, required: bool = False) -> float: ...
    @overload
    def duration(self, key: str, default: None = None, *, required: bool = False) -> float | None: ...
    def duration(self, key: str, default: float | None = None, *, required: bool = False) -> float | None:
        """Seconds, from ``30``, ``"30s"``, ``"500ms"``, ``"1.5s"``, ``"2m"`` or ``"1h"``."""
        node = self._get(key, required)
        if node is None:
            return default
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.error(key, f"expected a duration such as 30s or 500ms, got {node.describe()}")
            return default
        try:
            seconds = parse_duration(value)
        except (ValueError, OverflowError) as exc:
            self.error(key, str(exc) if not isinstance(exc, OverflowError) else "the duration is too long")
            return default
        if not math.isfinite(seconds):
            self.error(key, f"the duration is too long: {node.describe()}")
            return default
        return seconds

    def signal(self, key: str, default: int) -> int:
        """A signal number from ``TERM``, ``SIGTERM``, ``sigterm`` or ``15``."""
        node = self._get(key, False)
        if node is None:
            return default
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | str):
            self.error(key, f"expected a signal name such as TERM or a number, got {node.describe()}")
            return default
        try:
            return parse_signal(value)
        except ValueError as exc:
            self.error(key, str(exc))
            return default

    def signal_set(self, key: str, default: frozenset[int], parse: Callable[[str | int], int]) -> frozenset[int]:
        """A non-empty list of signals (``[QUIT, TERM]``; one name is a list
        of one), each checked by ``parse``; a problem names the item."""
        node = self._get(key, False)
        if node is None:
            return default
        items = node.value if isinstance(node.value, list) else [node]
        if not items:
            self.error(key, "expected a list of signals such as [QUIT, TERM], got an empty list")
            return default
        found: set[int] = set()
        for index, item in enumerate(items):
            where = f"{self.name(key)}[{index}]" if isinstance(node.value, list) else self.name(key)
            value = item.value
            if item.bad:
                return default
            if isinstance(value, bool) or not isinstance(value, int | str):
                self.problems.append(
                    Problem(item.position, f"{where}: expected a signal name such as TERM, got {item.describe()}")
                )
                return default
            try:
                found.add(parse(value))
            except ValueError as exc:
                self.problems.append(Problem(item.position, f"{where}: {exc}"))
                return default
        return frozenset(found)

    def string_list(self, key: str, default: Iterable[str] = ()) -> tuple[str, ...]:
        """A list of strings; a single string is a list of one."""
        node = self._get(key, False)
        if node is None:
            return tuple(default)
        if not isinstance(node.value, list):
            text = self._text(key, node, "a list of strings")
            return (text,) if text is not None else tuple(default)
        items = self._items(key, node, "a string")
        return tuple(items) if items is not None else tuple(default)

    def _items(self, key: str, node: Node, expected: str) -> list[str] | None:
        assert isinstance(node.value, list)
        items: list[str] = []
        ok = True
        for index, item in enumerate(node.value):
            if item.bad:
                ok = False
                continue
            if isinstance(item.value, str):
                items.append(item.value)
            elif item.value is not None and item.is_scalar:
                # [sleep, 5] and [echo, yes] mean what is written.
                items.append(item.text)
            else:
                self.problems.append(
                    Problem(
                        item.position,
                        f"{self.name(key)}[{index}]: expected {expected}, got {item.describe()}",
                    )
                )
                ok = False
        return items if ok else None

    def command(self, key: str, *, required: bool = False) -> tuple[str, ...] | None:
        """An argv: a list of strings, or one string split as a shell would (no shell runs)."""
        node = self._get(key, required)
        argv = self._argv(key, node) if node is not None else None
        if argv is None:
            return None
        if not argv or not argv[0]:
            self.error(key, "the command is empty")
            return None
        if any("\0" in arg for arg in argv):
            self.error(key, "the command contains a NUL character")
            return None
        return tuple(argv)

    def _argv(self, key: str, node: Node) -> list[str] | None:
        """The command's words as written, before they are checked."""
        if isinstance(node.value, str):
            try:
                return shlex.split(node.value)
            except ValueError as exc:
                self.error(key, f"cannot split the command line: {exc} (or write it as a list)")
                return None
        if isinstance(node.value, list):
            return self._items(key, node, "a string (one argument)")
        self.error(key, f"expected a command (a list of strings, or a string), got {node.describe()}")
        return None

    def mapping(self, key: str) -> dict[str, str]:
        """A mapping of strings to strings; numbers and booleans are taken as written."""
        node = self._get(key, False)
        if node is None:
            return {}
        if not isinstance(node.value, dict):
            self.error(key, f"expected a mapping of names to strings, got {node.describe()}")
            return {}
        result: dict[str, str] = {}
        for name, item in node.value.items():
            if item.bad:
                continue
            if item.value is None or not item.is_scalar:
                what = "null (write '' for an empty string)" if item.value is None else item.describe()
                self.problems.append(
                    Problem(
                        item.position,
                        f"{child_path(self.name(key), name)}: expected a string, got {what}",
                    )
                )
                continue
            result[name] = item.value if isinstance(item.value, str) else item.text
        return result

    def section(self, key: str, *, required: bool = False) -> Settings | None:
        """A nested mapping as Settings (sharing this section's problems), or None if absent."""
        node = self._get(key, required)
        if node is None:
            return None
        if not isinstance(node.value, dict):
            self.error(key, f"expected a mapping, got {node.describe()}")
            return None
        return Settings(node, path=self.name(key), problems=self.problems, reserved=())

    def sections(self, key: str) -> list[Settings]:
        """A list of mappings as Settings (a single mapping is a list of one)."""
        node = self._get(key, False)
        if node is None:
            return []
        if isinstance(node.value, dict):
            return [Settings(node, path=self.name(key), problems=self.problems, reserved=())]
        if not isinstance(node.value, list):
            self.error(key, f"expected a list of mappings, got {node.describe()}")
            return []
        result = []
        for index, item in enumerate(node.value):
            path = f"{self.name(key)}[{index}]"
            if item.bad:
                continue
            if not isinstance(item.value, dict):
                self.problems.append(Problem(item.position, f"{path}: expected a mapping, got {item.describe()}"))
                continue
            result.append(Settings(item, path=path, problems=self.problems, reserved=()))
        return result


def _node_from_python(value: object, position: Position) -> Node:
    if isinstance(value, Mapping):
        return Node({str(k): _node_from_python(v, position) for k, v in value.items()}, position)
    if isinstance(value, list | tuple):
        return Node([_node_from_python(v, position) for v in value], position)
    if value is None or isinstance(value, bool | int | float | str):
        text = value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        return Node(value, position, text="" if value is None else text)
    raise TypeError(f"Settings.from_mapping: unsupported value {value!r}")

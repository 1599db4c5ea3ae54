"""The configuration file parsed in a short-lived child process.

The orchestrator reads its file once and then runs for the pod's life.
Parsed in place, PyYAML (and ``datetime`` and ``base64``, which its
constructor imports) would stay in its memory all that time for nothing:
about 1 MiB of an idle orchestrator, which is mostly the code of the modules
it has imported.  ``parse_file_apart`` forks; the child parses (``_source``)
and sends the positioned tree back through a pipe as ``marshal`` data (a
builtin module that can only carry plain values), and the tree is rebuilt
here, shared sub-trees (YAML aliases) still shared.  The parent never
imports PyYAML.

Anything unusual (fork fails, the child dies or sends what does not decode,
other threads run, which a fork would not copy) and the file is parsed here
instead, with the same result or the same exception as ever.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Mapping
from typing import Any, NoReturn, TypeAlias

from ._errors import Problem
from ._nodes import Node
from ._position import Position

__all__ = ["parse_file_apart"]

Parsed: TypeAlias = tuple[Node | None, list[Problem]]


def parse_file_apart(path: str, environ: Mapping[str, str]) -> Parsed:
    """``_source.parse_file``'s result, parsed by a child process."""
    parsed = None if _other_threads() else _parse_in_child(path, environ)
    if parsed is not None:
        return parsed
    from ._source import parse_file

    return parse_file(path, environ)


def _other_threads() -> bool:
    threading = sys.modules.get("threading")
    return threading is not None and threading.active_count() > 1


def _parse_in_child(path: str, environ: Mapping[str, str]) -> Parsed | None:
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        child = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if child == 0:  # pragma: no cover - runs in the child, which never returns
        _child(path, environ, read_end, write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(child, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    try:
        return _decode(marshal.loads(data))
    except (ValueError, EOFError, TypeError, KeyError, IndexError):
        return None


def _child(path: str, environ: Mapping[str, str], read_end: int, write_end: int) -> NoReturn:
    """Parse, send, exit: never return into the parent's code, never flush
    the parent's buffered output a second time."""
    code = 1
    try:
        os.close(read_end)
        from ._source import parse_file

        data = marshal.dumps(_encode(parse_file(path, environ)))
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(data)
        code = 0
    finally:
        os._exit(code)


# A node travels as (value, position, text, keys, bad): the value a scalar, a
# list or a dict of encoded nodes; a position as (file, line, column).


def _encode(parsed: Parsed) -> tuple[Any, list[Any]]:
    root, problems = parsed
    memo: dict[int, tuple[Any, ...]] = {}
    encoded_root = None if root is None else _encode_node(root, memo)
    return encoded_root, [(_encode_position(p.position), p.message) for p in problems]


def _encode_node(node: Node, memo: dict[int, tuple[Any, ...]]) -> tuple[Any, ...]:
    # One tuple per node, however often aliases refer to it: marshal writes
    # an object seen before as a reference, so the sharing survives.
    done = memo.get(id(node))
    if done is not None:
        return done
    value: Any = node.value
    if isinstance(value, list):
        value = [_encode_node(item, memo) for item in value]
    elif isinstance(value, dict):
        value = {key: _encode_node(item, memo) for key, item in value.items()}
    keys = {key: _encode_position(position) for key, position in node.keys.items()}
    encoded = (value, _encode_position(node.position), node.text, keys, node.bad)
    memo[id(node)] = encoded
    return encoded


def _encode_position(position: Position | None) -> tuple[str, int, int] | None:
    return None if position is None else (position.file, position.line, position.column)


def _decode(data: tuple[Any, list[Any]]) -> Parsed:
    encoded_root, encoded_problems = data
    memo: dict[int, Node] = {}
    root = None if encoded_root is None else _decode_node(encoded_root, memo)
    return root, [Problem(_decode_position(position), message) for position, message in encoded_problems]


def _decode_node(encoded: tuple[Any, ...], memo: dict[int, Node]) -> Node:
    done = memo.get(id(encoded))
    if done is not None:
        return done
    value, position, text, keys, bad = encoded
    if isinstance(value, list):
        value = [_decode_node(item, memo) for item in value]
    elif isinstance(value, dict):
        value = {key: _decode_node(item, memo) for key, item in value.items()}
    node = Node(value, Position(*position), text, {key: Position(*p) for key, p in keys.items()}, bad)
    memo[id(encoded)] = node
    return node


def _decode_position(position: tuple[str, int, int] | None) -> Position | None:
    return None if position is None else Position(*position)

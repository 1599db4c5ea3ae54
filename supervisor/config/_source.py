"""From a file to a tree of positioned plain values (``Node``), or problems.

PyYAML's ``compose`` keeps every node's position; construction is done here
instead of by a PyYAML constructor so that only plain data is built (no tag
may construct an object), duplicate and non-string keys are reported rather
than silently resolved, and ``${VAR}`` references are expanded with the
position of the string they came from.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Mapping

import yaml

from ._envsubst import ExpansionError, expand
from ._errors import Problem
from ._nodes import Node, Scalar, child_path
from ._position import Position

__all__ = ["MAX_DEPTH", "MAX_VALUES", "parse_file", "parse_text"]

_TAG = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ, _MERGE = _TAG + "str", _TAG + "map", _TAG + "seq", _TAG + "merge"
# A deployment's file is a few kilobytes; this only stops /dev/zero and the like.
_MAX_SIZE = 16 << 20
# Values a document may hold with its aliases expanded: whoever reads a part
# of the tree as plain data (a plugin's JSON body, say) expands them.
MAX_VALUES = 100_000
# How deep collections may nest.  A deployment's file needs five or six
# levels; PyYAML composes (and this module converts) nested collections by
# recursion, so without a bound of its own the outcome would depend on the
# interpreter's recursion limit, which a test framework or an embedder may
# have raised: a deep document would then parse, or overflow the C stack.
MAX_DEPTH = 100
# Scalars kept as the text written: dates stay strings (nobody wants a
# datetime for a path), and "=" is YAML 1.1's obscure "value" key.
_AS_TEXT = {_STR, _TAG + "timestamp", _TAG + "value", _MERGE}


def parse_file(path: str, environ: Mapping[str, str]) -> tuple[Node | None, list[Problem]]:
    """Read, decode and parse ``path``; None with problems if that failed."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(_MAX_SIZE + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, [Problem(None, f"{path}: cannot read the configuration: {reason}")]
    if len(data) > _MAX_SIZE:
        message = f"{path}: the configuration is larger than {_MAX_SIZE >> 20} MiB; is it the right file?"
        return None, [Problem(None, message)]
    try:
        text = _decode(data)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        byte = data[exc.start : exc.start + 1].hex()
        message = f"the file is not valid UTF-8 text (byte 0x{byte}); save it as UTF-8"
        return None, [Problem(Position(path, line, column), message)]
    return parse_text(text, path, environ)


def parse_text(text: str, file: str, environ: Mapping[str, str]) -> tuple[Node | None, list[Problem]]:
    """Parse YAML text; ``file`` names it in positions."""
    root, problem = _compose(text, file)
    if problem is not None:
        return None, [problem]
    if root is None:
        return None, []
    converter = _Converter(file, environ)
    try:
        node = converter.convert(root)
    except RecursionError:
        return None, [Problem(_position(file, root), "the document is nested too deeply")]
    return node, converter.problems


def _compose(text: str, file: str) -> tuple[yaml.Node | None, Problem | None]:
    """PyYAML's node tree (None for an empty document), or the one problem
    that stopped PyYAML, as a positioned line."""
    try:
        return yaml.compose(text, Loader=_DepthLimitedLoader), None
    except yaml.MarkedYAMLError as exc:
        return None, _yaml_problem(exc, file, text)
    except yaml.reader.ReaderError as exc:
        line, column = _line_column(text, exc.position)
        char = f"U+{exc.character:04X}" if isinstance(exc.character, int) else repr(exc.character)
        message = f"invalid YAML: the character {char} is not allowed in a YAML file"
        return None, Problem(Position(file, line, column), message)
    except yaml.YAMLError as exc:  # no position known (not raised by PyYAML 6 for text input)
        return None, Problem(Position(file, 1, 1), f"invalid YAML: {exc}")
    except RecursionError:  # the interpreter's stack is smaller than MAX_DEPTH needs
        return None, Problem(Position(file, 1, 1), "invalid YAML: the document is nested too deeply")


class _DepthLimitedLoader(yaml.SafeLoader):
    """SafeLoader that refuses collections nested deeper than MAX_DEPTH,
    at the node where the limit was passed."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, f"collections nested more than {MAX_DEPTH} levels deep", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _decode(data: bytes) -> str:
    # YAML 1.1 allows UTF-16 with a byte order mark; everything else is UTF-8.
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    return data.decode("utf-8-sig")


def _yaml_problem(exc: yaml.MarkedYAMLError, file: str, text: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    position = Position(file, mark.line + 1, mark.column + 1) if mark else Position(file, 1, 1)
    problem = exc.problem or "invalid syntax"
    if exc.context and problem.startswith("but "):
        # PyYAML splits "expected X, but found Y" into context and problem.
        message = f"{exc.context}, {problem}"
    elif exc.context:
        message = f"{problem} ({exc.context})"
    else:
        message = problem
    lines = text.splitlines()
    if mark and mark.line < len(lines) and "${" in lines[mark.line]:
        # `env: {A: ${X}}`: the braces of a plain ${X} end a flow mapping.
        message += "; quote values that contain ${...}"
    return Problem(position, f"invalid YAML: {message}")


def _line_column(text: str, index: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _position(file: str, node: yaml.Node) -> Position:
    return Position(file, node.start_mark.line + 1, node.start_mark.column + 1)


class _Converter:
    """Turns composed PyYAML nodes into ``Node``s, collecting problems.

    Aliases are converted once and shared (so a "billion laughs" document
    costs what its text costs); an alias to a node that contains it is
    reported instead of recursing forever.  Each node's size with its
    aliases expanded is counted too, and a node larger than ``MAX_VALUES``
    is reported (and dropped): reading it as plain data would build every
    copy.
    """

    def __init__(self, file: str, environ: Mapping[str, str]) -> None:
        self.file = file
        self.environ = environ
        self.problems: list[Problem] = []
        self._done: dict[int, Node] = {}
        self._sizes: dict[int, int] = {}  # values under each node, aliases expanded
        self._active: set[int] = set()
        self._path: list[str | int] = []
        # Only used for its resolver and its scalar constructors; they read
        # nothing from the stream.
        self._loader = loader = yaml.SafeLoader("")
        self._constructors: dict[str, Callable[[yaml.ScalarNode], Scalar]] = {
            _TAG + "null": loader.construct_yaml_null,
            _TAG + "bool": loader.construct_yaml_bool,
            _TAG + "int": loader.construct_yaml_int,
            _TAG + "float": loader.construct_yaml_float,
        }

    def convert(self, node: yaml.Node) -> Node:
        done = self._done.get(id(node))
        if done is not None:
            return done
        position = _position(self.file, node)
        if id(node) in self._active:
            return self._bad(position, "an alias refers to a node that contains it (recursive structure)")
        self._active.add(id(node))
        size = 1
        try:
            if isinstance(node, yaml.ScalarNode):
                result = self._scalar(node, position)
            elif isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
                items = [self._convert_at(i, item) for i, item in enumerate(node.value)]
                result = Node(items, position)
                size += sum(self._sizes.get(id(item), 1) for item in node.value)
            elif isinstance(node, yaml.MappingNode) and node.tag == _MAP:
                result = self._mapping(node, position)
                size += sum(self._sizes.get(id(key), 1) + self._sizes.get(id(value), 1) for key, value in node.value)
            else:
                result = self._bad(position, _tag_message(node.tag))
        finally:
            self._active.discard(id(node))
        if size > MAX_VALUES:
            message = f"aliases expand this to {size:,} values, more than the {MAX_VALUES:,} a document may hold"
            result, size = self._bad(position, message), 1
        self._sizes[id(node)] = size
        self._done[id(node)] = result
        return result

    def _convert_at(self, step: str | int, node: yaml.Node) -> Node:
        """Convert a child: ``step`` is its key, or ``[index]`` in a list."""
        self._path.append(step)
        try:
            return self.convert(node)
        finally:
            self._path.pop()

    def _report(self, position: Position, message: str) -> None:
        """Record a problem, prefixed with where it is (``processes[1].env.X``)."""
        where = ""
        for step in self._path:
            where = f"{where}[{step}]" if isinstance(step, int) else child_path(where, step)
        self.problems.append(Problem(position, f"{where}: {message}" if where else message))

    def _bad(self, position: Position, message: str) -> Node:
        self._report(position, message)
        return Node(None, position, bad=True)

    def _scalar(self, node: yaml.ScalarNode, position: Position) -> Node:
        tag, text = node.tag, node.value
        if tag == _STR:
            try:
                text = expand(text, self.environ)
            except ExpansionError as exc:
                return self._bad(position, str(exc))
            if node.style is None and text != node.value:
                # A plain ${VAR} reads as the value it expands to would have:
                # `replicas: ${N:-3}` is a number, `main: ${MAIN:-false}` a boolean.
                tag = self._loader.resolve(  # type: ignore[no-untyped-call]
                    yaml.ScalarNode, text, (True, False)
                )
        if tag in _AS_TEXT:
            return Node(text, position, text=text)
        construct = self._constructors.get(tag)
        if construct is None:
            return self._bad(position, _tag_message(tag))
        try:
            value = construct(yaml.ScalarNode(tag, text))
        except (ValueError, OverflowError, yaml.constructor.ConstructorError):
            implicit = tag == self._loader.resolve(  # type: ignore[no-untyped-call]
                yaml.ScalarNode, text, (True, False)
            )
            if implicit:  # only an int can fail so: more digits than Python converts
                return self._bad(position, f"the number {text[:20]}... has too many digits")
            return self._bad(position, f"invalid value {text[:40]!r} for the tag {_short_tag(tag)}")
        return Node(value, position, text=text)

    def _mapping(self, node: yaml.MappingNode, position: Position) -> Node:
        merged: dict[str, Node] = {}
        merged_keys: dict[str, Position] = {}
        values: dict[str, Node] = {}
        keys: dict[str, Position] = {}
        for key_node, value_node in node.value:
            key_position = _position(self.file, key_node)
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag == _MERGE:
                self._merge(value_node, merged, merged_keys)
                continue
            key = self._key(key_node, key_position)
            value = self._convert_at(key if key is not None else "?", value_node)
            if key is None:
                continue
            if key in keys:
                first = keys[key]
                self._report(key_position, f"duplicate key {key!r} (first at line {first.line})")
                continue
            values[key] = value
            keys[key] = key_position
        # Like PyYAML: merged keys come first, and keys written here win.
        for key in values:
            merged.pop(key, None)
            merged_keys.pop(key, None)
        return Node({**merged, **values}, position, keys={**merged_keys, **keys})

    def _merge(self, value_node: yaml.Node, merged: dict[str, Node], keys: dict[str, Position]) -> None:
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            converted = self.convert(source)
            if converted.bad:
                continue
            if not isinstance(converted.value, dict):
                message = f"a merge key (<<) takes mappings, got {converted.kind()}"
                self._report(converted.position, message)
                continue
            for key, value in converted.value.items():
                # The first mapping listed wins, as in PyYAML.
                if key not in merged:
                    merged[key] = value
                    keys[key] = converted.keys.get(key, converted.position)

    def _key(self, node: yaml.Node, position: Position) -> str | None:
        if isinstance(node, yaml.ScalarNode) and node.tag in _AS_TEXT:
            return str(node.value)
        if isinstance(node, yaml.ScalarNode):
            converted = self.convert(node)
            if not converted.bad:
                message = f"a key must be a string, got {converted.describe()}"
                self._report(position, f"{message}: quote it ('{node.value}')")
            return None
        kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
        self._report(position, f"a key must be a string, got {kind}")
        return None


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else tag


def _tag_message(tag: str) -> str:
    return (
        f"the tag {_short_tag(tag)} is not supported: the configuration holds only strings, "
        "numbers, booleans, null, lists and mappings"
    )

"""Where something is written in a configuration file.

A module of its own because everything in this package points at places in
the file — problems, the parsed tree, ``Settings``, the model — and none of
them should have to import another of them just for this small value.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Position"]


@dataclass(frozen=True, slots=True)
class Position:
    """A place in a configuration file; line and column count from 1."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

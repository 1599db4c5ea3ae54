"""Configuration problems, each pinned to FILE:LINE:COLUMN."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ._position import Position

__all__ = ["ConfigError", "Problem"]


@dataclass(frozen=True, slots=True)
class Problem:
    position: Position | None
    message: str

    def __str__(self) -> str:
        return f"{self.position}: {self.message}" if self.position else self.message


class ConfigError(Exception):
    """One or more problems with a configuration; ``str()`` gives one line each.

    Raised before anything starts; the CLI prints it and exits 2.
    """

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = sorted(
            problems,
            key=lambda p: (p.position.file, p.position.line, p.position.column) if p.position else ("", 0, 0),
        )
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def at(cls, position: Position | None, message: str) -> ConfigError:
        return cls([Problem(position, message)])

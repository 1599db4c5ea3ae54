"""A mistake on the command line: the error every parser raises, and its
"did you mean".

Apart from ``supervisor/_cliparse.py`` (argparse) because PID 1's own parser
(supervisor/pid1/options.py) raises it too, and PID 1 imports nothing the
Python floor does not (see docs/architecture.md).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["UsageError", "did_you_mean"]


class UsageError(Exception):
    """A mistake on the command line; the message is the whole story."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'status'?`` for a near miss (the two nearest when
    both are near), else nothing."""
    # Imported here: only a mistake needs it, and `supervisor health` runs
    # as an exec probe every few seconds.
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""

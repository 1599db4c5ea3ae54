"""Why a plugin's step was cut short, in words for its log line.

A hook learns only that it was cancelled, not why.  The plugin host cancels
``pre_stop`` hooks when the main process exits (there is nothing left to
drain), every hook when the shutdown deadline leaves hooks no more time, and
one plugin's hook at its ``hook_timeout``.  Told from what the hook can see,
in that order: a main process that has exited explains a cut even when the
deadline is also near.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._context import Context
    from ._deadline import Deadline

__all__ = ["why_cancelled"]


def why_cancelled(ctx: Context, deadline: Deadline | None) -> str:
    """What most likely cut the step short: "the main process's exit", "the
    shutdown deadline", or "the plugin's hook_timeout or the shutdown"."""
    if ctx.main_exited.is_set():
        return "the main process's exit"
    if deadline is not None and deadline.remaining_for_hooks() <= 0:
        return "the shutdown deadline"
    return "the plugin's hook_timeout or the shutdown"

"""The ``sleep`` plugin: a fixed delay before any process is stopped.

Kubernetes removes a terminating pod from its Services' endpoints at the same
time as it sends SIGTERM, so clients keep arriving for a few seconds.  The
usual fix is ``preStop: sleep 15``, which needs a ``/bin/sleep`` that
distroless images lack.  This plugin is that sleep, inside the supervisor::

    plugins:
      sleep:
        seconds: 15s

Settings:

  seconds   the delay: 15, 15s, 500ms, 1m (required; 0 turns it off)

The delay ends early when the main process exits (there is nothing left to
drain) and never runs past the shutdown deadline's share for hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from supervisor import Config, Context, Deadline, Settings, format_duration, hookimpl

__all__ = ["SleepSettings"]


@dataclass(frozen=True, slots=True)
class SleepSettings:
    seconds: float

    def plan(self) -> dict[str, str]:
        """Where ``supervisor check`` shows this plugin: pre_stop, unless turned off."""
        return {"pre_stop": f"sleep {format_duration(self.seconds)}"} if self.seconds > 0 else {}


@hookimpl
def supervisor_configure(settings: Settings, config: Config) -> SleepSettings:
    settings.check_keys(["seconds"])
    return SleepSettings(seconds=settings.duration("seconds", required=True) or 0.0)


@hookimpl
async def supervisor_pre_stop(ctx: Context, deadline: Deadline) -> None:
    settings = ctx.settings
    if not isinstance(settings, SleepSettings):
        raise TypeError(f"unexpected settings for the sleep plugin: {settings!r}")
    if settings.seconds <= 0:
        return
    if ctx.main_exited.is_set():
        ctx.log.info("not sleeping: the main process has already exited")
        return
    available = deadline.remaining_for_hooks()
    if available <= 0:
        ctx.log.warning("not sleeping: the shutdown deadline leaves no time for hooks")
        return
    if settings.seconds > available:
        ctx.log.warning(
            "sleeping %s instead of %s: the shutdown deadline leaves no more for hooks",
            format_duration(available),
            format_duration(settings.seconds),
        )
    else:
        ctx.log.info("sleeping %s before stopping processes", format_duration(settings.seconds))
    started = trio.current_time()
    # The deadline scope follows later shorten()/expire() calls (a second
    # SIGTERM ends the sleep at once); the host wraps hooks the same way, but
    # the plugin must not depend on it to stay inside the budget.
    with deadline.scope(), trio.move_on_after(settings.seconds):
        await ctx.main_exited.wait()
        ctx.log.info(
            "sleep cut short after %s: the main process exited",
            format_duration(trio.current_time() - started),
        )

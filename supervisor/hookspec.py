"""Hook specifications: the reference for plugin authors.

A plugin is an ordinary Python distribution that names a module (or a class,
which the host instantiates without arguments) in the entry-point group
``supervisor.plugins``::

    [project.entry-points."supervisor.plugins"]
    drain-file = "drain_file_plugin"

It acts only when the deployment's YAML names it under ``plugins:`` (its
settings go there, even if empty: ``drain-file: {}``).  Implement any of the
hooks below with the ``supervisor.hookimpl`` marker; argument names must match
the specification, and you may declare only the arguments you need.

How hooks run
-------------
* Every hook except ``supervisor_configure`` and ``supervisor_add_commands``
  may be ``async def`` or plain ``def``.  The host runs one trio task per
  implementation, all implementations of a hook concurrently in one nursery.
  A plain ``def`` runs in a worker thread, so blocking I/O in it (a
  synchronous HTTP client, ``time.sleep``) never freezes the supervisor; when
  its time is up the thread is abandoned, not waited for.  From such a thread,
  ``deadline`` and ``ctx.timeline`` may be used directly; other trio calls go
  through ``trio.from_thread.run_sync``.  An ``async def`` runs on the event
  loop: blocking I/O there belongs in ``trio.to_thread.run_sync``, and one
  that never yields (a CPU loop) holds everything up until PID 1 kills the
  container at the end of the grace period.
* Order: implementations of one hook run concurrently, so ordering between
  plugins comes from the phases, not from registration.  pluggy's
  ``@hookimpl(tryfirst=True)`` and ``trylast=True`` are kept as waves: every
  ``tryfirst`` implementation of the call has returned (or been cut off)
  before the plain ones start, and those before the ``trylast`` ones, all
  within the same deadline.  Where waves cannot apply (``supervisor_configure``,
  ``supervisor_add_commands``, ``supervisor_background``) the plugin is
  refused as invalid.  Hook wrappers (``wrapper``/``hookwrapper``) are
  refused too: there is no single call for them to surround.
* Per-process hooks (``supervisor_process_started``, ``_exited``,
  ``_restarted``, ``supervisor_before_process_stop``, ``_after_process_stop``)
  fire for **every** supervised process, not only those your settings name:
  check ``process.name`` and return ``supervisor.SKIP`` for the others.
* An exception, a hang or a timeout in one implementation is logged with the
  plugin's name and recorded in the timeline; it never stops the other
  implementations, the shutdown, or PID 1.  Raise freely.  Raise
  ``supervisor.HookFailed("what failed")`` for a failure that is not a bug:
  the step says ``failed`` with that text, and no traceback is logged.
* Each implementation runs under its plugin's ``hook_timeout`` (a host-level
  setting available in every plugin's section; not ``supervisor_background``,
  which runs until the shutdown begins) and, during shutdown, under the
  plan's deadline less its reserve: a hook that would overrun the budget is
  cancelled so the supervisor can still escalate to SIGKILL in time.
* Shutdown hooks receive the plan's ``deadline`` (``supervisor.Deadline``):
  read ``deadline.remaining_for_hooks()`` before choosing a wait of your own,
  and call ``deadline.shorten(...)`` if you learn the real one.
* Return ``supervisor.SKIP`` from a hook that had nothing to do, to keep it
  out of the timeline.
* ``ctx`` (``supervisor.Context``) is your plugin's view: its parsed settings,
  a logger named after it, the supervised processes, the timeline.

Status lines and health checks
------------------------------
A plugin shows up in ``supervisor status`` and in the pod's health through
two ``Context`` methods, callable from any hook (on trio's thread; from a
plain ``def`` hook's worker thread, go through ``trio.from_thread.run_sync``).
The built-in health checks report to the same board, so ``status``,
``supervisor health``, ``/livez``, ``/readyz`` and ``/metrics`` agree:

``ctx.set_status(text)``
    ``text``: this plugin's one line under the status table ("guests: 3
    running, 1 shutting down", "drain: 2 of 5 endpoints left"); newlines are
    folded into spaces; None or ``""`` removes the line.  Call it whenever
    the state changes; it costs a dictionary update.

``ctx.report_health(name, *, ok, level="ready", detail="")``
    ``name``: the check, shown as ``PLUGIN.NAME``.  ``ok``: its verdict now;
    it counts at once, so apply any threshold of your own before reporting a
    failure.  ``level``: ``"ready"`` (a failing check fails ``/readyz`` and
    ``supervisor health``: the Service stops sending traffic) or ``"alive"``
    (fails ``/livez``: the kubelet restarts the container — only for a state
    the supervisor cannot recover from).  ``detail``: why, in a few words;
    shown in ``status`` and in the probes' answer.  Report again when the
    verdict changes; the last report stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import argparse  # the command line's, not the orchestrator's: annotations only

    from ._context import Context, ProcessInfo
    from ._deadline import Deadline
    from ._status import ExitStatus
    from .config import Config, Settings

__all__ = ["PROJECT", "SKIP", "HookFailed", "hookimpl", "hookspec"]

PROJECT = "supervisor"


class _Skip:
    def __repr__(self) -> str:
        return "supervisor.SKIP"


SKIP = _Skip()
"""Return this from a hook that had nothing to do this time (an ``exec``
plugin with no command for the phase, say): the call is left out of the
shutdown timeline instead of showing up as an empty ``ok`` step."""


class HookFailed(Exception):
    """Raise this from a hook whose work failed in a way it has already
    logged (a VM left running, say): the timeline shows the step as
    ``failed`` with the exception's text as its detail, and the host logs
    one line without a traceback.  Any other exception is a bug: ``error``,
    with its traceback."""


hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --------------------------------------------------------------------------
# Configuration (before anything starts)
# --------------------------------------------------------------------------


@hookspec
def supervisor_configure(settings: Settings, config: Config) -> object:
    """Validate this plugin's section of ``plugins:`` and return what it needs.

    Called once, synchronously (a plain ``def``; ``async def`` is refused),
    for each enabled plugin, in the order of the YAML, before any process
    starts.  Record problems rather than raising: the supervisor reports
    every problem of every plugin at once, each as ``FILE:LINE:COLUMN:
    message``, and exits 2 before starting anything.  An exception is
    reported the same way, as one line at the plugin's section.

    :param settings: This plugin's own section (``supervisor.Settings``).
        Read values through it (``settings.duration("delay", default=5.0)``,
        ``settings.string(...)``, ``settings.section(...)``...): the readers
        check types and record each problem at its position.  Call
        ``settings.error(key, message)`` for checks of your own and
        ``settings.check_keys(...)`` to reject unknown keys (the host's own
        ``hook_timeout`` is always allowed).
    :param config: The whole validated configuration (``supervisor.Config``),
        to check the process names your section refers to, say.
    :returns: What the plugin's other hooks get as ``ctx.settings`` (a
        frozen dataclass documents it best); None keeps the ``Settings``.
        For ``supervisor check``'s plan, the object may have a method
        ``plan() -> Mapping[str, str]``: each phase the plugin will act in
        with these settings (``pre_stop``; ``before_process_stop:NAME``
        for one process, ``before_process_stop`` for every one) mapped to
        a few words on what it does there (``sleep 15s``; ``until no
        endpoint routes here``).  The plan then shows those phases only,
        with those words; without the method it shows every hook the
        plugin implements.
    """


@hookspec
def supervisor_add_commands(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add subcommands to the ``supervisor`` command line (operators' tools).

    Called synchronously for every installed plugin, enabled or not (the
    command line is built before any YAML is read).  A plugin that raises
    here loses its commands, with a warning; the others keep theirs.

    :param subparsers: The ``supervisor`` parser's subcommands
        (``argparse``).  Add a parser per command and give it a handler with
        ``parser.set_defaults(handler=fn)``, where ``fn(args)`` returns the
        exit status.
    """


# --------------------------------------------------------------------------
# Normal operation
# --------------------------------------------------------------------------


@hookspec
async def supervisor_startup(ctx: Context) -> None:
    """Before any process starts; the first start waits until every
    implementation has returned (or timed out: ``hook_timeout``, by default
    30 s).

    Use it to wait for a dependency outside the pod or to prepare state.  A
    failure is logged and does not prevent the start.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    """


@hookspec
async def supervisor_background(ctx: Context) -> None:
    """Long-running work during normal operation (watchers, periodic
    enforcers).

    Started once every process has started; cancelled when the shutdown
    begins.  Returning early is fine; an exception is logged.  A background
    task is not a call with a timeout: the plugin's ``hook_timeout`` does not
    apply to it (it bounds the plugin's other hooks).  All background tasks
    run side by side, so ``tryfirst``/``trylast`` are refused here.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    """


@hookspec
async def supervisor_process_started(ctx: Context, process: ProcessInfo) -> None:
    """A supervised process was spawned (the first time and after each
    restart).

    Fires for every process, not only the ones your settings mention:
    filter on ``process.name``.  Not awaited by the supervisor: the process
    is already running, and the implementation runs beside it under its
    ``hook_timeout`` (30 s by default).

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param process: The process (``supervisor.ProcessInfo``), live: its
        ``pid`` is the new one.
    """


@hookspec
async def supervisor_process_exited(ctx: Context, process: ProcessInfo, status: ExitStatus) -> None:
    """A supervised process exited, whether or not it will be restarted.

    Fires for every process: filter on ``process.name``.  Not awaited by the
    supervisor; bounded by ``hook_timeout`` (30 s by default).  It fires for
    the exits the shutdown causes too, but calls still running when the
    supervisor exits are cancelled: work that must happen after a process
    stopped belongs in ``supervisor_after_process_stop``.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param process: The process (``supervisor.ProcessInfo``), live: by the
        time the hook runs it may be starting again.
    :param status: How this run ended (``supervisor.ExitStatus``: ``code``
        or ``signal``, and ``exit_code`` folding both as a shell would).
    """


@hookspec
async def supervisor_process_restarted(ctx: Context, process: ProcessInfo, attempt: int) -> None:
    """A process that had exited was spawned again by its restart policy.

    Fires for every process: filter on ``process.name``.  Comes with a
    ``supervisor_process_started`` for the same spawn.  Not awaited by the
    supervisor; bounded by ``hook_timeout`` (30 s by default).

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param process: The process (``supervisor.ProcessInfo``), live.
    :param attempt: How many restarts within the backoff window, counting
        from 1; past the policy's limit there is no restart and no call.
    """


# --------------------------------------------------------------------------
# The shutdown plan, in order
# --------------------------------------------------------------------------


@hookspec
async def supervisor_shutdown_started(ctx: Context, deadline: Deadline, reason: str) -> None:
    """The shutdown begins.

    The place to learn the real deadline and ``deadline.shorten()`` to it,
    before the other steps divide up the time, and to
    ``deadline.keep_for_later()`` what a step of yours after the stops needs,
    so that ``pre_stop`` and ``wind_down`` cannot use it up.  Keep it short:
    this phase as a whole gets at most 5 s, whatever ``hook_timeout`` says.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param deadline: The shutdown's one budget (``supervisor.Deadline``).
    :param reason: Why, for the log: ``"received SIGTERM"``, ``"main process
        web exited with code 0"``, ``"db failed: ..."``.
    """


@hookspec
async def supervisor_pre_stop(ctx: Context, deadline: Deadline) -> None:
    """Before any process is stopped: wait until it is safe to stop them
    (endpoints drained, a fixed delay, an app's drain endpoint).

    All implementations run concurrently.  If the main process exits
    meanwhile they are cancelled (outcome ``cancelled``), and if it has
    exited already the phase is skipped: there is nothing left to drain.
    Work that must run to its end anyway belongs in ``supervisor_wind_down``.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param deadline: The shutdown's one budget (``supervisor.Deadline``); the
        call is cut off at ``deadline.remaining_for_hooks()``.
    """


@hookspec
async def supervisor_wind_down(ctx: Context, deadline: Deadline) -> None:
    """Before any process is stopped, concurrently with ``pre_stop``: work
    that must run to its end whether or not the main process is still there
    (shut down VMs of a libvirtd that runs outside the pod, flush a remote
    job).

    Unlike ``pre_stop`` it is neither cancelled when the main process exits
    nor skipped when it already has; it is bounded like every shutdown hook,
    by ``hook_timeout`` and the plan's deadline less its reserve.  The first
    process is stopped once every ``pre_stop`` and ``wind_down``
    implementation has returned.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param deadline: The shutdown's one budget (``supervisor.Deadline``); the
        call is cut off at ``deadline.remaining_for_hooks()``.
    """


@hookspec
async def supervisor_before_process_stop(ctx: Context, deadline: Deadline, process: ProcessInfo) -> None:
    """Right before ``process`` gets its stop signal: processes stop in
    reverse dependency order, those of one dependency level concurrently.
    E.g. shut down VMs before libvirtd goes.

    Fires for every process that is still running, once each: filter on
    ``process.name``.  Not called for a process that has already exited.
    The stop signal waits until every implementation has returned.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param deadline: The shutdown's one budget (``supervisor.Deadline``).
    :param process: The process about to be stopped (``supervisor.ProcessInfo``),
        still running.
    """


@hookspec
async def supervisor_after_process_stop(
    ctx: Context, deadline: Deadline, process: ProcessInfo, status: ExitStatus
) -> None:
    """``process`` has exited (gracefully or killed); it can no longer act.
    E.g. release the leader Lease the process held, remove its files.

    Fires for every process that ever started, once each: filter on
    ``process.name``.  Processes of the next dependency level are stopped
    once these calls have returned.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param deadline: The shutdown's one budget (``supervisor.Deadline``).
    :param process: The process that was stopped (``supervisor.ProcessInfo``),
        no longer running.
    :param status: How it ended (``supervisor.ExitStatus``); a signal of
        SIGKILL means the supervisor had to kill it.
    """


@hookspec
async def supervisor_post_stop(ctx: Context, deadline: Deadline) -> None:
    """Every supervised process has exited.  Clean-up outside the pod.

    :param ctx: This plugin's view of the supervisor (``supervisor.Context``).
    :param deadline: The shutdown's one budget (``supervisor.Deadline``):
        what is left of it after the stops.
    """

"""The ``exec`` plugin: run commands in any phase, with a timeout.

::

    plugins:
      exec:
        commands:
          - phase: pre_stop
            command: ["nginx", "-s", "quit"]
            timeout: 10s
          - phase: after_process_stop
            process: web
            command: rm -f /run/web.pid

Commands of one phase run concurrently.  Each one's output (stdout and
stderr, merged) goes to the supervisor's log, one record per line, prefixed
with the command's name.  A non-zero exit or a timeout is logged and recorded
in the shutdown timeline; it never stops the shutdown.

Settings of each command:

  phase       startup, shutdown_started, pre_stop, wind_down,
              before_process_stop, after_process_stop or post_stop
              (required); wind_down runs beside pre_stop but is not cut
              short when the main process exits
  process     the process a before_/after_process_stop command belongs to
              (required there, not allowed elsewhere)
  command     a list of arguments, or one string split like a shell would;
              no shell runs (required)
  name        for the log and the timeline (default: the command line)
  timeout     then SIGTERM to its process group (default: none, the phase's
              deadline or the plugin's hook_timeout bounds it)
  kill_after  SIGKILL this long after that SIGTERM (default 2s)
  env         variables added to the supervisor's environment
  cwd         working directory (default: the supervisor's)

Besides its own ``env``, every command sees ``SUPERVISOR_PHASE``, and where
they apply ``SUPERVISOR_PROCESS``, ``SUPERVISOR_EXIT_CODE`` (after_process_stop)
and ``SUPERVISOR_TIME_LEFT`` (seconds the shutdown deadline leaves for hooks).
"""

from __future__ import annotations

import trio

from supervisor import Context, Deadline, ExitStatus, PhasePlugin, ProcessInfo, entries_for, run_each

from ._run import Result, Runner
from ._spec import PHASES, Command, ExecSettings, parse

__all__ = [
    "PHASES",
    "Command",
    "ExecSettings",
    "Result",
    "Runner",
    "plugin",
    "run_phase",
]


async def run_phase(
    ctx: Context,
    phase: str,
    deadline: Deadline | None,
    process: ProcessInfo | None = None,
    status: ExitStatus | None = None,
) -> list[Result]:
    """Run the commands of ``phase`` concurrently; return their results in order."""
    settings = ctx.settings
    if not isinstance(settings, ExecSettings):
        raise TypeError(f"unexpected settings for the exec plugin: {settings!r}")
    env = {"SUPERVISOR_PHASE": phase}
    if process is not None:
        env["SUPERVISOR_PROCESS"] = process.name
    if status is not None:
        env["SUPERVISOR_EXIT_CODE"] = str(status.exit_code)
    if deadline is not None:
        env["SUPERVISOR_TIME_LEFT"] = f"{deadline.remaining_for_hooks():.3f}"

    async def run(command: Command, nursery: trio.Nursery) -> Result:
        return await Runner(ctx, env, deadline, output=nursery).run(command)

    return await run_each(entries_for(settings.commands, phase, process), run, deadline)


plugin = PhasePlugin(configure=parse, run=run_phase, doc=__doc__)
"""The plugin object the ``exec`` entry point names."""

"""The ``http`` plugin: request a URL in any phase and wait for the expected status.

::

    plugins:
      http:
        requests:
          - phase: pre_stop
            url: http://127.0.0.1:8080/drain
            method: POST
            timeout: 10s
            retry_interval: 500ms
            expect: [200, 202]

A request is retried (connection refused, an unexpected status, no answer
within ``attempt_timeout``) every ``retry_interval`` until its status is one
of ``expect`` (default ``2xx``) or ``timeout`` ends; without a ``timeout`` it
goes on as long as the phase allows.  Requests of one phase run concurrently.
The outcome is logged and recorded in the shutdown timeline; a failure never
stops the shutdown.  Redirects are not followed: a 3xx is a status like any
other.

Settings of each request:

  phase            startup, shutdown_started, pre_stop, wind_down,
                   before_process_stop, after_process_stop or post_stop
                   (required); wind_down runs beside pre_stop but is not
                   cut short when the main process exits
  process          the process a before_/after_process_stop request belongs
                   to (required there, not allowed elsewhere)
  url              http:// or https://, credentials as user:password@ become
                   basic authentication (required)
  method           GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS
                   (default: POST with a body, else GET)
  body             a string to send
  json             any YAML value, sent as JSON (Content-Type: application/json)
  headers          a mapping of header names to values
  expect           a status, a class such as 2xx, or a list (default 2xx)
  timeout          give up after this long (default: none, the phase's
                   deadline or the plugin's hook_timeout bounds it)
  attempt_timeout  for one attempt's connection and answer (default 5s)
  retry_interval   between attempts (default 1s)
  tls_verify       check the server's certificate (default true)
  ca_file          PEM file of the CAs to check it against (default: the
                   system's), e.g. a Secret mounted into the pod
  name             for the log and the timeline (default: METHOD URL)
"""

from __future__ import annotations

import trio

from supervisor import Context, Deadline, ExitStatus, PhasePlugin, ProcessInfo, entries_for, run_each

from ._request import Result, perform
from ._spec import PHASES, Expect, HttpSettings, Request, parse

__all__ = [
    "PHASES",
    "Expect",
    "HttpSettings",
    "Request",
    "Result",
    "plugin",
    "run_phase",
]


async def run_phase(
    ctx: Context,
    phase: str,
    deadline: Deadline | None,
    process: ProcessInfo | None = None,
    status: ExitStatus | None = None,  # the phase hooks' shared signature; requests do not use it
) -> list[Result]:
    """Make the requests of ``phase`` concurrently; return their results in order.

    A request that would overrun the shutdown ``deadline`` is cancelled.
    """
    settings = ctx.settings
    if not isinstance(settings, HttpSettings):
        raise TypeError(f"unexpected settings for the http plugin: {settings!r}")

    async def run(request: Request, _nursery: trio.Nursery) -> Result:
        return await perform(request, ctx, deadline)

    return await run_each(entries_for(settings.requests, phase, process), run, deadline)


plugin = PhasePlugin(configure=parse, run=run_phase, doc=__doc__)
"""The plugin object the ``http`` entry point names."""

"""VM shutdown: 8 graceful QEMU guests shut down by the libvirt plugin, in
parallel, against one guest alone and against one at a time; and the
enforcer's lag from a request's deadline to its guest destroyed.

The supervisor runs as PID 1 (real root: libvirtd and QEMU need it) with a
private libvirtd from ``tests/libvirt`` as a supervised process and the probe
as the main process; the guests are the tiny TCG guests of
``tests/libvirt/lv_guestimage`` that power off as soon as their ACPI power
button is pressed.  The figure is SIGTERM → PID 1 exits (the plugin shuts the
guests down before libvirtd gets its stop signal).  The baseline is what
libvirt-guests does by default (``PARALLEL_SHUTDOWN=0``): a shutdown request
to one guest, wait until it is off, then the next — timed here with a 50 ms
poll, kinder than libvirt-guests' one-second one.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

from .._bench import REPO, Bench
from .._results import Figure, Row, Target
from .._sandbox import SandboxError

__all__ = ["enforcer_lag", "vm_shutdown"]

SHUTOFF = 5


def unavailable() -> str | None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        for module in ("libvirt", "supervisor_libvirt", "tests.libvirt.lv_daemon", "tests.libvirt.lv_guests"):
            importlib.import_module(module)
    except ImportError as exc:
        return f"not measured: {exc} (needs libvirt-python, plugins/libvirt and tests/libvirt)"
    if not Path("/dev/kvm").exists() and not Path("/usr/bin/qemu-system-x86_64").exists():
        return "not measured: no QEMU"
    return None


def _guest_image_or_gap(scenario: str, measure: str, target: str) -> tuple[Any, list[Row]]:
    """The tests' guest image (built once, cached), or the row saying why
    the scenario is not measured here."""
    reason = unavailable()
    if reason:
        return None, [Row(scenario, measure, "s", Target(target, None), Figure(note=reason))]
    guest_image: Any = importlib.import_module("tests.libvirt.lv_guestimage")
    return guest_image.build(REPO / "tests" / ".artifacts" / "guest"), []


def vm_shutdown(bench: Bench) -> list[Row]:
    count = 1 if bench.smoke else 8
    measure = f"{count} graceful QEMU guest(s), parallel: SIGTERM → PID 1 exits (median of {1 if bench.smoke else 3})"
    image, gap = _guest_image_or_gap("VM shutdown", measure, "≤ 1.5 × one guest")
    if gap:
        return gap
    rounds = 1 if bench.smoke else 3
    # The parallel run and its yardstick take turns, so drift hits both alike.
    parallel_runs: list[Figure] = []
    single_runs: list[Figure] = []
    for round_ in range(rounds):
        bench.say(f"  {count} guest(s), parallel, round {round_ + 1}")
        parallel_runs.append(_shutdown(bench, image, count, f"par{round_}", sequential=False))
        if count > 1:
            bench.say(f"  one guest, round {round_ + 1}")
            single_runs.append(_shutdown(bench, image, 1, f"one{round_}", sequential=False))
    parallel = _median(parallel_runs)
    single = _median(single_runs) if single_runs else Figure(parallel.value)
    bench.say(f"  {count} guest(s), one at a time")
    sequential = _shutdown(bench, image, count, "seq", sequential=True)
    limit = 1.5 * single.value if single.value is not None else None
    text = f"≤ 1.5 × one guest ({single.value:.2f} s)" if single.value is not None else "≤ 1.5 × one guest"
    parallel.note = f"{parallel.note}; one guest alone: {_seconds(single)} ({single.note})"
    parallel.problems += [f"one guest: {p}" for p in single.problems]
    return [
        Row(
            "VM shutdown",
            measure,
            "s",
            Target(text, limit),
            parallel,
            {"libvirt-guests default (one at a time)": sequential},
        )
    ]


def _median(runs: list[Figure]) -> Figure:
    values = [run.value for run in runs if run.value is not None]
    problems = [problem for run in runs for problem in run.problems]
    note = "median of " + ", ".join(f"{value:.3f}" for value in values)
    return Figure(statistics.median(values) if values else None, note, problems)


def _seconds(figure: Figure) -> str:
    return f"{figure.value:.2f} s" if figure.value is not None else "not measured"


def _config(daemon: Any) -> str:
    config = {
        "grace_period": "120s",
        "processes": [
            {
                "name": "libvirtd",
                "command": daemon.command(),
                "ready": {"socket": str(daemon.socket), "timeout": "60s"},
            }
        ],
        "plugins": {
            "libvirt": {
                "process": "libvirtd",
                "uri": daemon.uri,
                "domains": ["bench-*"],
                "shutdown_timeout": "90s",
                "resend_interval": "2s",
            }
        },
    }
    return json.dumps(config)  # JSON is YAML


def _shutdown(bench: Bench, image: Any, count: int, label: str, *, sequential: bool) -> Figure:
    # Through import_module: libvirt ships no type information.
    libvirt: Any = importlib.import_module("libvirt")
    lv_daemon: Any = importlib.import_module("tests.libvirt.lv_daemon")
    lv_guests: Any = importlib.import_module("tests.libvirt.lv_guests")

    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    problems: list[str] = []
    value: float | None = None
    daemon = lv_daemon.Libvirtd()
    try:
        with bench.run(
            bench.ours, ["term-exit", "{sock}"], label=f"vm-{label}", yaml=_config(daemon), user_namespace=False
        ) as run:
            run.ready(90)
            daemon.wait_until_up(60)
            conn = libvirt.open(daemon.uri)
            guests = lv_guests.Guests(conn, image, daemon.base / "console")
            names = [f"bench-{label}-{i}" for i in range(count)]
            for name in names:
                guests.start(name, "graceful")
            guests.wait_ready(*names, timeout=300)
            if sequential:
                started = time.monotonic()
                for name in names:
                    conn.lookupByName(name).shutdown()
                    _wait_off(guests, name, 90)
                value = time.monotonic() - started
                with contextlib.suppress(libvirt.libvirtError):
                    conn.close()
                run.sandbox.signal(signal.SIGTERM)
                run.expect_exit(problems, 0, timeout=120)
            else:
                with contextlib.suppress(libvirt.libvirtError):
                    conn.close()
                sent = time.monotonic_ns()
                run.sandbox.signal(signal.SIGTERM)
                gone = run.expect_exit(problems, 0, timeout=120)
                if gone is not None:
                    value = (gone - sent) / 1e9
            not_graceful = [name for name in names if "guest: powering off" not in guests.output(name)]
            if not_graceful:
                problems.append(f"not shut down gracefully: {', '.join(not_graceful)}")
    except (SandboxError, TimeoutError, RuntimeError, libvirt.libvirtError) as exc:
        problems.append(str(exc).splitlines()[0])
    finally:
        lv_daemon.kill_qemu_under(daemon.base)
        daemon.cleanup()
    return Figure(value, "", problems)


def _wait_off(guests: Any, name: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = guests.state(name)
        if state is None or state[0] == SHUTOFF:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{name} still running {timeout:g}s after its shutdown request")


def enforcer_lag(bench: Bench) -> list[Row]:
    """The deletion-deadline enforcer's precision: from a request's
    requested-at + grace to its stubborn guest destroyed, with the next
    resync pass a minute away (so only the per-request timer can be on
    time); and for requests written while it runs -- one due in 3 s written
    to both definitions, one written already overdue -- from the moment
    each became due or was written, whichever is later (so only the
    metadata-change event can be on time).  The plugin's Enforcer runs
    in-process on a private libvirtd; the yardstick is libvirt's own
    graceful destroy of the same kind of guest."""
    count = 1 if bench.smoke else 3
    measure = f"enforcer: requested-at + grace → {count} stubborn guest(s) destroyed, resync_interval 60 s (max)"
    late_measure = "enforcer: requests written while it runs (due in 3 s; overdue) → destroyed, resync 60 s (max)"
    image, gap = _guest_image_or_gap("VM enforcer", measure, "≤ 1 s + libvirt's destroy")
    if gap:
        return [*gap, Row("VM enforcer, late-found", late_measure, "s", gap[0].target, gap[0].ours)]
    bench.say(f"  {count} stubborn guest(s) with a request, 2 found late, and one destroyed by hand")
    lags, late, destroy_time, problems = _enforce(image, count)
    limit = 1.0 + destroy_time if destroy_time is not None else None
    text = f"≤ 1 s + libvirt's destroy ({destroy_time:.2f} s)" if destroy_time is not None else "≤ 1 s + destroy"
    note = "lags " + ", ".join(f"{lag:.3f}" for lag in lags) + "; before the per-request timer: up to 60 s"
    value = max(lags) if len(lags) == count else None
    late_note = "lags " + ", ".join(f"{lag:.3f}" for lag in late) + "; before the metadata events: up to 60 s"
    late_value = max(late) if len(late) == len(_LATE) else None
    return [
        Row("VM enforcer", measure, "s", Target(text, limit), Figure(value, note, problems)),
        Row("VM enforcer, late-found", late_measure, "s", Target(text, limit), Figure(late_value, late_note, problems)),
    ]


# The requests written while the enforcer runs: (name, seconds from the
# writing to due -- negative: already overdue, libvirt flags: 1 live, 2 config).
_LATE = (("bench-late-due", 3.0, 1 | 2), ("bench-late-overdue", -30.0, 1))


def _enforce(image: Any, count: int) -> tuple[list[float], list[float], float | None, list[str]]:
    libvirt: Any = importlib.import_module("libvirt")
    lv_daemon: Any = importlib.import_module("tests.libvirt.lv_daemon")
    lv_guests: Any = importlib.import_module("tests.libvirt.lv_guests")
    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    problems: list[str] = []
    lags: list[float] = []
    late: list[float] = []
    destroy_time: float | None = None
    daemon = lv_daemon.Libvirtd()
    try:
        daemon.start()
        conn = libvirt.open(daemon.uri)
        guests = lv_guests.Guests(conn, image, daemon.base / "console")
        names = [f"bench-enf-{i}" for i in range(count)]
        late_names = [name for name, _, _ in _LATE]
        for name in [*names, "yardstick"]:
            guests.start(name, "stubborn")
        for name in late_names:  # one is written to both definitions
            guests.start(name, "stubborn", persistent=True)
        guests.wait_ready(*names, *late_names, "yardstick", timeout=300)
        started = time.monotonic()
        conn.lookupByName("yardstick").destroyFlags(1)  # VIR_DOMAIN_DESTROY_GRACEFUL
        destroy_time = time.monotonic() - started
        lags = trio.run(_run_enforcer, daemon.uri, conn, names)
        late = trio.run(_run_enforcer_late, daemon.uri, conn)
        conn.close()
    except (TimeoutError, RuntimeError, trio.TooSlowError, libvirt.libvirtError) as exc:
        problems.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    finally:
        lv_daemon.kill_qemu_under(daemon.base)
        daemon.cleanup()
    return lags, late, destroy_time, problems


def _plugin(name: str) -> Any:
    return importlib.import_module(f"supervisor_libvirt.{name}")


def _enforcer_settings(uri: str, pattern: str) -> Any:
    settings_module = _plugin("_settings")
    return settings_module.LibvirtSettings(
        uri=uri,
        selection=_plugin("_domains").Selection(names=(pattern,)),
        enforcer=settings_module.EnforcerSettings(resync_interval=60.0),
    )


async def _run_enforcer(uri: str, conn: Any, names: list[str]) -> list[float]:
    metadata = _plugin("_metadata")
    log = logging.getLogger("supervisor.plugin.libvirt")
    grace = 3.0
    now = time.time()
    for name in names:
        request = metadata.ShutdownRequest(requested_at=now, grace=grace).to_xml()
        conn.lookupByName(name).setMetadata(2, request, metadata.KEY, metadata.NAMESPACE, 1)
    async with _plugin("_connection").Hypervisor(uri, log) as hv:
        enforcer = _plugin("_enforcer").Enforcer(hv, _enforcer_settings(uri, "bench-enf-*"), log)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(enforcer.run)
                while len(enforcer.destroyed) < len(names):
                    await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
    return list(enforcer.lag)


async def _run_enforcer_late(uri: str, conn: Any) -> list[float]:
    """Seconds from when each request became actionable (due, or written if
    later) to its guest destroyed."""
    metadata = _plugin("_metadata")
    log = logging.getLogger("supervisor.plugin.libvirt")
    overdue_when_written: dict[str, float] = {}
    async with _plugin("_connection").Hypervisor(uri, log) as hv:
        enforcer = _plugin("_enforcer").Enforcer(hv, _enforcer_settings(uri, "bench-late-*"), log)
        first_pass = trio.Event()
        resync_once = enforcer.resync

        async def noted(nursery: trio.Nursery) -> None:
            await resync_once(nursery)
            first_pass.set()

        enforcer.resync = noted
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(enforcer.run)
                await first_pass.wait()  # the next pass is 60 s away
                for name, due_in, flags in _LATE:
                    written = time.time()
                    request = metadata.ShutdownRequest(requested_at=written + due_in - 3.0, grace=3.0)
                    dom = conn.lookupByName(name)
                    await trio.to_thread.run_sync(
                        dom.setMetadata, 2, request.to_xml(), metadata.KEY, metadata.NAMESPACE, flags
                    )
                    overdue_when_written[name] = max(0.0, written - request.due(0.0))
                while len(enforcer.destroyed) < len(_LATE):
                    await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
    # The enforcer's lag counts from due; a request written overdue could
    # not be acted on before it was written.
    return [lag - overdue_when_written[name] for name, lag in zip(enforcer.destroyed, enforcer.lag, strict=True)]

"""Modules deferred until first use (``supervisor._deferred``): what trio
imports for TLS, DTLS and international host names stays out of an
orchestrator that never uses them, and is all there the moment it does.

Each check runs in a fresh interpreter: ``sys.modules`` is the thing under test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_runtime_and_trio_load_no_tls_hashing_or_idna() -> None:
    out = run_python(
        """
        import sys
        import supervisor.runtime, trio
        print(sorted(m for m in ("_ssl", "_hashlib", "hashlib", "idna.core") if m in sys.modules))
        """
    )
    assert out == "[]"


def test_the_first_use_loads_the_real_module_everywhere() -> None:
    out = run_python(
        """
        import sys
        import supervisor.runtime, trio
        import ssl
        context = ssl.create_default_context()  # the first attribute read
        from hmac import compare_digest
        real = sys.modules["ssl"]
        print(
            isinstance(context, real.SSLContext),
            real.__file__ is not None,
            trio._ssl._stdlib_ssl.SSLError is real.SSLError,  # bound before the load
            compare_digest(b"a", b"a"),
            sys.modules["idna"].encode("bücher.example") == b"xn--bcher-kva.example",
        )
        """
    )
    assert out == "True True True True True"


def test_trio_speaks_tls_through_a_deferred_ssl() -> None:
    out = run_python(
        """
        import supervisor.runtime, trio, trio.testing
        import ssl

        async def main():
            client, server = trio.testing.memory_stream_pair()
            stream = trio.SSLStream(client, ssl.create_default_context(), server_hostname="example.org")
            print(type(stream).__name__, stream.server_hostname)

        trio.run(main)
        """
    )
    assert out == "SSLStream example.org"


def test_a_module_already_imported_is_left_alone_and_a_failed_load_can_be_retried() -> None:
    out = run_python(
        """
        import json, sys
        from supervisor._deferred import DeferredModule, defer
        defer("json", "no_such_module_here")
        print(sys.modules["json"] is json)
        import no_such_module_here
        for _ in range(2):
            try:
                no_such_module_here.anything
            except ModuleNotFoundError as exc:
                print(exc.name, isinstance(sys.modules["no_such_module_here"], DeferredModule))
        """
    )
    assert out.splitlines() == ["True", "no_such_module_here True", "no_such_module_here True"]


def test_trio_names_its_threads_without_running_ldconfig() -> None:
    """trio's import looks up libpthread to name its worker threads; the
    orchestrator answers it without ``ldconfig -p``, a process every pod
    would otherwise spawn at start, and the threads are named all the same."""
    out = run_python(
        """
        import sys, threading
        started = []
        sys.addaudithook(lambda event, args: event == "subprocess.Popen" and started.append(args[0]))
        import supervisor.runtime, trio

        def name() -> str:
            with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
                return comm.read().strip()

        print(started, name(), "|", trio.run(trio.to_thread.run_sync, name))
        """
    )
    spawned, _, names = out.partition(" ")
    assert spawned == "[]", out
    # A thread trio has not named has the process's name, like this one.
    main_thread, worker = names.split(" | ")
    assert worker != main_thread, out
    # What ldconfig itself answers on this machine.
    assert run_python("import ctypes.util; print(ctypes.util.find_library('pthread'))") == "libpthread.so.0"

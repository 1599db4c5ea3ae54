"""Privilege dropping, observed from inside real children (/proc/self/status).

As plain root every test spawns and inspects a child.  Inside a user namespace
that maps only uid 0 (``unshare -Ur``), switching to another user cannot
work: those tests then assert that ``check_privileges`` says why instead.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from supervisor.config._model import Capabilities, ProcessSpec
from supervisor.config._process import CAPABILITIES as CONFIG_CAPABILITIES
from supervisor.pid1.exits import ExitCode
from supervisor.runtime.privileges import (
    CAPABILITIES,
    PrivilegeError,
    check_privileges,
    plan_privileges,
    preexec_for,
)

REPO = Path(__file__).resolve().parents[2]

if os.geteuid() != 0:  # pragma: no cover - the suite runs as root
    pytest.skip("privilege tests need root (or unshare -Ur)", allow_module_level=True)


def _full_root() -> bool:
    """Root of the initial user namespace (every uid mapped), not unshare -Ur."""
    return Path("/proc/self/uid_map").read_text().split() == ["0", "0", "4294967295"]


FULL_ROOT = _full_root()


def bit(name: str) -> int:
    return 1 << CAPABILITIES[name]


def spec(**kwargs: object) -> ProcessSpec:
    return ProcessSpec(name="web", command=("cat", "/proc/self/status"), **kwargs)  # type: ignore[arg-type]


def parse_status(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


async def child_status(process: ProcessSpec) -> dict[str, str]:
    """/proc/self/status of a child spawned with ``process``'s privileges."""
    result = await trio.run_process(
        ["cat", "/proc/self/status"],
        preexec_fn=preexec_for(process),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return parse_status(result.stdout.decode())


def ids(value: str) -> list[int]:
    return [int(part) for part in value.split()]


def caps(status: dict[str, str], key: str) -> int:
    return int(status[key], 16)


def run_python(code: str, *, preexec: object = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (optionally spawned with reduced
    privileges) that can import the supervisor."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        preexec_fn=preexec,  # type: ignore[arg-type]
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def without_caps(*names: str) -> object:
    """A preexec that leaves a root child without these capabilities."""
    return preexec_for(spec(capabilities=Capabilities(drop=names)))


# -- nothing to do ---------------------------------------------------------------


def test_nothing_requested_needs_no_preexec() -> None:
    assert preexec_for(spec()) is None
    assert check_privileges(spec()) is None


def test_same_user_as_now_needs_no_preexec() -> None:
    assert preexec_for(spec(user="0", group="0")) is None


# -- users and groups --------------------------------------------------------------


async def test_named_user_with_its_primary_group() -> None:
    process = spec(user="nobody", no_new_privs=True)
    if not FULL_ROOT:
        assert "uid 65534 is not mapped" in (check_privileges(process) or "")
        return
    status = await child_status(process)
    assert ids(status["Uid"]) == [65534] * 4
    assert ids(status["Gid"]) == [65534] * 4
    assert ids(status["Groups"]) == [65534]
    assert caps(status, "CapEff") == 0
    assert caps(status, "CapPrm") == 0


async def test_numeric_user_without_passwd_entry_gets_its_own_gid() -> None:
    process = spec(user="4242")
    if not FULL_ROOT:
        assert "not mapped" in (check_privileges(process) or "")
        return
    status = await child_status(process)
    assert ids(status["Uid"]) == [4242] * 4
    assert ids(status["Gid"]) == [4242] * 4  # never root's group by accident
    assert ids(status["Groups"]) == [4242]


async def test_user_and_group_by_name_and_number() -> None:
    for process in (spec(user="nobody", group="daemon"), spec(user="65534", group="1")):
        if not FULL_ROOT:
            assert "not mapped" in (check_privileges(process) or "")
            continue
        status = await child_status(process)
        assert ids(status["Uid"]) == [65534] * 4
        assert ids(status["Gid"]) == [1] * 4
        assert ids(status["Groups"]) == [1]


async def test_supplementary_groups_from_the_group_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked_up: list[tuple[str, int]] = []

    def grouplist(user: str, group: int) -> list[int]:
        looked_up.append((user, group))
        return [group, 20, 44, 20]

    monkeypatch.setattr(os, "getgrouplist", grouplist)
    process = spec(user="nobody")
    if not FULL_ROOT:
        assert "not mapped" in (check_privileges(process) or "")
        return
    status = await child_status(process)
    assert looked_up == [("nobody", 65534)]
    assert sorted(ids(status["Groups"])) == [20, 44, 65534]


async def test_group_alone_keeps_the_user() -> None:
    process = spec(group="daemon")
    if not FULL_ROOT:
        message = check_privileges(process) or ""
        assert "not mapped" in message or "setgroups is deny" in message
        return
    status = await child_status(process)
    assert ids(status["Uid"]) == [0] * 4
    assert ids(status["Gid"]) == [1] * 4
    assert 1 in ids(status["Groups"])


def test_every_capability_the_configuration_accepts_can_be_applied() -> None:
    assert set(CONFIG_CAPABILITIES) <= set(CAPABILITIES)
    # every capability of Linux 6.x (0-40) has its name
    assert set(CAPABILITIES.values()) == set(range(41))


def test_unknown_user_group_or_capability_is_a_clear_error() -> None:
    cases = [
        (spec(user="no-such-user-xyz"), "user 'no-such-user-xyz' does not exist"),
        (spec(group="no-such-group-xyz"), "group 'no-such-group-xyz' does not exist"),
        (spec(capabilities=Capabilities(drop=("net_rawx",))), "unknown capability 'net_rawx'"),
        (
            spec(capabilities=Capabilities(drop=("chown",), keep=("chown",))),
            "capabilities both dropped and kept: chown",
        ),
    ]
    for process, message in cases:
        assert (check_privileges(process) or "").startswith(message)
        with pytest.raises(PrivilegeError, match=message):
            preexec_for(process)


def test_the_passwd_database_is_read_at_each_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plan_privileges(spec(user="nobody")).uid in (65534, None)
    real = pwd.getpwnam

    def renumbered(name: str) -> pwd.struct_passwd:
        entry = real(name)
        return pwd.struct_passwd((entry[0], entry[1], 4343, 4343, *entry[4:]))

    monkeypatch.setattr(pwd, "getpwnam", renumbered)
    plan = plan_privileges(spec(user="nobody"))
    assert (plan.uid, plan.gid) == (4343, 4343)


# -- capabilities -------------------------------------------------------------------


async def test_drop_all_leaves_root_powerless(tmp_path: Path) -> None:
    status = await child_status(spec(capabilities=Capabilities(drop=("all",))))
    assert ids(status["Uid"]) == [0] * 4
    for key in ("CapBnd", "CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert caps(status, key) == 0, key
    # what a user sees: root without CAP_CHOWN cannot give a file away
    target = tmp_path / "file"
    target.write_text("")
    result = await trio.run_process(
        ["chown", "1", str(target)],
        preexec_fn=preexec_for(spec(capabilities=Capabilities(drop=("all",)))),
        capture_stderr=True,
        check=False,
    )
    assert result.returncode != 0
    assert target.stat().st_uid == 0


async def test_drop_named_capabilities_only() -> None:
    status = await child_status(spec(capabilities=Capabilities(drop=("net_raw", "CAP_SYS_ADMIN"))))
    for key in ("CapBnd", "CapEff", "CapPrm"):
        assert not caps(status, key) & (bit("net_raw") | bit("sys_admin")), key
        assert caps(status, key) & bit("chown"), key


async def test_keep_drops_every_other_capability_for_root() -> None:
    status = await child_status(spec(capabilities=Capabilities(keep=("net_bind_service",))))
    assert caps(status, "CapBnd") == bit("net_bind_service")
    assert caps(status, "CapEff") == bit("net_bind_service")
    assert caps(status, "CapPrm") == bit("net_bind_service")


async def test_keep_survives_the_switch_to_a_non_root_user() -> None:
    process = spec(user="nobody", no_new_privs=True, capabilities=Capabilities(keep=("net_bind_service",)))
    if not FULL_ROOT:
        assert "not mapped" in (check_privileges(process) or "")
        return
    status = await child_status(process)
    assert ids(status["Uid"]) == [65534] * 4
    for key in ("CapAmb", "CapEff", "CapPrm", "CapBnd"):
        assert caps(status, key) == bit("net_bind_service"), key
    assert status["NoNewPrivs"].strip() == "1"


def low_port() -> int:
    for port in range(1023, 900, -1):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below 1024")


async def test_kept_net_bind_service_lets_nobody_bind_port_below_1024() -> None:
    with_cap = spec(user="nobody", capabilities=Capabilities(keep=("net_bind_service",)))
    if not FULL_ROOT:
        assert "not mapped" in (check_privileges(with_cap) or "")
        return
    port = low_port()
    # perl-base is essential on Debian, and nobody may run it (unlike a
    # Python under /root).
    bind = [
        "perl",
        "-MSocket",
        "-e",
        f"socket(S, PF_INET, SOCK_STREAM, 0) or exit 1;bind(S, sockaddr_in({port}, inet_aton('127.0.0.1'))) or exit 13",
    ]
    result = await trio.run_process(bind, preexec_fn=preexec_for(with_cap), check=False)
    assert result.returncode == 0
    unprivileged_start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    assert port < unprivileged_start, "this machine lets anyone bind low ports"
    without = await trio.run_process(bind, preexec_fn=preexec_for(spec(user="nobody")), check=False)
    assert without.returncode == 13


def test_inherited_capabilities_are_dropped_too() -> None:
    # A supervisor started with a full inheritable set (container runtimes
    # before the fix for CVE-2022-24769): root regains every inheritable
    # capability at exec, so dropping from the bounding set alone would not
    # take them away.
    result = run_python(
        """
        import subprocess, prctl
        prctl.cap_inheritable.sys_admin = True
        prctl.cap_inheritable.net_raw = True
        from supervisor.config._model import Capabilities, ProcessSpec
        from supervisor.runtime.privileges import preexec_for
        spec = ProcessSpec("web", ("cat",), capabilities=Capabilities(drop=("sys_admin",)))
        print(subprocess.run(["cat", "/proc/self/status"], preexec_fn=preexec_for(spec),
                             capture_output=True, text=True, check=True).stdout)
        """
    )
    assert result.returncode == 0, result.stderr
    status = parse_status(result.stdout)
    for key in ("CapPrm", "CapEff", "CapInh", "CapBnd"):
        assert not caps(status, key) & bit("sys_admin"), key
    assert caps(status, "CapInh") & bit("net_raw")  # only the dropped one went


async def test_no_new_privs_alone() -> None:
    status = await child_status(spec(no_new_privs=True))
    assert status["NoNewPrivs"].strip() == "1"
    assert ids(status["Uid"]) == [0] * 4


# -- a supervisor without the privileges to do it ---------------------------------------


def check_in_child(process: str, *drop: str) -> str:
    """check_privileges(``process``) as seen by a root child lacking ``drop``."""
    result = run_python(
        f"""
        from supervisor.config._model import Capabilities, ProcessSpec
        from supervisor.runtime.privileges import check_privileges
        print(check_privileges({process}))
        """,
        preexec=without_caps(*drop),
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_user_change_without_cap_setuid_is_explained() -> None:
    message = check_in_child('ProcessSpec("web", ("x",), user="nobody")', "setuid", "setgid")
    assert message == (
        "user 'nobody': changing the user needs root (CAP_SETUID); the supervisor runs as uid 0 without it"
    )


def test_group_change_without_cap_setgid_is_explained() -> None:
    message = check_in_child('ProcessSpec("web", ("x",), group="daemon")', "setgid")
    assert message.startswith("group 'daemon': changing groups needs root (CAP_SETGID)")


def test_capability_drop_without_cap_setpcap_is_explained() -> None:
    process = 'ProcessSpec("web", ("x",), capabilities=Capabilities(drop=("net_raw",)))'
    message = check_in_child(process, "setpcap")
    assert message == "dropping capabilities needs CAP_SETPCAP, which the supervisor (uid 0) lacks"


def test_nothing_left_to_drop_is_not_a_problem() -> None:
    process = 'ProcessSpec("web", ("x",), capabilities=Capabilities(drop=("net_raw",)))'
    assert check_in_child(process, "setpcap", "net_raw") == "None"


def test_keeping_a_capability_the_supervisor_lacks_is_explained() -> None:
    process = 'ProcessSpec("web", ("x",), user="nobody", capabilities=Capabilities(keep=("net_bind_service",)))'
    message = check_in_child(process, "net_bind_service")
    if FULL_ROOT:
        assert message == "cannot keep net_bind_service: the supervisor does not have it itself"
    else:
        assert "not mapped" in message


def test_a_failing_call_in_the_child_exits_126_with_a_message() -> None:
    # Skip the parent's checks on purpose: the child itself must not go on
    # to exec with half-dropped privileges.
    result = run_python(
        """
        import subprocess, sys
        from supervisor.runtime.privileges import PrivilegePlan
        plan = PrivilegePlan(uid=65534, label="web")
        child = subprocess.run(["true"], preexec_fn=plan.preexec(), capture_output=True)
        sys.stdout.write(f"{child.returncode}\\n")
        sys.stdout.write(child.stderr.decode())
        """,
        preexec=without_caps("setuid"),
    )
    assert result.returncode == 0, result.stderr
    code, message = result.stdout.split("\n", 1)
    assert int(code) == ExitCode.NOT_EXECUTABLE == 126
    assert message.startswith("supervisor: web: cannot drop privileges: setresuid: ")

"""The plugin's settings, through ``supervisor check`` as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from supervisor_libvirt import supervisor_configure
from supervisor_libvirt._settings import LibvirtSettings

from supervisor import Settings
from supervisor.config import Config, ProcessSpec

SUPERVISOR = str(Path(sys.executable).parent / "supervisor")

HEADER = """\
processes:
  - name: libvirtd
    command: [libvirtd]
  - name: provider
    command: [sleep, infinity]
    depends_on: [libvirtd]
    main: true
plugins:
  libvirt:
"""


def check(tmp_path: Path, section: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "pod.yaml"
    path.write_text(HEADER + section)
    return subprocess.run(
        [SUPERVISOR, "check", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_valid_section_passes_check_and_shows_the_hooks(tmp_path: Path) -> None:
    result = check(tmp_path, "    process: libvirtd\n    mode: managedsave\n    enforcer: {grace: 2m}\n")
    assert result.returncode == 0, result.stderr
    assert "before_process_stop" in result.stdout
    assert "libvirt" in result.stdout


def test_every_problem_is_reported_with_its_position(tmp_path: Path) -> None:
    result = check(
        tmp_path,
        "    process: libvirt\n"
        "    mode: suspend\n"
        "    shutdown_timout: 30s\n"
        "    resend_interval: 0\n"
        "    enforcer: {grace: abc}\n",
    )
    assert result.returncode == 2
    path = tmp_path / "pod.yaml"
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"{path}:10:14: plugins.libvirt.process: no process named 'libvirt' (processes: libvirtd, provider)",
        f"{path}:11:11: plugins.libvirt.mode: expected one of shutdown, managedsave, got 'suspend'",
        f"{path}:12:5: unknown key 'shutdown_timout' in plugins.libvirt (did you mean 'shutdown_timeout'?)",
        f"{path}:13:22: plugins.libvirt.resend_interval: must be more than 0",
        f"{path}:14:23: plugins.libvirt.enforcer.grace: invalid duration 'abc': use a number of "
        "seconds or a number with ms, s, m or h (30, 30s, 500ms, 1.5s, 2m)",
    ]
    assert "Traceback" not in result.stderr


def configure(data: dict[str, object]) -> tuple[LibvirtSettings, Settings]:
    settings = Settings.from_mapping(data, path="plugins.libvirt")
    config = Config(processes=(ProcessSpec(name="libvirtd", command=("libvirtd",)),))
    return supervisor_configure(settings=settings, config=config), settings


def test_defaults_follow_the_reference_values() -> None:
    parsed, settings = configure({})
    assert settings.problems == []
    assert parsed.uri == "qemu:///system"
    assert parsed.process is None  # shut down in pre_stop
    assert (parsed.mode, parsed.shutdown_timeout, parsed.resend_interval) == ("shutdown", 60.0, 5.0)
    assert (parsed.enforcer.enabled, parsed.enforcer.resync_interval, parsed.enforcer.grace) == (
        True,
        60.0,
        300.0,
    )
    # libvirt-guests' ON_BOOT=start for what it saved; BYPASS_CACHE and SYNC_TIME off.
    assert (parsed.restore, parsed.bypass_cache, parsed.sync_time) == (True, False, False)


def test_restore_and_its_options_are_settings() -> None:
    parsed, settings = configure({"restore": False, "bypass_cache": True, "sync_time": True})
    assert settings.problems == []
    assert (parsed.restore, parsed.bypass_cache, parsed.sync_time) == (False, True, True)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"domains": ["vm-*"], "exclude": ["vm-keep"]}, ("vm-*",)),
        ({"marker": "urn:example:machine"}, ()),
    ],
)
def test_selection(data: dict[str, object], expected: tuple[str, ...]) -> None:
    parsed, settings = configure(data)
    assert settings.problems == []
    assert parsed.selection.names == expected
    assert parsed.selection.marker == data.get("marker")


def test_enforcer_can_be_switched_off_with_false() -> None:
    parsed, settings = configure({"enforcer": False, "hook_timeout": "20s", "max_parallel": 4})
    assert settings.problems == []
    assert parsed.enforcer.enabled is False
    assert parsed.hook_timeout == 20.0
    assert parsed.max_parallel == 4


def test_the_example_pod_configuration_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "libvirt" / "pod.yaml"
    result = subprocess.run(
        [SUPERVISOR, "check", "--no-compile", "-c", str(example)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "2. stop libvirtd" in result.stdout

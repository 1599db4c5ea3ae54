"""Privileges of a supervised process: user, groups, capabilities, no_new_privs.

Everything is decided in the parent, when the process is about to be spawned
(so a changed /etc/passwd is seen on the next restart); the child, between
fork and exec, only makes the system calls, in this order:

1. drop capabilities from the bounding set, and from the inheritable set
   (root regains every inheritable capability at exec, bounding set or not;
   container runtimes before 2022 left that set full, CVE-2022-24769);
2. with ``keep`` and a non-root target: raise the kept capabilities in the
   inheritable set and set PR_SET_KEEPCAPS, so they survive the uid change;
3. setgroups, setresgid, setresuid;
4. raise the kept capabilities as ambient ones (a non-root process keeps
   them across exec, e.g. NET_BIND_SERVICE for port 80);
5. PR_SET_NO_NEW_PRIVS.

With ``user`` (a user other than root) and nothing said about the rest,
the safe choice is made: every capability dropped (from the bounding set
when the supervisor can, from the inheritable set always) and
``no_new_privs`` set, so that a setuid-root binary cannot make the
process root again.  ``no_new_privs: false`` and ``capabilities: {drop:
[]}`` say otherwise.  ``login_environment`` gives such a process the
user's HOME, USER and LOGNAME.

python-prctl makes the prctl and capability calls; it has no ambient
capabilities, so those (and capabilities newer than its table) go through
libc's prctl directly.

The child function must not import, log or take locks that another thread
of the parent may hold: trio forks from a worker thread.  If a call fails
anyway, it writes one line to the process's stderr and exits with status 126
(CPython would otherwise replace the error with "Exception occurred in
preexec_fn").  ``check_privileges`` catches the predictable failures before
anything is spawned.
"""

from __future__ import annotations

import dataclasses
import grp
import os
import pwd
import subprocess
from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType

import prctl

from supervisor._libc import prctl as libc_prctl
from supervisor.config._model import ProcessSpec
from supervisor.pid1.exits import ExitCode

__all__ = [
    "CAPABILITIES",
    "PrivilegeError",
    "PrivilegePlan",
    "check_privileges",
    "login_environment",
    "plan_privileges",
    "preexec_for",
]

_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_IS_SET = 1
_PR_CAP_AMBIENT_RAISE = 2
_CAP_SETGID = 6
_CAP_SETUID = 7
_CAP_SETPCAP = 8
_CAP_CHECKPOINT_RESTORE = 40  # Linux 5.9; python-prctl 1.8.1 does not name it


def _capability_table() -> dict[str, int]:
    # python-prctl names CAP_LAST_CAP like a capability ("last_cap"); skip it.
    table = {
        name: int(getattr(prctl, "CAP_" + name.upper()))
        for name in prctl.ALL_CAP_NAMES
        if name != "last_cap" and not name.startswith("unknown_")
    }
    table.setdefault("checkpoint_restore", _CAP_CHECKPOINT_RESTORE)
    return table


CAPABILITIES: Mapping[str, int] = MappingProxyType(_capability_table())
"""Capability numbers by lower-case name without ``cap_`` (``net_bind_service``)."""

# Capabilities python-prctl accepts by number; any newer one the running
# kernel has is dropped through libc.
_PRCTL_KNOWN = frozenset(int(cap) for cap in prctl.ALL_CAPS)


class PrivilegeError(subprocess.SubprocessError):
    """A spec's user, group or capabilities cannot be applied here.

    ``str()`` is one line for the user.  A ``SubprocessError`` because it
    is raised while preparing a spawn, where callers already catch those.
    """


@dataclasses.dataclass(frozen=True, slots=True)
class PrivilegePlan:
    """The system calls one spawn makes between fork and exec.

    None or empty means "leave as it is".  ``problem`` is why the plan
    cannot work in this process (not root, unmapped uid, ...), or None.
    """

    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] | None = None
    bounding_drop: tuple[int, ...] = ()
    inheritable_drop: tuple[int, ...] = ()
    inheritable_raise: tuple[int, ...] = ()
    keepcaps: bool = False
    ambient: tuple[int, ...] = ()
    no_new_privs: bool = False
    problem: str | None = None
    label: str = "process"

    @property
    def needed(self) -> bool:
        return any(
            (
                self.uid is not None,
                self.gid is not None,
                self.groups is not None,
                self.bounding_drop,
                self.inheritable_drop,
                self.inheritable_raise,
                self.ambient,
                self.no_new_privs,
            )
        )

    def preexec(self) -> Callable[[], None]:
        """The function to pass as ``preexec_fn``."""
        # Bind everything now: the child only calls what is bound here, in
        # order, and stops at the first failure.
        calls = self._calls()
        write, strerror, exit_now = os.write, os.strerror, os._exit
        prefix = f"supervisor: {self.label}: cannot drop privileges: ".encode()

        def drop_privileges() -> None:
            step = b"privileges"
            try:
                for name, call in calls:
                    step = name  # for the error line
                    call()
            except Exception as exc:  # anything: never exec half-dropped
                reason = strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else str(exc)
                try:
                    write(2, prefix + step + b": " + reason.encode() + b"\n")
                finally:
                    # "Cannot execute", as for a program without the x bit.
                    exit_now(ExitCode.NOT_EXECUTABLE)

        return drop_privileges

    def _calls(self) -> tuple[tuple[bytes, Callable[[], object]], ...]:
        """The child's system calls in the order of the module's docstring,
        each with the step's name for the error line; only those this plan
        needs."""
        prctl_drop = tuple(cap for cap in self.bounding_drop if cap in _PRCTL_KNOWN)
        raw_drop = tuple(cap for cap in self.bounding_drop if cap not in _PRCTL_KNOWN)
        inheritable = (
            (list(self.inheritable_drop), prctl.CAP_INHERITABLE, False),
            (list(self.inheritable_raise), prctl.CAP_INHERITABLE, True),
        )
        # -1 is "leave it as it is" to setresuid/setresgid; those calls are
        # only made when the id is set anyway.
        uids = (self.uid,) * 3 if self.uid is not None else (-1, -1, -1)
        gids = (self.gid,) * 3 if self.gid is not None else (-1, -1, -1)
        planned: tuple[tuple[bool, bytes, Callable[[], object]], ...] = (
            (bool(prctl_drop), b"bounding set", partial(prctl.capbset.drop, *prctl_drop)),
            *((True, b"bounding set", partial(libc_prctl, _PR_CAPBSET_DROP, cap)) for cap in raw_drop),
            (
                bool(self.inheritable_drop or self.inheritable_raise),
                b"inheritable capabilities",
                partial(prctl.set_caps, *inheritable),
            ),
            (self.keepcaps, b"PR_SET_KEEPCAPS", partial(prctl.set_keepcaps, True)),
            (self.groups is not None, b"setgroups", partial(os.setgroups, self.groups or ())),
            (self.gid is not None, b"setresgid", partial(os.setresgid, *gids)),
            (self.uid is not None, b"setresuid", partial(os.setresuid, *uids)),
            *(
                (True, b"ambient capabilities", partial(libc_prctl, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, cap))
                for cap in self.ambient
            ),
            (self.no_new_privs, b"PR_SET_NO_NEW_PRIVS", partial(prctl.set_no_new_privs, True)),
        )
        return tuple((name, call) for wanted, name, call in planned if wanted)


def plan_privileges(spec: ProcessSpec) -> PrivilegePlan:
    """Resolve ``spec``'s user, group and capabilities against this process.

    Raises PrivilegeError for what is wrong whatever the environment (an
    unknown user, group or capability); ``problem`` of the result tells what
    cannot work in this process.
    """
    state = _State.read()
    uid, gid, groups, wanted = _resolve_ids(spec)
    final_uid = uid if uid is not None else state.euid
    # `user:` alone: the safe defaults of the module's docstring.
    safe_default = spec.user is not None and final_uid != 0
    caps = spec.capabilities
    drop: set[int] = set()
    keep: set[int] = set()
    everything = set(range(state.last_cap + 1)) | set(CAPABILITIES.values())
    if caps is None and safe_default:
        # Only what this process may drop: without CAP_SETPCAP the bounding
        # set stays (no_new_privs still keeps setuid binaries powerless).
        drop = everything if state.has(_CAP_SETPCAP) else {cap for cap in everything if state.inheritable >> cap & 1}
    elif caps is not None:
        keep = {_capability(name) for name in caps.keep}
        named_drop = {_capability(name) for name in caps.drop if name != "all"}
        if both := sorted(named_drop & keep):
            names = ", ".join(_capability_name(cap) for cap in both)
            raise PrivilegeError(f"capabilities both dropped and kept: {names}")
        drop = everything if "all" in caps.drop else named_drop
        if keep:
            drop |= everything - keep
        drop -= keep

    ambient = tuple(sorted(keep)) if keep and final_uid != 0 else ()
    plan = PrivilegePlan(
        uid=uid if uid is not None and state.uids != (uid, uid, uid) else None,
        gid=gid if gid is not None and state.gids != (gid, gid, gid) else None,
        groups=groups if groups is not None and not _same_groups(groups, gid, state) else None,
        bounding_drop=tuple(sorted(cap for cap in drop if state.bounding >> cap & 1)),
        inheritable_drop=tuple(sorted(cap for cap in drop if state.inheritable >> cap & 1)),
        inheritable_raise=tuple(cap for cap in ambient if not state.inheritable >> cap & 1),
        keepcaps=bool(ambient) and uid is not None and 0 in state.uids and uid != 0,
        ambient=ambient,
        no_new_privs=spec.no_new_privs if spec.no_new_privs is not None else safe_default,
        label=spec.name,
    )
    problem = _problem(plan, state, wanted)
    return dataclasses.replace(plan, problem=problem) if problem else plan


def check_privileges(spec: ProcessSpec) -> str | None:
    """Why ``spec``'s privilege settings cannot work here, or None.

    For a clear message before anything starts ("changing the user needs
    root ..."), instead of a child that exits 126.
    """
    try:
        return plan_privileges(spec).problem
    except PrivilegeError as exc:
        return str(exc)


def preexec_for(spec: ProcessSpec) -> Callable[[], None] | None:
    """The ``preexec_fn`` that applies ``spec``'s privileges, or None when
    there is nothing to change.  Raises PrivilegeError (see
    ``check_privileges``) when they cannot be applied here."""
    plan = plan_privileges(spec)
    if plan.problem:
        raise PrivilegeError(plan.problem)
    return plan.preexec() if plan.needed else None


def login_environment(spec: ProcessSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with HOME, USER and LOGNAME of ``spec``'s user (from the
    passwd database, as ``login`` would set them) when it names one; a user
    without an entry gets HOME=/ and no USER or LOGNAME rather than the
    supervisor's (HOME=/root)."""
    env = dict(environ)
    if spec.user is None:
        return env
    try:
        _uid, entry = _user(spec.user)
    except PrivilegeError:
        return env  # reported by plan_privileges
    for key in ("HOME", "USER", "LOGNAME"):
        env.pop(key, None)
    if entry is None:
        env["HOME"] = "/"
    else:
        env.update(HOME=entry.pw_dir or "/", USER=entry.pw_name, LOGNAME=entry.pw_name)
    return env


# -- resolution -----------------------------------------------------------------


def _resolve_ids(
    spec: ProcessSpec,
) -> tuple[int | None, int | None, tuple[int, ...] | None, str]:
    """uid, gid and supplementary groups to switch to, and the spec's words
    for them (for messages)."""
    if spec.user is None and spec.group is None:
        return None, None, None, ""
    entry: pwd.struct_passwd | None
    if spec.user is None:
        uid = None
        entry = _passwd_by_uid(os.geteuid())
    else:
        uid, entry = _user(spec.user)
    if spec.group is not None:
        gid = _group(spec.group)
    elif entry is not None:
        gid = entry.pw_gid
    else:
        # A numeric user without a passwd entry (OpenShift's random uids,
        # scratch images): its own number as group rather than root's group,
        # which it would otherwise keep.
        assert uid is not None
        gid = uid
    groups = os.getgrouplist(entry.pw_name, gid) if entry is not None else [gid]
    wanted = " ".join(
        part
        for part in (
            f"user {spec.user!r}" if spec.user is not None else "",
            f"group {spec.group!r}" if spec.group is not None else "",
        )
        if part
    )
    return uid, gid, tuple(dict.fromkeys(groups)), wanted


def _user(text: str) -> tuple[int, pwd.struct_passwd | None]:
    if text.isdigit():
        uid = int(text)
        return uid, _passwd_by_uid(uid)
    try:
        entry = pwd.getpwnam(text)
    except KeyError:
        raise PrivilegeError(f"user {text!r} does not exist (not in the passwd database)") from None
    return entry.pw_uid, entry


def _passwd_by_uid(uid: int) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        return None


def _group(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise PrivilegeError(f"group {text!r} does not exist (not in the group database)") from None


def _same_groups(groups: tuple[int, ...], gid: int | None, state: _State) -> bool:
    # A supplementary group equal to the primary one grants nothing more.
    return set(groups) | {gid} == set(state.groups) | {state.gids[1]}


def _capability(name: str) -> int:
    key = name.lower().removeprefix("cap_")
    try:
        return CAPABILITIES[key]
    except KeyError:
        raise PrivilegeError(f"unknown capability {name!r}") from None


def _capability_name(cap: int) -> str:
    names = (name for name, number in CAPABILITIES.items() if number == cap)
    return next(names, f"capability {cap}")


# -- what this process may do ---------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _State:
    """This process's credentials, as the kernel reports them."""

    uids: tuple[int, int, int]
    gids: tuple[int, int, int]
    groups: tuple[int, ...]
    effective: int
    permitted: int
    inheritable: int
    bounding: int
    last_cap: int
    uid_map: tuple[tuple[int, int], ...]  # (first, count) inside this namespace
    gid_map: tuple[tuple[int, int], ...]
    setgroups_allowed: bool

    @property
    def euid(self) -> int:
        return self.uids[1]

    @classmethod
    def read(cls) -> _State:
        status = dict(line.split(":\t", 1) for line in _read("/proc/self/status", "").splitlines() if ":\t" in line)
        caps = {key: int(status.get(key, "0"), 16) for key in ("CapEff", "CapPrm", "CapInh", "CapBnd")}
        last = _read("/proc/sys/kernel/cap_last_cap", "").strip()
        return cls(
            uids=os.getresuid(),
            gids=os.getresgid(),
            groups=tuple(os.getgroups()),
            effective=caps["CapEff"],
            permitted=caps["CapPrm"],
            inheritable=caps["CapInh"],
            bounding=caps["CapBnd"],
            last_cap=int(last) if last.isdigit() else max(CAPABILITIES.values()),
            uid_map=_id_map("/proc/self/uid_map"),
            gid_map=_id_map("/proc/self/gid_map"),
            setgroups_allowed=_read("/proc/self/setgroups", "allow").strip() != "deny",
        )

    def has(self, cap: int) -> bool:
        return bool(self.effective >> cap & 1)


def _read(path: str, default: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return default


def _id_map(path: str) -> tuple[tuple[int, int], ...]:
    ranges = []
    for line in _read(path, "0 0 4294967295").splitlines():
        fields = line.split()
        if len(fields) == 3:
            ranges.append((int(fields[0]), int(fields[2])))
    return tuple(ranges)


def _mapped(ident: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(first <= ident < first + count for first, count in ranges)


def _problem(plan: PrivilegePlan, state: _State, wanted: str) -> str | None:
    """The first reason the plan cannot work in this process, in the order
    the child would run into it."""
    for check in (_user_problem, _group_problem, _capability_problem):
        problem = check(plan, state, wanted)
        if problem is not None:
            return problem
    return None


_UNMAPPED = "is not mapped in the supervisor's user namespace"


def _user_problem(plan: PrivilegePlan, state: _State, wanted: str) -> str | None:
    if plan.uid is None:
        return None
    if not state.has(_CAP_SETUID):
        return (
            f"{wanted}: changing the user needs root (CAP_SETUID); the supervisor runs as uid {state.euid} without it"
        )
    if not _mapped(plan.uid, state.uid_map):
        return f"{wanted}: uid {plan.uid} {_UNMAPPED} (/proc/self/uid_map)"
    return None


def _group_problem(plan: PrivilegePlan, state: _State, wanted: str) -> str | None:
    if plan.gid is None and plan.groups is None:
        return None
    if not state.has(_CAP_SETGID):
        return f"{wanted}: changing groups needs root (CAP_SETGID); the supervisor runs as uid {state.euid} without it"
    gids = [g for g in (plan.gid, *(plan.groups or ())) if g is not None]
    unmapped = next((gid for gid in gids if not _mapped(gid, state.gid_map)), None)
    if unmapped is not None:
        return f"{wanted}: gid {unmapped} {_UNMAPPED} (/proc/self/gid_map)"
    if plan.groups is not None and not state.setgroups_allowed:
        return f"{wanted}: supplementary groups cannot be changed in this user namespace (/proc/self/setgroups is deny)"
    return None


def _capability_problem(plan: PrivilegePlan, state: _State, _wanted: str) -> str | None:
    if plan.bounding_drop and not state.has(_CAP_SETPCAP):
        return f"dropping capabilities needs CAP_SETPCAP, which the supervisor (uid {state.euid}) lacks"
    missing = [cap for cap in plan.ambient if not (state.permitted & state.bounding) >> cap & 1]
    if missing:
        return f"cannot keep {_capability_name(missing[0])}: the supervisor does not have it itself"
    if plan.ambient and not _ambient_supported():
        return "keeping capabilities for a non-root user needs Linux 4.3 or newer (ambient set)"
    return None


def _ambient_supported() -> bool:
    try:
        libc_prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_IS_SET, 0)
    except OSError:
        return False
    return True

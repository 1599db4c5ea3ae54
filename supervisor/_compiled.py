"""The compiled plan: the main process started before the orchestrator's imports.

``supervisor check -c FILE`` writes, next to FILE, what it takes to start
FILE's main process (``<dir>/__pycache__/<name>.supervisor-<version>.plan``,
in ``marshal`` form, as Python keeps ``.pyc`` files): the exact bytes of
FILE, the environment variables its ``${VAR}`` references read, and the
main process's command, ``env``, ``cwd`` and process group.

The plan holds no variable's value: the file lands in an image layer,
readable by everyone, and ``check`` may run with a secret in its
environment.  A variable is kept as a salted SHA-256 of its value (enough
to tell that it changed), and where its value stood in the command, the
``env`` or the ``cwd``, the plan names the variable instead; at run, once
the digests match, the values are taken back from the environment.
It is written only for a main process that nothing has to happen before
(the conditions of ``supervisor._run.prespawn_main``: no ``depends_on``, no
plugins, no ``log_prefix``) and that keeps the supervisor's user, group and
capabilities.

At run, the orchestrator asks ``start_from_plan`` first, before PyYAML,
dataclasses, subprocess and trio are imported (~70 ms on a small machine).
The plan is used only when FILE's bytes are the ones compiled, every
variable read has the value it had, the version is this one and the plan
file is ours (owned by this user or root, writable by nobody else);
anything else, including a command that cannot be executed, leaves the
start to the usual path, which also reports the failure.  The file is then
parsed and validated as always, and the process started here is adopted
(``supervisor.runtime.child``) if the validated main process is the one
compiled — otherwise it is stopped and started anew.

Stdlib only, and only modules the init layer has already imported: a test
lists ``sys.modules`` after importing this module.
"""

from __future__ import annotations

import marshal
import os
import signal

from . import __version__

# Not typing's: this module imports nothing the init layer has not (the
# constant is what type checkers look for).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .config import Config

__all__ = ["Recipe", "StartedFromPlan", "plan_path", "recipe_of", "start_from_plan", "write_plan"]

# Bumped whenever the layout of the marshalled dict changes.
_FORMAT = 2
# A plan larger than this is not one we wrote.
_MAX_PLAN = 4 << 20


class Recipe:
    """How the main process is started: what ``spawn_options`` would give it
    (the supervisor's environment with ``env`` on top, its stdin, the
    inherited descriptors, and its output captured unless stdout is a
    terminal)."""

    __slots__ = ("argv", "cwd", "env", "name", "process_group")

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: str | None, process_group: bool) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.process_group = process_group

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "argv": self.argv,
            "env": self.env,
            "cwd": self.cwd,
            "process_group": self.process_group,
        }

    @classmethod
    def from_dict(cls, data: object) -> Recipe | None:
        """None for anything that is not what ``as_dict`` wrote."""
        if not isinstance(data, dict):
            return None
        name, argv, env, cwd, group = (data.get(k) for k in ("name", "argv", "env", "cwd", "process_group"))
        if not (
            isinstance(name, str)
            and isinstance(argv, list)
            and argv
            and all(isinstance(a, str) for a in argv)
            and isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
            and (cwd is None or isinstance(cwd, str))
            and isinstance(group, bool)
        ):
            return None
        return cls(name, argv, env, cwd, group)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recipe) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]


def recipe_of(config: Config) -> Recipe | str:
    """The recipe of ``config``'s main process, or why it needs the
    orchestrator first (a sentence for ``supervisor check``)."""
    main = config.main
    if main is None:
        return "no process is `main: true`"
    if main.depends_on:
        return f"the main process waits for {', '.join(main.depends_on)} (depends_on)"
    if config.plugins:
        return "plugins are configured: their start-up hooks run first"
    if main.log_prefix:
        return "the main process's output is prefixed by the orchestrator (log_prefix)"
    if main.changes_privileges:
        return "the main process changes its user, group, capabilities or no_new_privs"
    return Recipe(main.name, list(main.command), dict(main.env), main.cwd, main.process_group)


def plan_path(config_path: str, version: str = __version__) -> str:
    directory, name = os.path.split(os.path.abspath(config_path))
    return os.path.join(directory, "__pycache__", f"{name}.supervisor-{version}.plan")


def write_plan(config_path: str, source: bytes, environ: Mapping[str, str | None], recipe: Recipe) -> str:
    """Write the plan of ``config_path`` (whose bytes are ``source``, whose
    references read ``environ``); returns its path.  Raises OSError.

    Written to a temporary file renamed into place, so a supervisor starting
    meanwhile reads the old plan or the new one, never half of one.
    """
    path = plan_path(config_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    salt = os.urandom(16)
    # Longest first: of two values where one contains the other, the
    # longer one is the variable that was there (either way, filling the
    # names back in gives the same string, since the values are the same).
    values = sorted(((v, n) for n, v in environ.items() if v), key=lambda vn: -len(vn[0]))
    data = marshal.dumps(
        {
            "format": _FORMAT,
            "version": __version__,
            "source": source,
            "salt": salt,
            "environ": {name: _digest(salt, value) for name, value in environ.items()},
            "main": _hidden(recipe.as_dict(), values),
        }
    )
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return path


def remove_plan(config_path: str) -> bool:
    """Remove a plan written earlier (the file no longer compiles); True if
    there was one."""
    try:
        os.unlink(plan_path(config_path))
    except OSError:
        return False
    return True


def read_plan(config_path: str) -> Recipe | None:
    """The recipe of ``config_path``'s plan if it may be used now, else None."""
    data = _read_trusted(plan_path(config_path))
    try:
        plan = marshal.loads(data) if data is not None else None
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(plan, dict) or plan.get("format") != _FORMAT or plan.get("version") != __version__:
        return None
    source, salt = plan.get("source"), plan.get("salt")
    if not isinstance(source, bytes) or not isinstance(salt, bytes) or not _same_environment(salt, plan.get("environ")):
        return None
    if _read_file(config_path, len(source) + 1) != source:
        return None
    try:
        main = _filled(plan.get("main"))
    except (KeyError, TypeError, IndexError):  # a name not set, or not a part
        return None
    return Recipe.from_dict(main)


def _same_environment(salt: bytes, environ: object) -> bool:
    """Whether every variable the file's ``${VAR}`` references read still
    holds what it held at ``check`` (a digest; None: unset)."""
    if not isinstance(environ, dict):
        return False
    for name, digest in environ.items():
        if not isinstance(name, str) or not (digest is None or isinstance(digest, str)):
            return False
        if _digest(salt, os.environ.get(name)) != digest:
            return False
    return True


def _digest(salt: bytes, value: str | None) -> str | None:
    """A salted SHA-256 of ``value`` (None for an unset variable)."""
    if value is None:
        return None
    # Not hashlib if it can be helped: it loads OpenSSL's libcrypto (some
    # MiB of mappings) into the orchestrator, whose own modules never need
    # it.  The built-in module is _sha2 since Python 3.12, _sha256 before;
    # a Python built with OpenSSL's hashes only (Fedora's, RHEL's) has
    # neither, and a missing module here would end the orchestrator.
    try:
        from _sha2 import sha256  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found, no-redef, unused-ignore]
        except ImportError:
            from hashlib import sha256  # type: ignore[assignment, unused-ignore]
    return str(sha256(salt + value.encode("utf-8", "surrogateescape")).hexdigest())


def _hidden(value: object, values: list[tuple[str, str]]) -> object:
    """``value`` (the recipe's dict, and what it holds) with every string in
    which a variable's value stands made a tuple of its parts: literal
    strings, and a 1-tuple naming the variable.  ``values``: (value, name),
    longest first."""
    if isinstance(value, dict):
        return {_hidden(k, values): _hidden(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_hidden(v, values) for v in value]
    if not isinstance(value, str) or not values:
        return value
    parts: list[str | tuple[str]] = []
    literal = i = 0
    while i < len(value):
        found = next(((v, n) for v, n in values if value.startswith(v, i)), None)
        if found is None:
            i += 1
            continue
        if literal < i:
            parts.append(value[literal:i])
        parts.append((found[1],))
        i = literal = i + len(found[0])
    if not parts:
        return value
    if literal < len(value):
        parts.append(value[literal:])
    return tuple(parts)


def _filled(value: object) -> object:
    """What ``_hidden`` was given, with the variables' values taken from the
    environment (which ``_same_environment`` found to hold the same ones).
    Raises KeyError, TypeError or IndexError for what it did not write."""
    if isinstance(value, tuple):
        return "".join(part if isinstance(part, str) else os.environ[part[0]] for part in value)
    if isinstance(value, dict):
        return {_filled(k): _filled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v) for v in value]
    return value


def _read_trusted(path: str) -> bytes | None:
    """The plan's bytes if it is ours: owned by this user or root and
    writable by nobody else (as ``sudo`` and ``ssh`` trust their files)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022 or st.st_size > _MAX_PLAN:
            return None
        return _read_all(fd, st.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_file(path: str, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read_all(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_all(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes (one more than expected tells a longer file)."""
    chunks = []
    while limit > 0:
        chunk = os.read(fd, limit)
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


class StartedFromPlan:
    """The main process as started here: its PID and, when its output is
    captured, the read ends of its stdout and stderr pipes."""

    def __init__(self, recipe: Recipe, pid: int, stdout: int | None, stderr: int | None) -> None:
        self.recipe = recipe
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr

    def discard(self) -> None:
        """Kill and reap it (its configuration turned out to differ, or to
        be wrong after all): nothing may run that the supervisor does not
        supervise."""
        try:
            if self.recipe.process_group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        for fd in (self.stdout, self.stderr):
            if fd is not None:
                os.close(fd)


def start_from_plan(config_path: str, inherited_fds: tuple[int, ...]) -> StartedFromPlan | None:
    """Start ``config_path``'s main process from its compiled plan, or None
    (no usable plan, an interactive start, or the start failed: the usual
    path starts it, and reports why it cannot)."""
    recipe = read_plan(config_path)
    if recipe is None or (recipe.process_group and _isatty(0)):
        # A terminal is handed to the main process's group between fork and
        # exec (supervisor.runtime.spawn), which posix_spawn cannot do; an
        # interactive start is not one to save milliseconds on.
        return None
    try:
        return _spawn(recipe)
    except (OSError, ValueError):  # ValueError: a NUL in an argument, say
        return None


def _spawn(recipe: Recipe) -> StartedFromPlan | None:
    """``posix_spawn`` with ``spawn_options``'s semantics: the supervisor's
    environment with ``env`` on top, ``cwd``, its own process group, our
    stdin, the output captured unless stdout is a terminal (as under tini
    then), the default disposition for what Python ignores (SIGPIPE,
    SIGXFSZ: ``subprocess``'s restore_signals).  The descriptors passed on
    are those PID 1 inherited (socket activation): this process opened
    everything else close-on-exec.  None if no executable is found.

    posix_spawn (vfork underneath) rather than fork: a fork of this process
    copies its page tables and then faults on every page the child's Python
    code touches, some milliseconds on a small machine.
    """
    env = {**os.environ, **recipe.env}
    here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if recipe.cwd is not None else None
    pipes = None
    try:
        if recipe.cwd is not None:
            # posix_spawn has no chdir; this process is single-threaded, and
            # back in its own directory before anything else runs.  (First:
            # a relative command or PATH entry is the new directory's.)
            os.chdir(recipe.cwd)
        program = _executable(recipe.argv[0], env)
        if program is None:
            return None
        pipes = (os.pipe(), os.pipe()) if not _isatty(1) else None  # close-on-exec
        try:
            pid = os.posix_spawn(program, recipe.argv, env, **_spawn_attributes(recipe, pipes))
        finally:
            for pair in pipes or ():
                os.close(pair[1])
    except OSError:
        for pair in pipes or ():
            os.close(pair[0])
        raise
    finally:
        if here is not None:
            os.fchdir(here)
            os.close(here)
    return StartedFromPlan(recipe, pid, *((pipes[0][0], pipes[1][0]) if pipes else (None, None)))


def _spawn_attributes(recipe: Recipe, pipes: tuple[tuple[int, int], tuple[int, int]] | None) -> dict[str, Any]:
    # Started while every signal is still blocked here (the early handlers
    # come after it): it starts with none blocked, as any child does.
    attributes: dict[str, Any] = {"setsigmask": (), "setsigdef": (signal.SIGPIPE, signal.SIGXFSZ)}
    if pipes is not None:
        attributes["file_actions"] = [(os.POSIX_SPAWN_DUP2, pipes[0][1], 1), (os.POSIX_SPAWN_DUP2, pipes[1][1], 2)]
    if recipe.process_group:
        attributes["setpgroup"] = 0
    return attributes


def _executable(name: str, env: dict[str, str]) -> str | None:
    """Where ``execvpe`` would find ``name`` with ``env``'s PATH (which
    ``posix_spawnp`` would take from this process instead)."""
    if "/" in name:
        return name
    for directory in os.get_exec_path(env):
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False

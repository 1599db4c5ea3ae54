#!/usr/bin/env python3
"""Build the distributions of the core and every plugin, check them, install them.

    python tools/dist.py [--out DIR]      # `make dist`: wheels and sdists into DIR (default dist/),
                                          # checked, then installed into a fresh virtualenv and run
    python tools/dist.py venv             # a regular install of them all, built once per state of
                                          # the sources and cached; prints the venv's path
    --cache DIR                           # where those are kept (default ~/.cache/pid1-supervisor)

A project is the repository's root (pid1-supervisor) or a directory under
plugins/ with a pyproject.toml.  Every sdist is built from a copy of the
sources in a temporary directory, and every wheel from its sdist (what pip
does with an sdist from an index), so the source tree gets no build/ or
*.egg-info directory and an sdist that lacks a file fails the build here,
not on a user's machine.  The build runs without isolation, with the
setuptools and wheel pinned in requirements-dev.txt: the same backend every
time, and no download of it for each of the twelve builds.

The checks are those an index applies and a newcomer would trip over:
``twine check --strict``; each long description is the project's README,
rendered the way PyPI renders it, with no link that only works inside the
repository (a relative link on PyPI resolves against pypi.org); the metadata
an index shows (summary, licence, Python versions); each plugin depends on
pid1-supervisor with a version range the core being built satisfies, and has
an entry point in the ``supervisor.plugins`` group.  Then the wheels go into
a new virtualenv (their dependencies from the index, our packages only from
these files) and ``supervisor --version``, ``supervisor plugins`` and a run of
a command must show every plugin and the right version.

The benchmarks measure such a regular install, not the development venv's
editable one: ``venv`` keeps one per state of the sources (a hash of what
goes into the distributions), and ``make dist`` leaves its fresh install
there when the cache has none for the sources it built.
"""

from __future__ import annotations

import argparse
import contextlib
import email.message
import email.parser
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
# What the distributions are made of: the build sees only these (copied), and
# the cached venv's key covers exactly them.
DIST_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "supervisor", "plugins")
PLUGIN_GROUP = "supervisor.plugins"
CORE = "pid1-supervisor"
# Links a reader of an index's project page can follow.
_ABSOLUTE_SCHEMES = frozenset({"http", "https", "mailto"})
# readme_renderer prefixes the ids it gives headings (PyPI does the same).
_HEADER_ID_PREFIX = "user-content-"
_RELATIVE = (
    "relative link {target!r}: an index's page resolves it against the index's own site;"
    " link with an absolute URL, or name the file without a link"
)
_BAD_ANCHOR = "link to {target!r}, which is no heading's anchor"
_READY_STAMP = ".pid1-supervisor-ready"
_KEEP_CACHED = 3


class DistError(Exception):
    """A distribution is not fit to publish; the message says where and why."""


@dataclass(frozen=True)
class Project:
    """One pyproject.toml: the core or a plugin."""

    directory: Path  # relative to the repository
    name: str
    version: str
    readme: Path | None  # relative to the repository
    plugins: tuple[str, ...]  # its entry points in the supervisor.plugins group

    @property
    def stem(self) -> str:
        """The file-name prefix of its distributions (PEP 625/491: pid1_supervisor_exec-0.1.0)."""
        return f"{self.name.replace('-', '_')}-{self.version}"

    @property
    def is_plugin(self) -> bool:
        return self.name != CORE


def load_projects(repo: Path = REPO) -> list[Project]:
    """The core first, then every plugin in name order."""
    found = []
    for pyproject in [repo / "pyproject.toml", *sorted(repo.glob("plugins/*/pyproject.toml"))]:
        with pyproject.open("rb") as f:
            table = tomllib.load(f)["project"]
        directory = pyproject.parent.relative_to(repo)
        readme = table.get("readme")
        if isinstance(readme, dict):
            readme = readme.get("file")
        found.append(
            Project(
                directory=directory,
                name=table["name"],
                version=table["version"],
                readme=directory / readme if isinstance(readme, str) else None,
                plugins=tuple(sorted(table.get("entry-points", {}).get(PLUGIN_GROUP, {}))),
            )
        )
    return found


# -- the sources ------------------------------------------------------------------


def source_files(repo: Path = REPO) -> list[Path]:
    """The files under DIST_SOURCES that the project keeps (tracked, or new and
    not ignored), relative to ``repo``.  Outside a git checkout (an unpacked
    source archive): every file there but caches and build output."""
    if (repo / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *DIST_SOURCES],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout.decode()
        # --cached also lists files deleted from the work tree but not yet from the index.
        names = sorted({n for n in listed.split("\0") if n and ((repo / n).is_symlink() or (repo / n).exists())})
        return [Path(n) for n in names]
    skipped = {"__pycache__", "build", "dist", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
    files = []
    for top in DIST_SOURCES:
        for path in [repo / top] if (repo / top).is_file() else sorted((repo / top).rglob("*")):
            relative = path.relative_to(repo)
            if path.is_dir() or skipped.intersection(relative.parts) or ".egg-info" in str(relative):
                continue
            files.append(relative)
    return files


def copy_sources(repo: Path, files: Sequence[Path], destination: Path) -> None:
    """Copy ``files`` keeping the layout; symlinks stay links (a plugin's
    LICENSE points at the repository's)."""
    for relative in files:
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / relative, target, follow_symlinks=False)


def sources_key(repo: Path, files: Sequence[Path]) -> str:
    """A hash of what goes into the distributions, the builder and the interpreter."""
    digest = hashlib.sha256()
    digest.update(f"{sys.version}\0{sys.base_prefix}\0".encode())
    digest.update(Path(__file__).read_bytes())
    for relative in files:
        path = repo / relative
        content = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        digest.update(f"\0{relative}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


# -- building ---------------------------------------------------------------------


def build(repo: Path, projects: Sequence[Project], out: Path, work: Path) -> None:
    """Every project's sdist, and its wheel built from that sdist, into ``out``."""
    source = work / "src"
    copy_sources(repo, source_files(repo), source)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("*.whl"), *out.glob("*.tar.gz")]:
        stale.unlink()
    for project in projects:
        say(f"building {project.name} {project.version}")
        command = [sys.executable, "-m", "build", "--no-isolation", "--quiet", "--outdir", str(out)]
        _run([*command, str(source / project.directory)], f"building {project.directory}")


def artifacts(out: Path, project: Project) -> tuple[Path, Path]:
    """The project's wheel and sdist in ``out``."""
    wheels = sorted(out.glob(f"{project.stem}-*.whl"))
    sdist = out / f"{project.stem}.tar.gz"
    if len(wheels) != 1 or not sdist.exists():
        raise DistError(f"{out}: expected one wheel and one sdist of {project.stem}, found {wheels} and {sdist.name}")
    return wheels[0], sdist


# -- checking ---------------------------------------------------------------------


def check(repo: Path, projects: Sequence[Project], out: Path) -> None:
    files = [path for project in projects for path in artifacts(out, project)]
    say("twine check --strict")
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)], "twine check")
    core = projects[0]
    problems = []
    for project in projects:
        wheel, _ = artifacts(out, project)
        metadata, entry_points = read_wheel(wheel)
        problems += check_description(repo, project, metadata)
        problems += check_metadata(project, metadata, entry_points, core)
    if problems:
        raise DistError("\n".join(problems))


def read_wheel(wheel: Path) -> tuple[email.message.Message, str]:
    """The wheel's METADATA and its entry_points.txt (empty if it has none)."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        # Core metadata is UTF-8 (the long description is its body, unencoded).
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = f"{info}/entry_points.txt"
        return metadata, archive.read(entry_points).decode() if entry_points in names else ""


def check_description(repo: Path, project: Project, metadata: email.message.Message) -> list[str]:
    """The long description is the README and works on an index's page."""
    where = project.readme or project.directory / "pyproject.toml"
    if project.readme is None:
        return [f"{where}: no readme: the index's page for {project.name} would be empty (set project.readme)"]
    text = (repo / project.readme).read_text()
    description = metadata.get_payload()
    if not isinstance(description, str) or description.strip() != text.strip():
        return [f"{where}: the long description of {project.name} is not this file"]
    if metadata.get("Description-Content-Type", "").split(";")[0] != "text/markdown":
        return [f"{where}: the long description of {project.name} is not declared as Markdown"]
    return [f"{where}:{line}:{column}: {message}" for line, column, message in link_problems(text)]


def link_problems(markdown: str) -> list[tuple[int, int, str]]:
    """(line, column, message) of each link or image that does not work on an
    index's project page: relative paths, and anchors to no heading."""
    from readme_renderer.markdown import render

    html = render(markdown)
    if html is None:
        return [(1, 1, "does not render as Markdown")]
    page = _Page()
    page.feed(html)
    found = []
    searched_from: dict[str, int] = {}  # the same link twice: report both places
    for target in page.links:
        if urlsplit(target).scheme in _ABSOLUTE_SCHEMES:
            continue
        anchor = target[1:] if target.startswith("#") else None
        if anchor is not None and {anchor, _HEADER_ID_PREFIX + anchor} & page.ids:
            continue
        # The renderer prefixes anchors as it prefixes ids; the source has neither.
        written = "#" + anchor.removeprefix(_HEADER_ID_PREFIX) if anchor is not None else target
        at = _find(markdown, written, searched_from.get(target, 0))
        searched_from[target] = at + 1
        line = markdown.count("\n", 0, at) + 1
        column = at - (markdown.rfind("\n", 0, at) + 1) + 1
        message = _BAD_ANCHOR if anchor is not None else _RELATIVE
        found.append((line, column, message.format(target=written)))
    return found


class _Page(HTMLParser):
    """The link targets and element ids of a rendered description."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("href", "src"):
                self.links.append(value)
            elif name in ("id", "name"):
                self.ids.add(value)


def _find(text: str, target: str, start: int) -> int:
    """Offset of ``target`` in ``text`` from ``start``, preferring ``](target``."""
    at = text.find(f"]({target}", start)
    if at >= 0:
        return at + 2
    at = text.find(target, start)
    return at if at >= 0 else max(text.find(target), 0)


def check_metadata(project: Project, metadata: email.message.Message, entry_points: str, core: Project) -> list[str]:
    """What an index shows and what pip resolves: the fields a user reads, the
    dependency on the core, the entry points."""
    where = project.directory / "pyproject.toml"
    problems = [
        f"{where}: {project.name} has no {field} ({key})"
        for field, key in (
            ("Summary", "description"),
            ("License-Expression", "license"),
            ("License-File", "license-files"),
            ("Requires-Python", "requires-python"),
        )
        if not metadata.get(field)
    ]
    if not project.is_plugin:
        if "supervisor =" not in entry_points:
            problems.append(f"{where}: {project.name} installs no `supervisor` command")
        return problems
    if not project.plugins or f"[{PLUGIN_GROUP}]" not in entry_points:
        problems.append(f"{where}: {project.name} has no entry point in the {PLUGIN_GROUP} group")
    return problems + _core_requirement(where, project, metadata.get_all("Requires-Dist") or [], core)


def _core_requirement(where: Path, project: Project, requires: Sequence[str], core: Project) -> list[str]:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    on_core = [r for r in map(Requirement, requires) if canonicalize_name(r.name) == canonicalize_name(CORE)]
    if not on_core:
        return [f"{where}: {project.name} does not depend on {CORE}"]
    specifier = on_core[0].specifier
    if not str(specifier):
        return [f"{where}: {project.name} depends on {CORE} of any version; give the range it works with"]
    if not specifier.contains(core.version, prereleases=True):
        return [f"{where}: {project.name} wants {CORE}{specifier}, but the core being built is {core.version}"]
    return []


# -- installing -------------------------------------------------------------------


def install(wheels: Sequence[Path], venv: Path) -> None:
    """A new virtualenv with ``wheels`` and their dependencies from the index.

    The venv's interpreter is this one's base Python; this interpreter's pip
    installs into it (``pip --python``), so the venv needs no pip of its own
    and the install does not depend on the age of the one ensurepip bundles.
    Each wheel is named by its path, and pip takes a package named by a file
    from that file only, even when a requirement of another one names it.
    """
    say(f"installing {len(wheels)} wheels into a new virtualenv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "creating the virtualenv")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet"]
    _run([*pip, *map(str, wheels)], "installing the wheels", cwd=venv)


# The installed distributions of ours and where pip took each from.
_ORIGINS = """
import importlib.metadata, json, sys
origins = {}
for name in sys.argv[1:]:
    dist = importlib.metadata.distribution(name)
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    origins[name] = {"version": dist.version, "url": direct.get("url", ""), "dir_info": "dir_info" in direct}
print(json.dumps(origins))
"""


def smoke(venv: Path, projects: Sequence[Project], out: Path) -> None:
    """The installed supervisor starts, runs a command, and lists every plugin
    from wheels in ``out`` (not from a source tree or an editable install)."""
    python, supervisor, core = venv / "bin" / "python", venv / "bin" / "supervisor", projects[0]
    origins = json.loads(_output([str(python), "-c", _ORIGINS, *(p.name for p in projects)], venv))
    for project in projects:
        origin = origins[project.name]
        wheel, _ = artifacts(out, project)
        if origin["dir_info"] or origin["url"] != wheel.resolve().as_uri() or origin["version"] != project.version:
            raise DistError(f"{project.name} was not installed from {wheel}: {origin}")
    version = _output([str(supervisor), "--version"], venv).strip()
    if core.version not in version.split():
        raise DistError(f"`supervisor --version` says {version!r}, expected version {core.version}")
    listing = _output([str(supervisor), "plugins"], venv)
    headers = [line for line in listing.splitlines() if line and not line[0].isspace()]
    for project in projects[1:]:
        for plugin in project.plugins:
            if not any(h.split()[0] == plugin and f"({project.name} {project.version})" in h for h in headers):
                raise DistError(f"`supervisor plugins` does not list {plugin} ({project.name}):\n{listing}")
    run = subprocess.run(
        [str(supervisor), "--", "sh", "-c", "exit 3"], cwd=venv, env=_env(), capture_output=True, text=True, check=False
    )
    if run.returncode != 3:
        raise DistError(f"`supervisor -- sh -c 'exit 3'` exited {run.returncode}, expected 3:\n{run.stderr.strip()}")
    say(f"{version}; plugins: {', '.join(p for project in projects for p in project.plugins)}")


# -- the cached regular install --------------------------------------------------


def default_cache() -> Path:
    """Outside the clone, beside the other builds the project caches."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pid1-supervisor"


def cache_entry(cache: Path, repo: Path, projects: Sequence[Project]) -> Path:
    """Where the regular install of the sources as they are now is kept."""
    return cache / f"regular-{projects[0].version}-{sources_key(repo, source_files(repo))[:16]}"


def cached_venv(cache: Path, repo: Path = REPO) -> Path:
    """A venv with the distributions of the sources as they are, installed from
    their wheels; built at most once per state of the sources (and
    interpreter), and shared by concurrent callers.  A ready one is never
    changed: a benchmark may be running it."""
    projects = load_projects(repo)
    venv = cache_entry(cache, repo, projects)
    with _locked(cache):
        if not _ready(venv):
            with tempfile.TemporaryDirectory(prefix="pid1-dist-") as work:
                out = Path(work) / "dist"
                build(repo, projects, out, Path(work))
                _fill(cache, venv, projects, out)
    return venv


def _ready(venv: Path) -> bool:
    return (venv / _READY_STAMP).exists()


def _fill(cache: Path, venv: Path, projects: Sequence[Project], out: Path) -> None:
    """Install the wheels in ``out`` into a new ``venv`` in the cache, check it,
    mark it ready; drop older entries.  The caller holds the cache's lock."""
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one, from a build that died
    install([artifacts(out, project)[0] for project in projects], venv)
    smoke(venv, projects, out)
    (venv / _READY_STAMP).touch()
    _prune(cache, venv)


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "regular.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _prune(cache: Path, keep: Path) -> None:
    """Keep the newest few regular installs: each is 170 MB or so."""
    others = sorted(
        (p for p in cache.glob("regular-*") if p.is_dir() and p != keep), key=lambda p: p.stat().st_mtime, reverse=True
    )
    for old in others[_KEEP_CACHED - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


# -- running ----------------------------------------------------------------------


def say(message: str) -> None:
    print(f"dist: {message}", file=sys.stderr, flush=True)


def _env() -> dict[str, str]:
    """This environment without what would let the source tree or another
    environment leak into the one under test."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _run(command: Sequence[str], what: str, cwd: Path | None = None) -> None:
    result = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DistError(f"{what} failed (exit {result.returncode}):\n{(result.stdout + result.stderr).strip()}")


def _output(command: Sequence[str], cwd: Path) -> str:
    result = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DistError(f"`{' '.join(command)}` failed (exit {result.returncode}):\n{result.stderr.strip()}")
    return result.stdout


def dist(out: Path, cache: Path, repo: Path = REPO) -> None:
    """Build into ``out``, check, and install into a fresh venv.

    That venv is the cache's entry for these sources when the cache has none
    yet (then the benchmarks find it ready), else a temporary one: the
    install is tried afresh either way.
    """
    projects = load_projects(repo)
    entry = cache_entry(cache, repo, projects)
    with tempfile.TemporaryDirectory(prefix="pid1-dist-") as work:
        build(repo, projects, out, Path(work))
        check(repo, projects, out)
        with _locked(cache):
            if _ready(entry):
                venv = Path(work) / "venv"
                install([artifacts(out, project)[0] for project in projects], venv)
                smoke(venv, projects, out)
            else:
                _fill(cache, entry, projects, out)
    say(f"{len(projects) * 2} distributions in {out}, checked and installed")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="tools/dist.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where the distributions go (default: dist/)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=default_cache(),
        help="where the regular installs are kept (default: $XDG_CACHE_HOME/pid1-supervisor or ~/.cache/...)",
    )
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("venv", help="print the path of the cached regular install, building it if needed")
    args = parser.parse_args(argv)
    try:
        if args.command == "venv":
            print(cached_venv(args.cache.resolve()))
        else:
            dist(args.out.resolve(), args.cache.resolve())
    except DistError as exc:
        print(f"dist: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

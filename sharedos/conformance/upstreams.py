"""Brokered upstream fixtures for the conformance rows that call an upstream's tools.

For each ``[upstreams.ID]`` of the manifest, a column environment gets:

- fresh git repositories (one commit each) under ``ROOT = <env>/upstreams/ID``,
  the value of the ``{ID.root}`` placeholder in the rows and the fixture's rules;
- the fixture's rules with ``{ID.root}`` resolved, written next to them and
  compiled with the run's rules (``overlay``);
- an ``[upstream.ID]`` configuration that runs the real ``mcp-server-git``
  (PyPI) over stdio behind ``sharedos.conformance.tap``, so the upstream's own
  input is logged: the proof that a refused call never reached it;
- ``UpstreamBroker`` (started by ``ConformanceEnv.serving_upstreams``), attached
  to the environment's registry, whose ``turn(context)`` every column opens
  around each of its turns.

``upstream_wire(record)`` reads the tap log for one evidence record: how many
``tools/call`` requests the upstream received with the arguments that were
authorized (the canonical resource in place of the path argument) and with the
arguments as the harness wrote them. Grading reads it (``grading._upstream_problem``).

A fixture that cannot be built here (mcp-server-git or git not installed, a
working directory a policy pattern cannot name literally) is ``unavailable``,
with the reason; its rows are graded not available, never silently skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sharedos.conformance.manifest import PLACEHOLDER_RE, Manifest, UpstreamFixture
from sharedos.conformance.tap import TappedCall
from sharedos.errors import ConformanceError

#: Characters a fixture root may contain so that it can stand literally in a policy
#: glob pattern (no glob metacharacters, quotes, braces or spaces).
_LITERAL_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]+$")
#: Seconds one forwarded fixture call may take (the host's handler deadline is 30 s).
CALL_TIMEOUT_S = 20.0


def git_server_command() -> str | None:
    """The mcp-server-git console script, when installed (the dev extra brings it)."""
    beside = Path(sys.executable).parent / "mcp-server-git"
    if beside.exists():
        return str(beside)
    return shutil.which("mcp-server-git")


def _git_env() -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "GIT_AUTHOR_NAME": "sharedos-conformance",
        "GIT_AUTHOR_EMAIL": "conformance@example.invalid",
        "GIT_COMMITTER_NAME": "sharedos-conformance",
        "GIT_COMMITTER_EMAIL": "conformance@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }


def make_repository(path: Path, name: str, files: Mapping[str, str] | None = None) -> Path:
    """A real git repository with one commit (``README.md`` naming it, and ``files``:
    relative path -> content)."""
    path.mkdir(parents=True)
    (path / "README.md").write_text(f"conformance repository {name}\n", encoding="utf-8")
    for rel, text in (files or {}).items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    env = _git_env()
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", name]):
        subprocess.run(
            ["git", "-C", str(path), *args], check=True, env=env, capture_output=True, timeout=60
        )
    return path


@dataclass
class FixtureUpstream:
    """One built fixture: where its repositories and tap log are, and its host configuration."""

    id: str
    namespace: str
    root: Path
    tap_log: Path
    overlay: Path
    config: Any  # sharedos.upstream.config.UpstreamConfig

    @property
    def placeholder(self) -> str:
        """The binding key (``git.root``) of ``{git.root}``."""
        return f"{self.id}.root"


@dataclass
class Fixtures:
    """The fixtures of one column environment: built ones, and unavailable ones with why."""

    built: dict[str, FixtureUpstream] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def bindings(self) -> dict[str, str]:
        """``{ID.root}`` placeholder key -> the fixture's root path in this environment."""
        return {f.placeholder: str(f.root) for f in self.built.values()}

    @property
    def overlays(self) -> tuple[Path, ...]:
        """The resolved fixture rules, compiled with the run's rules."""
        return tuple(f.overlay for f in self.built.values() if f.overlay.stat().st_size)

    def namespace_fixture(self, tool: str) -> FixtureUpstream | None:
        """The built fixture whose namespace ``tool`` is in (``git.git_log`` -> git)."""
        head = tool.split(".", 1)[0]
        return next((f for f in self.built.values() if f.namespace == head), None)


def build_fixtures(manifest: Manifest, base: Path) -> Fixtures:
    """Build every ``[upstreams.ID]`` of ``manifest`` under ``base/upstreams`` (see module doc)."""
    out = Fixtures()
    for uid, spec in manifest.upstreams.items():
        reason = _why_unavailable(spec)
        if reason is not None:
            out.unavailable[uid] = reason
            continue
        try:
            out.built[uid] = _build_one(uid, manifest.namespace_of(uid), spec, base / "upstreams")
        except FixtureError as exc:
            out.unavailable[uid] = exc.reason
        except (OSError, subprocess.SubprocessError) as exc:
            out.unavailable[uid] = f"its repositories could not be created: {exc}"
    return out


def _why_unavailable(spec: UpstreamFixture) -> str | None:
    if spec.server == "mcp-server-git":
        if git_server_command() is None:
            return "mcp-server-git is not installed (`make venv` installs the dev extra)"
        if shutil.which("git") is None:
            return "git is not installed (mcp-server-git needs it)"
    return None


def _build_one(uid: str, namespace: str, spec: UpstreamFixture, base: Path) -> FixtureUpstream:
    from sharedos.conformance import tap as tap_module
    from sharedos.harness.hostconfig import parse_host_config

    root = (base / uid).resolve()
    if not _LITERAL_PATH_RE.fullmatch(str(root)):
        raise FixtureError(
            uid,
            f"the working directory {root} holds characters a policy pattern cannot name "
            "literally; run with a plain --workdir / TMPDIR",
        )
    for name in spec.repositories:
        own = {
            rel.split("/", 1)[1]: text
            for rel, text in spec.files.items()
            if rel.split("/", 1)[0] == name
        }
        make_repository(root / name, name, own)
    plant_links(root, spec)
    # the tap's log in a directory of its own: the upstream's sandbox may write there
    # and nowhere else (the rules overlay beside it is a policy source, never shown)
    tap_dir = base / f"{uid}.tap"
    tap_dir.mkdir(exist_ok=True)
    tap_log = tap_dir / "tap.jsonl"
    tap_log.touch()
    overlay = base / f"{uid}.sos"
    rules = PLACEHOLDER_RE.sub(lambda m: str(root), spec.rules)
    overlay.write_text(rules, encoding="utf-8")
    command = git_server_command()
    assert command is not None
    # the tap as a script (standard library only): the upstream's sandbox shows no checkout
    args = [str(Path(tap_module.__file__).resolve()), str(tap_log), "--", command]
    # No --repository: the upstream is not fenced to one repository, so only SharedOS's
    # decision stands between a refused call and the repository, and the tap shows
    # whether it held. Its sandbox (sharedos.confine) shows the fixture's repositories
    # and the tap's log directory, nothing else of the host.
    roots = (
        f'roots = [{{ path = {json.dumps(str(root))}, mode = "ro" }}, '
        f'{{ path = {json.dumps(str(tap_dir.resolve()))}, mode = "rw" }}]\n'
    )
    toml = (
        f"[upstream.{uid}]\nnamespace = {json.dumps(namespace)}\n"
        f"command = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
        f'pinning = "off"\ntimeouts = {{ call_s = {CALL_TIMEOUT_S:g} }}\n{roots}'
        f'[upstream.{uid}.env]\nGIT_CONFIG_NOSYSTEM = "1"\n'
    )
    config = parse_host_config(toml, f"<conformance upstream {uid}>").upstream[uid]
    return FixtureUpstream(uid, namespace, root, tap_log, overlay, config)


def plant_links(root: Path, spec: UpstreamFixture) -> None:
    """The fixture's planted links: symbolic links and ``gitdir:`` pointers (both below ``root``)."""
    for name, target in spec.symlinks.items():
        link = root / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(root / target if target != "." else root, link)
    for name, target in spec.gitdir_pointers.items():
        directory = root / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ".git").write_text(f"gitdir: {root / target / '.git'}\n", encoding="utf-8")


class FixtureError(ConformanceError, RuntimeError):
    """A fixture that cannot be built in this environment; ``str()`` says why."""

    def __init__(self, uid: str, reason: str) -> None:
        self.uid = uid
        self.reason = reason
        super().__init__(f"upstream fixture {uid}: {reason}")


def forwarded_arguments(
    arguments: Mapping[str, Any], resource: str | None, resource_arg: str | None
) -> dict[str, Any]:
    """The arguments the forwarder sends upstream: the canonical resource in place of the
    path argument the requirement reads (``sharedos.upstream.forward``)."""
    out = dict(arguments)
    if resource_arg is not None and resource is not None and resource_arg in out:
        out[resource_arg] = resource
    return out


def upstream_wires(
    records: Sequence[Mapping[str, Any]],
    fixtures: Fixtures,
    received: Mapping[str, Sequence[TappedCall]],
    resource_argument: Callable[[str], str | None],
) -> list[dict[str, Any] | None]:
    """What the upstream received for each evidence record of one turn, from its tap log.

    ``received`` holds, per fixture id, the ``tools/call`` requests its tap logged
    during the turn. For a record of a brokered tool: ``calls`` counts requests with
    the tool's raw name and the arguments that were authorized (the canonical
    resource in place of the path argument), ``rawCalls`` those with the arguments as
    the harness wrote them when they differ (else ``None``), and ``successes`` the
    turn's succeeded records asking for that same forwarded call: each of them must
    have reached the upstream. Records of other tools get ``None``.
    """
    keyed: list[tuple[FixtureUpstream, str, dict[str, Any], dict[str, Any]] | None] = []
    for record in records:
        tool = str(record.get("tool", ""))
        fixture = fixtures.namespace_fixture(tool)
        if fixture is None:
            keyed.append(None)
            continue
        arguments = record.get("arguments")
        arguments = dict(arguments) if isinstance(arguments, dict) else {}
        canonical = forwarded_arguments(arguments, record.get("resource"), resource_argument(tool))
        keyed.append((fixture, tool.split(".", 1)[1], arguments, canonical))
    successes: dict[str, int] = {}
    for record, key in zip(records, keyed, strict=True):
        if key is not None and record.get("outcome") == "succeeded":
            ident = json.dumps([key[0].id, key[1], key[3]], sort_keys=True, default=str)
            successes[ident] = successes.get(ident, 0) + 1
    out: list[dict[str, Any] | None] = []
    for key in keyed:
        if key is None:
            out.append(None)
            continue
        fixture, raw_name, arguments, canonical = key
        same = [c for c in received.get(fixture.id, ()) if c.name == raw_name]
        ident = json.dumps([fixture.id, raw_name, canonical], sort_keys=True, default=str)
        out.append(
            {
                "upstream": fixture.id,
                "calls": _count(same, canonical),
                "rawCalls": None if canonical == arguments else _count(same, arguments),
                "successes": successes.get(ident, 0),
            }
        )
    return out


def _count(calls: list[TappedCall], arguments: Mapping[str, Any]) -> int:
    return sum(1 for c in calls if c.arguments == arguments)


def fixture_summary(fixture: FixtureUpstream) -> str:
    """One note: what the fixture is and where its upstream's own log is."""
    return (
        f"upstream {fixture.id}: the real mcp-server-git over stdio, behind "
        f"sharedos.conformance.tap (its input is logged to {fixture.tap_log}), in a sandbox "
        f"of its own that shows the repositories under {fixture.root} (read-only) and its "
        "tap log, but not fenced to one repository: only SharedOS's decision keeps refused "
        "calls away from the repositories it may not use"
    )

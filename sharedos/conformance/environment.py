"""A fresh, real kernel for one conformance run: sandbox tree, compiled rules, registry,
SQLite evidence store and RuntimeHost -- and the manifest's brokered upstreams.

Used by every column (the harness helper's live/mcp columns too), so that all
columns of one report are graded against the same rules and the same tree.
Nothing here is shared between runs: each run gets its own temp directory.

Brokered upstreams (``[upstreams.ID]`` in the manifest, see
``sharedos.conformance.upstreams``): an environment built with
``upstreams=True`` creates each fixture's repositories and compiles its rules;
``async with env.serving_upstreams()`` starts the ``UpstreamBroker`` (the real
upstream servers) and attaches it to the registry, and each column opens
``async with env.turn(context)`` around each of its turns, so that turn's
catalogue holds the brokered tools. A column that cannot serve them (a stdio
bridge is another process) builds with ``upstreams=False`` and a reason, and
its brokered rows are graded not available (``env.unavailable_rows()``).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sharedos.catalog import ToolRegistry
from sharedos.conformance.columns.base import ColumnOptions
from sharedos.conformance.manifest import Manifest, SandboxSpec
from sharedos.conformance.tap import read_tool_calls
from sharedos.conformance.upstreams import (
    Fixtures,
    build_fixtures,
    fixture_summary,
    upstream_wires,
)
from sharedos.evidence import SqliteEvidenceStore, record_dict
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, TurnCatalog
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import ToolPolicy
from sharedos.tools import register_files_tools


@dataclass
class BrokeredTurn:
    """One column turn as the brokered upstreams saw it (see ``ConformanceEnv.turn``).

    The tap logs of an environment are sliced by turn (``marks``), so a column runs
    its turns one after another: a call is attributed to the turn it reached the
    upstream in, never to an earlier shape's or group's turn.
    """

    env: ConformanceEnv
    #: the broker's snapshot of the turn (None: no upstream served)
    upstreams: Any
    #: fixture id -> how many tools/call its tap had logged when the turn opened
    marks: dict[str, int]

    def wires(self, records: Sequence[Any]) -> list[dict[str, Any] | None]:
        """For each evidence record of this turn: what its upstream received during the
        turn (``sharedos.conformance.upstreams.upstream_wires``), or None."""
        if self.upstreams is None or self.env.broker is None:
            return [None] * len(records)
        broker = self.env.broker
        received = {
            uid: read_tool_calls(f.tap_log)[self.marks.get(uid, 0) :]
            for uid, f in self.env.fixtures.built.items()
        }
        return upstream_wires(
            [record_dict(r) for r in records],
            self.env.fixtures,
            received,
            broker.resource_argument,
        )

    def note(self, group: str) -> str | None:
        """What reached each upstream during this turn, from its tap (None: none served)."""
        if self.upstreams is None:
            return None
        parts = []
        for uid, f in self.env.fixtures.built.items():
            calls = read_tool_calls(f.tap_log)[self.marks.get(uid, 0) :]
            names = ", ".join(f"{c.name}({_short_args(c.arguments)})" for c in calls) or "nothing"
            parts.append(f"upstream {uid} received {len(calls)} tools/call: {names}")
        return f"{group}: " + "; ".join(parts) + " (its own input, read from its tap log)"


def _short_args(arguments: dict[str, Any]) -> str:
    text = ", ".join(f"{k}={v}" for k, v in arguments.items())
    return text if len(text) <= 120 else text[:117] + "..."


def merge_wire(
    wire: dict[str, Any] | None, upstream: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A column's wire diagnostics with the upstream's account added under ``upstream``."""
    if upstream is None:
        return wire
    return {**(wire or {}), "upstream": upstream}


def create_sandbox(spec: SandboxSpec, root: Path) -> Path:
    """Create the manifest's file tree under ``root`` (which must not exist or be empty)."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"sandbox root {root} is not empty")
    for rel in spec.dirs:
        (root / rel.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for rel, text in spec.files.items():
        target = root / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    for top in ("public", "private", "home", "shared"):
        (root / top).mkdir(exist_ok=True)
    return root


def default_policy_paths() -> tuple[Path, ...]:
    """The shipped rules and run policies (``rules/``, ``policy/``): what ``sharedos demo`` and
    the default run compile, so their policy bundle hash is the shipped one."""
    return (shipped_dir("rules"), shipped_dir("policy"))


def compile_policy(paths: Iterable[Path]) -> Any:
    """Compile policy files/directories with the policy API (``sharedos.policy.compile_paths``)."""
    from sharedos.policy import compile_paths

    return compile_paths([Path(p) for p in paths])


@dataclass
class ConformanceEnv:
    """Everything one run needs; ``close()`` releases the evidence store."""

    workdir: Path
    sandbox_root: Path
    policy: Any
    registry: ToolRegistry
    kernel: Kernel
    evidence: SqliteEvidenceStore
    evidence_path: Path
    host: RuntimeHost
    manifest: Manifest
    #: the manifest's brokered upstream fixtures built for this environment
    fixtures: Fixtures = field(default_factory=Fixtures)
    #: why this environment serves no brokered upstream at all (None: it serves those it built)
    no_upstreams: str | None = None
    #: the running broker, inside ``serving_upstreams()``
    broker: Any = None
    #: what the broker reported at each upstream's first turn (for column notes)
    upstream_reports: list[str] = field(default_factory=list)
    #: what the upstream processes wrote on stderr (scrubbed by the broker)
    upstream_stderr: io.StringIO = field(default_factory=io.StringIO)

    @property
    def bindings(self) -> dict[str, str]:
        """``{ID.root}`` placeholder -> path, for the fixtures this environment built."""
        return self.fixtures.bindings if self.no_upstreams is None else {}

    def unavailable_rows(self) -> dict[str, str]:
        """Rows needing an upstream fixture this environment cannot serve -> why (graded
        not available)."""
        out: dict[str, str] = {}
        for row in self.manifest.upstream_rows():
            uid = row.upstream or ""
            if self.no_upstreams is not None:
                out[row.id] = self.no_upstreams
            elif uid in self.fixtures.unavailable:
                out[row.id] = (
                    f"upstream fixture {uid} is not available here: "
                    + (self.fixtures.unavailable[uid])
                )
        return out

    @contextlib.asynccontextmanager
    async def serving_upstreams(self) -> AsyncIterator[None]:
        """Run the broker for the fixtures this environment built (nothing when none)."""
        if self.no_upstreams is not None or not self.fixtures.built:
            yield
            return
        from sharedos.upstream.broker import UpstreamBroker
        from sharedos.upstream.sandbox import UpstreamConfinementPolicy

        configs = {f.id: f.config for f in self.fixtures.built.values()}
        # the manifest's run policies are strict: a fixture that cannot be confined is
        # left out (its rows then graded from an absent upstream), never run unconfined
        db = str(self.evidence_path)
        overlays = [str(p) for p in self.fixtures.overlays]
        confinement = UpstreamConfinementPolicy(
            required=True, managed=(db, db + "-wal", db + "-shm", str(self.sandbox_root), *overlays)
        )
        async with UpstreamBroker(
            configs, environ={}, stderr=self.upstream_stderr, confinement=confinement
        ) as broker:
            broker.attach(self.registry, self.policy)
            self.broker = broker
            try:
                yield
            finally:
                self.broker = None

    @contextlib.asynccontextmanager
    async def turn(self, context: AccessContext) -> AsyncIterator[BrokeredTurn]:
        """Prepare ``context``'s turn with the broker (its brokered tools fixed for the
        turn) and mark where each upstream's tap log stood when it opened."""
        if self.broker is None:
            yield BrokeredTurn(self, None, {})
            return
        marks = {uid: len(read_tool_calls(f.tap_log)) for uid, f in self.fixtures.built.items()}
        async with self.broker.turn(context) as state:
            if not self.upstream_reports:
                self.upstream_reports.extend(state.report())
            yield BrokeredTurn(self, state, marks)

    def upstream_notes(self) -> list[str]:
        """Column notes: what each upstream published, and what reached it (its tap)."""
        if self.no_upstreams is not None:
            return []
        notes = list(self.upstream_reports)
        notes.extend(fixture_summary(f) for f in self.fixtures.built.values())
        notes.extend(
            f"upstream fixture {uid} not available: {why}"
            for uid, why in self.fixtures.unavailable.items()
        )
        return notes

    def managed_roots(self) -> list[str]:
        """What a confined harness must not see here: the files sandbox, the evidence store,
        the rules and the fixtures' repositories and rules (docs/confinement.md)."""
        db = str(self.evidence_path)
        out = [str(self.sandbox_root), db, db + "-wal", db + "-shm"]
        out += [str(p) for p in self.fixtures.overlays]
        out += [str(f.root) for f in self.fixtures.built.values()]
        out += [str(f.tap_log.parent) for f in self.fixtures.built.values()]
        return out

    def tool_policy(self, name: str) -> ToolPolicy:
        """A run policy of the manifest by name."""
        return self.manifest.policies[name]

    def context(self, name: str, turn_id: str) -> AccessContext:
        """A manifest context for one turn."""
        return self.manifest.contexts[name].access_context(turn_id)

    def catalog(self, context: AccessContext, tool_policy: ToolPolicy) -> TurnCatalog:
        """The turn catalogue the kernel computes for this context and run policy."""
        return self.kernel.list_tools(context, tool_policy)

    @property
    def policy_bundle_hash(self) -> str:
        """The compiled policy's bundle hash (on every SystemIdentity)."""
        return str(self.policy.bundle_hash)

    def close(self) -> None:
        """Close the evidence store."""
        self.evidence.close()


def _compile_with_fixtures(paths: Sequence[Path], fixtures: Fixtures) -> Any:
    """The run's rules plus the fixtures' rules; fixtures whose rules do not compile with
    the run's rules (``--rules`` without rules/git.sos) become unavailable, with the
    first problem as the reason. Rules that do not compile on their own still raise."""
    from sharedos.policy import PolicyError

    if not fixtures.overlays:
        return compile_policy(paths)
    try:
        return compile_policy([*paths, *fixtures.overlays])
    except PolicyError as exc:
        policy = compile_policy(paths)  # the run's own rules broken: that error is the one
        first = str(exc).strip().splitlines()[0]
        for uid in list(fixtures.built):
            fixtures.unavailable[uid] = (
                "its rules do not compile with this run's rules (do they include the "
                f"upstream's requirements, e.g. rules/git.sos?): {first}"
            )
            del fixtures.built[uid]
        return policy


def build_environment(
    manifest: Manifest,
    workdir: Path,
    *,
    policy_paths: Iterable[Path] | None = None,
    name: str = "run",
    secrets: Sequence[str] = (),
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    upstreams: bool = False,
    no_upstreams: str | None = None,
) -> ConformanceEnv:
    """Create sandbox + kernel + SQLite evidence under ``workdir/<name>``.

    ``policy_paths`` defaults to the shipped rules; a test passes a modified copy
    to show that a broken rule makes the matching cells fail. ``secrets`` are the
    host's credentials (host-configuration env values); ``synchronous`` is the
    evidence store's commit mode (the host configuration's ``[evidence]``).
    ``upstreams=True`` builds the manifest's brokered upstream fixtures (their
    rules are compiled with the others); otherwise ``no_upstreams`` says why the
    environment serves none (the brokered rows' "not available" reason).
    """
    base = workdir / name
    sandbox_root = create_sandbox(manifest.sandbox, base / "sandbox")
    fixtures = build_fixtures(manifest, base) if upstreams else Fixtures()
    if not upstreams and no_upstreams is None:
        no_upstreams = "this environment serves no brokered upstream"
    paths = list(policy_paths if policy_paths is not None else default_policy_paths())
    policy = _compile_with_fixtures(paths, fixtures)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox_root)
    kernel = Kernel(policy, registry)
    evidence_path = base / "evidence.sqlite"
    evidence = SqliteEvidenceStore(evidence_path, synchronous=synchronous)
    host = RuntimeHost(kernel, evidence, handler_timeout_s=30.0, host_secrets=tuple(secrets))
    return ConformanceEnv(
        workdir=base,
        sandbox_root=sandbox_root,
        policy=policy,
        registry=registry,
        kernel=kernel,
        evidence=evidence,
        evidence_path=evidence_path,
        host=host,
        manifest=manifest,
        fixtures=fixtures,
        no_upstreams=None if upstreams else no_upstreams,
    )


def column_environment(
    options: ColumnOptions, name: str, *, no_upstreams: str | None = None
) -> ConformanceEnv:
    """``build_environment`` for one column run, with the options' rules, secrets and
    evidence commit mode, and the manifest's brokered upstreams unless ``no_upstreams``
    says why this column cannot serve them."""
    return build_environment(
        options.manifest,
        options.workdir,
        policy_paths=options.policy_paths,
        name=name,
        secrets=tuple(sorted(options.secrets.values)),
        synchronous=options.evidence_synchronous,
        upstreams=no_upstreams is None,
        no_upstreams=no_upstreams,
    )

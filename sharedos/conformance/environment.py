"""A fresh, real kernel for one conformance run: sandbox tree, compiled rules, registry,
SQLite evidence store and RuntimeHost.

Used by every column (the harness helper's live/mcp columns too), so that all
columns of one report are graded against the same rules and the same tree.
Nothing here is shared between runs: each run gets its own temp directory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sharedos.catalog import ToolRegistry
from sharedos.conformance.columns.base import ColumnOptions
from sharedos.conformance.manifest import Manifest, SandboxSpec
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, TurnCatalog
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import ToolPolicy
from sharedos.tools import register_files_tools


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


def build_environment(
    manifest: Manifest,
    workdir: Path,
    *,
    policy_paths: Iterable[Path] | None = None,
    name: str = "run",
    secrets: Sequence[str] = (),
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
) -> ConformanceEnv:
    """Create sandbox + kernel + SQLite evidence under ``workdir/<name>``.

    ``policy_paths`` defaults to the shipped rules; a test passes a modified copy
    to show that a broken rule makes the matching cells fail. ``secrets`` are the
    host's credentials (host-configuration env values); ``synchronous`` is the
    evidence store's commit mode (the host configuration's ``[evidence]``).
    """
    base = workdir / name
    sandbox_root = create_sandbox(manifest.sandbox, base / "sandbox")
    policy = compile_policy(policy_paths if policy_paths is not None else default_policy_paths())
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
    )


def column_environment(options: ColumnOptions, name: str) -> ConformanceEnv:
    """``build_environment`` for one column run, with the options' rules, secrets and
    evidence commit mode."""
    return build_environment(
        options.manifest,
        options.workdir,
        policy_paths=options.policy_paths,
        name=name,
        secrets=options.secrets.values,
        synchronous=options.evidence_synchronous,
    )

"""``sharedos demo`` (what ``make demo`` runs): the whole path on embedded defaults, offline.

1. compiles and checks the shipped rules and run policies;
2. explains a few sample calls (allowed, denied, traversal);
3. shows what a widening change to the shipped git rules would do
   (``sharedos-policy diff``), before it is enforced;
4. opens a turn for a sample user on a fresh sandbox tree and shows its catalogue;
5. runs the scripted column through all four vendor wire shapes against the real
   kernel and SQLite evidence store;
6. prints the matrix and where the JSON, text and HTML reports were written, and
   says whether the real harness CLIs (dsh included) are installed for the full
   matrix that ``make test`` runs;
7. brokers a real upstream (mcp-server-git) beside the built-in files tools;
8. one call that needs a maintainer's approval waits, is approved with
   ``sharedos approvals approve`` and, retried, runs (docs/approvals.md).

Exits 1 if any cell failed (or the shipped rules do not compile).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import click

from sharedos.cli._help import with_short_help
from sharedos.conformance.columns.base import ColumnOptions, ColumnRun
from sharedos.conformance.manifest import Manifest, ManifestError, load_manifest
from sharedos.conformance.report import Report, render_matrix, write_reports
from sharedos.conformance.runner import run_report
from sharedos.evidence.backup import keep_evidence
from sharedos.resources import shipped_dir

SAMPLES: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("files.read", {"path": "/public/a.txt"}, "alice"),
    ("files.read", {"path": "/private/a.txt"}, "alice"),
    ("files.read", {"path": "/public/../private/a.txt"}, "alice"),
    ("files.write", {"path": "/home/bob/notes.txt", "content": "x"}, "alice"),
)

#: Where ``make test`` leaves the full matrix (scripted, live and mcp columns side by side).
FULL_MATRIX = "reports/full-matrix/"


def _say(text: str = "") -> None:
    click.echo(text)


def _step(n: int, title: str) -> None:
    _say("")
    _say(click.style(f"[{n}] {title}", bold=True))


@click.command()
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Where the reports are written.",
)
def demo(out_dir: Path) -> None:
    """Check the shipped rules, explain sample calls, run the scripted columns, print the matrix."""
    started = time.perf_counter()
    _say(click.style("SharedOS demo — offline, embedded defaults", bold=True))
    _step(1, "Check the shipped rules and run policies")
    policy = _check_rules()
    manifest = _manifest()
    _step(2, "Explain sample calls (the same tool, different authority)")
    _explain(policy, manifest)
    _step(3, "What a change would do: diff a widening of the shipped git rules")
    _diff_widening()
    tmp = Path(tempfile.mkdtemp(prefix="sharedos-demo-"))
    try:
        _step(4, "Open a turn for a sample user on a sandbox file tree")
        _show_turn(manifest, tmp)
        _step(5, "Run the scripted columns through four vendor wire shapes against the real kernel")
        report, runs = _run_scripted(manifest, tmp)
        kept = keep_evidence(tmp / "columns", out_dir)  # for `sharedos evidence verify --db`
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for run in runs:
        if run.available:
            _say(
                f"  {run.column_id:<20} {len(run.attempts)} attempts recorded in {run.duration_s:.2f} s"
            )
    _step(6, "Matrix")
    _show_matrix(report, out_dir)
    if kept is not None:
        _say(f"evidence store: {kept} (sharedos evidence verify --db {kept})")
    _say(_harnesses_line())
    _step(7, "A brokered upstream: mcp-server-git as the git namespace, beside files.*")
    brokered_ok = _run_brokered()
    _step(8, "An approval: one call waits, an operator approves it from the CLI, it runs")
    approval_ok = _run_approval()
    _say(f"done in {time.perf_counter() - started:.1f} s")
    if not report.ok or not brokered_ok or not approval_ok:
        raise SystemExit(1)


def _check_rules() -> Any:
    """Compile the shipped rules and policies and run their test blocks (exit 1 on failure)."""
    from sharedos.policy import PolicyError, compile_paths
    from sharedos.policy.testing import run_tests

    rules_dir, policy_dir = shipped_dir("rules"), shipped_dir("policy")
    try:
        policy = compile_paths([rules_dir, policy_dir])
    except PolicyError as exc:
        _say(str(exc))
        raise SystemExit(1) from None
    _say(f"  compiled {rules_dir} and {policy_dir}")
    _say(f"  requirements: {', '.join(sorted(policy.requirements))}")
    _say(f"  policy bundle hash: {policy.bundle_hash}")
    for name, tp in sorted(policy.tool_policies.items()):
        _say(f"  run policy {name} ({tp.mode.value}): managed {', '.join(tp.managed)}")
    tests = run_tests(policy)
    passed = len(tests.outcomes) - len(tests.failed)
    _say(f"  policy test blocks: {passed}/{len(tests.outcomes)} passed")
    if not tests.ok:
        for failed in tests.failed:
            _say(f"    FAILED: {failed.to_dict()}")
        raise SystemExit(1)
    return policy


def _manifest() -> Manifest:
    """The shipped manifest (exit 1 with its positioned error if it does not load)."""
    try:
        return load_manifest()
    except ManifestError as exc:
        _say(str(exc))
        raise SystemExit(1) from None


def _explain(policy: Any, manifest: Manifest) -> None:
    """Decide and explain each sample call for its sample user."""
    for tool, args, ctx_name in SAMPLES:
        context = manifest.contexts[ctx_name].access_context(f"demo-explain-{ctx_name}")
        decision = policy.decide(tool, args, context.policy_input, context_key=context.cache_key)
        rules = ", ".join(getattr(r, "id", str(r)) for r in decision.rule_ids) or "-"
        _say(
            f"  {ctx_name:>5} {tool}({args['path']}) -> {decision.effect.value} "
            f"[{decision.reason.value}] resource={decision.resource} rules={rules}"
        )
        _say(f"        {decision.detail}")
        for rule in policy.explain(tool, args, context.policy_input).rules:
            if rule.pattern_matched:
                cond = f" {rule.condition}" if rule.condition else ""
                _say(
                    f"        - {rule.rule.id} ({rule.rule.effect} {rule.pattern}{cond}): {rule.why}"
                )


#: The change step 3 diffs: every principal may write every organisation repository.
WIDENING = '@id("git-everyone-writes")\npermit write on "/srv/git/**"\n'


def _diff_widening() -> None:
    """``sharedos-policy diff`` of the shipped rules against the same rules plus ``WIDENING``."""
    from sharedos.policy import compile_sources
    from sharedos.policy.analysis.diff import diff_policies

    rules = sorted(shipped_dir("rules").glob("*.sos"))
    sources = [(p.name, p.read_text(encoding="utf-8")) for p in rules]
    widened = [(n, t.rstrip("\n") + "\n\n" + WIDENING if n == "git.sos" else t) for n, t in sources]
    report = diff_policies(compile_sources(sources), compile_sources(widened), max_examples=1)
    _say("  the change, appended to rules/git.sos:")
    for line in WIDENING.splitlines():
        _say(f"    {line}")
    _say("  sharedos-policy diff rules/ rules-with-the-change/ says:")
    for line in report.render().splitlines():
        _say(f"  {line}")


def _show_turn(manifest: Manifest, tmp: Path) -> None:
    """The sample user's turn: sandbox, run policy, catalogue and catalogHash."""
    from sharedos.conformance.environment import build_environment

    env = build_environment(manifest, tmp, name="turn")
    try:
        context = env.context(manifest.default_context, "demo-turn")
        tool_policy = env.tool_policy(manifest.default_policy)
        catalog = env.catalog(context, tool_policy)
        _say(f"  sandbox: {env.sandbox_root} (public/, private/, home/alice, home/bob, shared/)")
        _say(
            f"  user {context.principal} roles {list(context.roles)} under run policy "
            f"{tool_policy.name} ({tool_policy.mode.value})"
        )
        _say(f"  catalogue: {', '.join(sorted(catalog.names)) or '(none)'}")
        _say(f"  catalogHash: {catalog.catalog_hash}")
        _say(f"  claim: {tool_policy.strict_claim()}")
    finally:
        env.close()


def _run_scripted(manifest: Manifest, tmp: Path) -> tuple[Report, list[ColumnRun]]:
    """The scripted column through every shape, in ``tmp``."""

    async def go() -> tuple[Report, list[ColumnRun]]:
        return await run_report(
            manifest,
            ["scripted"],
            options=ColumnOptions(manifest=manifest, workdir=tmp, shapes=("all",)),
            keep_workdir=tmp / "columns",
        )

    (tmp / "columns").mkdir()
    return anyio.run(go)


def _show_matrix(report: Report, out_dir: Path) -> None:
    """The graded matrix, the totals, and the report files."""
    _say("  " + report.catalog_check.message)
    _say("")
    _say(render_matrix(report))
    t = report.totals
    _say("")
    _say(
        f"{t['passed']} passed, {t['failed']} failed, {t['not_exercised']} not exercised, "
        f"{t['not_available']} not available"
    )
    for kind, path in write_reports(report, out_dir, stem="demo").items():
        _say(f"{kind} report: {path}")


def _harnesses_line() -> str:
    """Which real harness CLIs are installed here, and where their full matrix is."""
    from sharedos.harness.adapters import ADAPTERS

    installed = []
    for kind, adapter in ADAPTERS.items():
        command = adapter.default_command()
        if all(Path(p).exists() for p in command if "/" in p):
            installed.append(kind)
    if not installed:
        return (
            "the harness CLIs (Claude Code, Codex, Pi, dsh) are not installed here "
            "(scripts/install-tools.sh); the scripted columns above run without them"
        )
    return (
        f"installed harness CLIs: {', '.join(installed)}; `make test` runs them natively "
        f"(live and mcp columns, dsh included) and leaves the full matrix in {FULL_MATRIX}"
    )


def _run_approval() -> bool:
    """A call that needs approval: refused out of band, approved with the CLI, retried, run."""
    from sharedos.cli.demo_approval import approval_demo

    approval_tmp = Path(tempfile.mkdtemp(prefix="sharedos-demo-approval-"))
    try:
        return bool(anyio.run(approval_demo, approval_tmp, _say))
    finally:
        shutil.rmtree(approval_tmp, ignore_errors=True)


def _run_brokered() -> bool:
    """The brokered ``git`` namespace next to the built-in files tools: one allowed, one denied call."""
    from sharedos.cli.demo_upstream import brokered_git_demo

    brokered_tmp = Path(tempfile.mkdtemp(prefix="sharedos-demo-upstream-"))
    try:
        return bool(anyio.run(brokered_git_demo, brokered_tmp, _say))
    finally:
        shutil.rmtree(brokered_tmp, ignore_errors=True)


with_short_help(demo)

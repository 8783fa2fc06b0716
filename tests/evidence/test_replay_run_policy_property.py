"""Replay under a run policy, against the truth: the same calls made again by a real host
enforcing the candidate.

Seeded random pairs of policies (the candidate's toolpolicy manages more tools and
fewer, requirements appear and disappear, permits and forbids change); the same calls
(two principals, every tool, several resources, each turn with the catalogue its
policy lists) go through a real ``RuntimeHost`` under OLD and under NEW, each into a
real SQLite store. ``replay(OLD's records, NEW, run_policy=...)`` must report each
attempt widened or narrowed exactly when NEW's host decided it further or less far
than OLD's did, and its reason changed exactly when only the reason differs: never a
false "no change", nor a change the candidate's host does not make.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence.export import iter_records
from sharedos.evidence.replay import replay
from sharedos.evidence.shadow_report import shadow_report
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.shadow import ShadowDecider
from sharedos.outcomes import EFFECT_REACH, Effect, ReasonCode
from sharedos.policy import PolicyError, compile_sources
from sharedos.tools import register_files_tools

TOOLS = {
    "files.read": ("read", {}),
    "files.write": ("write", {"content": "x"}),
    "files.list": ("list", {}),
}
PATTERNS = ["/**", "/a/**", "/home/{context.principal}/**", "/b/*", "/home/*/x"]
CONDITIONS = ['"r1" in context.roles', 'context.principal == "bob"', "true"]
#: the last is no path (invalid arguments: refused after the turn's catalogue, by the host)
PATHS: list[Any] = ["/a/x", "/b/y", "/home/bob/x", "/home/carol/x", 7]
PEOPLE = [("bob", ()), ("carol", ("r1",))]


def _policy(rng: random.Random) -> list[tuple[str, str]]:
    tools = [t for t in TOOLS if rng.random() < 0.8] or ["files.read"]
    lines = ["namespace files"]
    for tool in tools:
        lines.append(f"requirement {tool} {{ action {TOOLS[tool][0]}; resource path(args.path) }}")
    for _ in range(rng.randint(1, 4)):
        effect = "forbid" if rng.random() < 0.3 else "permit"
        known = sorted(TOOLS[t][0] for t in tools)
        actions = ", ".join(sorted(rng.sample(known, rng.randint(1, len(known)))))
        cond = f" when {rng.choice(CONDITIONS)}" if rng.random() < 0.5 else ""
        lines.append(f'{effect} {actions} on "{rng.choice(PATTERNS)}"{cond}')
    managed = sorted(t for t in TOOLS if rng.random() < 0.6) or ["files.list"]
    run = f"toolpolicy r {{\n  mode open\n  managed {', '.join(managed)}\n}}\n"
    return [("f.sos", "\n".join(lines) + "\n"), ("run.sos", run)]


def _record(policy: Any, tmp_path: Path, name: str, shadow: Any = None) -> list[Any]:
    """Every call, made by a real host enforcing ``policy`` as a run under its toolpolicy
    ``r``, each turn with the catalogue ``policy`` lists (with ``shadow`` as its shadow
    policy, when given); the records, in call order."""
    sandbox = tmp_path / name
    for d in ("a", "b", "home/bob", "home/carol"):
        (sandbox / d).mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    store = SqliteEvidenceStore(tmp_path / f"{name}.db")
    try:
        kernel = Kernel(policy, registry)
        decider = None if shadow is None else ShadowDecider(shadow, enforced=policy)
        host = RuntimeHost(kernel, store, shadow=decider)
        run = policy.tool_policies["r"]

        async def calls() -> None:
            n = 0
            for principal, roles in PEOPLE:
                ctx = AccessContext(principal=principal, roles=roles, turn_id=f"t-{principal}")
                catalog = kernel.list_tools(ctx, run)
                for tool, (_action, extra) in TOOLS.items():
                    for path in PATHS:
                        call = ToolCall(
                            call_id=f"c{n}", tool=tool, arguments={"path": path, **extra}
                        )
                        n += 1
                        await host.invoke_tool(call, ctx, run, catalog=catalog)

        anyio.run(calls)
        return list(iter_records(store))
    finally:
        store.close()


#: a shadow report's kinds, as replay names them
_AS_REPLAY = {
    "would allow": "widened",
    "would deny": "narrowed",
    "reason changed": "reason changed",
}


def _reach(record: Any) -> int:
    return EFFECT_REACH[Effect(record.effect)] if record.effect else EFFECT_REACH[Effect.DENY]


def _reason(record: Any) -> Any:
    """The decision's reason (an allowed call's outcome, a handler's error, is not one)."""
    return "allowed" if record.effect == Effect.ALLOW.value else record.reason


def _check(seed: int, tmp_path: Path) -> int:
    rng = random.Random(seed)
    try:
        old = compile_sources(_policy(rng))
        new = compile_sources(_policy(rng))
    except PolicyError:
        return 0
    was = _record(old, tmp_path, "old", shadow=new)
    truth = {r.call_id: r for r in _record(new, tmp_path, "new")}
    store = SqliteEvidenceStore(tmp_path / "old.db")
    try:
        report = replay(iter_records(store), new, old=old, run_policy="r", max_examples=0)
    finally:
        store.close()
    assert not report.skipped, report.skipped
    assert report.mismatched == 0
    found = {c.request.origin["call_id"]: g.kind for g in report.groups for c in g.examples}
    # the shadow decision, made as each call was: the candidate's host's (its catalogue
    # for the turn included), for every call OLD's rules decided whose tool NEW's run
    # manages (the shadow policy knows no run policy)
    shadowed = shadow_report(was, max_examples=0)
    assert not shadowed.errors
    seen = {e.call_id: _AS_REPLAY[g.kind] for g in shadowed.groups for e in g.examples}
    for record in was:
        made = truth[record.call_id]
        then, now = _reach(record), _reach(made)
        expected = "widened" if now > then else "narrowed" if now < then else None
        if expected is None and _reason(record) != _reason(made):
            expected = "reason changed"
        got = found.get(record.call_id)
        assert got == expected, (seed, record.tool, record.arguments, record.reason, made.reason)
        if record.shadow is not None and made.reason is not ReasonCode.NOT_IN_RUN_POLICY:
            shown = seen.get(record.call_id)
            assert shown == expected, (seed, record.tool, record.reason, made.reason, shown)
    return len(was)


def test_replay_under_a_run_policy_agrees_with_the_candidate_enforced(tmp_path: Path) -> None:
    checked = 0
    # seeds whose candidate both widens and narrows, and takes a tool out of a turn's
    # catalogue the rules still decided (reason changed)
    for seed in (7, 10):
        checked += _check(seed, tmp_path / str(seed))
    assert checked >= 48


@pytest.mark.stress
def test_replay_under_a_run_policy_agrees_with_the_candidate_enforced_stress(
    tmp_path: Path,
) -> None:
    for seed in range(200):
        _check(seed, tmp_path / str(seed))

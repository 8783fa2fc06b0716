"""Property test tying the three answers to "what would this change do?" together.

For random pairs of policies (OLD enforced, NEW the candidate; the generator of
``tests/policy/test_diff_property.py``), sampled calls go through the real
``RuntimeHost`` under OLD with NEW as its shadow policy, into a real SQLite
store. Then, on what was recorded:

* every shadow decision is NEW's own decision of the recorded call (effect,
  reason, rule ids), and the enforced one is OLD's;
* ``sharedos evidence replay`` (``replay``) finds exactly the calls NEW decides
  differently from what was enforced, each of the kind a fresh comparison gives
  (a call of a tool OLD declares no requirement for included: refused before
  any decision, so it has no shadow decision, but a requirement NEW adds lets
  the rules decide it);
* ``sharedos evidence shadow`` (``shadow_report``) counts the same calls, kind
  by kind (would allow = widened, would deny = narrowed);
* when ``diff`` says its analysis is complete, every such call falls in a group
  it reported (same tool, action, pattern and kind).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
from hypothesis import given
from pydantic import ValidationError

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.export import iter_records
from sharedos.evidence.replay import replay
from sharedos.evidence.shadow_report import shadow_report
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.shadow import ShadowDecider
from sharedos.policy.analysis.compare import Comparer, Request
from sharedos.policy.analysis.diff import diff_policies
from sharedos.toolpolicy import RunMode, ToolPolicy
from tests.policy.test_diff_property import SETTINGS, TOOLS, compiles, pair, sampled

#: the host's clock for every decision of the test (a Monday, 09:30 UTC)
NOW = 1796635800.0
RUN = ToolPolicy(name="all", mode=RunMode.OPEN, managed=("files.*", "g.*"))
CALLS_PER_PAIR = 60
_KIND_OF_SHADOW = {"would allow": "widened", "would deny": "narrowed"}


async def echo(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text("ok")


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    for tool in TOOLS:
        reg.register(
            ToolDefinition(
                name=tool, description=f"{tool}.", input_schema={"type": "object"}, handler=echo
            )
        )
    return reg


def access(context: dict[str, Any], n: int) -> AccessContext | None:
    try:
        return AccessContext(
            principal=context["principal"],
            tenant=context["tenant"],
            roles=tuple(context["roles"]),
            attributes=context["attributes"],
            turn_id=f"turn-{n % 4}",
        )
    except ValidationError:  # a principal the host would never resolve
        return None


@SETTINGS
@given(pair())
def test_shadow_replay_and_diff_agree_on_recorded_traffic(texts: tuple[str, str]) -> None:
    old_text, new_text = texts
    try:
        old, new = compiles(old_text), compiles(new_text)
    except Exception:  # the generator can write a rule the checker refuses
        return
    calls = []
    for request in sampled(old_text + "|" + new_text, CALLS_PER_PAIR):
        context = access(request.context, len(calls))
        if context is not None:
            calls.append((request.tool, request.args, context))
    with tempfile.TemporaryDirectory() as tmp, SqliteEvidenceStore(Path(tmp) / "e.db") as store:
        shadow = ShadowDecider(new, enforced=old, clock=lambda: NOW)
        host = RuntimeHost(Kernel(old, registry(), clock=lambda: NOW), store, shadow=shadow)

        async def run() -> None:
            for i, (tool, args, context) in enumerate(calls):
                await host.invoke_tool(
                    ToolCall(call_id=f"c{i}", tool=tool, arguments=args), context, RUN
                )

        anyio.run(run)
        records = list(iter_records(store))
    assert len(records) == len(calls)

    # 1. the shadow decision is NEW's, the enforced one OLD's
    fresh = Comparer(old, new)
    expected: dict[str, str] = {}  # call id -> kind of change
    #: call id -> kind of change of a call of a tool OLD declares no requirement for:
    #: refused before any decision (no shadow decision), replayed as that refusal
    undeclared: dict[str, str] = {}
    for record, (tool, args, context) in zip(records, calls, strict=True):
        if record.effect is None:  # refused before any decision
            assert record.shadow is None
            if str(record.reason) == "tool_unavailable" and record.namespace is not None:
                now = {**context.policy_input, "now": _now()}
                change = fresh.compare_one(Request(tool, args, now))
                if change is not None:
                    undeclared[record.call_id] = change.kind
            continue
        now = {**context.policy_input, "now": _now()}
        mine = new.decide(tool, args, now, context_key=context.cache_key)
        assert record.shadow is not None
        assert (record.shadow["effect"], record.shadow["reason"]) == (
            str(mine.effect),
            str(mine.reason),
        ), (record.to_dict(), mine)
        assert record.shadow["rule_ids"] == [r.id for r in mine.rule_ids]
        enforced = old.decide(tool, args, now, context_key=context.cache_key)
        assert record.effect == str(enforced.effect)
        change = fresh.compare_one(Request(tool, args, now))
        if change is not None:
            expected[record.call_id] = change.kind

    # 2. replay finds exactly those calls, each of that kind
    report = replay(records, new, old=old, max_examples=0)
    kinds_found: dict[str, int] = {}
    for group in report.groups:
        kinds_found[group.kind] = kinds_found.get(group.kind, 0) + len(group.examples)
    kinds_expected: dict[str, int] = {}
    for kind in expected.values():
        kinds_expected[kind] = kinds_expected.get(kind, 0) + 1
    kinds_replayed = dict(kinds_expected)
    for kind in undeclared.values():
        kinds_replayed[kind] = kinds_replayed.get(kind, 0) + 1
    assert kinds_found == kinds_replayed, (kinds_found, kinds_replayed)
    assert report.mismatched == 0

    # 3. the shadow report counts the same calls, kind by kind
    shadowed = shadow_report(records, max_examples=0)
    counts = {_KIND_OF_SHADOW.get(kind, kind): n for kind, n in shadowed.counts().items() if n}
    assert counts == kinds_expected
    assert not shadowed.errors

    # 4. a complete diff reported a group for each of them
    diff = diff_policies(old, new, max_examples=1)
    if diff.complete:
        keys = {(g.tool, g.action, g.pattern, g.kind) for g in diff.groups}
        for group in report.groups:
            for change in group.examples:
                probe = fresh.compare_one(change.request)
                assert probe is not None
                key = (change.request.tool, probe.action, probe.pattern, probe.kind)
                assert key in keys, (change.request.to_dict(), key, sorted(keys, key=repr))
    elif expected:
        assert diff.verdict != "unchanged"


def _now() -> dict[str, Any]:
    from sharedos.policy.clock import current

    return current("UTC", lambda: NOW)

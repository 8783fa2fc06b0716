"""``diff_policies``: which requests two policies decide differently, with counterexamples.

For every tool either policy declares, the tool's rules in both (the rules of
its namespace and action that can meet its kind of resource) are compared
first: when its requirement is the same and the rules mean the same (as sets
of effect, pattern and condition: order, ids, files, formatting and
duplicates do not count), no request to it can decide differently and it is
not analysed further. Otherwise the tool's request space (``space``) yields
witness requests, each is decided under both policies by the real evaluator
(``compare``), and those that differ are grouped by (tool, action, pattern,
kind). Tools whose requirement and rules are the same in both policies share
one request space.

Toolpolicies are compared too: a tool that becomes managed (or stops being
managed) under a run policy, or a changed mode or list, is reported apart.

The report is *complete* when no ``Gap`` was met: then a tool with no group
has no request that decides differently (for the kernel's contexts, see
``domains``). With gaps, "no change found" is not "no change", and the report
says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sharedos.policy.analysis.atoms import Gap
from sharedos.policy.analysis.compare import (
    KINDS,
    Change,
    ChangeGroup,
    ChangeKind,
    Comparer,
    Request,
    change_kind,
    decide_request,
    group_changes,
    render_groups,
    summary,
)
from sharedos.policy.analysis.space import Limits, RequestSpace, Side, same_rules, signature
from sharedos.policy.policyset import PolicySet
from sharedos.toolpolicy import RunMode, ToolPolicy


@dataclass(frozen=True, slots=True)
class RunPolicyChange:
    """A toolpolicy that was added, removed or changed, and the tools whose managed
    status it changes (``(tool, managed before, managed after)``)."""

    name: str
    status: str
    fields: Mapping[str, Mapping[str, Any]]
    managed: tuple[tuple[str, bool, bool], ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "status": self.status,
            "fields": dict(self.fields),
            "managed": [{"tool": t, "old": a, "new": b} for t, a, b in self.managed],
        }


@dataclass(slots=True)
class DiffReport:
    """What ``diff_policies`` found (see the module docstring)."""

    groups: list[ChangeGroup] = field(default_factory=list)
    run_policies: list[RunPolicyChange] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    analysed: list[str] = field(default_factory=list)
    requests: int = 0
    #: examples that did not decide differently when decided again (always 0: a
    #: counterexample is printed only after a second decision agrees)
    dropped: int = 0
    kinds: tuple[ChangeKind, ...] = KINDS
    #: requests that decide differently in a kind ``kinds`` leaves out (not grouped)
    other_kinds: int = 0
    #: toolpolicies that changed only in a kind ``kinds`` leaves out (not listed)
    other_run_policies: int = 0

    @property
    def complete(self) -> bool:
        """True when the analysis met no construct it does not cover exactly."""
        return not self.gaps

    @property
    def changed(self) -> bool:
        """True when some request decides differently (or a toolpolicy changed)."""
        return bool(self.groups) or bool(self.run_policies)

    @property
    def verdict(self) -> str:
        """``changed``, ``unchanged`` or ``unknown`` (no change found, analysis incomplete)."""
        if self.changed:
            return "changed"
        return "unchanged" if self.complete else "unknown"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``--format json`` document)."""
        return {
            "verdict": self.verdict,
            "changed": self.changed,
            "complete": self.complete,
            "kinds": list(self.kinds),
            "summary": {
                **summary(self.groups),
                "tools": len(self.tools),
                "tools_analysed": len(self.analysed),
                "requests_decided": self.requests,
                "run_policies": len(self.run_policies),
                "other_kinds": self.other_kinds,
                "other_run_policies": self.other_run_policies,
            },
            "groups": [g.to_dict() for g in self.groups],
            "run_policies": [r.to_dict() for r in self.run_policies],
            "incomplete": [g.to_dict() for g in self.gaps],
        }

    def render(self) -> str:
        """The text report."""
        lines = render_groups(self.groups)
        if self.run_policies:
            lines.append("run policies:")
            for rp in self.run_policies:
                lines.append(f"  {rp.status} toolpolicy {rp.name}")
                for name, values in rp.fields.items():
                    lines.append(
                        f"    {name}: {_show(values.get('old'))} -> {_show(values.get('new'))}"
                    )
                for tool, _before, after in rp.managed:
                    what = "now managed" if after else "no longer managed"
                    lines.append(f"    {tool}: {what}")
        if self.gaps:
            lines.append("incomplete: the analysis does not cover these exactly:")
            for gap in self.gaps:
                where = ""
                if gap.rule is not None:
                    ref = gap.rule
                    where = f"{ref.file}:{ref.line}:{ref.col}"
                    where += ": " if ref.id == f"{ref.file}:{ref.line}" else f" ({ref.id}): "
                lines.append(f"  - {where}{gap.construct}: {gap.why}")
        s = summary(self.groups)
        lines.append(
            f"{len(self.tools)} tools compared, {len(self.analysed)} with different rules, "
            f"{self.requests} requests decided under both policies; "
            f"{s['changes']} decide differently in {s['groups']} groups "
            f"({s['widened']} widened, {s['narrowed']} narrowed, "
            f"{s['reason_changed']} reason changed)"
        )
        only = "" if self.kinds == KINDS else f" (looking for: {', '.join(self.kinds)})"
        if self.verdict == "changed":
            lines.append(f"result: some decisions change{only}")
        elif self.verdict == "unchanged" and (self.other_kinds or self.other_run_policies):
            # never "no decision can change": some do, in kinds not looked for
            n, m = self.other_kinds, self.other_run_policies
            others = []
            if n:
                others.append(
                    f"{n} request{'s' if n != 1 else ''} decide{'' if n != 1 else 's'} differently"
                )
            if m:
                others.append(
                    f"{m} toolpolic{'ies' if m != 1 else 'y'} change{'' if m != 1 else 's'}"
                )
            lines.append(
                f"result: no decision changes in the kinds looked for{only}; "
                f"{' and '.join(others)} in other kinds"
            )
        elif self.verdict == "unchanged":
            lines.append(f"result: no decision can change{only}")
        else:
            lines.append(
                "result: no change found, but the analysis is incomplete (see above): "
                "this is not a proof that no decision changes"
            )
        return "\n".join(lines)


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _side(policy: PolicySet, tool: str) -> tuple[Side, tuple[Any, ...] | None]:
    """The tool's side in one policy, and the key of what its decisions depend on."""
    plan = policy.tool(tool)
    if plan is None:
        return Side(None, None, ()), None
    resource = policy.program["requirements"][tool]["resource"]
    key = (plan.namespace, plan.action, plan.absolute, json.dumps(resource, sort_keys=True))
    approvals = (
        policy.approvals.rules_for(plan.namespace, plan.action, plan.absolute)
        if policy.approvals is not None
        else ()
    )
    return Side(resource, plan.action, (*plan.forbids, *plan.permits, *approvals)), key


def same_decisions(old: PolicySet, new: PolicySet, tool: str) -> dict[str, str] | None:
    """When ``old`` and ``new`` decide every call of ``tool`` alike, the id of each of its
    rules in ``old`` -> the id of the rule that means the same in ``new``; else None.

    Alike: the same requirement (namespace, action, resource expression) and the
    same rules as a set of meanings, the test ``diff_policies`` skips a tool by.
    None too when a meaning is written more than once on either side (which
    rule a decision cites would be a guess) or when either lacks the tool.
    """
    old_side, old_key = _side(old, tool)
    new_side, new_key = _side(new, tool)
    if old_key is None or old_key != new_key or old_side.resource != new_side.resource:
        return None
    old_ids: dict[tuple[Any, ...], str] = {}
    new_ids: dict[tuple[Any, ...], str] = {}
    for rules, ids in ((old_side.rules, old_ids), (new_side.rules, new_ids)):
        for rule in rules:
            sig = signature(rule)
            if sig in ids:
                return None
            ids[sig] = str(rule.id)
    if old_ids.keys() != new_ids.keys():
        return None
    return {rid: new_ids[sig] for sig, rid in old_ids.items()}


def _managed(policy: PolicySet, run: str | None, tool: str) -> bool | None:
    if run is None:
        return None
    declared = policy.tool_policies.get(run)
    return declared is not None and declared.is_managed(tool)


def diff_policies(
    old: PolicySet,
    new: PolicySet,
    *,
    run_policy: str | None = None,
    kinds: Iterable[ChangeKind] | None = None,
    max_examples: int = 3,
    limits: Limits | None = None,
) -> DiffReport:
    """Every request ``old`` and ``new`` decide differently, grouped, with counterexamples.

    ``run_policy``: decide every request as a run under that toolpolicy (a tool
    outside its managed set is ``not_in_run_policy``). ``kinds``: report only
    these kinds of change. ``max_examples``: requests kept per group (0: all).
    Every example is decided a second time before it is reported; one that
    does not decide differently again is dropped (and counted).
    """
    wanted = tuple(k for k in KINDS if kinds is None or k in set(kinds))
    report = DiffReport(kinds=wanted)
    tools = sorted(set(old.requirements) | set(new.requirements))
    report.tools = tools
    classes: dict[tuple[Any, ...], tuple[Side, Side, list[str]]] = {}
    for tool in tools:
        old_side, old_key = _side(old, tool)
        new_side, new_key = _side(new, tool)
        same_managed = _managed(old, run_policy, tool) == _managed(new, run_policy, tool)
        if (
            old_key is not None
            and old_key == new_key  # namespace, action and resource: the same requirement
            and old_side.resource == new_side.resource
            and same_rules(old_side.rules, new_side.rules)
            and same_managed
        ):
            continue  # the same requirement and the same rules: nothing can differ
        key = (old_key, new_key, same_managed)
        entry = classes.get(key)
        if entry is None:
            classes[key] = (old_side, new_side, [tool])
        else:
            entry[2].append(tool)
    comparer = Comparer(old, new)
    changes: list[Change] = []
    gaps: dict[Gap, None] = {}
    for (_old_key, _new_key, same_managed), (old_side, new_side, members) in classes.items():
        report.analysed.extend(members)
        space = RequestSpace(old_side, new_side, limits, prune=same_managed)
        seen: set[str] = set()
        for args, context in space.requests(members[0]):
            for tool in members:
                request = Request(tool, args, context, run_policy)
                text = request.key()
                if text in seen:
                    continue
                seen.add(text)
                report.requests += 1
                change = comparer.compare_one(request)
                if change is None:
                    continue
                if change.kind in wanted:
                    changes.append(change)
                else:
                    report.other_kinds += 1
        gaps.update(space.gaps)
    groups = group_changes(changes, max_examples)
    for group in groups:
        kept = [c for c in group.examples if _still_differs(old, new, c)]
        report.dropped += len(group.examples) - len(kept)
        group.examples = kept
    report.groups = [g for g in groups if g.examples]
    report.run_policies = _run_policy_changes(old, new, tools, wanted)
    report.other_run_policies = len(_run_policy_changes(old, new, tools, KINDS)) - len(
        report.run_policies
    )
    report.gaps = list(gaps)
    report.analysed.sort()
    return report


def _still_differs(old: PolicySet, new: PolicySet, change: Change) -> bool:
    """Decide the request again under both policies: the same change, or it is dropped."""
    request = Request(
        change.request.tool,
        json.loads(json.dumps(change.request.args)),
        json.loads(json.dumps(change.request.context)),
        change.request.run_policy,
    )
    return change_kind(decide_request(old, request), decide_request(new, request)) == change.kind


def _run_policy_changes(
    old: PolicySet, new: PolicySet, tools: list[str], kinds: tuple[ChangeKind, ...]
) -> list[RunPolicyChange]:
    out: list[RunPolicyChange] = []
    for name in sorted(set(old.tool_policies) | set(new.tool_policies)):
        before = old.tool_policies.get(name)
        after = new.tool_policies.get(name)
        a = before.model_dump(mode="json") if before is not None else None
        b = after.model_dump(mode="json") if after is not None else None
        if a == b:
            continue
        status = "added" if a is None else "removed" if b is None else "changed"
        fields = {
            k: {"old": (a or {}).get(k), "new": (b or {}).get(k)}
            for k in sorted(set(a or {}) | set(b or {}))
            if k != "name" and (a or {}).get(k) != (b or {}).get(k)
        }
        managed = []
        for tool in tools:
            was = before is not None and before.is_managed(tool)
            now = after is not None and after.is_managed(tool)
            if was != now and (("widened" if now else "narrowed") in kinds):
                managed.append((tool, was, now))
        if managed or len(kinds) == len(KINDS) or _surface_change(before, after) & set(kinds):
            out.append(RunPolicyChange(name, status, fields, tuple(managed)))
    return out


def _surface_change(before: ToolPolicy | None, after: ToolPolicy | None) -> set[ChangeKind]:
    """How a run policy's own reach changed, apart from the tools it manages.

    A run that goes from ``strict`` to ``open`` no longer confines the harness: its
    shell and its own tools reach managed resources without a decision, although no
    decision of the kernel changes. So does a tool added to ``harness_local`` or
    ``external_direct``, or a new toolpolicy a run can name. The reverse narrows.
    """
    kinds: set[ChangeKind] = set()
    if before is None or after is None:
        kinds.add("widened" if before is None else "narrowed")
        return kinds
    if before.mode is not after.mode:
        kinds.add("widened" if after.mode is RunMode.OPEN else "narrowed")
    # the managed set itself, whatever tools the policies declare today: `files.read` ->
    # `files.*` manages every files tool a requirement (or an upstream) adds later, and a
    # diff of the run policies alone declares no tool at all
    if _manages_beyond(after.managed, before.managed):
        kinds.add("widened")
    if _manages_beyond(before.managed, after.managed):
        kinds.add("narrowed")
    for field_name in ("harness_local", "external_direct"):
        was, now = set(getattr(before, field_name)), set(getattr(after, field_name))
        if now - was:
            kinds.add("widened")
        if was - now:
            kinds.add("narrowed")
    return kinds


#: a segment test of a managed pattern that any one segment passes
_ANY = None


def _segment_tests(pattern: str) -> tuple[tuple[str | None, ...], bool]:
    """A managed pattern as its segment tests (a literal, or ``_ANY``) and whether it ends
    in ``**`` (one or more further segments)."""
    segs = pattern.split(".")
    tail = segs[-1] == "**"
    if tail:
        segs = segs[:-1]
    return tuple(_ANY if seg == "*" else seg for seg in segs), tail


def _manages_beyond(a: Sequence[str], b: Sequence[str]) -> bool:
    """True when some tool name matches a managed pattern of ``a`` and none of ``b``.

    Exact: the names are walked segment by segment over the literals the patterns
    name and one segment none of them names (every other segment is tested alike),
    with the states of ``b``'s patterns tracked together (a subset construction)."""
    tests_a = [_segment_tests(p) for p in a]
    tests_b = [_segment_tests(p) for p in b]
    literals = {t for tests, _ in (*tests_a, *tests_b) for t in tests if t is not _ANY}
    fresh = "x"
    while fresh in literals:
        fresh += "x"
    alphabet = [*sorted(literals), fresh]

    # a state: the position in a pattern's tests, or len(tests) + 1 once a ** took a segment
    def step(tests: tuple[str | None, ...], tail: bool, at: int, seg: str) -> int | None:
        if at < len(tests):
            return at + 1 if tests[at] is _ANY or tests[at] == seg else None
        return len(tests) + 1 if tail else None

    def accepts(tests: tuple[str | None, ...], tail: bool, at: int) -> bool:
        return at == len(tests) + 1 if tail else at == len(tests)

    for tests, tail in tests_a:
        start = (0, frozenset((i, 0) for i in range(len(tests_b))))
        todo, seen = [start], {start}
        while todo:
            at, others = todo.pop()
            if accepts(tests, tail, at) and not any(accepts(*tests_b[i], j) for i, j in others):
                return True
            for seg in alphabet:
                nxt = step(tests, tail, at, seg)
                if nxt is None:
                    continue
                moved = frozenset(
                    (i, k) for i, j in others for k in [step(*tests_b[i], j, seg)] if k is not None
                )
                state = (nxt, moved)
                if state not in seen:
                    seen.add(state)
                    todo.append(state)
    return False

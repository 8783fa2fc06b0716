"""The partial evaluator: ``could_permit`` (could any call of this tool be allowed for this context?).

Arguments and resource are unknown, the context is known. A permit counts
when its condition can hold for some arguments (``partial``) and its pattern
can meet the tool's resource shape; it is cancelled only by forbids that apply
whatever the arguments and whose patterns cover every resource the permit
could match. Forbids and permits that test the same argument are reasoned
about jointly (``partial.JointSpace``).

The answer depends on a tool only through its requirement's (namespace,
action, resource shape): everything that does not read the context is worked
out once per such triple (a ``Plan``); the rest is cached per ``context_key``
under the plan.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sharedos.policy.conditions import Env, roots
from sharedos.policy.decision import ListingExplanation, PermitReason
from sharedos.policy.evaluator import ContextEntry, Evaluator
from sharedos.policy.explainer import condition_text
from sharedos.policy.index import Node, walk_along
from sharedos.policy.ir import MatchKind, RuleRecord, ToolPlan
from sharedos.policy.partial import (
    MAX_JOINT_CASES,
    MAX_LISTING_CASES,
    JointSpace,
    condition_key,
    forbid_certain,
    permit_possible,
    rule_applies_under,
)
from sharedos.policy.patterns import Resolved, covers_within, literal_prefix, meets_shape, resolve


@dataclass(frozen=True, slots=True)
class ForbidStep:
    """A forbid that may cover a permit; ``pattern`` is None when it interpolates the context."""

    rule: RuleRecord
    pattern: Resolved | None


@dataclass(frozen=True, slots=True)
class PermitStep:
    """One permit of a plan, with its resolved pattern (None: it interpolates the context)
    and the forbids that may cover it (only for a static pattern; else found per context)."""

    rule: RuleRecord
    pattern: Resolved | None
    forbids: tuple[ForbidStep, ...]
    #: steps with one scan number weigh the same forbids against the same pattern
    #: (permits that differ by condition): per context, their forbids are weighed once
    scan: int = -1


@dataclass(frozen=True, slots=True)
class Plan:
    """The context-dependent part of ``could_permit`` for one (namespace, action, shape)."""

    tool: ToolPlan
    memo_key: tuple[str, int]
    steps: tuple[PermitStep, ...]


@dataclass(frozen=True, slots=True)
class _GroupSplit:
    """One forbid group of a walk, sorted for a plan (``_split_forbids``)."""

    dynamic: tuple[ForbidStep, ...]  # interpolate the context: kept, weighed per context
    below: tuple[tuple[tuple[str, ...], tuple[ForbidStep, ...]], ...]  # 'LITERALS/**'
    tested: tuple[ForbidStep, ...]  # tested against each permit's pattern
    counted: dict[tuple[str, ...], bool]  # which ``below`` entries are in kept_rules


class _LiteralIndex:
    """Static forbids by (absolute, literal prefix), for a plan over a template resource.

    A forbid can cover a permit only when their literal prefixes agree at every
    position both have: a resource the permit matches holds the permit's literal
    there, which a different forbid literal never matches (``covers_within`` is
    False then; the permit meets the shape). ``agreeing`` returns the forbids
    whose literals are a prefix of the permit's or extend them, and every forbid
    not known safe; the others are never tested."""

    def __init__(self, steps: Sequence[ForbidStep]) -> None:
        self._roots: dict[bool, _LitNode] = {True: ({}, []), False: ({}, [])}
        self._always: list[ForbidStep] = []
        for step in steps:
            fpat = step.pattern
            if fpat is None or not fpat.safe:
                self._always.append(step)
                continue
            node = self._roots[fpat.absolute]
            for seg in literal_prefix(fpat):
                node = node[0].setdefault(seg, ({}, []))
            node[1].append(step)

    def agreeing(self, pat: Resolved) -> tuple[ForbidStep, ...]:
        out = list(self._always)
        node: _LitNode | None = self._roots[pat.absolute]
        for seg in literal_prefix(pat):
            assert node is not None
            out.extend(node[1])
            node = node[0].get(seg)
            if node is None:
                return tuple(out)
        assert node is not None
        stack = [node]  # the permit's literals all met: every forbid extending them
        while stack:
            n = stack.pop()
            out.extend(n[1])
            stack.extend(n[0].values())
        return tuple(out)


_LitNode = tuple[dict[str, "_LitNode"], list[ForbidStep]]


class PartialEvaluator:
    """``could_permit`` over an ``Evaluator``'s program (its caches are shared)."""

    def __init__(self, evaluator: Evaluator) -> None:
        self._ev = evaluator
        self._plans: dict[str, Plan | bool] = {}
        self._plans_by_shape: dict[tuple[Any, ...], Plan | bool] = {}
        self._sigs: dict[tuple[Any, ...], int] = {}
        self._porder: dict[str, list[RuleRecord]] = {}
        # (forbids of a step, its pattern) -> scan number (see PermitStep), and the
        # forbids, held here so that their id is never another tuple's
        self._scans: dict[
            tuple[int, bool, tuple[Any, ...]], tuple[int, tuple[ForbidStep, ...]]
        ] = {}
        # per rule: how many plans resolve its (context-dependent) pattern
        self._dyn_uses: dict[int, int] = {}

    def could_permit(
        self, tool: str, context: Mapping[str, Any], *, context_key: str | None = None
    ) -> bool:
        """True iff some arguments exist for which ``decide`` allows ``tool`` in ``context``."""
        plan = self._plans.get(tool) if type(tool) is str else None
        if plan is None:
            t = self._ev.tool(tool)
            if t is None:
                return False
            plan = self.plan(t)
        if plan is True or plan is False:
            return plan  # the same for every context
        cache = self._ev.cache_for(context_key)
        if cache is not None:
            hit = cache.memo.get(plan.memo_key)
            if hit is not None:
                return bool(hit)
        result = self._possible(plan, context, cache)
        if cache is not None:
            cache.memo[plan.memo_key] = result
        return result

    def plan(self, t: ToolPlan) -> Plan | bool:
        """The context-independent part of ``could_permit`` for ``t``'s (namespace,
        action, shape): True or False when no context can change the answer, else a
        ``Plan``. A static forbid pattern that cannot cover a static permit pattern
        is dropped here, once."""
        key = ("could", t.namespace, t.action, t.shape)
        plan = self._plans_by_shape.get(key)
        if plan is None:
            plan = self._plans_by_shape[key] = self._build_plan(t)
        self._plans[t.name] = plan
        return plan

    def permit_order(self, t: ToolPlan) -> list[RuleRecord]:
        """The tool's permits, unconditional ones first (they answer soonest)."""
        order = self._porder.get(t.name)
        if order is None:
            plain = [r for r in t.permits if not r.has_condition]
            gated = [r for r in t.permits if r.has_condition]
            order = self._porder[t.name] = plain + gated
        return order

    def _build_plan(self, t: ToolPlan) -> Plan | bool:
        template = t.shape[0] != "path"
        steps: list[PermitStep] = []
        resolved: dict[int, Any] = {}
        # Per walk node (or, over a template, once): the node's forbids split into those
        # kept for every permit reaching it without a pairwise test, and those a permit's
        # pattern must be tested against. A forbid on a prefix is otherwise weighed
        # against every permit below it, and permits and forbids on a bounded set of
        # prefixes both grow with the policy: that pairwise work made a plan quadratic.
        by_node: dict[int, tuple[Node, tuple[ForbidStep, ...], tuple[ForbidStep, ...]]] = {}
        groups: dict[int, _GroupSplit] = {}
        kept_rules: dict[int, RuleRecord] = {}  # every forbid some step keeps
        along: _LiteralIndex | None = None  # over a template: the forbids by literal prefix
        extras: dict[tuple[int, bool, tuple[Any, ...]], tuple[ForbidStep, ...]] = {}
        for rule in self.permit_order(t):
            if _context_dependent(rule):
                self._dyn_uses[rule.index] = self._dyn_uses.get(rule.index, 0) + 1
                steps.append(PermitStep(rule, None, ()))
                continue
            pat = resolve(rule.pattern_enc, None)
            if not meets_shape(pat, t.shape):
                continue  # whatever the context, this permit never meets the resource
            if template:
                node, segs, depth = t.walk, [], -1
            else:
                segs = literal_prefix(pat)
                node, depth = _walk_depth(t.walk, segs)
            split = by_node.get(id(node))
            if split is None:
                kept, tested = self._split_forbids(
                    t, node, segs[:depth], resolved, groups, kept_rules
                )
                split = by_node[id(node)] = (node, kept, tested)
            _, kept, tested = split
            fsteps = kept
            if tested:
                # permits on one pattern (differing by condition) meet the same forbids
                ekey = (id(node), pat.absolute, pat.segs)
                shared = extras.get(ekey)
                if shared is None:
                    if template:  # every forbid of the action: only those agreeing literally
                        if along is None:
                            along = _LiteralIndex(tested)
                        tested = along.agreeing(pat)
                    extra = tuple(
                        f
                        for f in tested
                        if f.pattern is not None and covers_within(f.pattern, pat, t.shape)
                    )
                    kept_rules.update((f.rule.index, f.rule) for f in extra)
                    shared = extras[ekey] = kept + extra if extra else kept
                fsteps = shared
            if rule.applies is None and not fsteps:
                # An unconditional permit no forbid can cover: a witness for
                # every context (could_permit is an "exists" over permits).
                return True
            scan = self._scans.setdefault(
                (id(fsteps), pat.absolute, pat.segs), (len(self._scans), fsteps)
            )[0]
            steps.append(PermitStep(rule, pat, fsteps, scan))
        if not steps:
            return False
        # Tools whose plans consider the same rules under the same shape get
        # the same answer, whatever their action, unless a condition reads
        # ``action``: share one memo entry per context between them.
        dynamic = any(step.pattern is None for step in steps)
        # each rule once (a forbid on a shared prefix is in the steps of every permit below it)
        involved = {step.rule.index: step.rule for step in steps}
        involved.update(kept_rules)
        forbid_set = tuple(r.index for r in t.forbids) if dynamic else None
        if forbid_set is not None:
            involved.update((i, self._ev.rule(i)) for i in forbid_set)
        # decoded afresh, not kept: a prepared policy holds no condition it never weighs
        reads_action = any(
            (cond := r.decode_condition()) is not None and "action" in roots(cond)
            for r in involved.values()
        )
        # permits reaching one node share its kept forbids: their indices are listed once
        ids: dict[int, tuple[int, ...]] = {}
        for step in steps:
            if id(step.forbids) not in ids:
                ids[id(step.forbids)] = tuple(f.rule.index for f in step.forbids)
        sig = (
            t.shape,
            tuple((step.rule.index, ids[id(step.forbids)]) for step in steps),
            forbid_set,
            t.action if reads_action else None,
        )
        sig_id = self._sigs.setdefault(sig, len(self._sigs))
        return Plan(t, ("could", sig_id), tuple(steps))

    def _split_forbids(
        self,
        t: ToolPlan,
        node: Node,
        path: Sequence[str],
        resolved: dict[int, Resolved],
        groups: dict[int, _GroupSplit],
        kept_rules: dict[int, RuleRecord],
    ) -> tuple[tuple[ForbidStep, ...], tuple[ForbidStep, ...]]:
        """The forbids a permit reaching ``node`` (along the literal ``path``; over a
        template, every forbid of ``t``) may meet: (kept, tested). Kept for every such
        permit: a forbid interpolating the context (weighed per context) and a static
        forbid ``LITERALS/**`` whose literals start ``path`` (it covers every pattern
        under them, as ``covers_within`` would answer). Each other forbid is tested
        against the permit's pattern. The kept ones are added to ``kept_rules``.

        A node's forbids are its groups' (one group: the forbids of one literal
        prefix), and a node lists its ancestors' groups too: each group is sorted
        once per plan (``groups``), each node only checks its groups' literals."""
        if t.shape[0] != "path":
            whole = self._split_group(t.forbids, resolved)
            kept = whole.dynamic
            tested = whole.tested + tuple(f for _, fs in whole.below for f in fs)
            kept_rules.update((f.rule.index, f.rule) for f in kept)
            return kept, tested
        gids = node[1]
        if not gids:
            return (), ()
        kept_parts: list[tuple[ForbidStep, ...]] = []
        tested_parts: list[tuple[ForbidStep, ...]] = []
        for gid in gids:
            split = groups.get(gid)
            if split is None:
                split = groups[gid] = self._split_group(self._ev.group(gid), resolved)
                kept_rules.update((f.rule.index, f.rule) for f in split.dynamic)
            kept_parts.append(split.dynamic)
            tested_parts.append(split.tested)
            for lits, fs in split.below:
                if len(lits) <= len(path) and all(x == y for x, y in zip(lits, path, strict=False)):
                    kept_parts.append(fs)
                    if not split.counted.get(lits):
                        split.counted[lits] = True
                        kept_rules.update((f.rule.index, f.rule) for f in fs)
                else:
                    tested_parts.append(fs)
        return _flat(kept_parts), _flat(tested_parts)

    def _split_group(
        self, forbids: Sequence[RuleRecord], resolved: dict[int, Resolved]
    ) -> _GroupSplit:
        dynamic: list[ForbidStep] = []
        below: dict[tuple[str, ...], list[ForbidStep]] = {}
        tested: list[ForbidStep] = []
        for forbid in forbids:
            if _context_dependent(forbid):
                dynamic.append(ForbidStep(forbid, None))
                continue
            fpat = resolved.get(forbid.index)
            if fpat is None:
                fpat = resolved[forbid.index] = resolve(forbid.pattern_enc, None, forbid=True)
            step = ForbidStep(forbid, fpat)
            lits = _blanket_literals(fpat)
            if lits is None:
                tested.append(step)
            else:
                below.setdefault(lits, []).append(step)
        return _GroupSplit(
            tuple(dynamic), tuple((k, tuple(v)) for k, v in below.items()), tuple(tested), {}
        )

    def _possible(self, plan: Plan, context: Any, cache: ContextEntry | None) -> bool:
        t = plan.tool
        action = t.action
        env: Env = (context, None, None, action)
        # What depends only on the context (resolved patterns, a forbid's
        # certainty per action) is kept in the context's memo, so the tools of
        # a first-seen context share it; without a context key, for this call.
        memo: dict[Any, Any] = cache.memo if cache is not None else {}
        template = t.shape[0] != "path"
        shape = t.shape
        # The forbid that last covered a permit of this namespace and action (for this
        # context and shape) is tried first: one this context meets whatever it asks
        # ('forbid * on "/**" when "suspended" in context.roles') covers every permit,
        # and finding it at the end of each permit's forbids made a listing weigh every
        # permit against every forbid. A forbid certain to apply whose pattern covers
        # the permit's is one its own list holds (a covering forbid's literal prefix is
        # a prefix of the permit's), so which one is found first changes nothing.
        win_key = ("won", t.namespace, action, shape)
        won = memo.get(win_key)
        # the joint combinations this listing may still enumerate, over all its permits
        budget = [MAX_LISTING_CASES]
        for step in plan.steps:
            rule = step.rule
            pat = step.pattern
            if pat is not None and won is not None and covers_within(won, pat, shape):
                continue
            if not self._permit_possible(rule, env, cache):
                continue
            fsteps: Sequence[ForbidStep] = step.forbids
            static_permit = pat is not None
            if pat is None:
                # The permit interpolates the context: resolve it and find the
                # forbids along its (context-filled) literal prefix now.
                if self._dyn_uses.get(rule.index, 0) > 1:  # several plans: once per context
                    pk = ("p", rule.index)
                    pat = memo.get(pk)
                    if pat is None:
                        pat = memo[pk] = resolve(rule.pattern_enc, context)
                else:
                    pat = resolve(rule.pattern_enc, context)
                if not meets_shape(pat, shape):
                    continue
                if won is not None and covers_within(won, pat, shape):
                    continue
                candidates = (
                    t.forbids if template else forbids_along(self._ev, t, literal_prefix(pat))
                )
                fsteps = [ForbidStep(f, None) for f in candidates]
            scan_key = ("scan", step.scan, action) if static_permit else None
            seen = memo.get(scan_key) if scan_key is not None else None
            if seen is not None:
                covering, uncertain_seen = seen
                if covering is not None:
                    won = memo[win_key] = covering
                    continue
                fsteps = ()
            covered = False
            uncertain: list[RuleRecord] = [] if seen is None else list(uncertain_seen)
            for fstep in fsteps:
                forbid = fstep.rule
                fk = ("f", forbid.index, action)
                info = memo.get(fk)
                if info is None:
                    info = memo[fk] = (
                        self._forbid_certain(forbid, env, cache),
                        fstep.pattern
                        if fstep.pattern is not None
                        else resolve(forbid.pattern_enc, context, forbid=True),
                    )
                certain, fpat = info
                # A static forbid kept in a static permit's plan is known to cover it.
                if not (static_permit and fstep.pattern is not None) and not covers_within(
                    fpat, pat, shape
                ):
                    continue
                if certain:
                    covered = True
                    won = memo[win_key] = fpat
                    break
                uncertain.append(forbid)
            if scan_key is not None and seen is None:
                memo[scan_key] = (won if covered else None, tuple(uncertain))
            if covered:
                continue
            # A condition reading arguments is weighed jointly, even alone: its
            # atoms may exclude each other ('when A unless A').
            plain = rule.applies is None or rule.context_only
            if plain and not uncertain:
                return True
            answer = _joint_answer(rule, uncertain, action, context, memo, budget)
            if answer is None or answer:
                # None: past the listing's bound, so "possible" (the call is still
                # decided exactly)
                return True
        return False

    def explain(self, tool: str, context: Mapping[str, Any]) -> ListingExplanation:
        """Why ``tool`` is (or is not) listed for ``context``, permit by permit.

        The verdict is ``could_permit``'s; the reasons re-derive it without the
        plan's shortcuts, for a person reading them.
        """
        t = self._ev.tool(tool)
        if t is None:
            return ListingExplanation(
                str(tool), False, "no requirement declares it: it is neither listed nor callable"
            )
        listed = self.could_permit(tool, context)
        env: Env = (context, None, None, t.action)
        joint: dict[Any, Any] = {}
        budget = [MAX_LISTING_CASES]
        reasons = tuple(
            self._permit_reason(t, rule, env, context, joint, budget)
            for rule in self.permit_order(t)
        )
        if listed:
            summary = "some call could be permitted"
        elif not reasons:
            summary = f"no permit governs action {t.action!r} of namespace {t.namespace!r}"
        else:
            summary = "no permit could allow any call for this context"
        approvals = self._approval_reasons(t, env)
        if listed and any(a.possible for a in approvals):
            summary += "; some calls may need approval"
        return ListingExplanation(tool, listed, summary, reasons, approvals)

    def _approval_reasons(self, t: ToolPlan, env: Env) -> tuple[PermitReason, ...]:
        """The approval rules of the tool's action, and whether they could apply here.

        They never hide a tool: a call that needs approval is still a call a
        permit allows, so the tool is listed and each such call is asked about.
        """
        approvals = self._ev.approvals
        if approvals is None:
            return ()
        out = []
        for rule in approvals.rules_for(t.namespace, t.action, t.absolute):
            who = " or ".join(f"{k} {n!r}" for k, n in approvals.approvers(rule.index))
            possible = True
            why = f"a call on a resource its pattern matches needs an approval by {who}"
            if rule.applies is not None and rule.context_only:
                try:
                    possible = bool(rule.applies(env))
                except Exception:
                    possible = True  # fails closed: it may apply
                if not possible:
                    why = f"its condition ({condition_text(rule)}) is false for this context"
            elif rule.applies is not None:
                why += f" ({condition_text(rule)})"
            out.append(PermitReason(rule.ref, rule.pattern, possible, why))
        return tuple(out)

    def _permit_reason(
        self,
        t: ToolPlan,
        rule: RuleRecord,
        env: Env,
        context: Any,
        joint: dict[Any, Any],
        budget: list[int],
    ) -> PermitReason:
        def say(possible: bool, why: str) -> PermitReason:
            return PermitReason(rule.ref, rule.pattern, possible, why)

        if not self._permit_possible(rule, env, None):
            return say(
                False, f"its condition ({condition_text(rule)}) cannot hold for this context"
            )
        pat = resolve(rule.pattern_enc, context)
        if not pat.safe:
            return say(False, "its pattern interpolates a missing or unsafe context value")
        if not meets_shape(pat, t.shape):
            return say(False, f"its pattern can never match the resource {t.requirement.resource}")
        segs = [] if t.shape[0] != "path" else literal_prefix(pat)
        candidates = t.forbids if t.shape[0] != "path" else forbids_along(self._ev, t, segs)
        uncertain: list[RuleRecord] = []
        for forbid in candidates:
            fpat = resolve(forbid.pattern_enc, context, forbid=True)
            if not covers_within(fpat, pat, t.shape):
                continue
            if self._forbid_certain(forbid, env, None):
                return say(
                    False,
                    f"every resource it could allow is forbidden by {forbid.id} "
                    f"({forbid.ref.file}:{forbid.ref.line}), whatever the arguments",
                )
            uncertain.append(forbid)
        plain = rule.applies is None or rule.context_only
        if (uncertain or not plain) and _joint_answer(
            rule, uncertain, t.action, context, joint, budget
        ) is False:
            ids = ", ".join(f.id for f in uncertain)
            if not ids:
                return say(False, "no arguments can satisfy its condition")
            return say(False, f"the forbids {ids} exclude every call its condition allows")
        return say(True, "some call could match its pattern and condition")

    def _permit_possible(self, rule: RuleRecord, env: Env, cache: ContextEntry | None) -> bool:
        if rule.applies is None:
            return True
        if rule.context_only:  # exactly what decide computes (and caches)
            return self._ev.context_holds(rule, env, cache)
        return permit_possible(rule.condition, rule.condition_kind, env[0], env[3])

    def _forbid_certain(self, rule: RuleRecord, env: Env, cache: ContextEntry | None) -> bool:
        if rule.applies is None:
            return True
        if rule.context_only:  # applies (or fails closed) whatever the arguments
            return self._ev.context_holds(rule, env, cache)
        return forbid_certain(rule.condition, rule.condition_kind, env[0], env[3])


def forbids_along(ev: Evaluator, t: ToolPlan, segs: Sequence[str]) -> Iterator[RuleRecord]:
    """The forbids of ``t`` whose literal prefix is a prefix of ``segs``."""
    return iter(ev.node_rules(walk_along(t.walk, segs), True))


def _walk_depth(walk: Node, segs: Sequence[str]) -> tuple[Node, int]:
    """``walk_along`` and how many of ``segs`` it descended."""
    node = walk
    depth = 0
    for seg in segs:
        child = node[0].get(seg)
        if child is None:
            break
        node = child
        depth += 1
    return node, depth


def _blanket_literals(fpat: Resolved) -> tuple[str, ...] | None:
    """``L1 .. Lk`` when the static forbid pattern ``fpat`` is ``/L1/.../Lk/**``: it
    covers every absolute pattern whose literal prefix starts with them (what
    ``covers_within`` answers for each such permit); else None."""
    segs = fpat.segs
    last = len(segs) - 1
    if not fpat.safe or not fpat.absolute or last < 0 or segs[last][0] != "D":
        return None
    lits: list[str] = []
    for i in range(last):
        seg = segs[i]
        if seg[0] != "L":
            return None
        lits.append(seg[1])
    return tuple(lits)


def _flat(parts: list[tuple[ForbidStep, ...]]) -> tuple[ForbidStep, ...]:
    parts = [p for p in parts if p]
    if len(parts) == 1:
        return parts[0]
    return tuple(f for p in parts for f in p)


def _context_dependent(rule: RuleRecord) -> bool:
    return rule.match is MatchKind.CONTEXT


def _joint_answer(
    permit: RuleRecord,
    forbids: list[RuleRecord],
    action: str,
    context: Any,
    memo: dict[Any, Any],
    budget: list[int],
) -> bool | None:
    """``_jointly_possible``, asked once per ``memo``: permits of one condition under
    the same forbids (a generated policy's 'permit read on "/dN/**" when "a" in
    args.tags', one per directory) ask one joint question, and each may enumerate
    thousands of lists."""
    key = (
        "joint",
        action,
        condition_key(permit.condition) if permit.condition is not None else None,
        permit.condition_kind,
        tuple(f.index for f in forbids),
    )
    answer = memo.get(key)
    if answer is None:
        answer = _jointly_possible(permit, forbids, action, context, budget)
        if answer is not None:
            memo[key] = answer
    return cast("bool | None", answer)


def _jointly_possible(
    permit: RuleRecord,
    forbids: list[RuleRecord],
    action: str,
    context: Any,
    budget: list[int],
) -> bool | None:
    """Is there a choice of arguments under which the permit applies and none of
    the (pattern-covering) forbids does? See ``partial.JointSpace``. None when the
    combinations are more than ``MAX_JOINT_CASES`` or than ``budget[0]``, what is left
    of the listing's ``MAX_LISTING_CASES`` (taken from it otherwise): "possible"."""
    space = JointSpace(context, action)
    for rule in (permit, *forbids):
        space.add(rule.condition)
    size = space.size()
    if size > MAX_JOINT_CASES or size > budget[0]:
        return None  # too many to enumerate: per-condition reasoning already said possible
    budget[0] -= size
    for assign in space.cases():
        if not rule_applies_under(
            permit.condition, permit.condition_kind, False, context, action, assign
        ):
            continue
        if not any(
            rule_applies_under(f.condition, f.condition_kind, True, context, action, assign)
            for f in forbids
        ):
            return True
    return False

"""The evaluator: one call in, one ``Decision`` out (forbid overrides permit, default deny).

``Evaluator`` owns the program and everything a decision reads: the tool
plans, the rule records (``ir``), the decision walks (``index``), and the
per-context caches. The partial evaluator (``partial_eval``) and the
explainer (``explainer``) read the same state; ``PolicySet`` is the public
face of all three.

Hot path notes: ``decide`` touches dicts, lists, tuples and slotted records
only. The program is used as it is: the walks are descended as compiled (or
as ``json.loads`` returned them from a bundle), and a rule is decoded the
first time a decision reaches it, so neither a compile nor a bundle load does
per-rule work and the first decision of an action decodes only the rules it
meets; a condition is compiled by its first evaluation, through the rule
table's memo (``PolicySet.prepare`` does all of it up front, if a host wants
that). A context rule's matcher is tested inline against its quick reject
(``Matcher.qpos``/``qtext``) before it is called. A
``path(args.x)`` resource that is already canonical is recognised inline
with the same C-level string tests ``paths.canonical_path`` starts with;
anything else goes through ``canonical_path``. Context-only conditions and
context-interpolated patterns are evaluated once per ``context_key`` and kept
in a bounded LRU (cachetools).
"""

from __future__ import annotations

import gc
import threading
import unicodedata
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy.conditions import Env
from sharedos.policy.decision import Decision, Requirement, SourceSpan
from sharedos.policy.index import (
    FILTER_MIN,
    Node,
    empty_walk,
    validate_groups,
    validate_walk,
    walk_groups,
)
from sharedos.policy.ir import MalformedProgram, Matcher, MatchKind, RuleRecord, RuleTable, ToolPlan
from sharedos.policy.matchers import match_general
from sharedos.policy.paths import MAX_PATH_CHARS
from sharedos.policy.patterns import Shape
from sharedos.policy.resolvers import (
    Resolver,
    Unresolvable,
    path_resolver,
    resource_shape,
    template_resolver,
)

if TYPE_CHECKING:
    from sharedos.policy.approvals import ApprovalRules
    from sharedos.toolpolicy import ToolPolicy

#: How many distinct contexts keep cached condition results.
CONTEXT_CACHE_SIZE = 256
#: How many distinct decisions are kept for reuse (cleared when full).
DECISION_CACHE_SIZE = 65536

#: A context-only verdict in ``ContextEntry.verdicts``: not yet evaluated, false, true.
UNSEEN, NO, YES = 0, 1, 2

_ALLOW = Effect.ALLOW
_DENY = Effect.DENY
_ALLOWED = ReasonCode.ALLOWED
_FORBIDDEN = ReasonCode.FORBIDDEN
_NO_PERMIT = ReasonCode.NO_MATCHING_PERMIT
_DEPTH = MatchKind.DEPTH
_AFFIX = MatchKind.AFFIX
_GENERAL = MatchKind.GENERAL
_MISSING: Any = object()
_is_normalized = unicodedata.is_normalized


class ContextEntry:
    """What one context has cached.

    ``verdicts[rule.index]`` is a context-only condition's verdict (``UNSEEN``,
    ``NO``, ``YES``: a bytearray, compact and unhashed); ``filtered`` maps a
    large group to the rules of it whose context-only condition holds;
    ``matchers`` maps a ``CONTEXT`` rule's index to its resolved matcher
    (None: it matches nothing for this context); ``memo`` is the partial
    evaluator's.
    """

    __slots__ = ("filtered", "matchers", "memo", "verdicts")

    def __init__(self, n_rules: int) -> None:
        self.verdicts = bytearray(n_rules)
        self.filtered: dict[int, tuple[RuleRecord, ...]] = {}
        self.matchers: dict[int, Matcher | None] = {}
        self.memo: dict[Any, Any] = {}


class Evaluator:
    """Decides calls against a compiled program (built by ``PolicySet``).

    Raise ``MalformedProgram`` when the program is not what the compiler
    writes: it is checked here, once, so that a decision never meets a
    malformed structure.
    """

    def __init__(self, program: Mapping[str, Any]) -> None:
        self._table = RuleTable(program.get("rules"))
        n_rules = self._table.n
        groups = program.get("groups")
        validate_groups(groups, n_rules)
        self._raw_groups: list[list[int]] = groups  # type: ignore[assignment]
        # decoded groups: a tuple of records, or None until first use (and for
        # large groups, which are filtered per context: see _group_rules)
        self._groups: list[tuple[RuleRecord, ...] | None] = [None] * len(groups)  # type: ignore[arg-type]
        self._large: dict[int, tuple[RuleRecord, ...]] = {}
        self._records: list[RuleRecord | None] = [None] * n_rules
        index = program.get("index")
        if type(index) is not dict or not all(type(a) is dict for a in index.values()):
            raise MalformedProgram("index is not a mapping of namespaces to actions")
        # One empty children dict for every leaf, one list per distinct group
        # list: no decision fills either (a walk is read-only once built).
        leaf: dict[str, Any] = {}
        shared: dict[tuple[int, ...], list[int]] = {}
        for actions in index.values():
            for walks in actions.values():
                if type(walks) is not list or len(walks) != 2:
                    raise MalformedProgram("an index entry is not [absolute walk, relative walk]")
                for walk in walks:
                    validate_walk(walk, len(self._groups), leaf, shared)
        self._index: Mapping[str, Mapping[str, list[Node]]] = index
        self._ctx_cache: LRUCache[str, ContextEntry] = LRUCache(maxsize=CONTEXT_CACHE_SIZE)
        self._ctx_front: dict[str, ContextEntry] = {}
        self._decisions: dict[tuple[Any, ...], Decision] = {}
        # context_key excludes the turn id; a policy reading it is never cached
        self._cacheable = not program.get("reads_turn_id", True)
        self._lock = threading.Lock()
        self._tools: dict[str, ToolPlan] = {}
        self._walk_rules: dict[
            tuple[str, str, bool], tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]
        ] = {}
        self._raw_tool_policies: Mapping[str, Any] = program["tool_policies"]
        self._tool_policies: Mapping[str, ToolPolicy] | None = None
        self._reqs: Mapping[str, Any] = program["requirements"]
        self.requirements: Mapping[str, Requirement] = {
            tool: Requirement(
                tool,
                req["ns"],
                req["action"],
                req["resource_text"],
                SourceSpan(req["file"], req["line"], req["col"]),
            )
            for tool, req in self._reqs.items()
        }
        # Approval rules (sharedos.policy.approvals): read only after an allow, and
        # only by a policy that has them; without them ``decide`` is untouched.
        self.approvals: ApprovalRules | None = None
        section = program.get("approvals")
        if section is not None:
            from sharedos.policy.approvals import ApprovalRules

            self.approvals = ApprovalRules(section)
            self.decide = self._decide_with_approvals  # type: ignore[method-assign]
        # Resolvers are built now (cheap, one per tool), so a malformed
        # requirement fails the load, never a decision.
        self._resolvers: dict[str, tuple[Resolver, bool, Shape, str | None]] = {}
        for tool, req in self._reqs.items():
            renc = req["resource"]
            is_path = renc["kind"] == "path"
            arg = tuple(renc["arg"]) if is_path else ()
            if is_path and not (arg and all(type(a) is str for a in arg)):
                raise MalformedProgram(f"the resource of {tool} is malformed")
            self._resolvers[tool] = (
                path_resolver(arg) if is_path else template_resolver(renc),
                is_path or bool(renc["abs"]),
                resource_shape(renc),
                arg[0] if is_path and len(arg) == 1 else None,
            )

    # ------------------------------------------------------------ the program

    @property
    def tool_policies(self) -> Mapping[str, ToolPolicy]:
        """The compiled toolpolicies by name (validated ``ToolPolicy`` objects, built on first use)."""
        policies = self._tool_policies
        if policies is None:
            from sharedos.toolpolicy import ToolPolicy

            policies = self._tool_policies = {
                name: ToolPolicy(**fields) for name, fields in self._raw_tool_policies.items()
            }
        return policies

    @property
    def rule_count(self) -> int:
        """How many rules the program has."""
        return self._table.n

    def rule(self, index: int) -> RuleRecord:
        """Rule record ``index``, decoded on first use.

        The program itself is never modified, so ``bundle_hash`` does not
        depend on which rules have been used.
        """
        record = self._records[index]
        if record is None:
            record = self._records[index] = self._table.record(index)
        return record

    def group(self, gid: int) -> tuple[RuleRecord, ...]:
        """The rules of group ``gid``, in program order (decoded on first use)."""
        rules = self._groups[gid] or self._large.get(gid)
        if rules is None:
            rules = tuple(self._records[i] or self.rule(i) for i in self._raw_groups[gid])
            if len(rules) > FILTER_MIN:
                self._large[gid] = rules  # read through _group_rules, filtered per context
            else:
                self._groups[gid] = rules
        return rules

    def node_rules(self, node: Node, forbid: bool) -> tuple[RuleRecord, ...]:
        """The forbids (or permits) a resource reaching ``node`` can meet, root first."""
        gids = node[1 if forbid else 2]
        return tuple(r for gid in gids for r in self.group(gid)) if gids else ()

    def _all_rules(self, walk: Node) -> tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]:
        forbids, permits = walk_groups(walk)

        def rules(gids: set[int]) -> tuple[RuleRecord, ...]:
            found = {r.index: r for gid in gids for r in self.group(gid)}
            return tuple(found[i] for i in sorted(found))

        return rules(forbids), rules(permits)

    def tool(self, tool: object) -> ToolPlan | None:
        """The plan of ``tool``'s requirement, built on first use (None: no requirement)."""
        t = self._tools.get(tool) if type(tool) is str else None
        if t is not None or type(tool) is not str:
            return t
        parts = self._resolvers.get(tool)
        if parts is None:
            return None
        resolver, absolute, shape, path_arg = parts
        req = self._reqs[tool]
        ns, action = req["ns"], req["action"]
        walks = self._index.get(ns, {}).get(action)
        walk = walks[0 if absolute else 1] if walks is not None else empty_walk()
        key = (ns, action, absolute)

        def rules() -> tuple[tuple[RuleRecord, ...], tuple[RuleRecord, ...]]:
            found = self._walk_rules.get(key)
            if found is None:
                found = self._walk_rules[key] = self._all_rules(walk)
            return found

        t = ToolPlan(
            tool,
            ns,
            action,
            resolver,
            absolute,
            shape,
            self.requirements[tool],
            walk,
            path_arg,
            rules,
        )
        self._tools[tool] = t
        return t

    # ---------------------------------------------------------- context cache

    def context_entry(self, key: str) -> ContextEntry:
        """The cache of one context (created on first use; bounded LRU)."""
        # A lock-free front dict answers the common case; the bounded
        # cachetools LRU behind it is the authority on which contexts stay.
        entry = self._ctx_front.get(key)
        if entry is not None:
            return entry
        with self._lock:
            entry = self._ctx_cache.get(key)
            if entry is None:
                entry = ContextEntry(self._table.n)
                self._ctx_cache[key] = entry
            if len(self._ctx_front) >= CONTEXT_CACHE_SIZE:
                self._ctx_front.clear()
            self._ctx_front[key] = entry
        return entry

    def cache_for(self, context_key: object) -> ContextEntry | None:
        """The context cache for ``context_key``; None when it cannot be cached."""
        if type(context_key) is str and self._cacheable:
            return self._ctx_front.get(context_key) or self.context_entry(context_key)
        return None

    @staticmethod
    def context_holds(rule: RuleRecord, env: Env, cache: ContextEntry | None) -> bool:
        """A context-only rule's verdict for this context (cached when there is a cache)."""
        applies = rule.applies
        if applies is None:
            return True
        if cache is None:
            return bool(applies(env))
        ok = cache.verdicts[rule.index]
        if not ok:
            ok = cache.verdicts[rule.index] = YES if applies(env) else NO
        return ok == YES

    @staticmethod
    def context_matcher(
        rule: RuleRecord, context: Any, cache: ContextEntry | None
    ) -> Matcher | None:
        """A ``CONTEXT`` rule's matcher for this context (cached when there is a cache)."""
        if cache is None:
            return rule.context_matcher(context)
        m = cache.matchers.get(rule.index, _MISSING)
        if m is _MISSING:
            m = cache.matchers[rule.index] = rule.context_matcher(context)
        return m  # type: ignore[no-any-return]

    def _group_rules(
        self, gid: int, cache: ContextEntry | None, env: Env
    ) -> tuple[RuleRecord, ...]:
        """A group's rules on the slow path: decoded on first use, and a large group
        narrowed, per context, to the rules whose context-only condition holds (so a
        decision's cost follows the rules that can apply to this caller)."""
        rules = self.group(gid)
        if cache is None or len(rules) <= FILTER_MIN:
            return rules
        filtered = cache.filtered.get(gid)
        if filtered is None:
            filtered = cache.filtered[gid] = tuple(
                r
                for r in rules
                if r.applies is None or not r.context_only or self.context_holds(r, env, cache)
            )
        return filtered

    # ----------------------------------------------------------------- decide

    def decide(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        context_key: str | None = None,
    ) -> Decision:
        """Decide one call. Never raises: bad input is a deny with a reason code.

        Forbid overrides permit; default deny. ``context_key`` (e.g.
        ``AccessContext.cache_key``) must identify ``context``: context-only
        conditions are cached under it.
        """
        t = self._tools.get(tool) if type(tool) is str else None
        if t is None:
            t = self.tool(tool)
            if t is None:
                return self._unavailable(tool)
        # The common resource, path(args.x) already canonical, inline: the same
        # tests canonical_path starts with (anything else takes its careful path).
        name = t.path_arg
        value = args.get(name) if name is not None and type(args) is dict else None
        if (
            type(value) is str
            and value[:1] == "/"
            and value.isprintable()
            and "//" not in value
            and "/." not in value
            and (value[-1] != "/" or len(value) == 1)
            and len(value) <= MAX_PATH_CHARS
            and (value.isascii() or _is_normalized("NFC", value))
        ):
            resource = value
            segs = value[1:].split("/") if len(value) > 1 else []
        else:
            try:
                resource, segs = t.resolve(args)
            except Unresolvable as exc:
                return self._unresolvable(t, str(exc))
            except Exception as exc:  # hostile args object: fail closed, never raise
                return self._unresolvable(t, type(exc).__name__)
        if type(context_key) is str and self._cacheable:
            cache = self._ctx_front.get(context_key)
            if cache is None:
                cache = self.context_entry(context_key)
            verdicts = cache.verdicts
        else:
            cache = verdicts = None  # no key (or not a string): evaluate, do not cache
        # Descend to the deepest walk node along the resource: its groups hold
        # every rule whose literal prefix the resource starts with.
        node = t.walk
        for seg in segs:
            child = node[0].get(seg)
            if child is None:
                break
            node = child
        n = len(segs)
        env: Env | None = None
        # the first rule that applies, and all of them once there are several
        # (no list for the common single hit)
        first: RuleRecord | None = None
        more: list[RuleRecord] | None = None
        groups = self._groups
        # Forbids first: one that applies denies, whatever the permits say.
        for gids in (node[1], node[2]):
            if not gids:
                continue
            for gid in gids:
                rules = groups[gid]
                if rules is None:
                    if env is None:
                        env = (context, args, resource, t.action)
                    rules = self._group_rules(gid, cache, env)
                for rule in rules:
                    mk = rule.match
                    if mk:  # ANY (0): '**' after the prefix, nothing to check
                        if mk is _DEPTH:
                            if n != rule.depth:
                                continue
                        elif mk is _AFFIX:
                            if n != rule.depth:
                                continue
                            last = segs[-1]
                            if (
                                len(last) < rule.least
                                or not last.startswith(rule.head)
                                or not last.endswith(rule.tail)
                            ):
                                continue
                        elif mk is _GENERAL:
                            if not match_general(rule.prog, segs, rule.depth):
                                continue
                        else:  # CONTEXT: the pattern interpolates the context
                            if cache is not None:
                                m = cache.matchers.get(rule.index, _MISSING)
                                if m is _MISSING:
                                    m = cache.matchers[rule.index] = rule.context_matcher(context)
                            else:
                                m = rule.context_matcher(context)
                            if (
                                m is None
                                or (n > m.qpos and segs[m.qpos] != m.qtext)
                                or not m.matches(segs)
                            ):
                                continue
                    applies = rule.applies
                    if applies is not None:
                        if env is None:
                            env = (context, args, resource, t.action)
                        if verdicts is not None and rule.context_only:
                            ok = verdicts[rule.index]
                            if not ok:
                                ok = verdicts[rule.index] = YES if applies(env) else NO
                            if ok == NO:
                                continue
                        elif not applies(env):
                            continue
                    if first is None:
                        first = rule
                    elif more is None:
                        more = [first, rule]
                    else:
                        more.append(rule)
            if first is not None:
                break
        # Decisions are immutable values, so identical ones are shared: building
        # a frozen dataclass costs more than the whole walk.
        if first is None:
            dkey: tuple[Any, ...] = (tool, resource)
        elif more is None:
            dkey = (tool, resource, first)
        else:
            dkey = (tool, resource, *more)
        cached = self._decisions.get(dkey)
        if cached is not None:
            return cached
        return self._decision(dkey, t, resource, dkey[2:] or None)

    def _decide_with_approvals(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        context_key: str | None = None,
    ) -> Decision:
        """``decide``, then the approval rules of an allowed call (a policy that has them).

        Forbid wins, then default deny, then approval (``approval_required``), then allow.
        """
        decision = Evaluator.decide(self, tool, args, context, context_key=context_key)
        approvals = self.approvals
        if decision.effect is not _ALLOW or approvals is None:
            return decision
        t = self._tools.get(tool)
        if t is None:
            return decision
        return approvals.check(decision, t, args, context)

    def applying_rules(
        self, tool: str, args: Mapping[str, Any], context: Mapping[str, Any]
    ) -> tuple[RuleRecord, ...]:
        """Every rule that applies to this call, forbids and permits alike (for test coverage).

        ``decide`` stops at the forbids when one applies; this also reads the
        permits, through the same index (never the rules that cannot match).
        """
        t = self.tool(tool)
        if t is None:
            return ()
        try:
            resource, segs = t.resolve(args)
        except Exception:
            return ()
        env: Env = (context, args, resource, t.action)
        node = t.walk
        for seg in segs:
            child = node[0].get(seg)
            if child is None:
                break
            node = child
        found = tuple(
            r
            for forbid in (True, False)
            for r in self.node_rules(node, forbid)
            if self.rule_applies(r, segs, env, None)
        )
        if self.approvals is not None:
            found += tuple(self.approvals.applying(t, resource, args, context))
        return found

    def pattern_matches(
        self, rule: RuleRecord, segs: list[str], context: Any, cache: ContextEntry | None = None
    ) -> bool:
        """Does the pattern of ``rule`` (which the index reached) match the resource ``segs``?

        The same test ``decide`` makes inline."""
        mk = rule.match
        n = len(segs)
        if mk is _DEPTH:
            return n == rule.depth
        if mk is _AFFIX:
            last = segs[-1] if segs else ""
            return (
                n == rule.depth
                and len(last) >= rule.least
                and last.startswith(rule.head)
                and last.endswith(rule.tail)
            )
        if mk is _GENERAL:
            return match_general(rule.prog, segs, rule.depth)  # type: ignore[arg-type]
        if mk is MatchKind.CONTEXT:
            m = self.context_matcher(rule, context, cache)
            return m is not None and m.matches(segs)
        return True

    def rule_applies(
        self, rule: RuleRecord, segs: list[str], env: Env, cache: ContextEntry | None
    ) -> bool:
        """Does ``rule`` (which the index reached) apply to the resource ``segs`` in ``env``?"""
        if not self.pattern_matches(rule, segs, env[0], cache):
            return False
        applies = rule.applies
        if applies is None:
            return True
        if rule.context_only and cache is not None:
            return self.context_holds(rule, env, cache)
        return applies(env)

    def _decision(
        self,
        dkey: tuple[Any, ...],
        t: ToolPlan,
        resource: str,
        hits: tuple[RuleRecord, ...] | None,
    ) -> Decision:
        if hits is None:
            reason: ReasonCode = _NO_PERMIT
            refs: tuple[Any, ...] = ()
            detail = f"no permit allows {t.action} on {resource} (default deny)"
        else:
            reason = _FORBIDDEN if hits[0].forbid else _ALLOWED
            if len(hits) == 1:
                only = hits[0]
                refs = only.refs or self._single_ref(only)
            else:
                refs = tuple(r.ref for r in hits)
            ids = ", ".join(r.id for r in refs)
            verb = "forbidden" if reason is _FORBIDDEN else "permitted"
            detail = f"{t.action} on {resource} is {verb} by {ids}"
        effect = _ALLOW if reason is _ALLOWED else _DENY
        decision = Decision(effect, reason, t.name, t.namespace, t.action, resource, refs, detail)
        if len(self._decisions) >= DECISION_CACHE_SIZE:
            self._decisions.clear()
        self._decisions[dkey] = decision
        return decision

    @staticmethod
    def _single_ref(rule: RuleRecord) -> tuple[Any, ...]:
        refs = rule.refs = (rule.ref,)
        return refs

    @staticmethod
    def _unresolvable(t: ToolPlan, why: str) -> Decision:
        return Decision(
            _DENY,
            ReasonCode.UNRESOLVABLE_RESOURCE,
            t.name,
            t.namespace,
            t.action,
            None,
            (),
            f"the resource of {t.name} cannot be resolved: {why}",
        )

    @staticmethod
    def _unavailable(tool: object) -> Decision:
        name = tool if type(tool) is str else repr(tool)
        shown = name if len(name) <= 200 else name[:197] + "..."
        return Decision(
            _DENY,
            ReasonCode.TOOL_UNAVAILABLE,
            shown,
            None,
            None,
            None,
            (),
            f"no requirement declares tool {shown!r}: it is neither listed nor callable",
        )

    def prepare_all(self) -> None:
        """Decode every rule and group and build every tool's plan (see ``PolicySet.prepare``)."""
        was_enabled = gc.isenabled()
        gc.disable()  # thousands of small records and closures, no cycles
        try:
            for idx in range(self._table.n):
                record = self.rule(idx)
                if record.has_condition:
                    record.compile_condition(self._table.memo)
            for gid in range(len(self._groups)):
                self.group(gid)
            for name in self.requirements:
                self.tool(name)
        finally:
            if was_enabled:
                gc.enable()

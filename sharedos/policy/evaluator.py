"""The evaluator: one call in, one ``Decision`` out (forbid overrides permit, default deny).

``Evaluator`` owns the decoded program (``ir``) and everything a decision
reads: the tool plans, the rule records, the decision walks, and the
per-context caches. The partial evaluator (``partial_eval``) and the explainer
(``explainer``) read the same state; ``PolicySet`` is the public face of all
three.

Hot path notes: ``decide`` touches slotted records, dicts and tuples only.
A (namespace, action)'s rules and index are decoded the first time a
decision reaches it (``PolicySet.prepare`` does every one up front), so
loading a bundle does no per-rule work. Context-only conditions and
context-interpolated patterns are evaluated once per ``context_key`` and kept
in a bounded LRU (cachetools).
"""

from __future__ import annotations

import gc
import itertools
import json
import threading
from collections.abc import Mapping
from typing import Any

from cachetools import LRUCache

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy.conditions import Env
from sharedos.policy.decision import Decision, Requirement, SourceSpan
from sharedos.policy.index import RuleGroup, WalkNode, build_walk, decode_table
from sharedos.policy.ir import (
    MalformedProgram,
    Matcher,
    MatchKind,
    RuleRecord,
    ToolPlan,
    decode_rule,
)
from sharedos.policy.patterns import Shape
from sharedos.policy.resolvers import (
    Resolver,
    Unresolvable,
    path_resolver,
    resource_shape,
    template_resolver,
)
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
_ANY = MatchKind.ANY
_DEPTH = MatchKind.DEPTH
_AFFIX = MatchKind.AFFIX
_REGEX = MatchKind.REGEX
_MISSING = object()


class ContextEntry:
    """What one context has cached.

    ``verdicts[rule.index]`` is a context-only condition's verdict (``UNSEEN``,
    ``NO``, ``YES``: a bytearray, compact and unhashed); ``filtered`` maps a
    large ``RuleGroup.key`` to the rules whose context-only condition holds;
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


#: The decoded index of one (namespace, action): forbid and permit prefix tables
#: for absolute resources, then for relative ones.
_Tables = list[dict[str, list[RuleRecord]]]


def _fail_closed_tables() -> _Tables:
    return [{}, {}, {}, {}]


def _all_rules(table: dict[str, list[RuleRecord]]) -> tuple[RuleRecord, ...]:
    return tuple(
        sorted({r.index: r for rs in table.values() for r in rs}.values(), key=lambda r: r.index)
    )


class Evaluator:
    """Decides calls against a compiled program (built by ``PolicySet``)."""

    def __init__(self, program: Mapping[str, Any]) -> None:
        raw_rules = program["rules"]
        if not isinstance(raw_rules, list):
            raise MalformedProgram("rules is not a list")
        self._raw_rules: list[Any] = raw_rules
        self._records: list[RuleRecord | None] = [None] * len(raw_rules)
        self._ctx_cache: LRUCache[str, ContextEntry] = LRUCache(maxsize=CONTEXT_CACHE_SIZE)
        self._ctx_front: dict[str, ContextEntry] = {}
        self._decisions: dict[tuple[Any, ...], Decision] = {}
        # context_key excludes the turn id; a policy reading it is never cached
        self._cacheable = not program.get("reads_turn_id", True)
        self._lock = threading.Lock()
        self._group_keys = itertools.count()
        self._tools: dict[str, ToolPlan] = {}
        # Tools (and the index tries they walk) are built on first use: a bundle
        # stores each (namespace, action)'s tries as one packed JSON string, so
        # loading one does not decode hundreds of thousands of trie nodes.
        self._reqs: Mapping[str, Any] = program["requirements"]
        self._index: Mapping[str, Mapping[str, Any]] = program["index"]
        for ns, actions in self._index.items():
            for action, tries in actions.items():
                if type(tries) is not str and not (type(tries) is list and len(tries) == 4):
                    raise MalformedProgram(f"index entry {ns}.{action} is not a packed trie set")
        self._tables: dict[tuple[str, str], _Tables] = {}
        self._walks: dict[
            tuple[str, str, bool], tuple[WalkNode, tuple[RuleRecord, ...], tuple[RuleRecord, ...]]
        ] = {}
        self.tool_policies: Mapping[str, ToolPolicy] = {
            name: ToolPolicy(**fields) for name, fields in program["tool_policies"].items()
        }
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
        # Resolvers are built now (cheap, one per tool), so a malformed
        # requirement fails the load, never a decision.
        self._resolvers: dict[str, tuple[Resolver, bool, Shape]] = {}
        for tool, req in self._reqs.items():
            renc = req["resource"]
            self._resolvers[tool] = (
                path_resolver(tuple(renc["arg"]))
                if renc["kind"] == "path"
                else template_resolver(renc),
                renc["kind"] == "path" or bool(renc["abs"]),
                resource_shape(renc),
            )

    # ------------------------------------------------------------ the program

    @property
    def rule_count(self) -> int:
        """How many rules the program has."""
        return len(self._raw_rules)

    def rule(self, index: int) -> RuleRecord:
        """Rule record ``index``, decoded on first use (raise ``MalformedProgram`` if corrupt).

        The program's own records are never modified, so ``bundle_hash`` does
        not depend on which rules have been used.
        """
        record = self._records[index]
        if record is None:
            raw = self._raw_rules[index]
            try:
                data = json.loads(raw) if type(raw) is str else raw
            except ValueError:
                raise MalformedProgram(f"rule #{index} is not JSON") from None
            record = self._records[index] = decode_rule(data, index)
        return record

    def _rule_at(self, value: Any) -> RuleRecord:
        if type(value) is not int or not 0 <= value < len(self._raw_rules):
            raise MalformedProgram("an index node names a rule that does not exist")
        return self._records[value] or self.rule(value)

    def tool(self, tool: object) -> ToolPlan | None:
        """The plan of ``tool``'s requirement, built on first use (None: no requirement)."""
        t = self._tools.get(tool) if type(tool) is str else None
        if t is not None or type(tool) is not str:
            return t
        parts = self._resolvers.get(tool)
        if parts is None:
            return None
        resolver, absolute, shape = parts
        req = self._reqs[tool]
        key = (req["ns"], req["action"], absolute)
        built = self._walks.get(key)
        if built is None:
            # Thousands of small records and closures, no cycles: with the
            # collector on, a large host heap turns this into full collections.
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                tables = self._action_tables(req["ns"], req["action"])
                forbid, permit = (tables[0], tables[2]) if absolute else (tables[1], tables[3])
                walk = build_walk(forbid, permit, self._group_keys)
                built = self._walks[key] = (walk, _all_rules(forbid), _all_rules(permit))
            finally:
                if was_enabled:
                    gc.enable()
        t = ToolPlan(
            tool,
            req["ns"],
            req["action"],
            resolver,
            absolute,
            shape,
            self.requirements[tool],
            *built,
        )
        self._tools[tool] = t
        return t

    def _action_tables(self, ns: str, action: str) -> _Tables:
        """The forbid/permit prefix tables of (ns, action), decoded once:
        [forbid_abs, forbid_rel, permit_abs, permit_rel].

        A corrupt entry (a tampered bundle) decodes to empty tables: no rule
        applies, so every call of this action is denied (fail closed).
        """
        key = (ns, action)
        tables = self._tables.get(key)
        if tables is None:
            packed = self._index.get(ns, {}).get(action)
            try:
                data = json.loads(packed) if type(packed) is str else packed
                if packed is None:
                    tables = _fail_closed_tables()
                elif type(data) is not list or len(data) != 4:
                    raise MalformedProgram("an index entry is not four prefix tables")
                else:
                    tables = [decode_table(d, self._rule_at) for d in data]
            except (ValueError, TypeError, KeyError, RecursionError):
                tables = _fail_closed_tables()
            self._tables[key] = tables
        return tables

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
                entry = ContextEntry(len(self._raw_rules))
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
        return m  # type: ignore[return-value]

    def _context_filter(
        self, rules: tuple[RuleRecord, ...], env: Env, cache: ContextEntry
    ) -> tuple[RuleRecord, ...]:
        return tuple(
            r
            for r in rules
            if r.applies is None or not r.context_only or self.context_holds(r, env, cache)
        )

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
        try:
            resource, segs = t.resolve(args)
        except Unresolvable as exc:
            return self._unresolvable(t, str(exc))
        except Exception as exc:  # hostile args object: fail closed, never raise
            return self._unresolvable(t, type(exc).__name__)
        # The match key puts a '/' before every segment (see patterns.match_key).
        key = (resource if t.absolute else "/" + resource) if segs else ""
        if type(context_key) is str and self._cacheable:
            cache = self._ctx_front.get(context_key)
            if cache is None:
                cache = self.context_entry(context_key)
        else:
            cache = None  # no key (or not a string): evaluate, do not cache
        env = (context, args, resource, t.action)
        # Descend to the deepest index node along the resource; its groups hold
        # every rule whose literal prefix the resource starts with.
        node = t.walk
        for seg in segs:
            child = node.children.get(seg)
            if child is None:
                break
            node = child
        hits: list[RuleRecord] | None = None
        reason = _NO_PERMIT
        if node.forbids:
            hits = self._applicable(node.forbids, segs, key, env, cache)
            if hits is not None:
                reason = _FORBIDDEN
        if hits is None and node.permits:
            hits = self._applicable(node.permits, segs, key, env, cache)
            if hits is not None:
                reason = _ALLOWED
        dkey = (t.name, resource, reason, tuple(hits) if hits else ())
        cached = self._decisions.get(dkey)
        if cached is not None:
            return cached
        return self._decision(dkey, t, resource, hits)

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
        key = (resource if t.absolute else "/" + resource) if segs else ""
        env = (context, args, resource, t.action)
        node = t.walk
        for seg in segs:
            child = node.children.get(seg)
            if child is None:
                break
            node = child
        forbids = self._applicable(node.forbids, segs, key, env, None) or []
        permits = self._applicable(node.permits, segs, key, env, None) or []
        return (*forbids, *permits)

    def _applicable(
        self,
        groups: tuple[RuleGroup, ...],
        segs: list[str],
        key: str,
        env: Env,
        cache: ContextEntry | None,
    ) -> list[RuleRecord] | None:
        """The rules of ``groups`` that apply to this call, in index order, root first (None: none)."""
        n = len(segs)
        verdicts = cache.verdicts if cache is not None else None
        hits: list[RuleRecord] | None = None
        for group in groups:
            rules = group.rules
            if cache is not None and group.key >= 0:
                # Many rules share this prefix: keep, per context, only those
                # whose context-only condition holds, so a decision's cost
                # follows the rules that can apply to this caller.
                filtered = cache.filtered.get(group.key)
                if filtered is None:
                    filtered = cache.filtered[group.key] = self._context_filter(rules, env, cache)
                rules = filtered
            for rule in rules:
                mk = rule.match
                if mk is not _ANY:  # ANY: '**' after the prefix, nothing to check
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
                    elif mk is _REGEX:
                        if rule.regex(key) is None:  # type: ignore[misc]
                            continue
                    else:  # CONTEXT: the pattern interpolates the context
                        m = self.context_matcher(rule, env[0], cache)
                        if m is None or not m.matches(segs, key):
                            continue
                applies = rule.applies
                if applies is not None:
                    if rule.context_only and verdicts is not None:
                        ok = verdicts[rule.index]
                        if not ok:
                            ok = verdicts[rule.index] = YES if applies(env) else NO
                        if ok == NO:
                            continue
                    elif not applies(env):
                        continue
                if hits is None:
                    hits = [rule]
                else:
                    hits.append(rule)
        return hits

    def _decision(
        self,
        dkey: tuple[Any, ...],
        t: ToolPlan,
        resource: str,
        hits: list[RuleRecord] | None,
    ) -> Decision:
        # Decisions are immutable values, so identical ones are shared: building
        # a frozen dataclass costs more than the whole tree walk.
        reason: ReasonCode = dkey[2]
        refs = tuple(r.ref for r in hits) if hits else ()
        ids = ", ".join(r.id for r in refs)
        if reason is _FORBIDDEN:
            detail = f"{t.action} on {resource} is forbidden by {ids}"
        elif reason is _ALLOWED:
            detail = f"{t.action} on {resource} is permitted by {ids}"
        else:
            detail = f"no permit allows {t.action} on {resource} (default deny)"
        effect = _ALLOW if reason is _ALLOWED else _DENY
        decision = Decision(effect, reason, t.name, t.namespace, t.action, resource, refs, detail)
        if len(self._decisions) >= DECISION_CACHE_SIZE:
            self._decisions.clear()
        self._decisions[dkey] = decision
        return decision

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

"""PolicySet: the compiled policy, its decisions, partial evaluation and explanations.

Hot path notes: ``decide`` touches only plain dicts, lists and tuples. Rules
are turned into closures lazily, the first time a decision reaches them, so
loading a bundle does no per-rule work. Context-only conditions and
context-interpolated patterns are evaluated once per ``context_key`` and kept
in a bounded LRU (cachetools) owned by this PolicySet.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachetools import LRUCache

from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy import ast
from sharedos.policy.compiler import (
    R_COL,
    R_COND,
    R_CTXONLY,
    R_EFFECT,
    R_FILE,
    R_ID,
    R_KIND,
    R_LINE,
    R_PATTERN,
    R_PENC,
    Trie,
)
from sharedos.policy.conditions import Env, compile_applies, evaluate, roots, unparse
from sharedos.policy.decision import (
    Decision,
    Explanation,
    Requirement,
    RuleRef,
    RuleTrace,
    SourceSpan,
)
from sharedos.policy.diagnostics import Diagnostic
from sharedos.policy.partial import (
    MAX_JOINT_CASES,
    JointSpace,
    forbid_certain,
    permit_possible,
    rule_applies_under,
)
from sharedos.policy.patterns import (
    Resolved,
    Shape,
    covers_within,
    is_context_dependent,
    meets_shape,
    parse_pattern,
    resolve,
    to_regex,
)
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
#: Trie nodes holding more rules than this get a per-context filtered list.
_FILTER_MIN = 8
#: How many distinct decisions are kept for reuse (cleared when full).
DECISION_CACHE_SIZE = 65536

_ALLOW = Effect.ALLOW
_DENY = Effect.DENY
_ALLOWED = ReasonCode.ALLOWED
_FORBIDDEN = ReasonCode.FORBIDDEN
_NO_PERMIT = ReasonCode.NO_MATCHING_PERMIT


class _ContextEntry:
    """What one context has cached: context-only verdicts by rule index
    (0 unknown, 1 false, 2 true: compact, no hashing) and other memos."""

    __slots__ = ("conds", "memo")

    def __init__(self, n_rules: int) -> None:
        self.conds = bytearray(n_rules)
        self.memo: dict[Any, Any] = {}


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    ns: str
    action: str
    resolve: Resolver
    absolute: bool
    forbid: Trie
    permit: Trie
    shape: Shape
    requirement: Requirement
    walk: _WalkNode


_EMPTY_TRIE: Trie = [[], {}]

#: A node of the decision walk: (rule lists from the root down to here, children).
#: Each rule list pair is (forbids, permits) of one index node that has rules.
_WalkNode = tuple[tuple[tuple[list[int], list[int]], ...], dict[str, Any]]


def _walk_index(forbid: Trie, permit: Trie) -> _WalkNode:
    """Merge a forbid and a permit trie into one walk index.

    Every node carries the rule lists of all its ancestors (and its own), so a
    decision descends with plain dict lookups to the deepest node along the
    resource and then reads one short chain: one walk instead of two, and no
    per-node work on the (many) index nodes that hold no rule.
    """
    empty: list[int] = []
    root_chain: tuple[tuple[list[int], list[int]], ...] = ()
    if forbid[0] or permit[0]:
        root_chain = ((forbid[0], permit[0]),)
    root: _WalkNode = (root_chain, {})
    stack: list[tuple[Trie | None, Trie | None, _WalkNode]] = [(forbid, permit, root)]
    while stack:
        f, p, node = stack.pop()
        fkids: dict[str, Trie] = f[1] if f is not None else {}
        pkids: dict[str, Trie] = p[1] if p is not None else {}
        for seg in (*fkids, *(k for k in pkids if k not in fkids)):
            fc = fkids.get(seg)
            pc = pkids.get(seg)
            frules = fc[0] if fc is not None else empty
            prules = pc[0] if pc is not None else empty
            chain = node[0] + ((frules, prules),) if frules or prules else node[0]
            child: _WalkNode = (chain, {})
            node[1][seg] = child
            stack.append((fc, pc, child))
    return root


def _new_trie() -> Trie:
    return [[], {}]


def _single_wildcard(seg: list[Any]) -> tuple[str, str] | None:
    """(head, tail) of a glob segment ``head*tail`` with one wildcard, else None."""
    if seg[0] != "G":
        return None
    pieces = seg[1]
    kinds = [p[0] for p in pieces]
    if kinds.count("w") != 1 or "c" in kinds:
        return None
    star = kinds.index("w")
    head = "".join(p[1] for p in pieces[:star])
    tail = "".join(p[1] for p in pieces[star + 1 :])
    return head, tail


def _literal_segments(pattern: Resolved) -> list[str]:
    out = []
    for seg in pattern.segs:
        if seg[0] != "L":
            break
        out.append(seg[1])
    return out


def _trie_rules(trie: Trie) -> Iterator[int]:
    stack = [trie]
    while stack:
        node = stack.pop()
        yield from node[0]
        stack.extend(node[1].values())


# --------------------------------------------------------------------- PolicySet


class PolicySet:
    """A compiled policy. Build with ``compile_paths``/``compile_source``/``load_bundle``."""

    def __init__(
        self,
        program: dict[str, Any],
        *,
        files: tuple[ast.PolicyFile, ...] = (),
        diagnostics: tuple[Diagnostic, ...] = (),
        bundle_hash: str | None = None,
    ) -> None:
        self._program = program
        self.files = files
        #: warnings found while compiling (errors raise ``PolicyError`` instead)
        self.diagnostics = diagnostics
        # Rules may arrive packed (JSON strings, from a bundle): decoding waits
        # until a decision first reaches a rule, which keeps bundle loads cheap.
        self._rules: list[Any] = list(program["rules"])
        self._decoded: list[list[Any] | None] = [None] * len(self._rules)
        self._rts: list[tuple[Any, ...] | None] = [None] * len(self._rules)
        self._refs: list[RuleRef | None] = [None] * len(self._rules)
        self._bundle_hash = bundle_hash
        self._ctx_cache: LRUCache[str, _ContextEntry] = LRUCache(maxsize=CONTEXT_CACHE_SIZE)
        self._ctx_front: dict[str, _ContextEntry] = {}
        self._decisions: dict[tuple[Any, ...], Decision] = {}
        self._porder: dict[str, list[int]] = {}
        # could_permit's context-independent work, per tool and per (ns, action, shape)
        self._cplans: dict[str, Any] = {}
        self._cplans_by_shape: dict[tuple[Any, ...], Any] = {}
        self._could_sigs: dict[tuple[Any, ...], int] = {}
        # per rule: how many could_permit plans resolve its (context-dependent) pattern
        self._dyn_uses: list[int] = [0] * len(self._rules)
        # context_key excludes the turn id; a policy reading it is never cached
        self._cacheable = not program.get("reads_turn_id", True)
        self._lock = threading.Lock()
        self._tools: dict[str, _Tool] = {}
        # Tools (and the index tries they walk) are built on first use: a bundle
        # stores each (namespace, action)'s tries as one packed JSON string, so
        # loading one does not decode hundreds of thousands of trie nodes.
        self._reqs: Mapping[str, Any] = program["requirements"]
        self._index: Mapping[str, Mapping[str, Any]] = program["index"]
        for ns, actions in self._index.items():
            for action, tries in actions.items():
                if type(tries) is not str and not (type(tries) is list and len(tries) == 4):
                    raise ValueError(f"index entry {ns}.{action} is not a packed trie set")
        self._tries: dict[tuple[str, str], list[Trie]] = {}
        self._walks: dict[tuple[str, str, bool], _WalkNode] = {}
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

    def _tool(self, tool: object) -> _Tool | None:
        """The runtime form of ``tool``'s requirement, built on first use (None: no requirement)."""
        t = self._tools.get(tool) if type(tool) is str else None
        if t is not None or type(tool) is not str:
            return t
        parts = self._resolvers.get(tool)
        if parts is None:
            return None
        resolver, absolute, shape = parts
        req = self._reqs[tool]
        tries = self._action_tries(req["ns"], req["action"])
        if tries is None:
            forbid = permit = _EMPTY_TRIE
        else:
            forbid, permit = (tries[0], tries[2]) if absolute else (tries[1], tries[3])
        t = _Tool(
            tool,
            req["ns"],
            req["action"],
            resolver,
            absolute,
            forbid,
            permit,
            shape,
            self.requirements[tool],
            self._walk_for(req["ns"], req["action"], absolute, forbid, permit),
        )
        self._tools[tool] = t
        return t

    def _walk_for(
        self, ns: str, action: str, absolute: bool, forbid: Trie, permit: Trie
    ) -> _WalkNode:
        key = (ns, action, absolute)
        walk = self._walks.get(key)
        if walk is None:
            walk = self._walks[key] = _walk_index(forbid, permit)
        return walk

    def _action_tries(self, ns: str, action: str) -> list[Trie] | None:
        """[forbid_abs, forbid_rel, permit_abs, permit_rel] for (ns, action), decoded once."""
        key = (ns, action)
        tries = self._tries.get(key)
        if tries is None:
            packed = self._index.get(ns, {}).get(action)
            if packed is None:
                return None
            tries = packed
            if type(packed) is str:
                try:
                    tries = json.loads(packed)
                except ValueError:
                    tries = None
            if not (
                type(tries) is list
                and len(tries) == 4
                and all(type(x) is list and len(x) == 2 for x in tries)
            ):
                # A corrupt bundle entry: no rule applies, so every call of
                # this action is denied (fail closed).
                tries = [_new_trie(), _new_trie(), _new_trie(), _new_trie()]
            self._tries[key] = tries
        return tries

    # ------------------------------------------------------------ properties

    @property
    def program(self) -> dict[str, Any]:
        """The compiled program in its packed form (what bundles store): each rule is
        a compact JSON string, decoded on first use. Do not mutate."""
        packed = dict(self._program)
        packed["rules"] = [
            r if type(r) is str else json.dumps(r, separators=(",", ":"), ensure_ascii=False)
            for r in self._rules
        ]
        packed["index"] = {
            ns: {
                action: tries
                if type(tries) is str
                else json.dumps(tries, separators=(",", ":"), ensure_ascii=False)
                for action, tries in actions.items()
            }
            for ns, actions in self._index.items()
        }
        return packed

    @property
    def bundle_hash(self) -> str:
        """SHA-256 hex of the canonical JSON of the packed program."""
        if self._bundle_hash is None:
            self._bundle_hash = program_hash(self.program)
        return self._bundle_hash

    def _rule(self, idx: int) -> list[Any]:
        """Rule record ``idx``, decoded (with its parsed pattern) on first use.

        The program's own records are never modified, so ``bundle_hash`` does
        not depend on which rules have been used.
        """
        r = self._decoded[idx]
        if r is None:
            raw = self._rules[idx]
            r = json.loads(raw) if type(raw) is str else list(raw)
            if r[R_PENC] is None:
                r[R_PENC] = parse_pattern(r[R_PATTERN])
            self._decoded[idx] = r
        return r

    @property
    def sources(self) -> Mapping[str, str]:
        """file -> SHA-256 of the source text compiled."""
        return dict(self._program["sources"])

    @property
    def rules(self) -> tuple[RuleRef, ...]:
        """Every rule, in compile order (for coverage reports)."""
        return tuple(self._ref(i) for i in range(len(self._rules)))

    @property
    def tests(self) -> tuple[ast.TestBlock, ...]:
        """Test blocks of the compiled files (empty for a PolicySet loaded from a bundle)."""
        return tuple(t for f in self.files for t in f.tests)

    def prepare(self) -> PolicySet:
        """Compile every rule now instead of on first use; returns ``self``.

        Decisions compile the rules they reach lazily (so loading a bundle is
        cheap); a long-running host calls this once at start-up so that no
        turn pays for it. Also builds every tool's decision index and
        ``could_permit`` plan. Decisions are unchanged.
        """
        import gc

        was_enabled = gc.isenabled()
        gc.disable()  # tens of thousands of small closures, no cycles
        try:
            for idx in range(len(self._rules)):
                self._rule(idx)
                self._rt(idx)
                self._ref(idx)
            for name in self._reqs:
                t = self._tool(name)
                assert t is not None
                self._permit_order(t)
                self._could_plan(t)
        finally:
            if was_enabled:
                gc.enable()
        return self

    def save_bundle(self, path: str | Path) -> None:
        """Write this policy as a bundle (see ``sharedos.policy.bundle``)."""
        from sharedos.policy.bundle import save_bundle

        save_bundle(self, path)

    # -------------------------------------------------------------- internals

    def _ref(self, idx: int) -> RuleRef:
        ref = self._refs[idx]
        if ref is None:
            r = self._rule(idx)
            ref = RuleRef(r[R_ID], r[R_FILE], r[R_LINE], r[R_COL], r[R_EFFECT])
            self._refs[idx] = ref
        return ref

    def _rt(self, idx: int) -> tuple[Any, ...]:
        """Runtime form of a rule: (match kind, match data, applies fn | None, context-only)."""
        rt = self._rts[idx]
        if rt is not None:
            return rt
        r = self._rule(idx)
        penc = r[R_PENC]
        segs = penc["segs"]
        prefix = 0
        while prefix < len(segs) and segs[prefix][0] == "L":
            prefix += 1
        rest = segs[prefix:]
        forbid = r[R_EFFECT] == "forbid"
        mdata: Any
        if is_context_dependent(penc):
            mkind, mdata = 3, penc
        elif len(rest) == 1 and rest[0][0] == "D":
            mkind, mdata = 0, None
        elif not rest:
            mkind, mdata = 1, prefix
        elif len(rest) == 1 and rest[0][0] == "S":
            mkind, mdata = 1, prefix + 1  # one more segment, any name
        elif len(rest) == 1 and _single_wildcard(rest[0]) is not None:
            # "*.md"-style last segment: string tests instead of a regex
            head, tail = _single_wildcard(rest[0]) or ("", "")
            mkind, mdata = 4, (prefix + 1, head, tail, len(head) + len(tail))
        else:
            mkind, mdata = 2, re.compile(to_regex(resolve(penc, None))).fullmatch
        cond = r[R_COND]
        applies = compile_applies(cond, r[R_KIND], forbid) if cond is not None else None
        rt = (mkind, mdata, applies, bool(r[R_CTXONLY]), forbid)
        self._rts[idx] = rt
        return rt

    def _context_entry(self, key: str) -> _ContextEntry:
        # A lock-free front dict answers the common case; the bounded
        # cachetools LRU behind it is the authority on which contexts stay.
        entry = self._ctx_front.get(key)
        if entry is not None:
            return entry
        with self._lock:
            entry = self._ctx_cache.get(key)
            if entry is None:
                entry = _ContextEntry(len(self._rules))
                self._ctx_cache[key] = entry
            if len(self._ctx_front) >= CONTEXT_CACHE_SIZE:
                self._ctx_front.clear()
            self._ctx_front[key] = entry
        return entry

    def _decision(
        self, effect: Effect, reason: ReasonCode, t: _Tool, resource: str, hits: list[int] | None
    ) -> Decision:
        # Decisions are immutable values, so identical ones are shared: building
        # a frozen dataclass costs more than the whole tree walk.
        key = (t.name, resource, reason, tuple(hits) if hits else ())
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        refs = tuple(self._ref(i) for i in hits) if hits else ()
        ids = ", ".join(r.id for r in refs)
        if reason is ReasonCode.FORBIDDEN:
            detail = f"{t.action} on {resource} is forbidden by {ids}"
        elif reason is ReasonCode.ALLOWED:
            detail = f"{t.action} on {resource} is permitted by {ids}"
        else:
            detail = f"no permit allows {t.action} on {resource} (default deny)"
        decision = Decision(effect, reason, t.name, t.ns, t.action, resource, refs, detail)
        if len(self._decisions) >= DECISION_CACHE_SIZE:
            self._decisions.clear()
        self._decisions[key] = decision
        return decision

    def _interp_matcher(self, idx: int, penc: Any, forbid: bool, context: Any) -> Any:
        resolved = resolve(penc, context, forbid=forbid)
        if not resolved.safe:
            return False  # a permit interpolating an unsafe value matches nothing
        return re.compile(to_regex(resolved)).fullmatch

    def _context_filter(self, rules: list[int], env: Env, cache: _ContextEntry) -> list[int]:
        out = []
        for idx in rules:
            rt = self._rts[idx] or self._rt(idx)
            if rt[2] is not None and rt[3] and not self._context_holds(idx, rt[2], env, cache):
                continue
            out.append(idx)
        return out

    @staticmethod
    def _context_holds(
        idx: int, applies: Callable[[Env], bool], env: Env, cache: _ContextEntry | None
    ) -> bool:
        """A context-only rule's verdict for this context (cached when there is a cache)."""
        if cache is None:
            return bool(applies(env))
        ok = cache.conds[idx]
        if not ok:
            ok = cache.conds[idx] = 2 if applies(env) else 1
        return ok == 2

    def _hits(
        self,
        chain: tuple[tuple[list[int], list[int]], ...],
        segs: list[str],
        key: str,
        env: Env,
        cache: _ContextEntry | None,
    ) -> tuple[bool, list[int] | None]:
        """(forbidden, rules) for one call: the forbids along ``chain`` that apply,
        else the permits that apply (None: none), each in index order, root first."""
        n = len(segs)
        rts = self._rts
        conds = cache.conds if cache is not None else None
        for slot in (0, 1):
            hits: list[int] | None = None
            for pair in chain:
                rules = pair[slot]
                if not rules:
                    continue
                if cache is not None and len(rules) > _FILTER_MIN:
                    # Many rules share this prefix: keep, per context, only those
                    # whose context-only condition holds, so a decision's cost
                    # follows the rules that can apply to this caller.
                    fkey = ("n", id(rules))
                    filtered = cache.memo.get(fkey)
                    if filtered is None:
                        filtered = cache.memo[fkey] = self._context_filter(rules, env, cache)
                    rules = filtered
                for idx in rules:
                    rt = rts[idx] or self._rt(idx)
                    mk = rt[0]
                    if mk:  # 0: "**" after the prefix, nothing to check
                        if mk == 1:
                            if n != rt[1]:
                                continue
                        elif mk == 4:
                            depth_needed, head, tail, least = rt[1]
                            if n != depth_needed:
                                continue
                            last = segs[-1]
                            if (
                                len(last) < least
                                or not last.startswith(head)
                                or not last.endswith(tail)
                            ):
                                continue
                        elif mk == 2:
                            if rt[1](key) is None:
                                continue
                        else:  # 3: the pattern interpolates the context
                            if cache is not None:
                                m = cache.memo.get(idx)
                                if m is None:
                                    m = cache.memo[idx] = self._interp_matcher(
                                        idx, rt[1], rt[4], env[0]
                                    )
                            else:
                                m = self._interp_matcher(idx, rt[1], rt[4], env[0])
                            if m is False or (m is not True and m(key) is None):
                                continue
                    applies = rt[2]
                    if applies is not None:
                        if rt[3] and conds is not None:
                            ok = conds[idx]
                            if not ok:
                                ok = conds[idx] = 2 if applies(env) else 1
                            if ok == 1:
                                continue
                        elif not applies(env):
                            continue
                    if hits is None:
                        hits = [idx]
                    else:
                        hits.append(idx)
            if hits is not None and slot == 0:
                return True, hits
            if slot == 1:
                return False, hits
        return False, None  # pragma: no cover - the loop always returns

    # --------------------------------------------------------------- decide

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
            t = self._tool(tool)
            if t is None:
                return self._unavailable(tool)
        try:
            resource, segs = t.resolve(args)
        except Unresolvable as exc:
            return Decision(
                _DENY,
                ReasonCode.UNRESOLVABLE_RESOURCE,
                tool,
                t.ns,
                t.action,
                None,
                (),
                f"the resource of {tool} cannot be resolved: {exc}",
            )
        except Exception as exc:  # hostile args object: fail closed, never raise
            return Decision(
                _DENY,
                ReasonCode.UNRESOLVABLE_RESOURCE,
                tool,
                t.ns,
                t.action,
                None,
                (),
                f"the resource of {tool} cannot be resolved: {type(exc).__name__}",
            )
        # The match key puts a '/' before every segment (see patterns.match_key).
        key = (resource if t.absolute else "/" + resource) if segs else ""
        if type(context_key) is str and self._cacheable:
            cache = self._ctx_front.get(context_key)
            if cache is None:
                cache = self._context_entry(context_key)
        else:
            cache = None  # no key (or not a string): evaluate, do not cache
        env = (context, args, resource, t.action)
        # Descend to the deepest index node along the resource; its chain holds
        # every rule whose literal prefix the resource starts with.
        node = t.walk
        for seg in segs:
            child = node[1].get(seg)
            if child is None:
                break
            node = child
        chain = node[0]
        if chain:
            forbidden, hits = self._hits(chain, segs, key, env, cache)
            reason = _FORBIDDEN if forbidden else _ALLOWED if hits else _NO_PERMIT
        else:
            hits = None
            reason = _NO_PERMIT
        cached = self._decisions.get((t.name, resource, reason, tuple(hits) if hits else ()))
        if cached is not None:
            return cached
        return self._decision(
            _ALLOW if hits and reason is _ALLOWED else _DENY, reason, t, resource, hits
        )

    def _unavailable(self, tool: object) -> Decision:
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

    # --------------------------------------------------------- could_permit

    def could_permit(
        self, tool: str, context: Mapping[str, Any], *, context_key: str | None = None
    ) -> bool:
        """Partial evaluation: True iff some arguments exist for which ``decide`` allows.

        Arguments and resource are unknown, context is known. A permit counts
        when its condition can hold and its pattern meets the tool's resource
        shape; it is cancelled by a forbid whose condition holds whatever the
        arguments (unconditional or context-only) and whose pattern covers
        every resource the permit could match.

        The answer depends on the tool only through (namespace, action,
        resource shape): everything that does not read the context is worked
        out once per such triple (``_could_plan``); the rest is cached per
        ``context_key`` under the triple.
        """
        plan = self._cplans.get(tool) if type(tool) is str else None
        if plan is None:
            t = self._tool(tool)
            if t is None:
                return False
            plan = self._could_plan(t)
        if plan is True or plan is False:
            return plan  # the same for every context
        t, ck, steps = plan
        cache = (
            (self._ctx_front.get(context_key) or self._context_entry(context_key))
            if type(context_key) is str and self._cacheable
            else None
        )
        if cache is not None:
            hit = cache.memo.get(ck)
            if hit is not None:
                return bool(hit)
        result = self._could_permit(t, steps, context, cache)
        if cache is not None:
            cache.memo[ck] = result
        return result

    def _could_plan(self, t: _Tool) -> Any:
        """The context-independent part of ``could_permit`` for ``t``'s (namespace,
        action, shape): True or False when no context can change the answer, else
        ``(tool, memo key, steps)``. Each step is one permit (in ``_permit_order``)
        with its resolved pattern (None when it interpolates the context) and the
        forbids that may cover it; a static forbid pattern that cannot cover a
        static permit pattern is dropped here, once."""
        key = ("could", t.ns, t.action, t.shape)
        plan = self._cplans_by_shape.get(key)
        if plan is None:
            plan = self._build_could_plan(t, key)
            self._cplans_by_shape[key] = plan
        self._cplans[t.name] = plan
        return plan

    def _build_could_plan(self, t: _Tool, key: tuple[Any, ...]) -> Any:
        template = t.shape[0] != "path"
        steps: list[tuple[Any, ...]] = []
        for idx in self._permit_order(t):
            r = self._rule(idx)
            rt = self._rts[idx] or self._rt(idx)
            if is_context_dependent(r[R_PENC]):
                self._dyn_uses[idx] += 1
                steps.append((idx, r, None, ()))
                continue
            pat = resolve(r[R_PENC], None)
            if not meets_shape(pat, t.shape):
                continue  # whatever the context, this permit never meets the resource
            prefix = [] if template else _literal_segments(pat)
            candidates = _trie_rules(t.forbid) if template else self._walk(t.forbid, prefix)
            fsteps: list[tuple[Any, ...]] = []
            for fidx in candidates:
                fr = self._rule(fidx)
                if is_context_dependent(fr[R_PENC]):
                    fsteps.append((fidx, fr, None))
                    continue
                fpat = resolve(fr[R_PENC], None, forbid=True)
                if covers_within(fpat, pat, t.shape):
                    fsteps.append((fidx, fr, fpat))
            if rt[2] is None and not fsteps:
                # An unconditional permit no forbid can cover: a witness for
                # every context (could_permit is an "exists" over permits).
                return True
            steps.append((idx, r, pat, tuple(fsteps)))
        if not steps:
            return False
        # Tools whose plans consider the same rules under the same shape get
        # the same answer, whatever their action, unless a condition reads
        # ``action``: share one memo entry per context between them.
        dynamic = any(step[2] is None for step in steps)
        involved = [step[1] for step in steps]
        involved += [f[1] for step in steps for f in step[3]]
        forbid_set = tuple(sorted(_trie_rules(t.forbid))) if dynamic else None
        if forbid_set is not None:
            involved += [self._rule(i) for i in forbid_set]
        reads_action = any(r[R_COND] is not None and "action" in roots(r[R_COND]) for r in involved)
        sig = (
            t.shape,
            tuple((step[0], tuple(f[0] for f in step[3])) for step in steps),
            forbid_set,
            t.action if reads_action else None,
        )
        sig_id = self._could_sigs.setdefault(sig, len(self._could_sigs))
        return (t, ("could", sig_id), tuple(steps))

    def _could_permit(
        self,
        t: _Tool,
        steps: tuple[tuple[Any, ...], ...],
        context: Any,
        cache: _ContextEntry | None,
    ) -> bool:
        action = t.action
        env = (context, None, None, action)
        # What depends only on the context (resolved patterns, a forbid's
        # certainty per action) is kept in the context's memo, so the tools of
        # a first-seen context share it; without a context key, for this call.
        memo: dict[Any, Any] = cache.memo if cache is not None else {}
        template = t.shape[0] != "path"
        shape = t.shape
        for idx, r, pat, fsteps in steps:
            if not self._permit_possible(idx, r, env, cache):
                continue
            if pat is None:
                # The permit interpolates the context: resolve it and find the
                # forbids along its (context-filled) literal prefix now.
                if self._dyn_uses[idx] > 1:  # several plans resolve it: once per context
                    pk = ("p", idx)
                    pat = memo.get(pk)
                    if pat is None:
                        pat = memo[pk] = resolve(r[R_PENC], context)
                else:
                    pat = resolve(r[R_PENC], context)
                if not meets_shape(pat, shape):
                    continue
                prefix = [] if template else _literal_segments(pat)
                candidates = _trie_rules(t.forbid) if template else self._walk(t.forbid, prefix)
                fsteps = tuple((fidx, self._rule(fidx), None) for fidx in candidates)
                static_permit = False
            else:
                static_permit = True
            covered = False
            uncertain: list[list[Any]] = []
            for fidx, fr, fstatic in fsteps:
                fk = ("f", fidx, action)
                info = memo.get(fk)
                if info is None:
                    info = memo[fk] = (
                        self._forbid_certain(fidx, fr, env, cache),
                        fstatic
                        if fstatic is not None
                        else resolve(fr[R_PENC], context, forbid=True),
                    )
                certain, fpat = info
                # A static forbid kept in a static permit's plan is known to cover it.
                if not (static_permit and fstatic is not None) and not covers_within(
                    fpat, pat, shape
                ):
                    continue
                if certain:
                    covered = True
                    break
                uncertain.append(fr)
            if covered:
                continue
            if not uncertain or self._jointly_possible(r, uncertain, t.action, context):
                return True
        return False

    def _permit_order(self, t: _Tool) -> list[int]:
        """The tool's permits, unconditional ones first (they answer soonest)."""
        order = self._porder.get(t.name)
        if order is None:
            every = sorted(_trie_rules(t.permit))
            plain = [i for i in every if self._rule(i)[R_COND] is None]
            gated = [i for i in every if self._rule(i)[R_COND] is not None]
            order = self._porder[t.name] = plain + gated
        return order

    def _permit_possible(
        self, idx: int, r: list[Any], env: Env, cache: _ContextEntry | None
    ) -> bool:
        rt = self._rts[idx] or self._rt(idx)
        applies = rt[2]
        if applies is None:
            return True
        if rt[3]:  # context-only: exactly what decide computes (and caches)
            return self._context_holds(idx, applies, env, cache)
        return permit_possible(r[R_COND], r[R_KIND], env[0], env[3])

    def _forbid_certain(
        self, idx: int, r: list[Any], env: Env, cache: _ContextEntry | None
    ) -> bool:
        rt = self._rts[idx] or self._rt(idx)
        applies = rt[2]
        if applies is None:
            return True
        if rt[3]:  # context-only: applies (or fails closed) whatever the arguments
            return self._context_holds(idx, applies, env, cache)
        return forbid_certain(r[R_COND], r[R_KIND], env[0], env[3])

    @staticmethod
    def _jointly_possible(
        permit: list[Any], forbids: list[list[Any]], action: str, context: Any
    ) -> bool:
        """Is there a choice of arguments under which the permit applies and none of
        the (pattern-covering) forbids does? See ``conditions.JointSpace``."""
        space = JointSpace(context, action)
        for rule in (permit, *forbids):
            space.add(rule[R_COND])
        if space.size() > MAX_JOINT_CASES:
            return True  # too many to enumerate: per-condition reasoning already said possible
        for assign in space.cases():
            if not rule_applies_under(
                permit[R_COND], permit[R_KIND], False, context, action, assign
            ):
                continue
            if not any(
                rule_applies_under(f[R_COND], f[R_KIND], True, context, action, assign)
                for f in forbids
            ):
                return True
        return False

    # ---------------------------------------------------------------- explain

    def explain(
        self, tool: str, args: Mapping[str, Any], context: Mapping[str, Any]
    ) -> Explanation:
        """The decision path of one call: requirement, canonical resource, every rule and why."""
        decision = self.decide(tool, args, context)
        t = self._tool(tool)
        if t is None:
            return Explanation(str(tool), args, None, None, None, decision, ())
        try:
            resource, segs = t.resolve(args)
        except Exception as exc:
            return Explanation(tool, args, t.requirement, None, str(exc), decision, ())
        key = "/" + "/".join(segs) if segs else ""
        env = (context, args, resource, t.action)
        traces: list[RuleTrace] = []
        for trie in (t.forbid, t.permit):
            candidates = set(self._walk(trie, segs))
            for idx in sorted(_trie_rules(trie)):
                traces.append(self._trace(idx, idx in candidates, key, env, context))
        return Explanation(tool, args, t.requirement, resource, None, decision, tuple(traces))

    @staticmethod
    def _walk(trie: Trie, segs: list[str]) -> Iterator[int]:
        node: Trie | None = trie
        depth = 0
        while node is not None:
            yield from node[0]
            if depth == len(segs):
                return
            node = node[1].get(segs[depth])
            depth += 1

    def _trace(self, idx: int, indexed: bool, key: str, env: Env, context: Any) -> RuleTrace:
        r = self._rule(idx)
        ref = self._ref(idx)
        forbid = r[R_EFFECT] == "forbid"
        cond_text = f"{r[R_KIND]} {unparse(r[R_COND])}" if r[R_COND] is not None else None
        resolved = resolve(r[R_PENC], context, forbid=forbid)
        if not indexed:
            matched = False
            why = "pattern does not match: its literal prefix differs from the resource"
        elif not resolved.safe:
            matched = False
            why = (
                "pattern interpolates a missing or unsafe context value: the permit matches nothing"
            )
        else:
            matched = re.fullmatch(to_regex(resolved), key) is not None
            why = "pattern matches" if matched else "pattern does not match"
        cond_result: bool | None = None
        applied = matched
        if matched and r[R_COND] is not None:
            value, error = evaluate(r[R_COND], env)
            want = r[R_KIND] != "unless"
            if value is None:
                applied = forbid
                why += f"; condition errored ({error}): " + (
                    "the forbid applies (fail closed)" if forbid else "the permit does not apply"
                )
            else:
                cond_result = value
                applied = value is want
                why += f"; condition is {'true' if value else 'false'}"
                why += "" if applied else f", so the {r[R_EFFECT]} does not apply"
        return RuleTrace(ref, r[R_PATTERN], cond_text, matched, cond_result, applied, why)


def program_hash(program: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of a program."""
    text = json.dumps(program, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

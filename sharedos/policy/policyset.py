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
from sharedos.policy.conditions import Env, compile_applies, evaluate, unparse
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


_EMPTY_TRIE: Trie = [[], {}]


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
        # context_key excludes the turn id; a policy reading it is never cached
        self._cacheable = not program.get("reads_turn_id", True)
        self._lock = threading.Lock()
        self._tools: dict[str, _Tool] = {}
        index = program["index"]
        for tool, req in program["requirements"].items():
            renc = req["resource"]
            absolute = renc["kind"] == "path" or bool(renc["abs"])
            tries = index.get(req["ns"], {}).get(req["action"])
            if tries is None:
                forbid = permit = _EMPTY_TRIE
            else:
                forbid, permit = (tries[0], tries[2]) if absolute else (tries[1], tries[3])
            resolver = (
                path_resolver(tuple(renc["arg"]))
                if renc["kind"] == "path"
                else template_resolver(renc)
            )
            self._tools[tool] = _Tool(
                tool,
                req["ns"],
                req["action"],
                resolver,
                absolute,
                forbid,
                permit,
                resource_shape(renc),
                Requirement(
                    tool,
                    req["ns"],
                    req["action"],
                    req["resource_text"],
                    SourceSpan(req["file"], req["line"], req["col"]),
                ),
            )
        self.tool_policies: Mapping[str, ToolPolicy] = {
            name: ToolPolicy(**fields) for name, fields in program["tool_policies"].items()
        }
        self.requirements: Mapping[str, Requirement] = {
            name: t.requirement for name, t in self._tools.items()
        }

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
        turn pays for it.
        """
        import gc

        was_enabled = gc.isenabled()
        gc.disable()  # tens of thousands of small closures, no cycles
        try:
            for idx in range(len(self._rules)):
                self._rule(idx)
                self._rt(idx)
                self._ref(idx)
            for t in self._tools.values():
                self._permit_order(t)
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
        trie: Trie,
        segs: list[str],
        key: str,
        env: Env,
        cache: _ContextEntry | None,
    ) -> list[int] | None:
        hits: list[int] | None = None
        node = trie
        depth = 0
        n = len(segs)
        rts = self._rts
        conds = cache.conds if cache is not None else None
        while True:
            rules = node[0]
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
                if mk == 1:
                    if n != rt[1]:
                        continue
                elif mk == 2:
                    if rt[1](key) is None:
                        continue
                elif mk == 4:
                    depth_needed, head, tail, least = rt[1]
                    if n != depth_needed:
                        continue
                    last = segs[-1]
                    if len(last) < least or not last.startswith(head) or not last.endswith(tail):
                        continue
                elif mk == 3:
                    if cache is not None:
                        m = cache.memo.get(idx)
                        if m is None:
                            m = cache.memo[idx] = self._interp_matcher(idx, rt[1], rt[4], env[0])
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
            if depth == n:
                return hits
            node = node[1].get(segs[depth])
            if node is None:
                return hits
            depth += 1

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
        hits = self._hits(t.forbid, segs, key, env, cache) if t.forbid[0] or t.forbid[1] else None
        if hits:
            reason = _FORBIDDEN
        else:
            hits = (
                self._hits(t.permit, segs, key, env, cache) if t.permit[0] or t.permit[1] else None
            )
            reason = _ALLOWED if hits else _NO_PERMIT
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
        """
        t = self._tools.get(tool) if type(tool) is str else None
        if t is None:
            return False
        cache = (
            self._context_entry(context_key)
            if type(context_key) is str and self._cacheable
            else None
        )
        ck = ("could", tool)
        if cache is not None:
            hit = cache.memo.get(ck)
            if hit is not None:
                return bool(hit)
        result = self._could_permit(t, context, cache)
        if cache is not None:
            cache.memo[ck] = result
        return result

    def _could_permit(self, t: _Tool, context: Any, cache: _ContextEntry | None) -> bool:
        env = (context, None, None, t.action)
        forbids: dict[int, tuple[bool, Resolved]] = {}
        template = t.shape[0] != "path"
        for idx in self._permit_order(t):
            r = self._rule(idx)
            if not self._permit_possible(idx, r, env, cache):
                continue
            pat = resolve(r[R_PENC], context)
            if not meets_shape(pat, t.shape):
                continue
            # Only a forbid whose literal prefix lies along this permit's can
            # cover it, so walk the forbid trie along the permit's prefix
            # (all forbids for template resources, whose shape adds literals).
            prefix = [] if template else _literal_segments(pat)
            candidates = _trie_rules(t.forbid) if template else self._walk(t.forbid, prefix)
            covered = False
            uncertain: list[list[Any]] = []
            for fidx in candidates:
                info = forbids.get(fidx)
                if info is None:
                    fr = self._rule(fidx)
                    info = forbids[fidx] = (
                        self._forbid_certain(fidx, fr, env, cache),
                        resolve(fr[R_PENC], context, forbid=True),
                    )
                certain, fpat = info
                if not covers_within(fpat, pat, t.shape):
                    continue
                if certain:
                    covered = True
                    break
                uncertain.append(self._rule(fidx))
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
        t = self._tools.get(tool) if type(tool) is str else None
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

"""The request space of one tool under two policies: witness requests for every decision
that can differ.

A decision is a function of the tool, the canonical resource, the context and
the arguments the conditions read. ``RequestSpace`` derives a finite set of
requests from the rules themselves so that every combination that can decide
differently is tried:

1. **Contexts that change what patterns match** (the *outer* variables: those
   interpolated into patterns, ``{context.principal}``, and those resource
   conditions read): every combination of their domains (``domains``);
2. **Resources**: for each such context, the patterns of both policies'
   rules (as resolved there) and the extra patterns the resource conditions
   amount to (``startswith(resource, "/a")`` is ``/a*/**``) give one witness
   resource per combination of matches (``segments.witnesses``);
3. **Everything else** (the *inner* variables): for each witness, only the
   rules whose pattern matches it can apply. When those are the same rules
   (same effect, same condition) in both policies, no context or argument can
   make the decisions differ there, and the witness is skipped; otherwise
   every combination of the domains of the variables those rules read.

What is not exact is recorded as a ``Gap`` (``gaps``): a condition form the
atoms do not analyse, a domain or product cut at its bound (then sampled).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.policy.analysis.atoms import Atoms, Gap, ResourceAtom, Var, reads_of, var_text
from sharedos.policy.analysis.domains import MISSING, Domains
from sharedos.policy.analysis.segments import (
    SegPattern,
    Shape,
    Witness,
    globs_of,
    safe_hole,
    valid_segment,
    witnesses,
)
from sharedos.policy.analysis.strings import Glob, representatives
from sharedos.policy.conditions import compile_expr, roots
from sharedos.policy.ir import RuleRecord
from sharedos.policy.patterns import resolve

#: The context every witness starts from: the kernel's defaults and a principal.
BASE_CONTEXT: Mapping[str, Any] = {
    "principal": "user",
    "tenant": "default",
    "roles": [],
    "attributes": {},
}


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that keep the analysis finite; past one, it samples and says so (a ``Gap``)."""

    #: combinations of the outer (pattern-deciding) context variables per tool
    max_contexts: int = 256
    #: combinations of the inner variables per witness resource
    max_combinations: int = 4096
    #: product states of the string and resource automata
    max_states: int = 20000
    #: elements of a list variable whose every subset is tried
    max_members: int = 6
    #: requests per tool (and the tools sharing its rules); past it the rest is not tried
    max_requests: int = 100_000


@dataclass(frozen=True, slots=True)
class Side:
    """One policy's view of one tool: its requirement's resource and the rules of its walk
    (``resource`` None: no requirement declares the tool there)."""

    resource: Mapping[str, Any] | None
    action: str | None
    rules: tuple[RuleRecord, ...]

    @property
    def shape(self) -> Shape | None:
        """What the resource expression can produce (None: no requirement)."""
        return None if self.resource is None else Shape.of(self.resource)

    def resource_args(self) -> list[Var]:
        """The argument paths the resource expression reads."""
        res = self.resource
        if res is None:
            return []
        if res.get("kind") == "path":
            return [("args", tuple(res["arg"]))]
        return [
            ("args", tuple(piece[1]))
            for seg in res.get("segs", [])
            for piece in seg
            if piece[0] == "h"
        ]


def signature(rule: RuleRecord) -> tuple[Any, ...]:
    """What a rule means apart from where it is written and what it is called."""
    cond = rule.condition
    text = None if cond is None else json.dumps(cond, sort_keys=True, separators=(",", ":"))
    return (rule.forbid, rule.pattern, text, rule.condition_kind)


def _meaning(rules: Sequence[RuleRecord]) -> frozenset[tuple[Any, ...]]:
    """The rules as a set of (effect, condition) once their patterns are known to match."""
    return frozenset(signature(r)[:1] + signature(r)[2:] for r in rules)


def same_rules(a: Sequence[RuleRecord], b: Sequence[RuleRecord]) -> bool:
    """True when two rule lists mean the same (order, ids, files and duplicates aside)."""
    return {signature(r) for r in a} == {signature(r) for r in b}


def interpolations(rule: RuleRecord) -> list[tuple[Var, tuple[Any, ...]]]:
    """``(context variable, the segment's pieces)`` for each ``{context.x}`` of the pattern."""
    out: list[tuple[Var, tuple[Any, ...]]] = []
    for seg in rule.pattern_enc["segs"]:
        if seg[0] != "G":
            continue
        for piece in seg[1]:
            if piece[0] == "c":
                out.append((("context", tuple(piece[1])), tuple(tuple(p) for p in seg[1])))
    return out


def set_path(target: dict[str, Any], path: Sequence[str], value: Any) -> None:
    """Set ``target[path...] = value``, making objects on the way. What is there first
    wins: a value that is not an object on the way drops the deeper key, and an
    object already there is kept; MISSING sets nothing."""
    if value is MISSING:
        return
    node = target
    for name in path[:-1]:
        nxt = node.get(name)
        if nxt is None and name not in node:
            nxt = node[name] = {}
        if type(nxt) is not dict:
            return
        node = nxt
    if type(node.get(path[-1])) is dict:
        return  # an object made for a deeper key (a resource argument) stays
    node[path[-1]] = value


class RequestSpace:
    """Witness requests for one tool under two policies (see the module docstring)."""

    def __init__(
        self, old: Side, new: Side, limits: Limits | None = None, *, prune: bool = True
    ) -> None:
        self.old = old
        self.new = new
        self.limits = limits or Limits()
        #: skip a witness whose rules mean the same on both sides (False: something
        #: else than the rules differs, such as the run policy's managed set)
        self._prune = prune
        self.gaps: dict[Gap, None] = {}
        self.complete = True
        # the same resource and action: a condition sees the same call on both sides
        self.same_requirement = (
            old.resource is not None
            and new.resource is not None
            and _canon(old.resource) == _canon(new.resource)
            and old.action == new.action
        )
        rules = [*old.rules, *new.rules]
        self._rules = rules
        self.atoms = Atoms()
        for side in (old, new):
            for rule in side.rules:
                self.atoms.add(rule.condition, side.action, rule.ref)
        self.gaps.update(self.atoms.gaps)
        # outer variables: interpolated into a pattern, or read by a resource atom
        interpolated: dict[Var, None] = {}
        whole: dict[Var, None] = {}
        inside: list[RuleRecord] = []
        for rule in rules:
            for var, pieces in interpolations(rule):
                interpolated.setdefault(var, None)
                if len(pieces) == 1:
                    whole.setdefault(var, None)
                else:
                    inside.append(rule)
                    self._interpolation_constants(rule, var, pieces)
        # two context values filling whole segments can fill the same one: let them
        # be equal (and not)
        for a, b in itertools.combinations(whole, 2):
            self.atoms.use(a).equal_to.add(b)
            self.atoms.use(b).equal_to.add(a)
        if inside and len(interpolated) > 1:
            for rule in inside:
                self._gap(
                    rule.ref,
                    rule.pattern,
                    "an interpolation inside a segment with text, in rules that interpolate "
                    "other context values too: values of both that spell the same segment "
                    "are not all tried",
                )
        outer = dict(interpolated)
        for atom in self.atoms.resource_atoms:
            for var in atom.reads:
                outer.setdefault(var, None)
        self.outer: list[Var] = list(outer)
        self.domains = Domains(
            self.atoms,
            interpolated=interpolated,
            segment_globs=self._segment_globs(rules),
            max_members=self.limits.max_members,
            max_states=self.limits.max_states,
        )
        self._resource_vars: set[Var] = set(old.resource_args()) | set(new.resource_args())
        reads = set().union(*(reads_of(r.condition) for r in rules)) if rules else set()
        for var in sorted(reads & self._resource_vars):
            self._gap(
                None,
                var_text(var),
                "a condition reads the argument that names the resource: only its "
                "canonical spellings (the witness resources) are tried",
            )
        self._witness_cache: dict[tuple[Any, ...], Any] = {}

    # ------------------------------------------------------------ bookkeeping

    def _gap(self, rule: Any, construct: str, why: str) -> None:
        self.gaps.setdefault(Gap(rule, construct, why), None)

    def _segment_globs(self, rules: Sequence[RuleRecord]) -> list[Glob]:
        globs: dict[Glob, None] = {}
        for rule in rules:
            for seg in rule.pattern_enc["segs"]:
                if seg[0] == "L":
                    globs.setdefault(Glob.literal(seg[1]), None)
                elif seg[0] == "G" and all(p[0] != "c" for p in seg[1]):
                    globs.setdefault(Glob.of_pieces(seg[1]), None)
        return list(globs)

    def _interpolation_constants(self, rule: RuleRecord, var: Var, pieces: tuple[Any, ...]) -> None:
        """What decides a match for ``var`` inside a segment with text (``x-{context.tenant}``):
        the other segments' literals and globs, shifted past that text."""
        if len(pieces) == 1:
            return  # the whole segment: the segment globs give the values (Domains)
        holes = [p for p in pieces if p[0] in ("c", "w")]
        if len(holes) > 1:
            self._gap(
                rule.ref,
                rule.pattern,
                "an interpolation beside a wildcard or another interpolation in one "
                "segment: the values tried may miss some matches",
            )
            return
        at = next(i for i, p in enumerate(pieces) if p[0] == "c")
        prefix = "".join(p[1] for p in pieces[:at])
        suffix = "".join(p[1] for p in pieces[at + 1 :])
        uses = self.atoms.use(var)
        for glob in self._segment_globs(self._rules):
            uses.strings.setdefault(glob.shift(prefix, suffix), None)

    # --------------------------------------------------------------- requests

    def requests(self, tool: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(args, context)`` pairs to decide ``tool`` under both policies."""
        lim = self.limits
        outer_domains = [self.domains.domain(v) for v in self.outer]
        for var, dom in zip(self.outer, outer_domains, strict=True):
            if not dom.complete:
                self._gap(None, var_text(var), "its values were cut at a bound")
        made = 0
        for outer in self._product([d.values for d in outer_domains], lim.max_contexts, "contexts"):
            base = json.loads(json.dumps(BASE_CONTEXT))
            for var, value in zip(self.outer, outer, strict=True):
                set_path(base, var[1], value)
            for request in self._for_context(base):
                made += 1
                if made > lim.max_requests:
                    self.complete = False
                    self._gap(
                        None,
                        tool,
                        f"more than {lim.max_requests} requests: the rest were not tried",
                    )
                    return
                yield request

    def _witnesses(self, live: list[SegPattern], shape: Shape) -> list[Witness]:
        key = (shape, tuple(live))
        found = self._witness_cache.get(key)
        if found is None:
            found = self._witness_cache[key] = witnesses(
                live, shape, max_states=self.limits.max_states
            )
            if not found.complete:
                self.complete = False
                for note in found.notes:
                    self._gap(None, "resource witnesses", note)
        return list(found.found)

    def _for_context(
        self, context: dict[str, Any]
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        patterns: list[SegPattern | None] = []
        for rule in self._rules:
            patterns.append(SegPattern.of(resolve(rule.pattern_enc, context, forbid=rule.forbid)))
        live = [p for p in patterns if p is not None] + self._pseudo_patterns(context)
        if not self.same_requirement:
            for args, rules in self._both_sides(live, patterns):
                yield from self._inner(context, rules, [args])
            return
        shape = self.old.shape
        assert shape is not None
        for w in self._witnesses(live, shape):
            old_m, new_m = self._matched_rules(patterns, w)
            if self._prune and _meaning(old_m) == _meaning(new_m):
                continue  # the same rules can apply: no context or argument can differ
            spelled: dict[str, Any] = {}
            for path, value in _arg_values(self.old, w):
                set_path(spelled, path, value)
            yield from self._inner(context, [*old_m, *new_m], [spelled])

    def _matched_rules(
        self, patterns: Sequence[SegPattern | None], w: Witness
    ) -> tuple[list[RuleRecord], list[RuleRecord]]:
        """The old and the new rules whose patterns match the witness."""
        matched = self._matched(patterns, w)
        n_old = len(self.old.rules)
        old_m = [r for i, r in enumerate(self.old.rules) if matched[i]]
        new_m = [r for i, r in enumerate(self.new.rules) if matched[n_old + i]]
        return old_m, new_m

    def _both_sides(
        self, live: list[SegPattern], patterns: Sequence[SegPattern | None]
    ) -> list[tuple[dict[str, Any], list[RuleRecord]]]:
        """Arguments for a tool whose requirement differs (or exists on one side only),
        each with the rules that can apply: every witness of one side's resource paired
        with every witness of the other's (each side decides on its own resource), and
        each alone (the other side's resource then unresolvable), and none (both
        unresolvable). A pair whose rules
        mean the same on both sides (and read neither resource nor action) decides
        alike whatever else, and is left out."""
        sides: list[list[tuple[list[tuple[tuple[str, ...], Any]], list[RuleRecord]]]] = []
        for index, side in enumerate((self.old, self.new)):
            shape = side.shape
            found: list[tuple[list[tuple[tuple[str, ...], Any]], list[RuleRecord]]] = []
            if shape is not None:
                for w in self._witnesses(live, shape):
                    mine = self._matched_rules(patterns, w)[index]
                    found.append((_arg_values(side, w), mine))
            sides.append(found)
        old_paths = {p for values, _ in sides[0] for p, _ in values}
        new_paths = {p for values, _ in sides[1] for p, _ in values}
        shared = {a for a in old_paths for b in new_paths if a[: len(b)] == b or b[: len(a)] == a}
        # no resource argument at all: unresolvable (or unavailable) on both sides
        out: list[tuple[dict[str, Any], list[RuleRecord]]] = [({}, [])]
        for values, rules in [*sides[0], *sides[1]]:
            args: dict[str, Any] = {}
            for path, value in values:
                set_path(args, path, value)
            out.append((args, rules))
        if sides[0] and sides[1]:
            if shared:
                out += [(args, self._rules) for args in self._shared_holes(live)]
                return out
            for (a, a_rules), (b, b_rules) in itertools.product(sides[0], sides[1]):
                if (
                    self.old.action == self.new.action
                    and not any(_reads_call(r) for r in (*a_rules, *b_rules))
                    and _meaning(a_rules) == _meaning(b_rules)
                ):
                    continue  # the same rules on each side's own resource
                args = {}
                for path, value in (*a, *b):
                    set_path(args, path, value)
                out.append((args, [*a_rules, *b_rules]))
        return out

    def _shared_holes(self, live: list[SegPattern]) -> list[dict[str, Any]]:
        """Arguments for two resource expressions that read the same arguments: every
        combination of one value per class of each argument, the classes telling apart
        what every pattern segment (shifted past the text beside it) can match there."""
        templates = [side.resource for side in (self.old, self.new)]
        if any(t is None or t.get("kind") != "template" for t in templates):
            self._gap(
                None,
                "requirement",
                "the resource expression changed between a path and a template that read "
                "the same argument: only each side's own witnesses are tried",
            )
            return []
        segment_globs = globs_of(live)
        per_hole: dict[tuple[str, ...], dict[Glob, None]] = {}
        for template in templates:
            assert template is not None
            for seg in template["segs"]:
                holes = [i for i, p in enumerate(seg) if p[0] == "h"]
                for i in holes:
                    globs = per_hole.setdefault(tuple(seg[i][1]), {})
                    if len(holes) > 1:
                        self._gap(
                            None,
                            "requirement",
                            "a template segment with several holes: the values tried for "
                            "each may miss some matches",
                        )
                    prefix = "".join(p[1] for p in seg[:i] if p[0] == "t")
                    suffix = "".join(p[1] for p in seg[i + 1 :] if p[0] == "t")
                    for glob in segment_globs:
                        globs.setdefault(glob.shift(prefix, suffix), None)
        names = list(per_hole)
        values = [
            representatives(
                list(per_hole[name]), valid=safe_hole, max_states=self.limits.max_states
            ).strings
            for name in names
        ]
        out: list[dict[str, Any]] = []
        for combo in self._product(values, self.limits.max_combinations, "argument values"):
            args: dict[str, Any] = {}
            for name, value in zip(names, combo, strict=True):
                set_path(args, name, value)
            out.append(args)
        return out

    @staticmethod
    def _matched(patterns: Sequence[SegPattern | None], w: Witness) -> list[bool]:
        """Which rules' patterns match the witness (a None pattern matches nothing)."""
        out: list[bool] = []
        it = iter(w.vector)
        for p in patterns:
            out.append(False if p is None else next(it))
        return out

    def _inner(
        self,
        context: dict[str, Any],
        rules: Sequence[RuleRecord],
        arg_variants: list[dict[str, Any]],
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        reads: dict[Var, None] = {}
        for rule in rules:
            for var in sorted(reads_of(rule.condition)):
                reads.setdefault(var, None)
        outer = set(self.outer)
        inner = [v for v in reads if v not in outer and v not in self._resource_vars]
        # shallow paths first, so a deeper key lands inside an object made for it
        inner.sort(key=lambda v: (len(v[1]), v))
        domains = [self.domains.domain(v) for v in inner]
        for var, dom in zip(inner, domains, strict=True):
            if not dom.complete:
                self._gap(None, var_text(var), "its values were cut at a bound")
        for combo in self._product(
            [d.values for d in domains], self.limits.max_combinations, "combinations"
        ):
            ctx = json.loads(json.dumps(context))
            for var, value in zip(inner, combo, strict=True):
                if var[0] == "context":
                    set_path(ctx, var[1], value)
            for base_args in arg_variants:
                args = json.loads(json.dumps(base_args))
                for var, value in zip(inner, combo, strict=True):
                    if var[0] == "args":
                        set_path(args, var[1], value)
                yield args, ctx

    def _product(
        self, domains: Sequence[Sequence[Any]], cap: int, what: str
    ) -> Iterator[tuple[Any, ...]]:
        total = 1
        for d in domains:
            total *= max(len(d), 1)
        if total <= cap:
            yield from itertools.product(*domains)
            return
        self.complete = False
        self._gap(
            None,
            what,
            f"{total} {what} exceed the bound of {cap}: a deterministic sample of {cap} was tried",
        )
        rng = random.Random(total)
        picks = sorted(rng.sample(range(total), cap))
        for index in picks:
            combo = []
            for d in reversed(domains):
                index, pos = divmod(index, len(d))
                combo.append(d[pos])
            yield tuple(reversed(combo))

    # ------------------------------------------------------- resource atoms

    def _pseudo_patterns(self, context: Mapping[str, Any]) -> list[SegPattern]:
        out: list[SegPattern] = []
        for atom in self.atoms.resource_atoms:
            out.extend(self._translate(atom, context))
        return out

    def _translate(self, atom: ResourceAtom, context: Mapping[str, Any]) -> list[SegPattern]:
        """The patterns a resource atom amounts to in this context (empty: it tells no
        resource from another here)."""
        try:
            value = compile_expr(atom.other_enc)((context, None, None, None))
        except Exception:
            return []  # the atom errors whatever the resource
        values = value if atom.many else [value]
        if not isinstance(values, list | tuple):
            return []
        out: list[SegPattern] = []
        for text in values:
            if type(text) is not str:
                continue
            for absolute in (True, False):
                pat = _atom_pattern(atom.test, atom.position, text, absolute)
                if pat is not None:
                    out.append(pat)
            if atom.position is not None:
                depth = abs(atom.position)
                ones: tuple[Any, ...] = tuple(("S",) for _ in range(depth))
                for absolute in (True, False):
                    out.append(SegPattern(absolute, (*ones, ("D",))))
        return out


def _reads_call(rule: RuleRecord) -> bool:
    """Does the rule's condition read the resource or the action (which differ between
    two requirements)?"""
    cond = rule.condition
    return cond is not None and bool({"resource", "action"} & roots(cond))


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _atom_pattern(test: str, position: int | None, text: str, absolute: bool) -> SegPattern | None:
    """``startswith(resource, "/a/b")`` as the pattern ``/a/b*/**`` and so on; None when no
    canonical resource of that kind can satisfy it or every one does."""
    if position is not None:
        if "/" in text and test == "eq":
            return None
        glob = _glob(test, text)
        if test == "eq" and not valid_segment(text):
            return None
        one: tuple[Any, ...] = ("L", text) if test == "eq" else ("G", glob)
        pad: tuple[Any, ...] = tuple(("S",) for _ in range(abs(position) - 1))
        if position > 0:
            return SegPattern(absolute, (*pad, one, ("D",)))
        return SegPattern(absolute, (("D",), one, *pad))
    if absolute:
        if test in ("eq", "startswith") and not text.startswith("/"):
            return None
        body = text[1:] if test in ("eq", "startswith") else text
    else:
        if test in ("eq", "startswith") and text.startswith("/"):
            return None
        body = text
    parts = body.split("/")
    if test == "eq":
        if body == "":
            return SegPattern(absolute, ()) if absolute else None
        if not all(valid_segment(p) for p in parts):
            return None
        return SegPattern(absolute, tuple(("L", p) for p in parts))
    if test == "startswith":
        if body == "":
            return None  # every resource of this kind
        *whole, last = parts
        if not all(valid_segment(p) for p in whole):
            return None
        tail: tuple[Any, ...] = ("S",) if last == "" else ("G", Glob.prefix(last))
        return SegPattern(absolute, (*(("L", p) for p in whole), tail, ("D",)))
    if test == "endswith":
        if text == "":
            return None
        first, *rest = text.split("/")
        if rest and rest[-1] == "":
            # ends with '/': only the root of an absolute resource does
            return SegPattern(absolute, ()) if absolute and text == "/" else None
        if not all(valid_segment(p) for p in rest[:-1]):
            return None
        head: tuple[Any, ...] = () if (first == "" and rest) else (("G", Glob.suffix(first)),)
        return SegPattern(absolute, (("D",), *head, *(("L", p) for p in rest)))
    # contains
    if text == "":
        return None
    parts = text.split("/")
    if len(parts) == 1:
        return SegPattern(absolute, (("D",), ("G", Glob.infix(text)), ("D",)))
    first, *middle, last = parts
    if not all(valid_segment(p) for p in middle):
        return None
    segs: list[Any] = [("D",)]
    if first != "":
        segs.append(("G", Glob.suffix(first)))
    segs += [("L", p) for p in middle]
    segs.append(("S",) if last == "" else ("G", Glob.prefix(last)))
    segs.append(("D",))
    return SegPattern(absolute, tuple(segs))


def _glob(test: str, text: str) -> Glob:
    if test == "startswith":
        return Glob.prefix(text)
    if test == "endswith":
        return Glob.suffix(text)
    if test == "contains":
        return Glob.infix(text)
    return Glob.literal(text)


def _arg_values(side: Side, w: Witness) -> list[tuple[tuple[str, ...], Any]]:
    res = side.resource
    if res is None:
        return []
    if res.get("kind") == "path":
        return [(tuple(res["arg"]), w.text)]
    return [(path, value) for path, value in w.holes]


__all__ = [
    "BASE_CONTEXT",
    "Limits",
    "RequestSpace",
    "Side",
    "same_rules",
    "set_path",
    "signature",
]

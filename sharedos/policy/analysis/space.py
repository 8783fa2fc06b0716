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
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.policy.analysis.atoms import Atoms, Gap, ResourceAtom, Var, reads_of, var_text
from sharedos.policy.analysis.domains import MISSING, Domains
from sharedos.policy.analysis.segments import (
    SegPattern,
    Shape,
    Witness,
    valid_segment,
    witnesses,
)
from sharedos.policy.analysis.strings import Glob
from sharedos.policy.conditions import compile_expr
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

    def __init__(self, old: Side, new: Side, limits: Limits | None = None) -> None:
        self.old = old
        self.new = new
        self.limits = limits or Limits()
        self.gaps: dict[Gap, None] = {}
        self.complete = True
        self.same_requirement = (
            old.resource is not None
            and new.resource is not None
            and _canon(old.resource) == _canon(new.resource)
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
        for rule in rules:
            for var, pieces in interpolations(rule):
                interpolated.setdefault(var, None)
                self._interpolation_constants(rule, var, pieces)
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
        """A value of ``var`` that makes this segment equal some literal segment."""
        if len(pieces) == 1:
            return  # the whole segment: the segment globs give the values (Domains)
        holes = [p for p in pieces if p[0] in ("c", "w")]
        if len(holes) > 1:
            self._gap(
                rule.ref,
                rule.pattern,
                "an interpolation beside a wildcard or another interpolation in one "
                "segment: only values that make it equal a literal segment are tried",
            )
        parts: list[str] = []
        grouped = False
        for p in pieces:
            if p[0] == "t":
                parts.append(re.escape(p[1]))
            elif p[0] == "c" and tuple(p[1]) == var[1] and not grouped:
                parts.append("(.+)")
                grouped = True
            else:
                parts.append(".*")
        compiled = re.compile("".join(parts), re.DOTALL)
        uses = self.atoms.use(var)
        for other in self._rules:
            for seg in other.pattern_enc["segs"]:
                if seg[0] == "L":
                    m = compiled.fullmatch(seg[1])
                    if m is not None and m.groups():
                        uses.add_value(m.group(1))
                elif seg[0] == "G" and other is not rule:
                    self._gap(
                        rule.ref,
                        rule.pattern,
                        "an interpolation inside a segment with text, beside glob "
                        "segments: values matching those globs are not derived",
                    )

    # --------------------------------------------------------------- requests

    def requests(self, tool: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(args, context)`` pairs to decide ``tool`` under both policies."""
        lim = self.limits
        outer_domains = [self.domains.domain(v) for v in self.outer]
        for var, dom in zip(self.outer, outer_domains, strict=True):
            if not dom.complete:
                self._gap(None, var_text(var), "its values were cut at a bound")
        for outer in self._product([d.values for d in outer_domains], lim.max_contexts, "contexts"):
            base = json.loads(json.dumps(BASE_CONTEXT))
            for var, value in zip(self.outer, outer, strict=True):
                set_path(base, var[1], value)
            yield from self._for_context(base)

    def _for_context(
        self, context: dict[str, Any]
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        patterns: list[SegPattern | None] = []
        for rule in self._rules:
            patterns.append(SegPattern.of(resolve(rule.pattern_enc, context, forbid=rule.forbid)))
        pseudo = self._pseudo_patterns(context)
        shapes: list[tuple[Shape, str]] = []
        if self.same_requirement:
            assert self.old.shape is not None
            shapes.append((self.old.shape, "both"))
        else:
            for side, name in ((self.old, "old"), (self.new, "new")):
                if side.shape is not None:
                    shapes.append((side.shape, name))
        n_old = len(self.old.rules)
        live = [p for p in patterns if p is not None] + pseudo
        for shape, which in shapes:
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
            for w in found.found:
                matched = self._matched(patterns, w)
                old_m = [r for i, r in enumerate(self.old.rules) if matched[i]]
                new_m = [r for i, r in enumerate(self.new.rules) if matched[n_old + i]]
                if self.same_requirement and _meaning(old_m) == _meaning(new_m):
                    continue  # the same rules can apply: no context or argument can differ
                rules = [*old_m, *new_m] if self.same_requirement else self._rules
                yield from self._inner(context, rules, self._spell(w, which, shape))

    def _matched(self, patterns: Sequence[SegPattern | None], w: Witness) -> list[bool]:
        out: list[bool] = []
        it = iter(w.vector)
        for p in patterns:
            out.append(False if p is None else next(it))
        return out

    def _spell(self, w: Witness, which: str, shape: Shape) -> list[dict[str, Any]]:
        """The arguments that make the witness resource, for one side or both."""
        sides = {"both": (self.old,), "old": (self.old,), "new": (self.new,)}[which]
        own: dict[str, Any] = {}
        for side in sides:
            for path, value in _arg_values(side, w):
                set_path(own, path, value)
        if which == "both":
            return [own]
        other = self.new if which == "old" else self.old
        variants = [own]
        if other.resource is not None:
            merged = json.loads(json.dumps(own))
            spelled = _arg_values_for_text(other, w.text)
            if spelled is not None:
                for path, value in spelled:
                    set_path(merged, path, value)
                variants.append(merged)
        return variants

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
        self, domains: list[Sequence[Any]], cap: int, what: str
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


def _arg_values_for_text(side: Side, text: str) -> list[tuple[tuple[str, ...], Any]] | None:
    """The arguments that make ``side``'s resource expression produce ``text`` (None: none do)."""
    res = side.resource
    if res is None:
        return None
    if res.get("kind") == "path":
        return [(tuple(res["arg"]), text)]
    absolute = bool(res.get("abs"))
    if absolute != text.startswith("/"):
        return None
    body = text[1:] if absolute else text
    regex = "/".join(
        "".join(re.escape(p[1]) if p[0] == "t" else "([^/]+)" for p in seg) for seg in res["segs"]
    )
    m = re.fullmatch(regex, body)
    if m is None:
        return None
    names = [tuple(p[1]) for seg in res["segs"] for p in seg if p[0] == "h"]
    return list(zip(names, m.groups(), strict=True))


__all__ = [
    "BASE_CONTEXT",
    "Limits",
    "RequestSpace",
    "Side",
    "same_rules",
    "set_path",
    "signature",
]

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

from sharedos.policy.analysis.atoms import (
    Atoms,
    Gap,
    ResourceAtom,
    Var,
    reads_of,
    value_reads_of,
    var_text,
)
from sharedos.policy.analysis.clock_values import MemberUses, now_values
from sharedos.policy.analysis.domains import CLOCK, MISSING, Domains
from sharedos.policy.analysis.resource_atoms import atom_patterns
from sharedos.policy.analysis.segments import (
    SegPattern,
    Shape,
    Witness,
    globs_of,
    overlap,
    safe_hole,
    valid_segment,
    witnesses,
)
from sharedos.policy.analysis.strings import Glob, representatives
from sharedos.policy.clock import FIELDS as CLOCK_FIELDS
from sharedos.policy.conditions import roots, unparse
from sharedos.policy.ir import RuleRecord
from sharedos.policy.patterns import is_context_dependent, lookup_context, resolve

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
    return (
        rule.effect,
        rule.pattern,
        text,
        rule.condition_kind,
        getattr(rule, "approvers", ()),  # an approval rule: who may approve is its meaning too
    )


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
        # the same resource: both sides decide on one witness resource
        self.same_resource = (
            old.resource is not None
            and new.resource is not None
            and _canon(old.resource) == _canon(new.resource)
        )
        # and the same action: a condition sees the same call on both sides
        self.same_requirement = self.same_resource and old.action == new.action
        if prune and self.same_requirement:
            old, new = _relevant(old, new)
            self.old, self.new = old, new
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
            self._resource_atom_values(atom, rules)
        self.outer: list[Var] = list(outer)
        self.domains = self._domains(interpolated, rules)
        if self._segment_values_of_interpolations(interpolated):
            self.domains = self._domains(interpolated, rules)
        self._resource_vars: set[Var] = set(old.resource_args()) | set(new.resource_args())
        # a `has` of the argument naming the resource is true wherever a rule's
        # condition is evaluated (a call without it is unresolvable first)
        reads = set().union(*(value_reads_of(r.condition) for r in rules)) if rules else set()
        for var in sorted(reads & self._resource_vars):
            self._gap(
                None,
                var_text(var),
                "a condition reads the argument that names the resource: only its "
                "canonical spellings (the witness resources) are tried",
            )
        self._witness_cache: dict[tuple[Any, ...], Any] = {}
        self._local: dict[tuple[int, ...], tuple[Atoms, Domains]] = {}
        self._old_ids = {id(r) for r in old.rules}
        self._live_cache: tuple[int, list[int]] | None = None

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
        # A template's own segments decide too: '{context.principal}' meets the
        # segment 'org-{args.owner}' only for a value that starts with 'org-', and
        # the segment 'x' of '{args.owner}/x/{args.repo}' only for 'x'; the rules'
        # patterns alone may never suggest one ('org-a/**' gives 'org-a', not
        # another 'org-' value), so a permit granted to every such principal would
        # have no witness.
        for side in (self.old, self.new):
            shape = side.shape
            if shape is not None and shape.template is not None:
                for tseg in shape.template:
                    if any(p[0] == "t" for p in tseg):
                        globs.setdefault(Glob.of_pieces(tseg), None)
        # So do the patterns the resource conditions amount to: the segment 'svc-*' of
        # `startswith(resource, "/home/svc-")` (`/home/svc-*/**`) is met by the segment
        # '{context.principal}' of '/home/{context.principal}/**' only for a principal
        # starting 'svc-', which no pattern suggests: without it, a permit's `unless`
        # on such homes could be dropped (or a permit granted to them) with no witness.
        static = [atom for atom in self.atoms.resource_atoms if not atom.reads]
        for pattern in atom_patterns(static, BASE_CONTEXT):
            for test in pattern.segs:
                if test[0] == "L":
                    globs.setdefault(Glob.literal(test[1]), None)
                elif test[0] == "G":
                    globs.setdefault(test[1], None)
        return list(globs)

    def _resource_atom_values(self, atom: ResourceAtom, rules: Sequence[RuleRecord]) -> None:
        """Values for the context variables a resource condition compares the resource
        with: for one segment (``segment(resource, 2) in context.attributes.folders``),
        one segment of every class the patterns tell apart, so the value can equal what
        another pattern names there, or not; for the whole resource, the static
        patterns' witness resources (a heuristic, reported as a gap)."""
        if not atom.reads:
            return
        other = atom.other_enc
        plain = other[0] == "ref" and other[1] == "context"
        construct = unparse(other)
        if not plain:
            self._gap(
                None,
                construct,
                "a resource condition on a context expression: the context values tried "
                "may miss some that match",
            )
        if atom.position is not None:
            values = representatives(
                self._segment_globs(rules), valid=valid_segment, max_states=self.limits.max_states
            ).strings
        else:
            self._gap(
                None,
                construct,
                "a context value compared with the whole resource: the values tried are "
                "the patterns' own witness resources",
            )
            static = [
                p
                for r in rules
                if not any(
                    seg[0] == "G" and any(x[0] == "c" for x in seg[1])
                    for seg in r.pattern_enc["segs"]
                )
                for p in [SegPattern.of(resolve(r.pattern_enc, None, forbid=r.forbid))]
                if p is not None
            ]
            values = []
            for side in (self.old, self.new):
                if side.shape is not None:
                    values += [w.text for w in witnesses(static, side.shape).found]
        for var in atom.reads:
            uses = self.atoms.use(var)
            for value in values:
                if atom.many:
                    # one request has one resource: a list holding one value is as good
                    # as any list holding it
                    uses.add_element(value)
                else:
                    uses.add_value(value)
                    if atom.test != "eq":
                        uses.add_value(value + "/")

    def _domains(self, interpolated: Mapping[Var, None], rules: Sequence[RuleRecord]) -> Domains:
        return Domains(
            self.atoms,
            interpolated=interpolated,
            segment_globs=self._segment_globs(rules),
            max_members=self.limits.max_members,
            max_states=self.limits.max_states,
        )

    def _segment_values_of_interpolations(self, interpolated: Mapping[Var, None]) -> bool:
        """A context value a resource condition compares one segment with
        (``segment(resource, 1) in context.attributes.dirs``) can be the value an
        interpolation fills that segment with (``/{context.principal}/**``): give it
        each value the interpolated variables take, which the segment classes alone
        need not spell alike (``user`` for one, ``x`` for the other). True when some
        value was added (the domains are then built again)."""
        added = False
        for atom in self.atoms.resource_atoms:
            if atom.position is None or not atom.reads:
                continue
            for source in interpolated:
                for value in self.domains.domain(source).values:
                    if type(value) is not str or not valid_segment(value):
                        continue
                    for var in atom.reads:
                        uses = self.atoms.use(var)
                        if atom.many:
                            uses.add_element(value)
                        else:
                            uses.add_value(value)
                        added = True
        return added

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
                self._gap(None, var_text(var), dom.note or "its values were cut at a bound")
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
        live = [p for p in patterns if p is not None] + atom_patterns(
            self.atoms.resource_atoms, context
        )
        if not self.same_resource:
            for args, rules in self._both_sides(live, patterns):
                yield from self._inner(context, rules, [args])
            return
        shape = self.old.shape
        assert shape is not None
        if not self._prune:
            # something else than the rules differs (the run's managed set): a call
            # whose resource cannot be resolved is unresolvable on a side that lets it
            # reach the policy, and refused before it on the other
            yield from self._inner(context, [], [{}])
        for w in self._witnesses(live, shape):
            old_m, new_m = self._matched_rules(patterns, w)
            if self._prune and self.same_requirement and _meaning(old_m) == _meaning(new_m):
                # the same rules can apply to the same call: no context or argument can
                # differ (under another action, `permit *` ... `unless action == "delete"`
                # is the same rule deciding otherwise)
                continue
            spelled: dict[str, Any] = {}
            for path, value in _arg_values(self.old, w):
                set_path(spelled, path, value)
            yield from self._inner(context, [*old_m, *new_m], [spelled])

    def _matched_rules(
        self, patterns: Sequence[SegPattern | None], w: Witness
    ) -> tuple[list[RuleRecord], list[RuleRecord]]:
        """The old and the new rules whose patterns match the witness (``patterns`` are
        the rules' patterns, None for one that matches nothing, in ``_rules`` order:
        the live ones are the first patterns the witness was found for)."""
        live = self._live_index(patterns)
        n_old = len(self.old.rules)
        hit = sorted(live[k] for k in w.accepted if k < len(live))
        old_m = [self._rules[i] for i in hit if i < n_old]
        new_m = [self._rules[i] for i in hit if i >= n_old]
        return old_m, new_m

    def _live_index(self, patterns: Sequence[SegPattern | None]) -> list[int]:
        """For each pattern that is not None, in order, the index of its rule."""
        key = id(patterns)
        found = self._live_cache
        if found is None or found[0] != key:
            found = self._live_cache = (key, [i for i, p in enumerate(patterns) if p is not None])
        return found[1]

    def _both_sides(
        self, live: list[SegPattern], patterns: Sequence[SegPattern | None]
    ) -> list[tuple[dict[str, Any], list[RuleRecord]]]:
        """Arguments for a tool whose requirement differs (or exists on one side only),
        each with the rules that can apply: every witness of one side's resource paired
        with every witness of the other's (each side decides on its own resource), and
        each alone (the other side's resource then unresolvable), and none (both
        unresolvable). On one side, witnesses that the very same rules match (none of
        them reading the resource) decide alike whatever else: one stands for all. A
        pair whose rules mean the same on both sides (and read neither resource nor
        action) decides alike whatever else, and is left out."""
        sides: list[list[tuple[list[tuple[tuple[str, ...], Any]], list[RuleRecord]]]] = []
        for index, side in enumerate((self.old, self.new)):
            shape = side.shape
            found: list[tuple[list[tuple[tuple[str, ...], Any]], list[RuleRecord]]] = []
            classes: set[Any] = set()
            if shape is not None:
                for w in self._witnesses(live, shape):
                    mine = self._matched_rules(patterns, w)[index]
                    same: Any = frozenset(id(r) for r in mine)
                    if any(_reads_call(r) for r in mine):
                        same = (same, w.text)
                    if same in classes:
                        continue
                    classes.add(same)
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
                for args in self._shared_holes(live):
                    a_rules = self._rules_at(0, patterns, args)
                    b_rules = self._rules_at(1, patterns, args)
                    if not self._same_pair(a_rules, b_rules):
                        out.append((args, [*a_rules, *b_rules]))
                return out
            for (a, a_rules), (b, b_rules) in itertools.product(sides[0], sides[1]):
                if self._same_pair(a_rules, b_rules):
                    continue  # the same rules on each side's own resource
                args = {}
                for path, value in (*a, *b):
                    set_path(args, path, value)
                out.append((args, [*a_rules, *b_rules]))
        return out

    def _same_pair(self, a: Sequence[RuleRecord], b: Sequence[RuleRecord]) -> bool:
        """Do these old and new rules, each on its own side's resource, decide alike
        whatever the context and arguments? (Not when a condition reads the resource or
        the action, which differ between the two requirements.)"""
        return (
            self.old.action == self.new.action
            and not any(_reads_call(r) for r in (*a, *b))
            and _meaning(a) == _meaning(b)
        )

    def _rules_at(
        self, index: int, patterns: Sequence[SegPattern | None], args: Mapping[str, Any]
    ) -> list[RuleRecord]:
        """The rules of side ``index`` (0 old, 1 new) whose pattern matches the resource
        its requirement makes of ``args`` (none when it makes none)."""
        side = (self.old, self.new)[index]
        segs = _template_segments(side.resource, args)
        if segs is None:
            return []
        offset = 0 if index == 0 else len(self.old.rules)
        absolute = bool(side.resource and side.resource.get("abs"))
        out = []
        for i, rule in enumerate(side.rules):
            p = patterns[offset + i]
            if p is not None and p.absolute == absolute and p.matches(segs):
                out.append(rule)
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
        # the time is one variable, its members chosen jointly (``clock_values``)
        clock = [v for v in inner if v[0] == "context" and v[1][0] == CLOCK]
        if clock:
            inner = [v for v in inner if v not in clock] + [("context", (CLOCK,))]
        # shallow paths first, so a deeper key lands inside an object made for it
        inner.sort(key=lambda v: (len(v[1]), v))
        atoms, local = self._local_domains(rules)
        domains: list[list[Any]] = []
        for var in inner:
            if var == ("context", (CLOCK,)):
                domains.append(list(self._clock_values(atoms, clock)))
                continue
            dom = local.domain(var)
            if not dom.complete:
                self._gap(None, var_text(var), dom.note or "its values were cut at a bound")
            domains.append(list(dom.values) + self._related_values(atoms, var, context))
        for combo in self._product(domains, self.limits.max_combinations, "combinations"):
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

    def _clock_values(self, atoms: Atoms, members: Sequence[Var]) -> tuple[dict[str, Any], ...]:
        """The ``context.now`` objects to try, from what these rules tell apart in it."""
        uses: dict[str, MemberUses] = {}
        for var in members:
            path = var[1]
            if len(path) != 2 or path[1] not in CLOCK_FIELDS:
                continue  # the object itself (``has context.now``), or no member: inert
            found = atoms.uses.get(var)
            if found is None:
                uses.setdefault(path[1], MemberUses())
                continue
            bounds = tuple(b for b in found.bounds if b == b and abs(b) != float("inf"))
            uses[path[1]] = MemberUses(bounds, tuple(found.strings))
        domain = now_values(uses)
        if domain.note is not None:
            self._gap(None, "context.now", domain.note)
        return domain.values

    def _local_domains(self, rules: Sequence[RuleRecord]) -> tuple[Atoms, Domains]:
        """The atoms and domains of just these rules (those that can apply at one
        witness resource): what the other rules tell apart cannot matter there."""
        key = tuple(sorted({id(r) for r in rules}))
        found = self._local.get(key)
        if found is None:
            atoms = Atoms()
            for rule in rules:
                action = self.old.action if id(rule) in self._old_ids else self.new.action
                atoms.add(rule.condition, action, rule.ref)
            for var, uses in self.atoms.uses.items():
                if uses.elements:
                    atoms.use(var).elements = list(uses.elements)
            domains = Domains(
                atoms, max_members=self.limits.max_members, max_states=self.limits.max_states
            )
            found = self._local[key] = (atoms, domains)
        return found

    def _related_values(self, atoms: Atoms, var: Var, context: Mapping[str, Any]) -> list[Any]:
        """The values, in this context, of the (fixed) context variables ``var`` is compared
        with: so it can equal them, or hold them (and, from its domain, not)."""
        uses = atoms.uses.get(var)
        if uses is None:
            return []
        holders = {w for w, u in atoms.uses.items() if var in u.member_of}
        out: list[Any] = []
        for other in (*uses.equal_to, *uses.member_of, *holders):
            if other not in self.outer or other[0] != "context":
                continue
            found, value = lookup_context(context, other[1])
            if not found:
                continue
            if other in holders:
                out.append([value])  # var holds the other's value
            elif other in uses.member_of and isinstance(value, list | tuple):
                out.extend(value)  # var is one of the other's elements
            else:
                out.append(value)
        return out

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


def _relevant(old: Side, new: Side) -> tuple[Side, Side]:
    """The two sides with only the rules that can matter: the *changed* rules (those the
    other side does not have in the same form) and the rules whose pattern can meet
    one of theirs. Any other rule never matches a resource where a changed rule does,
    and where no changed rule matches, both sides have the same rules."""
    old_forms = {signature(r) for r in old.rules}
    new_forms = {signature(r) for r in new.rules}
    changed = [r for r in old.rules if signature(r) not in new_forms]
    changed += [r for r in new.rules if signature(r) not in old_forms]
    shape = old.shape
    assert shape is not None
    met: dict[int, bool] = {}

    def keep(rule: RuleRecord) -> bool:
        key = id(rule)
        if key not in met:
            met[key] = any(c is rule or _may_meet(c, rule, shape) for c in changed)
        return met[key]

    return (
        Side(old.resource, old.action, tuple(r for r in old.rules if keep(r))),
        Side(new.resource, new.action, tuple(r for r in new.rules if keep(r))),
    )


def _may_meet(a: RuleRecord, b: RuleRecord, shape: Shape) -> bool:
    """Can some resource of ``shape`` match both rules' patterns, in some context?"""
    ea, eb = a.pattern_enc, b.pattern_enc
    for sa, sb in zip(ea["segs"], eb["segs"], strict=False):
        if sa[0] != "L" or sb[0] != "L":
            break
        if sa[1] != sb[1]:
            return False  # their literal prefixes part ways
    if is_context_dependent(ea) or is_context_dependent(eb):
        return True  # whether they meet depends on the context: keep
    pa = SegPattern.of(resolve(ea, None, forbid=a.forbid))
    pb = SegPattern.of(resolve(eb, None, forbid=b.forbid))
    if pa is None or pb is None:
        return False
    if shape.template is not None:
        return overlap(pa, pb, shape) is not None
    return _meet(pa.segs, pb.segs)


def _meet(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Can one path match both segment-test sequences? Walks the pairs of positions
    (``**`` either consuming a segment or not); two glob segments are taken to meet
    (an over-estimate: it only keeps a rule that could have been left out)."""

    def one(x: tuple[Any, ...], y: tuple[Any, ...]) -> bool:
        if x[0] == "L" and y[0] == "L":
            return bool(x[1] == y[1])
        if x[0] == "L" and y[0] == "G":
            return bool(y[1].matches(x[1]))
        if x[0] == "G" and y[0] == "L":
            return bool(x[1].matches(y[1]))
        return True  # '*' meets anything; two globs: assumed to

    todo = [(0, 0)]
    seen = {(0, 0)}
    while todo:
        i, j = todo.pop()
        if i == len(a) and j == len(b):
            return True
        steps = []
        if i < len(a) and a[i][0] == "D":
            steps.append((i + 1, j))  # '**' matches nothing more
            if j < len(b) and b[j][0] != "D":
                steps.append((i, j + 1))  # '**' takes the segment b's test takes
        if j < len(b) and b[j][0] == "D":
            steps.append((i, j + 1))
            if i < len(a) and a[i][0] != "D":
                steps.append((i + 1, j))
        if i < len(a) and j < len(b) and a[i][0] != "D" and b[j][0] != "D" and one(a[i], b[j]):
            steps.append((i + 1, j + 1))
        for step in steps:
            if step not in seen:
                seen.add(step)
                todo.append(step)
    return False


def _template_segments(
    resource: Mapping[str, Any] | None, args: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """The segments a template resource makes of ``args`` (None: unresolvable)."""
    if resource is None or resource.get("kind") != "template":
        return None
    out: list[str] = []
    for seg in resource["segs"]:
        text = ""
        for piece in seg:
            if piece[0] == "t":
                text += piece[1]
                continue
            value: Any = args
            for name in piece[1]:
                if not isinstance(value, Mapping) or name not in value:
                    return None
                value = value[name]
            if type(value) is int:
                value = str(value)
            if type(value) is not str or not safe_hole(value):
                return None
            text += value
        out.append(text)
    return tuple(out)


def _reads_call(rule: RuleRecord) -> bool:
    """Does the rule's condition read the resource or the action (which differ between
    two requirements)?"""
    cond = rule.condition
    return cond is not None and bool({"resource", "action"} & roots(cond))


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


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

"""What the conditions of a set of rules can tell apart, variable by variable.

A condition is a boolean combination of *atoms* (comparisons, function
calls, bare references). ``Atoms.add`` reads every atom of a rule's encoded
condition and records, for each variable it reads (``context.x`` or
``args.x``, a path), what distinguishes one value of it from another:

* the constants it is compared with (``==``, ``in`` a list), which become
  literal globs for strings;
* the globs of ``startswith``/``endswith``/``contains`` (``lower(x)`` gives
  case-insensitive ones);
* the number bounds of ``< <= > >=``;
* the elements tested for membership in it (``"admin" in context.roles``,
  ``any_in``/``all_in``);
* the variables it is compared with (their constants are shared);
* whether it is used as a boolean, or only tested for presence (``has``);
* the tests of its canonical path (``startswith(path(args.x), "/a/")``,
  ``segment(path(args.x), 2) == "b"``): ``PathAtom``, which become patterns
  whose witness paths are the values tried (``domains``).

Atoms on the resource itself (``startswith(resource, "/a")``,
``segment(resource, 2) == context.tenant``) are kept as ``ResourceAtom``: for
one context they become extra patterns, so the resource witnesses
(``segments``) also tell apart what they test.

An atom of any other form is a ``Gap``: the analysis still tries the values
the variable's other uses suggest, but cannot promise that every value class
of that atom is covered, and says so (``diff`` reports gaps instead of "no
change"). New condition forms are supported by adding a case to
``Atoms._atom`` (and, for a function, to ``_STRING_FUNCS``/``_LIST_FUNCS``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sharedos.policy.analysis.strings import Glob
from sharedos.policy.conditions import ORDERING, compile_expr, subexpressions, unparse
from sharedos.policy.decision import RuleRef

#: A variable: its root (``context`` or ``args``) and its path below it.
Var = tuple[str, tuple[str, ...]]

_STRING_FUNCS = ("startswith", "endswith", "contains")
_LIST_FUNCS = ("any_in", "all_in")
#: Substrings of a constant tried for ``contains("const", x)`` and friends, at most.
_MAX_SUBSTRINGS = 256


def var_text(var: Var) -> str:
    """``args.path`` / ``context.roles`` as written."""
    return ".".join((var[0], *var[1]))


@dataclass(slots=True)
class Uses:
    """What distinguishes values of one variable (see the module docstring)."""

    strings: dict[Glob, None] = field(default_factory=dict)
    values: list[Any] = field(default_factory=list)
    bounds: list[int | float] = field(default_factory=list)
    members: list[Any] = field(default_factory=list)
    #: a list whose elements are tested against a constant list: an element outside it matters
    fresh_member: bool = False
    boolean: bool = False
    #: read through ``path()`` (in a form ``path_atoms`` may not hold)
    as_path: bool = False
    #: tests of its canonical path: ``(test, segment position or None, text)``
    path_atoms: dict[tuple[str, int | None, str], None] = field(default_factory=dict)
    #: tested for presence (``has``): missing and present tell it apart
    presence: bool = False
    #: compared for equality with these variables
    equal_to: set[Var] = field(default_factory=set)
    #: its value is tested for membership in these (list) variables
    member_of: set[Var] = field(default_factory=set)
    #: values a one-element list of it should hold (a list a resource segment is looked
    #: up in: only whether it holds that segment matters)
    elements: list[Any] = field(default_factory=list)

    def add_element(self, value: Any) -> None:
        """A value to try as the only element of this (list) variable."""
        if self._new("e", value):
            self.elements.append(value)

    #: keys of what ``values``/``members``/``elements`` hold (a quick duplicate check)
    seen: set[tuple[str, str]] = field(default_factory=set)

    def add_value(self, value: Any) -> None:
        """An equality constant (a string becomes a literal glob)."""
        if type(value) is str:
            self.strings.setdefault(Glob.literal(value), None)
        elif type(value) in (int, float) and value == value:  # NaN equals nothing
            self.values.append(value)
            self.bounds.append(value)
        elif self._new("v", value):
            self.values.append(value)

    def add_member(self, value: Any) -> None:
        """An element tested for membership in this (list) variable."""
        if self._new("m", value):
            self.members.append(value)

    def _new(self, where: str, value: Any) -> bool:
        key = (where, type(value).__name__ + json.dumps(value, sort_keys=True, default=repr))
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


@dataclass(frozen=True, slots=True)
class ResourceAtom:
    """A test of the resource against a value the context (or a literal) gives.

    ``test`` is ``eq``, ``startswith``, ``endswith`` or ``contains``; ``position``
    is ``n`` for ``segment(resource, n)`` (None: the whole resource); ``other``
    is the encoded expression of the value (a list of alternatives when
    ``many``: ``resource in [...]``), as compact JSON; ``reads`` are the
    context variables it reads.
    """

    test: str
    position: int | None
    other: str
    many: bool
    reads: frozenset[Var]

    @property
    def other_enc(self) -> list[Any]:
        """The encoded expression of the value tested against."""
        value: list[Any] = json.loads(self.other)
        return value


@dataclass(frozen=True, slots=True)
class Gap:
    """A construct the analysis does not cover exactly: where, what, and why."""

    rule: RuleRef | None
    construct: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "rule": None if self.rule is None else self.rule.to_dict(),
            "construct": self.construct,
            "why": self.why,
        }


# ------------------------------------------------------------------- terms

# A term is what one operand of an atom is, as far as the analysis cares:
#   ("var", Var)            a reference to context.x / args.x
#   ("resource",)           the resource
#   ("const", value)        reads nothing (or only `action`): its value
#   ("error",)              reads nothing and always errors
#   ("ctx", json, reads)    reads only the context, not as a plain variable (its
#                           encoded form as compact JSON, and the variables it reads)
#   ("fn", name, [terms])   a call of lower/path/segment on one of the above
#   ("other",)              anything else
Term = tuple[Any, ...]


def _refs(enc: list[Any]) -> Iterator[tuple[str, tuple[str, ...]]]:
    for node in subexpressions(enc):
        if node[0] == "ref" or node[0] == "has":  # a presence test reads its variable
            yield node[1], tuple(node[2])


def reads_of(enc: list[Any] | None) -> set[Var]:
    """Every variable (``context.x``/``args.x`` path) an encoded condition reads."""
    if enc is None:
        return set()
    return {(root, path) for root, path in _refs(enc) if root in ("context", "args") and path}


def value_reads_of(enc: list[Any] | None) -> set[Var]:
    """The variables an encoded condition reads the value of (a ``has`` reads only
    whether one is there)."""
    if enc is None:
        return set()
    return {
        (node[1], tuple(node[2]))
        for node in subexpressions(enc)
        if node[0] == "ref" and node[1] in ("context", "args") and node[2]
    }


class Atoms:
    """The atoms of a set of rules' conditions: variable uses, resource atoms, gaps."""

    def __init__(self) -> None:
        self.uses: dict[Var, Uses] = {}
        self.resource_atoms: dict[ResourceAtom, None] = {}
        self.gaps: dict[Gap, None] = {}
        self._action: str | None = None
        self._rule: RuleRef | None = None

    def use(self, var: Var) -> Uses:
        """The uses of ``var`` (created empty on first mention)."""
        found = self.uses.get(var)
        if found is None:
            found = self.uses[var] = Uses()
        return found

    def add(self, enc: list[Any] | None, action: str | None, rule: RuleRef | None) -> None:
        """Record every atom of one rule's encoded condition (``action``: the action it is
        decided for; ``rule``: where it is written, for gaps)."""
        if enc is None:
            return
        self._action, self._rule = action, rule
        for var in reads_of(enc):
            self.use(var)
        stack = [enc]
        while stack:
            node = stack.pop()
            kind = node[0] if type(node) is list and node else None
            if kind in ("and", "or", "not"):
                stack.extend(node[1:])
            else:
                self._atom(node)

    def _gap(self, node: Any, why: str) -> None:
        try:
            text = unparse(node)
        except Exception:
            text = json.dumps(node, default=repr)[:200]
        self.gaps.setdefault(Gap(self._rule, text, why), None)

    # ------------------------------------------------------------- terms

    def term(self, node: Any) -> Term:
        """Classify one operand (see ``Term``)."""
        if type(node) is not list or not node:
            return ("other",)
        kind = node[0]
        if kind == "ref":
            root, path = node[1], tuple(node[2])
            if root in ("context", "args") and path:
                return ("var", (root, path))
            if root == "resource" and not path:
                return ("resource",)
        if kind == "call" and node[1] in ("lower", "path", "segment"):
            inner = [self.term(a) for a in node[2]]
            if inner and inner[0][0] in ("var", "resource"):
                return ("fn", node[1], inner)
            if node[1] == "segment" and inner and _is_path_of_var(inner[0]):
                return ("fn", "segment", inner)  # a segment of path(args.x)
        try:
            roots = {root for root, _ in _refs(node)}
        except Exception:
            return ("other",)
        if roots <= {"action"}:
            try:
                return ("const", compile_expr(node)((None, None, None, self._action)))
            except Exception:
                return ("error",)
        if roots <= {"action", "context"}:
            reads = frozenset((r, p) for r, p in _refs(node) if r == "context" and p)
            return ("ctx", _compact(node), reads)
        return ("other",)

    # ------------------------------------------------------------- atoms

    def _atom(self, node: Any) -> None:
        if type(node) is not list or not node:
            return
        kind = node[0]
        if kind == "cmp":
            op, left, right = node[1], self.term(node[2]), self.term(node[3])
            if "error" in (left[0], right[0]):
                return  # both operands are always evaluated: the atom always errors
            if op in ("==", "!="):
                self._eq(node, left, right)
            elif op in ("in", "not in"):
                self._in(node, left, right)
            elif op in ORDERING:
                self._order(node, left, right)
            else:
                self._gap(node, f"comparison {op!r} is not analysed")
            return
        if kind == "call":
            name = node[1]
            terms = [self.term(a) for a in node[2]]
            if any(t[0] == "error" for t in terms):
                return  # every argument is evaluated: the call always errors
            if name in _STRING_FUNCS and len(terms) == 2:
                self._string_fn(node, name, terms[0], terms[1])
            elif name in _LIST_FUNCS and len(terms) == 2:
                self._list_fn(node, name, terms[0], terms[1])
            elif any(t[0] not in ("const", "error") for t in terms):
                self._gap(node, f"{name}() used as a condition is not analysed")
            return
        if kind == "ref":
            term = self.term(node)
            if term[0] == "var":
                self.use(term[1]).boolean = True
            elif term[0] == "resource":
                self._gap(node, "the resource used as a boolean is not analysed")
            return
        if kind == "lit":
            return
        if kind == "has":
            if node[1] in ("context", "args") and node[2]:
                self.use((node[1], tuple(node[2]))).presence = True
            return
        # a node kind this analysis does not know (a newer language construct)
        if any(root in ("context", "args", "resource") for root, _ in _refs(node)):
            self._gap(node, f"the construct {kind!r} is not analysed")

    def _eq(self, node: Any, a: Term, b: Term) -> None:
        for x, y in ((a, b), (b, a)):
            if x[0] == "var" and y[0] == "const":
                uses = self.use(x[1])
                uses.add_value(y[1])
                if isinstance(y[1], list | tuple):
                    # a list that is not this one: `context.roles != []` holds for any role
                    # held, `"a" in context.roles and context.roles != ["a"]` for a role
                    # besides "a" (the lists tried are otherwise only those the membership
                    # tests make, and this one)
                    uses.fresh_member = True
                return
            if x[0] == "var" and y[0] == "var":
                self.use(x[1]).equal_to.add(y[1])
                self.use(y[1]).equal_to.add(x[1])
                return
            if x[0] == "fn" and y[0] == "const" and self._fn_glob(x, y[1], "eq"):
                return
            if x[0] in ("resource", "fn") and self._resource(x, "eq", y, many=False):
                return
        if {a[0], b[0]} <= {"const", "error", "ctx"}:
            return  # reads no argument or resource: decided per context, enumerated exactly
        self._gap(node, "equality between these operands is not analysed")

    def _in(self, node: Any, a: Term, b: Term) -> None:
        if a[0] == "var" and b[0] == "const":
            if isinstance(b[1], list | tuple):
                for item in b[1]:
                    self.use(a[1]).add_value(item)
            return  # anything else on the right: always an error
        if a[0] == "const" and b[0] == "var":
            self.use(b[1]).add_member(a[1])
            return
        if a[0] == "var" and b[0] == "var":
            self.use(a[1]).member_of.add(b[1])
            self.use(b[1])
            return
        if (
            a[0] == "fn"
            and b[0] == "const"
            and isinstance(b[1], list | tuple)
            and all(self._fn_glob(a, item, "eq") for item in b[1])
        ):
            return
        if a[0] in ("resource", "fn") and self._resource(a, "eq", b, many=True):
            return
        if {a[0], b[0]} <= {"const", "error", "ctx"}:
            return
        self._gap(node, "membership between these operands is not analysed")

    def _order(self, node: Any, a: Term, b: Term) -> None:
        for x, y in ((a, b), (b, a)):
            if x[0] == "var" and y[0] in ("const", "error"):
                value: Any = y[1] if y[0] == "const" else None
                if type(value) in (int, float) and value == value and abs(value) != float("inf"):
                    self.use(x[1]).bounds.append(value)
                elif type(value) in (int, float):
                    self._gap(node, "an ordering against a non-finite number is not analysed")
                return  # a non-number constant: the comparison always errors
        if {a[0], b[0]} <= {"const", "error", "ctx"}:
            return
        self._gap(node, "an ordering between these operands is not analysed")

    def _string_fn(self, node: Any, name: str, a: Term, b: Term) -> None:
        if b[0] == "const" and type(b[1]) is str:
            text = b[1]
            if a[0] == "var":
                self.use(a[1]).strings.setdefault(_fn_glob(name, text), None)
                return
            if a[0] == "fn" and self._fn_glob(a, text, name):
                return
        if a[0] == "const" and type(a[1]) is str and b[0] == "var":
            # startswith("abc", x): x ranges over the prefixes of "abc" (and anything else)
            text = a[1]
            parts: list[str]
            if name == "startswith":
                parts = [text[:i] for i in range(len(text) + 1)]
            elif name == "endswith":
                parts = [text[i:] for i in range(len(text) + 1)]
            else:
                parts = sorted(
                    {text[i:j] for i in range(len(text) + 1) for j in range(i, len(text) + 1)}
                )
            uses = self.use(b[1])
            for part in parts[:_MAX_SUBSTRINGS]:
                uses.add_value(part)
            if len(parts) > _MAX_SUBSTRINGS:
                self._gap(node, f"{name}() of a long constant: only {_MAX_SUBSTRINGS} parts tried")
            return
        if a[0] in ("resource", "fn") and self._resource(a, name, b, many=False):
            return
        if {a[0], b[0]} <= {"const", "error", "ctx"}:
            return
        self._gap(node, f"{name}() on these operands is not analysed")

    def _list_fn(self, node: Any, name: str, a: Term, b: Term) -> None:
        if a[0] == "const" and b[0] == "var":
            if isinstance(a[1], list | tuple):
                for item in a[1]:
                    self.use(b[1]).add_member(item)
            return
        if a[0] == "var" and b[0] == "const":
            uses = self.use(a[1])
            if isinstance(b[1], list | tuple):
                for item in b[1]:
                    uses.add_member(item)
            uses.fresh_member = True
            return
        if {a[0], b[0]} <= {"const", "error", "ctx"}:
            return
        self._gap(node, f"{name}() on these operands is not analysed")

    def _fn_glob(self, fn: Term, text: Any, test: str) -> bool:
        """``lower(x) == "a"`` / ``startswith(path(x), "/a")``: a glob on ``x``."""
        if type(text) is not str:
            return False
        name, inner = fn[1], fn[2]
        if name == "segment" and _is_path_of_var(inner[0]):
            # segment(path(args.x), n): a test of the canonical path's n-th segment
            if len(inner) != 2 or inner[1][0] != "const":
                return False
            position = inner[1][1]
            if type(position) is not int or position == 0:
                return False
            uses = self.use(inner[0][2][0][1])
            uses.as_path = True
            uses.path_atoms.setdefault((test, position, text), None)
            return True
        if inner[0][0] != "var":
            return False
        uses = self.use(inner[0][1])
        if name == "lower":
            glob = _fn_glob(test, text)
            uses.strings.setdefault(Glob(glob.tokens, fold=True), None)
            return True
        if name == "path":
            # the values tried are canonical paths (witnesses of what these tests tell
            # apart) and one that is no path at all: see ``domains``
            uses.as_path = True
            uses.path_atoms.setdefault((test, None, text), None)
            return True
        return False

    def _resource(self, x: Term, test: str, y: Term, *, many: bool) -> bool:
        """Record a resource atom; False when ``x`` is not the resource or one segment of it,
        or ``y`` is not known once the context is (a literal, a context expression)."""
        if y[0] == "var" and y[1][0] == "context":
            y = ("ctx", _compact(["ref", "context", list(y[1][1])]), frozenset([y[1]]))
        if y[0] not in ("const", "ctx"):
            return False
        position: int | None = None
        if x[0] == "fn":
            args = x[2]
            if x[1] != "segment" or args[0][0] != "resource" or len(args) != 2:
                return False
            if args[1][0] != "const" or type(args[1][1]) is not int or args[1][1] == 0:
                return False
            position = args[1][1]
        elif x[0] != "resource":
            return False
        if y[0] == "const":
            other = _compact(["lit", y[1]])
            reads: frozenset[Var] = frozenset()
        else:
            other, reads = y[1], y[2]
        self.resource_atoms.setdefault(ResourceAtom(test, position, other, many, reads), None)
        return True


def _is_path_of_var(term: Term) -> bool:
    """Is ``term`` ``path(args.x)`` (or ``path(context.x)``)?"""
    return term[0] == "fn" and term[1] == "path" and len(term[2]) == 1 and term[2][0][0] == "var"


def _compact(enc: Any) -> str:
    return json.dumps(enc, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _fn_glob(test: str, text: str) -> Glob:
    if test == "startswith":
        return Glob.prefix(text)
    if test == "endswith":
        return Glob.suffix(text)
    if test == "contains":
        return Glob.infix(text)
    return Glob.literal(text)

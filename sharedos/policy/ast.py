"""Typed AST of the policy language (``.sos`` files).

The parser produces these nodes; the checker, compiler, formatter and test
runner consume them. Every node carries a ``Span`` so that any diagnostic can
point at file:line:col. Nodes are frozen dataclasses: an AST is a value.

Layout of one file::

    PolicyFile(path, source, statements=(NamespaceDecl | Requirement | Rule |
               ConditionDecl | ToolPolicyDecl | TestBlock, ...), comments=(Comment, ...))

Statements keep source order. Each ``Requirement``, ``Rule``, ``ConditionDecl`` and ``TestBlock``
records the namespace in force where it was written (the last preceding
``namespace`` statement of the same file, else ``DEFAULT_NAMESPACE``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from typing import Literal as TypingLiteral

#: Namespace of statements written before any ``namespace`` statement.
DEFAULT_NAMESPACE = "default"

#: Roots a condition may reference.
REF_ROOTS = ("context", "args", "resource", "action")


class Span(NamedTuple):
    """A source range: 1-based line and column, end exclusive of ``end_col``.

    A named tuple rather than a dataclass: a large file creates one per token,
    and tuple construction is three times cheaper. Immutable and hashable.
    """

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Literal:
    """A string, number or boolean literal (``null`` only appears in test values)."""

    value: str | int | float | bool | None
    span: Span


@dataclass(frozen=True, slots=True)
class ListExpr:
    """``[a, b, ...]``."""

    items: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Ref:
    """A name path: ``context.roles`` is ``Ref("context", ("roles",))``, ``resource`` is ``Ref("resource", ())``.

    ``root`` may be any identifier; the checker rejects roots outside ``REF_ROOTS``.
    """

    root: str
    path: tuple[str, ...]
    span: Span

    @property
    def dotted(self) -> str:
        """``root.a.b`` as written."""
        return ".".join((self.root, *self.path))


@dataclass(frozen=True, slots=True)
class Call:
    """A function call: ``startswith(resource, "/x")``, ``path(args.p)``."""

    func: str
    args: tuple[Expr, ...]
    span: Span


CompareOp = TypingLiteral["==", "!=", "<", "<=", ">", ">=", "in", "not in"]


@dataclass(frozen=True, slots=True)
class Compare:
    """``left OP right``: ``==``, ``!=``, the orderings ``< <= > >=``, ``in``, ``not in``."""

    op: CompareOp
    left: Expr
    right: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class BoolOp:
    """``a and b and ...`` / ``a or b or ...``: two or more operands, evaluated left to right.

    A chain of one operator is one node however long it is, so no pass
    recurses once per term.
    """

    op: TypingLiteral["and", "or"]
    operands: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Concat:
    """``a + b + ...``: strings joined (an error if any operand is not a string)."""

    operands: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True, slots=True)
class Not:
    """``not operand``."""

    operand: Expr
    span: Span


@dataclass(frozen=True, slots=True)
class Has:
    """``has args.x`` / ``has context.a.b``: true when the attribute is present (never an error).

    ``ref`` is the attribute tested; it is a child (so every pass sees which
    root the test reads), but it is not evaluated: a missing attribute is
    ``false`` here, not an error.
    """

    ref: Ref
    span: Span


Expr = Literal | ListExpr | Ref | Call | Compare | BoolOp | Concat | Not | Has


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct subexpressions of ``expr``, in source order."""
    get = _CHILDREN.get(type(expr))
    return get(expr) if get is not None else ()


def walk(expr: Expr) -> Iterator[Expr]:
    """``expr`` and every subexpression, pre-order, left to right (iterative: any depth).

    The one traversal the checker, the lints and the compiler share (Cedar's
    ``subexpressions``).
    """
    stack = [expr]
    pop, push, table = stack.pop, stack.extend, _CHILDREN
    while stack:
        node = pop()
        yield node
        get = table.get(type(node))
        if get is not None:
            push(reversed(get(node)))


def inline(expr: Expr, named: Mapping[str, Expr]) -> Expr:
    """``expr`` with every reference to a named condition replaced by its expression.

    ``named`` maps a name to its already-inlined expression; the checker
    refuses cycles, so a reference's replacement holds no further names.
    """
    if isinstance(expr, Ref):
        if not expr.path and expr.root in named:
            return named[expr.root]
        return expr
    kids = children(expr)
    if not kids:
        return expr
    new = tuple(inline(k, named) for k in kids)
    if all(a is b for a, b in zip(new, kids, strict=True)):
        return expr
    if isinstance(expr, BoolOp):
        return BoolOp(expr.op, new, expr.span)
    if isinstance(expr, Concat):
        return Concat(new, expr.span)
    if isinstance(expr, Compare):
        return Compare(expr.op, new[0], new[1], expr.span)
    if isinstance(expr, Not):
        return Not(new[0], expr.span)
    if isinstance(expr, Call):
        return Call(expr.func, new, expr.span)
    if isinstance(expr, Has):
        return expr  # its reference is an attribute path, never a named condition
    assert isinstance(expr, ListExpr)
    return ListExpr(new, expr.span)


_CHILDREN: dict[type, Any] = {
    BoolOp: lambda e: e.operands,
    Concat: lambda e: e.operands,
    Compare: lambda e: (e.left, e.right),
    Not: lambda e: (e.operand,),
    Call: lambda e: e.args,
    ListExpr: lambda e: e.items,
    Has: lambda e: (e.ref,),
}


def roots(expr: Expr) -> frozenset[str]:
    """The reference roots (``context``, ``args``, ``resource``, ``action``) ``expr`` reads."""
    return frozenset(node.root for node in walk(expr) if isinstance(node, Ref))


# ---------------------------------------------------------- resources, patterns


@dataclass(frozen=True, slots=True)
class PathResource:
    """``resource path(args.x)``: the canonicalized absolute path held by an argument."""

    arg: Ref
    span: Span


@dataclass(frozen=True, slots=True)
class TemplateResource:
    """``resource "{args.owner}/{args.repo}"``: text with argument holes.

    ``parts`` alternates literal text (``str``) and ``Ref`` holes; ``raw`` is the
    decoded string literal as written.
    """

    raw: str
    parts: tuple[str | Ref, ...]
    span: Span


ResourceExpr = PathResource | TemplateResource


@dataclass(frozen=True, slots=True)
class Pattern:
    """A resource glob as written (the decoded string literal); segments are parsed by the compiler."""

    raw: str
    span: Span


# ------------------------------------------------------------------ statements


@dataclass(frozen=True, slots=True)
class NamespaceDecl:
    """``namespace NAME``: scopes the following requirements, rules and tests of this file."""

    name: str
    span: Span


@dataclass(frozen=True, slots=True)
class Requirement:
    """``requirement TOOL { action NAME; resource EXPR }``.

    ``action``/``resource`` are ``None`` only in a file with errors (the checker reports it).
    """

    tool: str
    namespace: str
    action: str | None
    resource: ResourceExpr | None
    span: Span
    tool_span: Span
    action_span: Span | None = None


@dataclass(frozen=True, slots=True)
class Annotation:
    """``@name("value")`` before a rule; only ``@id`` is defined."""

    name: str
    value: str
    span: Span


@dataclass(frozen=True, slots=True)
class Approver:
    """One entry of an approval rule's ``by`` list: a ``role`` or a ``group`` (resolved by the host)."""

    kind: TypingLiteral["role", "group"]
    name: str
    span: Span

    def __str__(self) -> str:
        return f"{self.kind} {self.name!r}"


#: A rule's effect: a permit or forbid, or an approval rule (``require approval by ...``).
RuleEffect = TypingLiteral["permit", "forbid", "approval"]


@dataclass(frozen=True, slots=True)
class Rule:
    """``permit|forbid ACTIONS on PATTERN [when COND] [unless COND]``, or an approval rule
    ``require approval by APPROVERS for ACTIONS on PATTERN [when COND] [unless COND]``.

    ``actions`` is ``("*",)`` for every action of the namespace. The rule
    applies when its ``when`` condition (if any) holds and its ``unless``
    condition (if any) does not. An approval rule (``effect == "approval"``)
    never grants: when it applies to a call a permit allows (and no forbid
    forbids), the call needs an approval by one of ``approvers``.
    """

    effect: RuleEffect
    actions: tuple[str, ...]
    pattern: Pattern
    when: Expr | None
    unless: Expr | None
    namespace: str
    annotations: tuple[Annotation, ...]
    span: Span
    action_spans: tuple[Span, ...] = ()
    #: who may approve (approval rules only): any one of them satisfies the rule
    approvers: tuple[Approver, ...] = ()

    @property
    def conditions(self) -> tuple[Expr, ...]:
        """The rule's conditions, ``when`` first."""
        return tuple(c for c in (self.when, self.unless) if c is not None)

    def annotation(self, name: str) -> str | None:
        """The value of ``@name("...")``, if the rule has it."""
        for ann in self.annotations:
            if ann.name == name:
                return ann.value
        return None

    @property
    def explicit_id(self) -> str | None:
        """The ``@id("...")`` value, if any."""
        return self.annotation("id")

    @property
    def description(self) -> str | None:
        """The ``@description("...")`` value, if any."""
        return self.annotation("description")

    @property
    def auto_id(self) -> str:
        """``file:line`` of the rule keyword (``permit``, ``forbid`` or ``require``)."""
        return f"{self.span.file}:{self.span.line}"

    @property
    def rule_id(self) -> str:
        """The explicit id, else ``file:line``."""
        return self.explicit_id or self.auto_id


@dataclass(frozen=True, slots=True)
class ConditionDecl:
    """``condition NAME = EXPR``: a name the rules of its namespace may use in conditions."""

    name: str
    expr: Expr
    namespace: str
    span: Span
    name_span: Span


@dataclass(frozen=True, slots=True)
class ToolPolicyEntry:
    """One name or pattern in a toolpolicy list (quoted or bare)."""

    value: str
    quoted: bool
    span: Span


@dataclass(frozen=True, slots=True)
class ToolPolicyDecl:
    """``toolpolicy NAME { mode ...; managed ...; harness_local ...; external_direct ... }``.

    A list clause that is absent is ``None``; present but empty is ``()``.
    """

    name: str
    mode: str | None
    managed: tuple[ToolPolicyEntry, ...] | None
    harness_local: tuple[ToolPolicyEntry, ...] | None
    external_direct: tuple[ToolPolicyEntry, ...] | None
    span: Span
    name_span: Span
    mode_span: Span | None = None
    clause_spans: tuple[tuple[str, Span], ...] = ()


# JSON-like values used in test blocks.
Value = str | int | float | bool | None | list["Value"] | dict[str, "Value"]


@dataclass(frozen=True, slots=True)
class TestBlock:
    """``test "name" { [policy NAME;] context {...}; call TOOL {...}; [approver {...};]
    expect allow|deny|approval [REASON] }``.

    ``context``/``args`` are plain JSON-like values; ``expect_reason`` is a
    ``ReasonCode`` value string (e.g. ``"forbidden"``) or ``None``. ``approver``
    (``{principal, roles, groups}``) decides the call as if that person had
    approved it: a call that needs approval is then allowed when they may give it.
    """

    __test__ = False  # not a pytest test class

    name: str
    namespace: str
    context: dict[str, Value]
    tool: str | None
    args: dict[str, Value]
    expect_effect: TypingLiteral["allow", "deny", "approval"] | None
    expect_reason: str | None
    span: Span
    tool_span: Span | None = None
    expect_span: Span | None = None
    reason_span: Span | None = None
    #: ``policy NAME``: decide as a run under that toolpolicy (unmanaged tools are
    #: denied ``not_in_run_policy`` before any rule is consulted)
    policy: str | None = None
    policy_span: Span | None = None
    #: the ``context`` clause (keyword to closing brace), when written
    context_span: Span | None = None
    #: ``skip ["reason"]``: the test is reported as skipped, not run ("" without a reason)
    skip: str | None = None
    #: keys written twice in the test's objects (the later value is the one kept)
    duplicate_keys: tuple[Span, ...] = ()
    #: the ``call`` clause, and where each top-level key of ``context``/``args``
    #: is written (the formatter keeps comments beside them)
    call_span: Span | None = None
    context_pair_spans: tuple[Span, ...] = ()
    args_pair_spans: tuple[Span, ...] = ()
    #: ``approver {...}``: the person whose approval the call is decided with
    approver: dict[str, Value] | None = None
    approver_span: Span | None = None
    approver_pair_spans: tuple[Span, ...] = ()


Statement = NamespaceDecl | Requirement | Rule | ConditionDecl | ToolPolicyDecl | TestBlock


@dataclass(frozen=True, slots=True)
class Comment:
    """A ``#`` comment: text without the ``#``; ``own_line`` when nothing precedes it on its line."""

    text: str
    span: Span
    own_line: bool


@dataclass(frozen=True, slots=True)
class PolicyFile:
    """One parsed ``.sos`` file (possibly partial when it had syntax errors)."""

    path: str
    source: str
    statements: tuple[Statement, ...]
    comments: tuple[Comment, ...] = field(default=())

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """The file's requirements in source order."""
        return tuple(s for s in self.statements if isinstance(s, Requirement))

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The file's permit/forbid and approval rules in source order."""
        return tuple(s for s in self.statements if isinstance(s, Rule))

    @property
    def conditions(self) -> tuple[ConditionDecl, ...]:
        """The file's named conditions in source order."""
        return tuple(s for s in self.statements if isinstance(s, ConditionDecl))

    @property
    def tool_policies(self) -> tuple[ToolPolicyDecl, ...]:
        """The file's toolpolicy blocks in source order."""
        return tuple(s for s in self.statements if isinstance(s, ToolPolicyDecl))

    @property
    def tests(self) -> tuple[TestBlock, ...]:
        """The file's test blocks in source order."""
        return tuple(s for s in self.statements if isinstance(s, TestBlock))

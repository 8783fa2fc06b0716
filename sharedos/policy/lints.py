"""Lints: warnings about policies that are valid but probably not what was meant.

The checker reports what is *wrong* (errors); lints report what is *suspicious*
(warnings, which ``sharedos-policy check --strict`` turns into errors):

* ``SOS501`` a ``context.x`` the context schema does not have;
* ``SOS502`` a context attribute used as the wrong type (``context.roles == "admin"``);
* ``SOS503`` a permit that can never allow anything because one unconditional
  forbid of the same namespace covers all of its actions and its pattern;
* ``SOS504`` a rule whose pattern never matches the resource of any requirement
  its actions govern (e.g. an absolute pattern over ``"{args.owner}/{args.repo}"``),
  or a forbid or approval rule that never matches the resource of some of them;
* ``SOS505`` an ``args.x`` that the tool's ``inputSchema`` does not declare
  (only with a catalogue);
* ``SOS506`` a requirement for a tool the catalogue does not have;
* ``SOS513`` (also) ``startswith(resource, "/public")`` where it widens access (it
  holds for ``/publicity``), a literal compared with the canonical resource that no
  canonical resource spells (``resource == "/private/"``, ``contains(resource,
  "/../")``, ``endswith(resource, "x/")``), and a pattern that
  uses glob syntax the language does not have (``?``, ``[abc]``, ``\\*``): it is
  literal text, so ``forbid * on "/keys/id_???"`` never forbids ``/keys/id_rsa``;
* ``SOS516`` an approval rule that never takes effect: no permit allows its
  actions, or an unconditional forbid covers it.
* ``SOS517`` a test that expects ``deny`` of a call refused before any rule is
  weighed (its arguments name no resource, or its run policy does not manage it).

Duplicate requirements are a checker error (``SOS202``), not a lint.

Without ``--context-schema`` the context schema is the one the kernel really
passes: ``AccessContext.policy_input`` (``principal``, ``tenant``, ``roles``,
``attributes``, ``turn_id``; ``attributes`` is open).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sharedos.policy import ast
from sharedos.policy.checker import named_conditions
from sharedos.policy.compiler import encode_resource, resource_text
from sharedos.policy.conditions import encode, evaluate
from sharedos.policy.diagnostics import CODES, Diagnostic, make
from sharedos.policy.index import TrieNode
from sharedos.policy.patterns import (
    PatternSyntaxError,
    Resolved,
    covers_within,
    literal_prefix,
    meets_shape,
    parse_pattern,
    resolve,
)
from sharedos.policy.resolvers import (
    Resolver,
    Unresolvable,
    path_resolver,
    resource_shape,
    template_resolver,
)
from sharedos.policy.schemas import (
    ACCESS_CONTEXT_SCHEMA,
    AttrSchema,
    CatalogTool,
    lookup,
    on_calendar,
    value_kind,
)
from sharedos.policy.unicode_lints import lint_unicode

# ------------------------------------------------------------------- lints


@dataclass
class LintOptions:
    """What the lints check against."""

    context_schema: AttrSchema = ACCESS_CONTEXT_SCHEMA
    context_schema_name: str = "AccessContext"
    catalog: Mapping[str, CatalogTool] | None = None


@dataclass
class _Out:
    sources: Mapping[str, str]
    items: list[Diagnostic] = field(default_factory=list)

    def warn(self, code: str, message: str, span: ast.Span, hint: str | None = None) -> None:
        end_col = span.end_col if span.end_line == span.line else span.col + 1
        self.items.append(
            make(
                code,
                message,
                file=span.file,
                source=self.sources.get(span.file, ""),
                line=span.line,
                col=span.col,
                end_col=end_col,
                hint=hint,
                severity="warning",
            )
        )


def lint(files: Sequence[ast.PolicyFile], options: LintOptions | None = None) -> list[Diagnostic]:
    """Every lint warning for the files taken together (as they are compiled together)."""
    opts = options or LintOptions()
    out = _Out({f.path: f.source for f in files})
    requirements = _requirements(files)
    named = named_conditions(files)
    _lint_context(files, opts, out, _declared_actions(requirements))
    _lint_resource_literals(files, requirements, named, out)
    _lint_pattern_segments(files, named, out)
    _lint_sibling_prefixes(files, named, out)
    _lint_constants(files, named, out)
    _lint_empty_lists(files, out)
    _lint_rules(files, requirements, named, out)
    _lint_foreign_globs(files, out)
    _lint_padded_segments(files, out)
    _lint_raw_resource_reads(files, requirements, named, out)
    lint_unicode(files, named, out.warn)
    _lint_tool_policies(files, requirements, out)
    _lint_tests(files, requirements, out)
    if opts.catalog is not None:
        _lint_catalog(files, requirements, named, opts.catalog, out)
    return out.items


#: glob syntax of other languages (OPA's glob.match, shells, gitignore) that a
#: pattern reads as literal text: '?' (one character), '[...]' (a class), and a
#: backslash before a wildcard (an escape: here the backslash is a character and
#: the '*' still a wildcard)
_FOREIGN_GLOB = re.compile(r"\?|\[[^\]/]*\]|\\(?=[*?\[])")
_HOLE = re.compile(r"\{[^{}]*\}")


def _lint_foreign_globs(files: Sequence[ast.PolicyFile], out: _Out) -> None:
    """SOS513: a pattern that uses glob syntax SharedOS patterns do not have. It is
    literal text, so a forbid written with it protects a name nobody uses."""
    for f in files:
        for rule in f.rules:
            raw = rule.pattern.raw
            m = _FOREIGN_GLOB.search(_HOLE.sub(lambda h: "_" * len(h.group()), raw))
            if m is None:
                continue
            meaning = {
                "?": "'?' is a literal character here, not 'any one character'",
                "\\": "'\\' is a literal character here, not an escape: the wildcard after it "
                "still matches",
            }.get(m.group(), f"{m.group()!r} is literal text here, not a character class")
            sp = rule.pattern.span
            col = sp.col + 1 + m.start()  # +1: the opening quote (exact without escapes)
            out.warn(
                "SOS513",
                f"{rule.effect} {rule.rule_id}: pattern {raw!r}: {meaning}",
                ast.Span(sp.file, sp.line, col, sp.line, col + len(m.group())),
                "a pattern's only wildcards are '*' (any characters within one segment) and "
                "'**' (any segments); write '*', or a rule per name. If the resource really "
                "holds the character, suppress: # sos:ignore SOS513: why",
            )


def _lint_padded_segments(files: Sequence[ast.PolicyFile], out: _Out) -> None:
    """SOS513: a pattern segment that starts or ends with white space (``"/private /**"``,
    ``"sharedos /*"``). It reads as the name without it and matches only the padded one,
    which no path or repository is called: a forbid written so never applies."""
    for f in files:
        for rule in f.rules:
            raw = rule.pattern.raw
            offset = 0
            for seg in raw.split("/"):
                stripped = seg.strip(" ")  # other white space: SOS106, SOS513 (Unicode)
                if stripped and stripped != seg:
                    sp = rule.pattern.span
                    col = sp.col + 1 + offset  # +1: the opening quote (exact without escapes)
                    out.warn(
                        "SOS513",
                        f"{rule.effect} {rule.rule_id}: pattern segment {seg!r} starts or ends "
                        f"with white space: it matches only that spelling, not {stripped!r}",
                        ast.Span(sp.file, sp.line, col, sp.line, col + len(seg)),
                        f"write {stripped!r}; if the name really has the space, suppress: "
                        "# sos:ignore SOS513: why",
                    )
                offset += len(seg) + 1


def _inlined(rule: ast.Rule, named: Mapping[str, Mapping[str, ast.Expr]]) -> list[ast.Expr]:
    """A rule's conditions with its namespace's named conditions inlined."""
    names = named.get(rule.namespace, {})
    return [ast.inline(c, names) if names else c for c in rule.conditions]


def _requirements(files: Sequence[ast.PolicyFile]) -> dict[str, ast.Requirement]:
    reqs: dict[str, ast.Requirement] = {}
    for f in files:
        for req in f.requirements:
            if req.action is not None and req.resource is not None:
                reqs.setdefault(req.tool, req)
    return reqs


# -- expressions


def _refs(expr: ast.Expr | None, root: str) -> Iterator[ast.Ref]:
    if expr is None:
        return
    for node in ast.walk(expr):
        if isinstance(node, ast.Ref) and node.root == root and node.path:
            yield node


# -- context attributes (SOS501, SOS502)


def _check_context_path(
    path: Sequence[str], span: ast.Span, opts: LintOptions, out: _Out
) -> AttrSchema | None:
    status, node, i = lookup(opts.context_schema, path)
    dotted = ".".join(("context", *path[: i + 1]))
    if status == "unknown" and node is not None and node.members is not None:
        known = ", ".join(sorted(node.members)) or "none"
        parent = ".".join(("context", *path[:i]))
        hint = f"{parent} has: {known} (schema: {opts.context_schema_name})"
        if (
            not path[:i]
            and "attributes" in node.members
            and opts.context_schema is ACCESS_CONTEXT_SCHEMA
        ):
            hint += f"; host-specific values are context.attributes.{path[i]}"
        close = difflib.get_close_matches(path[i], list(node.members), n=1)
        suggestion = f" (did you mean {parent}.{close[0]}?)" if close else ""
        out.warn("SOS501", f"unknown context attribute {dotted}{suggestion}", span, hint)
        return None
    if status == "not-object" and node is not None:
        parent = ".".join(("context", *path[:i]))
        kinds = "/".join(sorted(node.types))
        out.warn("SOS502", f"{parent} is a {kinds}; it has no attribute {path[i]!r}", span)
        return None
    return node


def _kind(expr: ast.Expr) -> str | None:
    if isinstance(expr, ast.Literal):
        v = expr.value
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, int | float):
            return "number"
        if isinstance(v, str):
            return "string"
        return "null"
    if isinstance(expr, ast.ListExpr):
        return "array"
    return None


def _lint_condition(
    cond: ast.Expr, opts: LintOptions, out: _Out, actions: Sequence[str] = ()
) -> None:
    """SOS501/SOS502 for the context a condition reads, and SOS502 for ``action``
    compared with an action the condition never sees (``actions``: those of the
    rule, or of the namespace for a named condition): ``action == "wirte"``, or
    ``forbid read ... when action == "write"``."""
    known: dict[int, AttrSchema | None] = {}
    for ref in _refs(cond, "context"):
        known[id(ref)] = _check_context_path(ref.path, ref.span, opts, out)
    action = AttrSchema(frozenset({"string"}), values=tuple(sorted(actions))) if actions else None

    def schemas(node: ast.Expr) -> list[AttrSchema]:
        if action is not None and isinstance(node, ast.Ref) and node.root == "action":
            return [] if node.path else [action]
        schema = known.get(id(node))
        return [schema] if schema is not None else []

    _lint_values(cond, schemas, out)


def _lint_values(
    cond: ast.Expr, schemas: Callable[[ast.Expr], Sequence[AttrSchema]], out: _Out
) -> None:
    """SOS502: a comparison of an attribute with a value it can never hold (another
    type, a value its schema does not list, a number outside its bounds), which is
    constant: a forbid meant to apply never does. ``schemas(node)`` is what is known
    of the attribute ``node`` reads (one schema per tool a rule governs: the value is
    impossible only when every one of them rules it out); empty when nothing is."""
    for node in ast.walk(cond):
        if isinstance(node, ast.Call):
            _lint_list_functions(node, schemas, out)
            continue
        if not isinstance(node, ast.Compare):
            continue
        if node.op in ("==", "!="):
            for ref_side, other in ((node.left, node.right), (node.right, node.left)):
                found = schemas(ref_side)
                kind = _kind(other)
                if not found or not isinstance(ref_side, ast.Ref) or kind is None:
                    continue
                always = "false" if node.op == "==" else "true"
                if not any(s.allows(kind) for s in found):
                    declared = "/".join(sorted(found[0].types))
                    hint = None
                    if any("array" in s.types for s in found) and kind != "array":
                        hint = (
                            f"to test membership write: {_literal_text(other)} in {ref_side.dotted}"
                        )
                    out.warn(
                        "SOS502",
                        f"{ref_side.dotted} is declared {declared} but is compared with a {kind}: "
                        f"'{node.op}' is always {always}",
                        node.span,
                        hint,
                    )
                elif isinstance(other, ast.Literal):
                    why = _never(found, other.value)
                    if why is not None:
                        out.warn(
                            "SOS502",
                            f"{ref_side.dotted} {why}, never {_shown(other.value)}: "
                            f"'{node.op}' is always {always}",
                            node.span,
                            _value_hint(found, other.value),
                        )
        elif node.op in ("in", "not in"):
            found = schemas(node.right)
            if isinstance(node.left, ast.Literal) and isinstance(node.right, ast.Ref):
                why = _never_an_element(found, node.left.value)
                if why is not None:
                    always = "false" if node.op == "in" else "true"
                    out.warn(
                        "SOS502",
                        f"every element of {node.right.dotted} {why}, never the "
                        f"{value_kind(node.left.value)} {_shown(node.left.value)}: "
                        f"'{node.op}' is always {always}",
                        node.span,
                        _element_hint(found, node.left.value),
                    )
            if found and all(
                s.types and not (s.types & {"array", "object", "string"}) for s in found
            ):
                assert isinstance(node.right, ast.Ref)
                declared = "/".join(sorted(found[0].types))
                out.warn(
                    "SOS502",
                    f"'{node.op}' needs a list, string or object on the right, but {node.right.dotted} is declared {declared}",
                    node.span,
                )
            left = schemas(node.left)
            if left and isinstance(node.left, ast.Ref) and isinstance(node.right, ast.ListExpr):
                _lint_listed_values(
                    node.right,
                    node.left.dotted,
                    partial(_never, left),
                    partial(_value_hint, left),
                    f"'{node.op}'",
                    out,
                )
        else:
            _lint_order(node, schemas, out)


def _never_an_element(found: Sequence[AttrSchema], value: Any) -> str | None:
    """Why no list the schemas of ``found`` describe holds ``value`` (their ``items``
    rule it out: a role the context schema does not list), else None."""
    items = [s.items for s in found]
    if not items or any(i is None for i in items):
        return None
    return _never([i for i in items if i is not None], value)


def _element_hint(found: Sequence[AttrSchema], value: Any) -> str | None:
    return _value_hint([s.items for s in found if s.items is not None], value)


def _lint_list_functions(
    node: ast.Call, schemas: Callable[[ast.Expr], Sequence[AttrSchema]], out: _Out
) -> None:
    """``any_in(context.roles, ["admn"])``, ``all_in(["admn"], context.roles)``: a listed
    value that no element of the attribute can be never matches it (SOS502)."""
    if node.func not in ("any_in", "all_in") or len(node.args) != 2:
        return
    first, second = node.args
    pairs = [(first, second)]
    if node.func == "any_in":  # symmetric: some element of one is in the other
        pairs.append((second, first))
    for listed, ref in pairs:
        if not (isinstance(listed, ast.ListExpr) and isinstance(ref, ast.Ref)):
            continue
        found = schemas(ref)
        _lint_listed_values(
            listed,
            f"every element of {ref.dotted}",
            partial(_never_an_element, found),
            partial(_element_hint, found),
            node.func,
            out,
        )


def _lint_listed_values(
    listed: ast.ListExpr,
    subject: str,
    never: Callable[[Any], str | None],
    hint: Callable[[Any], str | None],
    how: str,
    out: _Out,
) -> None:
    """SOS502 on each literal of ``listed`` that ``subject`` can never match: ``never(v)``
    says why (None: it can), ``hint(v)`` the fix; ``how`` names the test (``'in'``,
    ``any_in``)."""
    for item in listed.items:
        if not isinstance(item, ast.Literal):
            continue
        why = never(item.value)
        if why is not None:
            out.warn(
                "SOS502",
                f"{subject} {why}, never the {value_kind(item.value)} {_shown(item.value)}: "
                f"this element of the list never matches it ({how})",
                item.span,
                hint(item.value),
            )


def _never(found: Sequence[AttrSchema], value: Any) -> str | None:
    """Why no schema of ``found`` allows ``value`` (None when one does)."""
    reasons = [s.never(value) for s in found]
    return None if any(r is None for r in reasons) else reasons[0]


def _value_hint(found: Sequence[AttrSchema], value: Any) -> str | None:
    """The fix for a value the attribute never holds: the allowed value it is
    probably a misspelling of, or the bounds (None: the code's own hint)."""
    listed = [v for s in found for v in s.values or () if isinstance(v, str)]
    if listed and isinstance(value, str):
        close = [v for v in listed if v.casefold() == value.casefold()]
        close = close or difflib.get_close_matches(value, listed, n=1)
        close = close or [v for v in listed if value.casefold().startswith(v.casefold())]
        if close:
            return f"did you mean {_shown(close[0])}?"
        return "compare with one of the values listed"
    dated = [s for s in found if s.calendar is not None]
    if dated and isinstance(value, str) and not on_calendar(dated[0].calendar or "", value):
        shape = dated[0].pattern
        if shape is None or re.search(shape, value):  # the shape is right, the day is not
            return (
                "compare with a day that exists: a month is 01 to 12, a day at most its "
                "month's last (February 29 only in a leap year)"
            )
    patterns = [s.pattern for s in found if s.pattern is not None]
    if patterns and isinstance(value, str):
        return f"compare with a string that matches {patterns[0]}"
    bounded = [s for s in found if s.allows("number") and (s.minimum, s.maximum) != (None, None)]
    if bounded and isinstance(value, int | float) and not isinstance(value, bool):
        return f"compare with a number {bounded[0].bounds()}"
    return None


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


#: ``x OP c`` as the literal on the other side sees it: ``c OP' x``
_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _lint_order(
    node: ast.Compare, schemas: Callable[[ast.Expr], Sequence[AttrSchema]], out: _Out
) -> None:
    """``context.now.hour >= 24``: an ordering that no number within the attribute's
    bounds can make true (or false) is constant."""
    op: str = node.op
    ref, other = node.left, node.right
    if isinstance(ref, ast.Literal):
        op, ref, other = _MIRRORED.get(op, op), other, ref
    found = schemas(ref)
    if not found or not isinstance(ref, ast.Ref) or not isinstance(other, ast.Literal):
        return
    c = other.value
    if isinstance(c, bool) or not isinstance(c, int | float):
        return
    if any(s.minimum is None and s.maximum is None for s in found):
        return
    strict = op in ("<", ">")
    upward = op in (">", ">=")

    def beyond(bound: int | float | None, inward: bool) -> bool:
        """``bound`` lies strictly past ``c`` in the direction ``x OP c`` holds
        (``inward``: on the side where it holds), or on ``c`` when that holds."""
        if bound is None:
            return inward  # unbounded: the attribute reaches past any c
        past = bound > c if upward else bound < c
        return past or (bound == c and not strict)

    def holds_somewhere(s: AttrSchema) -> bool:
        return beyond(s.maximum if upward else s.minimum, True)

    def holds_everywhere(s: AttrSchema) -> bool:
        return beyond(s.minimum if upward else s.maximum, False)

    if not any(holds_somewhere(s) for s in found):
        always = "false"
    elif all(holds_everywhere(s) for s in found):
        always = "true"
    else:
        return
    out.warn(
        "SOS502",
        f"{ref.dotted} is {found[0].bounds()}: '{node.op}' with {_shown(c)} is always {always}",
        node.span,
        f"compare with a number {found[0].bounds()}",
    )


def _literal_text(expr: ast.Expr) -> str:
    if isinstance(expr, ast.Literal) and isinstance(expr.value, str):
        return '"' + expr.value + '"'
    return "VALUE"


def _pattern_context_refs(pattern: ast.Pattern) -> list[tuple[list[str], int]]:
    """(context path, character offset in the pattern) of each ``{context.x}`` hole."""
    found: list[tuple[list[str], int]] = []
    raw = pattern.raw
    start = raw.find("{")
    while start >= 0:
        end = raw.find("}", start)
        if end < 0:
            break
        inner = raw[start + 1 : end].strip()
        parts = inner.split(".")
        if parts[0] == "context" and len(parts) > 1:
            found.append((parts[1:], start))
        start = raw.find("{", end)
    return found


def _lint_context(
    files: Sequence[ast.PolicyFile],
    opts: LintOptions,
    out: _Out,
    declared: Mapping[str, Sequence[str]],
) -> None:
    for f in files:
        for stmt in f.statements:
            if isinstance(stmt, ast.ConditionDecl):
                _lint_condition(stmt.expr, opts, out, declared.get(stmt.namespace, ()))
            if isinstance(stmt, ast.Rule):
                known = declared.get(stmt.namespace, ())
                own = known if "*" in stmt.actions else [a for a in stmt.actions if a in known]
                for condition in stmt.conditions:
                    _lint_condition(condition, opts, out, own)
                sp = stmt.pattern.span
                for path, offset in _pattern_context_refs(stmt.pattern):
                    col = sp.col + 1 + offset  # +1: the opening quote
                    width = len("{context." + ".".join(path) + "}")
                    where = ast.Span(sp.file, sp.line, col, sp.line, col + width)
                    schema = _check_context_path(path, where, opts, out)
                    if schema is not None and schema.types and not schema.types & _SEGMENT_TYPES:
                        kinds = "/".join(sorted(schema.types))
                        out.warn(
                            "SOS507",
                            f"pattern {stmt.pattern.raw!r} interpolates context.{'.'.join(path)}, "
                            f"declared {kinds}: only a string or integer fills a segment, so the "
                            + (
                                "permit matches nothing"
                                if stmt.effect == "permit"
                                else "forbid matches any segment there"
                                if stmt.effect == "forbid"
                                else "approval rule matches any segment there"
                            ),
                            where,
                        )
            elif isinstance(stmt, ast.TestBlock):
                clause = stmt.context_span
                if clause is not None:  # point at the 'context' keyword
                    clause = clause._replace(
                        end_line=clause.line, end_col=clause.col + len("context")
                    )
                _lint_test_context(stmt, clause or stmt.span, opts, out)


def _declared_actions(requirements: Mapping[str, ast.Requirement]) -> dict[str, list[str]]:
    """Per namespace, the actions its requirements declare (in the order first seen)."""
    declared: dict[str, list[str]] = {}
    for req in requirements.values():
        if req.action is not None and req.action not in declared.get(req.namespace, []):
            declared.setdefault(req.namespace, []).append(req.action)
    return declared


def _lint_resource_literals(
    files: Sequence[ast.PolicyFile],
    requirements: Mapping[str, ast.Requirement],
    named: Mapping[str, Mapping[str, ast.Expr]],
    out: _Out,
) -> None:
    """SOS513 for a literal the canonical resource never spells, in a rule whose
    tools all take one kind of resource: ``resource == "/private/"`` (a canonical path
    has no trailing '/'), ``startswith(resource, "private/")`` (it is absolute),
    ``contains(resource, "/../")`` (its '..' are resolved),
    ``segment(resource, 1) == "a/b"`` (a segment holds no '/'). Such a test is
    constant: a forbid written with it never applies."""
    by_ns: dict[str, list[ast.Requirement]] = {}
    for req in requirements.values():
        by_ns.setdefault(req.namespace, []).append(req)
    seen: set[tuple[ast.Span, str]] = set()
    for f in files:
        for rule in f.rules:
            reqs = [
                r
                for r in by_ns.get(rule.namespace, [])
                if "*" in rule.actions or r.action in rule.actions
            ]
            kinds = {_resource_kind(r.resource) for r in reqs}
            paths = kinds.pop() if len(kinds) == 1 else None
            for cond in _inlined(rule, named):
                for lit, why in _impossible_resource_literals(cond, paths):
                    if (lit.span, why) in seen:
                        continue  # a named condition several rules use: once
                    seen.add((lit.span, why))
                    out.warn(
                        "SOS513",
                        f"{_shown(lit.value)} {why}, so this comparison never matches it",
                        lit.span,
                        "write the literal as the canonical resource: absolute, single '/', "
                        "no trailing '/', no '.' or '..' segment",
                    )


def _lint_pattern_segments(
    files: Sequence[ast.PolicyFile], named: Mapping[str, Mapping[str, ast.Expr]], out: _Out
) -> None:
    """SOS508 for a test of the resource that the rule's own pattern decides: under
    ``"/srv/prod/**"``, ``segment(resource, 2)`` is always ``"prod"``, so
    ``forbid write on "/srv/prod/**" when segment(resource, 2) == "secrets"`` (the
    segments counted from the pattern's second, an easy slip) never applies, and a
    permit's ``unless segment(resource, 2) == "private"`` never takes anything back.
    Likewise ``resource == L`` and ``startswith(resource, L)`` with a literal the
    pattern's leading fixed segments rule out. A ``segment`` is read at every position
    the pattern fixes (``_pattern_positions``): past a ``*`` or a ``{hole}``, which are
    one segment each, and from the end past the last ``**``."""
    seen: set[tuple[ast.Span, str]] = set()
    for f in files:
        for rule in f.rules:
            fixed: list[str] = []
            for seg in rule.pattern.raw.removeprefix("/").split("/"):
                if not _literal_segment(seg):
                    break
                fixed.append(seg)
            at = _pattern_positions(rule.pattern.raw)
            if not at:
                continue
            lead = "/" if rule.pattern.raw.startswith("/") else ""
            stem = lead + "/".join(fixed) if fixed else ""
            for cond in _inlined(rule, named):
                for node in ast.walk(cond):
                    found = _pattern_decides(node, at, stem)
                    if found is None:
                        continue
                    what, hint = found
                    message = (
                        f"under the pattern {_shown(rule.pattern.raw)} of {rule.effect} "
                        f"{rule.rule_id}, {what}"
                    )
                    if (node.span, message) in seen:
                        continue
                    seen.add((node.span, message))
                    out.warn("SOS508", message, node.span, hint)


def _literal_segment(seg: str) -> bool:
    """A pattern segment that matches one spelling only (no ``*``, no ``{hole}``)."""
    return bool(seg) and "*" not in seg and "{" not in seg and "}" not in seg


def _pattern_positions(raw: str) -> dict[int, str]:
    """``segment(resource, n)`` -> the literal it always is, for every ``n`` the pattern
    ``raw`` fixes. Before the first ``**`` each pattern segment is exactly one segment
    of the resource (``*`` and ``{context.x}`` one too, never empty), so ``n`` counts
    from the start past them: under ``"/home/{context.principal}/secret/**"`` segment 3
    is always ``"secret"``. After the last ``**`` (or in a pattern without one) the
    segments are counted from the end: under ``"/srv/**/keys"`` segment -1 is always
    ``"keys"``. (Only reading the leading literal run, a forbid counting from the
    wrong end, or past a hole, never applied, with no diagnostic.)"""
    segs = raw.removeprefix("/").split("/")
    if segs == [""]:
        return {}
    out: dict[int, str] = {}
    for i, seg in enumerate(segs):
        if seg == "**":
            break
        if _literal_segment(seg):
            out[i + 1] = seg
    tail = segs[len(segs) - segs[::-1].index("**") :] if "**" in segs else segs
    for k, seg in enumerate(reversed(tail), start=1):
        if _literal_segment(seg):
            out[-k] = seg
    return out


def _pattern_decides(
    node: ast.Expr, at: Mapping[int, str], stem: str
) -> tuple[str, str | None] | None:
    """(what is always so, a hint) when ``node`` is a test of ``resource`` that every
    resource the rule sees answers the same way; None otherwise. ``at`` is what the
    pattern fixes (``_pattern_positions``), ``stem`` its leading literal segments
    joined ("" when it has none)."""

    def is_resource(e: ast.Expr) -> bool:
        return isinstance(e, ast.Ref) and e.root == "resource" and not e.path

    def strings(e: ast.Expr) -> list[str] | None:
        if isinstance(e, ast.Literal) and isinstance(e.value, str):
            return [e.value]
        return None

    if isinstance(node, ast.Compare) and node.op in ("==", "!=", "in", "not in"):
        sides = ((node.left, node.right), (node.right, node.left))
        for read, other in sides[:1] if node.op in ("in", "not in") else sides:
            if node.op in ("in", "not in"):
                if not isinstance(other, ast.ListExpr) or not other.items:
                    continue
                texts = [t for item in other.items for t in strings(item) or ()]
                if len(texts) != len(other.items):
                    continue  # not a list of string literals
            else:
                got = strings(other)
                if got is None:
                    continue
                texts = got
            always = "false" if node.op in ("==", "in") else "true"
            if (
                isinstance(read, ast.Call)
                and read.func == "segment"
                and len(read.args) == 2
                and is_resource(read.args[0])
                and isinstance(read.args[1], ast.Literal)
                and type(read.args[1].value) is int
                and read.args[1].value in at
            ):
                n = read.args[1].value
                if at[n] in texts:
                    continue
                where = [i for i, seg in at.items() if seg in texts]
                hint = f"did you mean segment(resource, {where[0]})?" if where else None
                return (
                    f"segment(resource, {n}) is always {_shown(at[n])}: "
                    f"'{node.op}' is always {always}",
                    hint,
                )
            if (
                stem
                and is_resource(read)
                and not any(t == stem or t.startswith(stem + "/") for t in texts)
            ):
                return (
                    f"resource is always {_shown(stem)} or under it: '{node.op}' is always {always}",
                    None,
                )
        return None
    if (
        stem
        and isinstance(node, ast.Call)
        and node.func == "startswith"
        and len(node.args) == 2
        and is_resource(node.args[0])
        and isinstance(node.args[1], ast.Literal)
        and isinstance(node.args[1].value, str)
    ):
        text = node.args[1].value
        if not ((stem + "/").startswith(text) or text.startswith(stem + "/")):
            return (
                f"resource is always {_shown(stem)} or under it: startswith is always false",
                None,
            )
    return None


def _lint_sibling_prefixes(
    files: Sequence[ast.PolicyFile], named: Mapping[str, Mapping[str, ast.Expr]], out: _Out
) -> None:
    """SOS513 for ``startswith(resource, "/public")`` where its holding widens access (a
    permit's ``when``, a forbid's ``unless``, or negated the other way): it also holds for
    ``/publicity`` and ``/public-old``, siblings the literal reads as excluding."""
    seen: set[ast.Span] = set()
    for f in files:
        for rule in f.rules:
            names = named.get(rule.namespace, {})
            for kind, cond in (("when", rule.when), ("unless", rule.unless)):
                if cond is None:
                    continue
                # holding widens: a permit applies, a forbid or approval rule does not
                widens_when_true = (rule.effect == "permit") == (kind == "when")
                expr = ast.inline(cond, names) if names else cond
                for call, positive in _startswith_polarity(expr):
                    lit = call.args[1]
                    assert isinstance(lit, ast.Literal) and isinstance(lit.value, str)
                    text = lit.value
                    if positive != widens_when_true or lit.span in seen:
                        continue
                    if not text or not (text[-1].isalnum() or text[-1] == "_"):
                        continue  # '/', or a name prefix such as "/tmp/build-"
                    seen.add(lit.span)
                    out.warn(
                        "SOS513",
                        f"{rule.effect} {rule.rule_id}: startswith(..., {_shown(text)}) also "
                        f"holds for {_shown(text + 'ity')} and {_shown(text + '-old')}, not "
                        f"only under {_shown(text + '/')}",
                        lit.span,
                        f"for the directory write {_shown(text + '/')} (and == {_shown(text)} "
                        f"for itself), or a pattern {_shown(text + '/**')}; for a name prefix, "
                        "suppress: # sos:ignore SOS513: why",
                    )


def _startswith_polarity(expr: ast.Expr) -> Iterator[tuple[ast.Call, bool]]:
    """Each ``startswith(R, "literal")`` of a canonical resource in ``expr``, and whether
    the condition holding needs it true (False: under an odd number of ``not``)."""
    stack: list[tuple[ast.Expr, bool]] = [(expr, True)]
    while stack:
        node, positive = stack.pop()
        if isinstance(node, ast.Not):
            stack.append((node.operand, not positive))
        elif isinstance(node, ast.BoolOp):
            stack.extend((o, positive) for o in node.operands)
        elif (
            isinstance(node, ast.Call)
            and node.func == "startswith"
            and len(node.args) == 2
            and _reads_resource(node.args[0])
            and isinstance(node.args[1], ast.Literal)
            and isinstance(node.args[1].value, str)
        ):
            yield node, positive


def _reads_resource(node: ast.Expr) -> bool:
    """``resource`` or ``path(x)``: a canonical resource, as the decision sees it."""
    if isinstance(node, ast.Ref):
        return node.root == "resource" and not node.path
    return isinstance(node, ast.Call) and node.func == "path" and len(node.args) == 1


def _resource_kind(res: ast.ResourceExpr | None) -> str | None:
    """``path``, or a template's ``absolute``/``relative`` (None: not known)."""
    if isinstance(res, ast.PathResource):
        return "path"
    if isinstance(res, ast.TemplateResource):
        return "absolute" if res.raw.startswith("/") else "relative"
    return None


def _impossible_resource_literals(
    cond: ast.Expr, kind: str | None
) -> Iterator[tuple[ast.Literal, str]]:
    """(literal, why) for each string literal ``cond`` compares with a canonical
    resource (``kind``: what every tool's resource is, ``path`` or an ``absolute``
    or ``relative`` template; ``path(x)`` is always a path) or with one of its
    segments, that no such value can equal or start with."""
    for node in ast.walk(cond):
        if isinstance(node, ast.Compare) and node.op in ("==", "!=", "in", "not in"):
            sides = (
                ((node.left, node.right), (node.right, node.left))
                if node.op in ("==", "!=")
                else ((node.left, node.right),)
            )
            for ref, other in sides:
                items: Sequence[ast.Expr] = (
                    other.items
                    if isinstance(other, ast.ListExpr) and node.op in ("in", "not in")
                    else (other,)
                    if node.op in ("==", "!=")
                    else ()
                )
                for lit in items:
                    if not isinstance(lit, ast.Literal) or not isinstance(lit.value, str):
                        continue
                    why = _segment_never(ref, lit.value)
                    if why is None and _reads_resource(ref):
                        why = _literal_never(lit.value, _kind_of(ref, kind), prefix=False)
                    if why is not None:
                        yield lit, why
        elif (
            isinstance(node, ast.Call)
            and node.func in ("startswith", "endswith", "contains")
            and len(node.args) == 2
            and _reads_resource(node.args[0])
            and isinstance(node.args[1], ast.Literal)
            and isinstance(node.args[1].value, str)
        ):
            text, of = node.args[1].value, _kind_of(node.args[0], kind)
            if node.func == "startswith":
                why = _literal_never(text, of, prefix=True)
            else:
                why = (
                    _path_piece_never(text, suffix=node.func == "endswith")
                    if of == "path"
                    else None
                )
            if why is not None:
                yield node.args[1], why


def _kind_of(ref: ast.Expr, kind: str | None) -> str | None:
    """What ``ref`` reads: ``path(x)`` is always a canonical path."""
    return "path" if isinstance(ref, ast.Call) else kind


def _literal_never(text: str, kind: str | None, *, prefix: bool) -> str | None:
    """Why no resource of ``kind`` equals (``prefix``: starts with) ``text``."""
    if kind == "path":
        return _path_prefix_never(text) if prefix else _path_never(text)
    if kind == "relative" and text.startswith("/"):
        return "is absolute, and the resource of these tools is a relative template"
    if kind == "absolute" and text and not text.startswith("/"):
        return "is relative, and the resource of these tools is an absolute template"
    return None


def _segment_never(ref: ast.Expr, text: str) -> str | None:
    """Why ``segment(resource, n)`` never equals ``text`` (None when it can)."""
    if not (isinstance(ref, ast.Call) and ref.func == "segment" and len(ref.args) == 2):
        return None
    if not _reads_resource(ref.args[0]):
        return None
    if text in ("", ".", "..") or "/" in text:
        return (
            "is no segment of a canonical resource (one is never empty, '.' or '..', nor holds '/')"
        )
    return None


def _path_never(text: str) -> str | None:
    """Why no canonical path equals ``text`` (None when one does: ``text`` itself)."""
    from sharedos.policy.paths import UnresolvablePath, canonical_path

    try:
        canonical = canonical_path(text)
    except UnresolvablePath as exc:
        return f"is no canonical path ({exc})"
    if canonical != text:
        return f"is not a canonical path (the canonical form is {_shown(canonical)})"
    return None


def _path_piece_never(text: str, *, suffix: bool) -> str | None:
    """Why no canonical path ends with (``suffix``) or holds ``text`` (None when one does):
    ``contains(resource, "/../")`` reads as catching a traversal, but the decision sees
    the path after its '..' is resolved, so such a test (and ``endswith(resource, "/")``,
    ``contains(resource, "//")``) is always false: a forbid written with it never applies."""
    inner = "/" + text + "/"  # a piece can start or end inside a segment ...
    whole = inner.split("/")[1:-1]  # ... but what lies between two '/' of it is a segment
    if "//" in text or any(seg in (".", "..") for seg in whole[1:-1]):
        return f"{'ends' if suffix else 'is in'} no canonical path (one has no empty, '.' or '..' segment)"
    if (
        suffix
        and text != "/"
        and (text.endswith("/") or ("/" in text and whole[-1] in (".", "..")))
    ):
        return "ends no canonical path (one never ends with '/', '/.' or '/..' but the root '/')"
    return None


def _path_prefix_never(text: str) -> str | None:
    """Why no canonical path starts with ``text`` (None when one does)."""
    if not text.startswith("/"):
        return "starts no canonical path (every one is absolute, starting with '/')"
    whole = text.split("/")[1:-1]  # the segments a '/' closes
    if any(seg in ("", ".", "..") for seg in whole):
        return "starts no canonical path (one has no empty, '.' or '..' segment)"
    return None


def _lint_test_context(test: ast.TestBlock, where: ast.Span, opts: LintOptions, out: _Out) -> None:
    def visit(value: Any, path: list[str]) -> None:
        if not isinstance(value, dict):
            return
        for key, sub in value.items():
            here = [*path, key]
            if here == ["now"] and not isinstance(sub, dict):
                # written as an ISO-8601 time or a timestamp, expanded for the test
                from sharedos.policy.clock import ClockError, expand

                try:
                    expand(sub)
                except ClockError as exc:
                    out.warn("SOS502", f"test {test.name!r}: context.now: {exc}", where)
                continue
            status, node, _ = lookup(opts.context_schema, here)
            if status != "ok":
                _check_context_path(here, where, opts, out)
                continue
            if node is not None and node.types and not node.allows(value_kind(sub)):
                declared = "/".join(sorted(node.types))
                out.warn(
                    "SOS502",
                    f"test {test.name!r} gives context.{'.'.join(here)} a {value_kind(sub)}; the schema declares {declared}",
                    where,
                )
            elif node is not None:
                # a value the host never passes (a role the schema does not list): the
                # test decides for a caller who does not exist
                given = [(sub, node)] if not isinstance(sub, dict | list) else []
                if isinstance(sub, list) and node.items is not None:
                    given = [(x, node.items) for x in sub if not isinstance(x, dict | list)]
                for x, schema in given:
                    why = schema.never(x)
                    if why is not None:
                        out.warn(
                            "SOS502",
                            f"test {test.name!r} gives context.{'.'.join(here)} {_shown(x)}, "
                            f"which it never holds: "
                            + ("every element " if isinstance(sub, list) else "it ")
                            + why,
                            where,
                            _value_hint([schema], x),
                        )
            visit(sub, here)

    visit(test.context, [])


#: Schema types whose values can fill a pattern segment.
_SEGMENT_TYPES = frozenset({"string", "integer", "number"})


# -- constant and contradictory conditions (SOS508)


def _constant(expr: ast.Expr) -> tuple[bool, bool | None]:
    """(is constant, its value: True/False, None when it always errors)."""
    if ast.roots(expr):
        return False, None
    value, _error = evaluate(encode(expr), (None, None, None, None))
    return True, value


def _always_applies(rule: ast.Rule, named: Mapping[str, Mapping[str, ast.Expr]]) -> bool:
    """True when the rule's conditions apply whatever the call (``when true``, none at all)."""
    names = named.get(rule.namespace, {})
    for kind, cond in (("when", rule.when), ("unless", rule.unless)):
        if cond is None:
            continue
        constant, value = _constant(ast.inline(cond, names) if names else cond)
        if not constant:
            return False
        # an error applies a forbid (fail closed): it counts as applying
        if value is (kind == "unless"):
            return False
    return True


def _shape_key(expr: ast.Expr) -> Any:
    from sharedos.policy.formatter import shape

    return shape(expr)


def _lint_constants(
    files: Sequence[ast.PolicyFile], named: Mapping[str, Mapping[str, ast.Expr]], out: _Out
) -> None:
    for f in files:
        for rule in f.rules:
            names = named.get(rule.namespace, {})
            reported = False
            for kind, cond in (("when", rule.when), ("unless", rule.unless)):
                if cond is None:
                    continue
                expr = ast.inline(cond, names) if names else cond
                constant, value = _constant(expr)
                if constant:
                    reported = True
                    verdict = (
                        "always errors" if value is None else f"is always {str(value).lower()}"
                    )
                    # an error applies a forbid and an approval rule (fail closed)
                    applies = (value is None and rule.effect != "permit") or (
                        value is not None and value is (kind == "when")
                    )
                    out.warn(
                        "SOS508",
                        f"the {kind} condition of {rule.effect} {rule.rule_id} {verdict}: the rule "
                        + ("always applies" if applies else "never applies"),
                        cond.span,
                    )
                    continue
                problem = _contradiction(expr)
                if problem is not None:
                    out.warn(
                        "SOS508",
                        f"the {kind} condition of {rule.effect} {rule.rule_id} {problem}",
                        cond.span,
                    )
                    reported = True
            if rule.when is not None and rule.unless is not None and not reported:
                when, unless = rule.when, rule.unless
                if names:
                    when, unless = ast.inline(when, names), ast.inline(unless, names)
                problem = _when_unless_problem(when, unless)
                if problem is not None:
                    out.warn(
                        "SOS508",
                        f"the when and unless conditions of {rule.effect} {rule.rule_id} "
                        f"{problem}: the rule never applies",
                        rule.unless.span,
                    )


def _lint_empty_lists(files: Sequence[ast.PolicyFile], out: _Out) -> None:
    """SOS508 for each test of an empty list, in a rule or a named condition (where it
    is written, once however many rules use it)."""
    for f in files:
        for stmt in f.statements:
            if isinstance(stmt, ast.ConditionDecl):
                where = [(f"condition {stmt.name}", stmt.expr)]
            elif isinstance(stmt, ast.Rule):
                where = [
                    (f"the {kind} condition of {stmt.effect} {stmt.rule_id}", cond)
                    for kind, cond in (("when", stmt.when), ("unless", stmt.unless))
                    if cond is not None and ast.roots(cond)  # a constant one: _lint_constants
                ]
            else:
                continue
            for what, cond in where:
                for node, always in _empty_list_tests(cond):
                    out.warn(
                        "SOS508",
                        f"{what}: this test is always {always} (an empty list holds nothing)",
                        node.span,
                    )


def _empty_list_tests(expr: ast.Expr) -> Iterator[tuple[ast.Expr, str]]:
    """``x in []``, ``x not in []``, ``any_in(x, [])``, ``all_in([], x)``: tests of an
    empty list literal, constant whatever the call (an operand that errs aside):
    ``forbid ... when context.principal in []`` never applies."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Compare) and node.op in ("in", "not in"):
            if isinstance(node.right, ast.ListExpr) and not node.right.items:
                yield node, "false" if node.op == "in" else "true"
        elif isinstance(node, ast.Call) and len(node.args) == 2:
            empty = [isinstance(a, ast.ListExpr) and not a.items for a in node.args]
            if node.func == "any_in" and any(empty):
                yield node, "false"
            elif node.func == "all_in" and empty[0]:
                yield node, "true"


def _contradiction(expr: ast.Expr) -> str | None:
    """Why an ``and`` can never hold or an ``or`` always does, if it is that plain."""
    for node in ast.walk(expr):
        if isinstance(node, ast.BoolOp):
            problem = _bool_problem(node.op, node.operands)
            if problem is not None:
                return problem
    return None


def _polarity(expr: ast.Expr) -> tuple[ast.Expr, bool]:
    """``expr`` as a test and whether it is asserted or denied: ``not x`` denies ``x``,
    ``a != b`` denies ``a == b``, ``a not in b`` denies ``a in b``."""
    positive = True
    while True:
        if isinstance(expr, ast.Not):
            expr, positive = expr.operand, not positive
        elif isinstance(expr, ast.Compare) and expr.op in ("!=", "not in"):
            op: ast.CompareOp = "==" if expr.op == "!=" else "in"
            expr, positive = ast.Compare(op, expr.left, expr.right, expr.span), not positive
        else:
            return expr, positive


def _test_key(expr: ast.Expr) -> Any:
    """What identifies a test, whatever its spelling (``a == b`` is ``b == a``)."""
    if isinstance(expr, ast.Compare) and expr.op == "==":
        return ("==", frozenset({_shape_key(expr.left), _shape_key(expr.right)}))
    return _shape_key(expr)


def _bool_problem(op: str, operands: Sequence[ast.Expr]) -> str | None:
    seen: set[Any] = set()
    negated: set[Any] = set()
    equals: dict[str, Any] = {}
    for operand in operands:
        test, positive = _polarity(operand)
        (seen if positive else negated).add(_test_key(test))
        if op == "and" and positive and isinstance(test, ast.Compare) and test.op == "==":
            ref, lit = test.left, test.right
            if isinstance(lit, ast.Ref):
                ref, lit = lit, ref
            if isinstance(ref, ast.Ref) and isinstance(lit, ast.Literal):
                key = ref.dotted
                v = lit.value
                number = isinstance(v, int | float) and not isinstance(v, bool)
                value = ("number", v) if number else (type(v).__name__, v)  # 1 == 1.0
                if key in equals and equals[key] != value:
                    return f"can never hold: {key} cannot equal two different values"
                equals[key] = value
    if seen & negated:
        return (
            "can never hold: it requires something and its negation"
            if op == "and"
            else "always holds: it accepts something and its negation"
        )
    if op == "and":
        problem = _value_set_problem(operands)
        if problem is not None:
            return problem
    return _range_problem(op, operands)


def _literal_value(expr: ast.Expr) -> Any:
    """A literal's value as the evaluator compares it (``1 == 1.0``, ``1 != true``), or
    None when ``expr`` is not a literal."""
    if not isinstance(expr, ast.Literal) or expr.value is None:
        return None
    v = expr.value
    number = isinstance(v, int | float) and not isinstance(v, bool)
    return ("number", v) if number else (type(v).__name__, v)


def _value_set(test: ast.Expr) -> tuple[str, frozenset[Any]] | None:
    """``x == "a"``, ``"a" == x``, ``x in ["a", "b"]`` (literals only): the attribute and
    the values the test holds for (None: not such a test)."""
    if not isinstance(test, ast.Compare):
        return None
    if test.op == "==":
        ref, lit = test.left, test.right
        if isinstance(lit, ast.Ref):
            ref, lit = lit, ref
        value = _literal_value(lit)
        if isinstance(ref, ast.Ref) and value is not None:
            return ref.dotted, frozenset({value})
    elif (
        test.op == "in" and isinstance(test.left, ast.Ref) and isinstance(test.right, ast.ListExpr)
    ):
        values = [_literal_value(item) for item in test.right.items]
        if values and all(v is not None for v in values):
            return test.left.dotted, frozenset(values)
    return None


def _value_set_problem(operands: Sequence[ast.Expr]) -> str | None:
    """An ``and`` of ``==``/``in`` tests of one attribute, and of their negations, that no
    value meets: ``context.tenant == "a" and context.tenant in ["b", "c"]``,
    ``x in ["a", "b"] and x not in ["b", "a"]``."""
    allowed: dict[str, frozenset[Any]] = {}
    excluded: dict[str, frozenset[Any]] = {}
    for operand in operands:
        test, positive = _polarity(operand)
        found = _value_set(test)
        if found is None:
            continue
        key, values = found
        if positive:
            allowed[key] = allowed[key] & values if key in allowed else values
        else:
            excluded[key] = excluded.get(key, frozenset()) | values
    for key, values in allowed.items():
        if not values - excluded.get(key, frozenset()):
            return f"can never hold: no value of {key} meets all its tests"
    return None


#: a range of numbers: (low, low included, high, high included); infinite ends
_Range = tuple[float, bool, float, bool]
_FLIPPED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _number_range(test: ast.Expr, positive: bool) -> tuple[str, _Range] | None:
    """``x < 5``, ``not (x >= 22)``, ``x == 3``, ``5 <= x``: the attribute and the range of
    numbers the test holds for (None: not such a test)."""
    if not isinstance(test, ast.Compare) or test.op not in ("<", "<=", ">", ">=", "=="):
        return None
    op: str = test.op
    ref, lit = test.left, test.right
    if isinstance(ref, ast.Literal):
        op, ref, lit = _MIRRORED.get(op, op), lit, ref
    if not isinstance(ref, ast.Ref) or not isinstance(lit, ast.Literal):
        return None
    c = lit.value
    if isinstance(c, bool) or not isinstance(c, int | float):
        return None
    if not positive:
        if op == "==":
            return None  # x != c: two ranges
        op = _FLIPPED[op]
    bound = float(c)
    ranges: dict[str, _Range] = {
        "<": (-math.inf, False, bound, False),
        "<=": (-math.inf, False, bound, True),
        ">": (bound, False, math.inf, False),
        ">=": (bound, True, math.inf, False),
        "==": (bound, True, bound, True),
    }
    return ref.dotted, ranges[op]


def _range_problem(op: str, operands: Sequence[ast.Expr]) -> str | None:
    """Number bounds on one attribute that no number meets together (``and``), or that
    every number meets (``or``): ``context.now.hour >= 22 and context.now.hour < 6``."""
    by_key: dict[str, list[_Range]] = {}
    for operand in operands:
        found = _number_range(*_polarity(operand))
        if found is not None:
            by_key.setdefault(found[0], []).append(found[1])
    for key, ranges in by_key.items():
        if len(ranges) < 2:
            continue
        if op == "and":
            lo, lo_in, hi, hi_in = -math.inf, False, math.inf, False
            for r_lo, r_lo_in, r_hi, r_hi_in in ranges:
                if r_lo > lo or (r_lo == lo and not r_lo_in):
                    lo, lo_in = r_lo, r_lo_in
                if r_hi < hi or (r_hi == hi and not r_hi_in):
                    hi, hi_in = r_hi, r_hi_in
            if lo > hi or (lo == hi and not (lo_in and hi_in)):
                wrap = " (a window across midnight is 'hour >= 22 or hour < 6')"
                return f"can never hold: no number meets all its bounds on {key}" + (
                    wrap if key.startswith("context.now.") else ""
                )
        elif _covers_every_number(ranges):
            return f"always holds: every number meets one of its bounds on {key}"
    return None


def _covers_every_number(ranges: Sequence[_Range]) -> bool:
    reach, reach_in = -math.inf, True
    for lo, lo_in, hi, hi_in in sorted(ranges, key=lambda r: (r[0], not r[1])):
        if lo > reach or (lo == reach and not (reach_in or lo_in)):
            return False
        if hi > reach:
            reach, reach_in = hi, hi_in
        elif hi == reach:
            reach_in = reach_in or hi_in
    return reach == math.inf


def _when_unless_problem(when: ast.Expr, unless: ast.Expr) -> str | None:
    """Why ``when W unless U`` (W and not U) can never hold, if it is that plain:
    ``when "admin" in context.roles unless "admin" in context.roles``."""
    terms = list(when.operands) if isinstance(when, ast.BoolOp) and when.op == "and" else [when]
    if isinstance(unless, ast.BoolOp) and unless.op == "or":  # not (a or b): not a, not b
        terms += [ast.Not(u, u.span) for u in unless.operands]
    else:
        terms.append(ast.Not(unless, unless.span))
    problem = _bool_problem("and", terms)
    return None if problem is None else problem.replace("can never hold", "can never both hold")


# -- rules (SOS503, SOS504)

#: Stand-in values for ``{context.x}`` holes: distinct per attribute, safe, and
#: unlike any literal an operator writes, so pattern reasoning treats each hole
#: as "some one segment, the same wherever this attribute appears".
_HOLE_MARK = "\u2063"


def _placeholder_context(rules: Sequence[ast.Rule]) -> dict[str, Any] | None:
    ctx: dict[str, Any] = {}
    for rule in rules:
        for path, _ in _pattern_context_refs(rule.pattern):
            node = ctx
            for name in path[:-1]:
                nxt = node.setdefault(name, {})
                if not isinstance(nxt, dict):
                    return None
                node = nxt
            leaf = path[-1]
            if isinstance(node.get(leaf), dict):
                return None
            node[leaf] = _HOLE_MARK + ".".join(path) + _HOLE_MARK
    return ctx


def _shape(req: ast.Requirement) -> tuple[Any, ...]:
    assert req.resource is not None
    return resource_shape(encode_resource(req.resource))


def _lint_rules(
    files: Sequence[ast.PolicyFile],
    requirements: Mapping[str, ast.Requirement],
    named: Mapping[str, Mapping[str, ast.Expr]],
    out: _Out,
) -> None:
    rules = [r for f in files for r in f.rules]
    by_ns: dict[str, list[ast.Requirement]] = {}
    for req in requirements.values():
        by_ns.setdefault(req.namespace, []).append(req)
    ctx = _placeholder_context(rules)
    if ctx is None:
        return
    resolved: dict[int, Resolved] = {}
    # What a rule can reach, whatever the context: each segment holding a hole
    # matches any one segment (what a forbid's unsafe hole matches, and a superset
    # of what any value can make it match). The placeholder above is a value no
    # resource segment spells, so it cannot say "never matches" (a hole beside a
    # template's fixed text, 'org-{args.owner}', is met by the value 'org-a').
    reach: dict[int, Resolved] = {}
    for rule in rules:
        try:
            encoded = parse_pattern(rule.pattern.raw)
        except PatternSyntaxError:
            continue  # the checker reports it (SOS207)
        resolved[id(rule)] = resolve(encoded, ctx)
        reach[id(rule)] = resolve(encoded, {}, forbid=True)

    def governed(rule: ast.Rule) -> list[ast.Requirement]:
        reqs = by_ns.get(rule.namespace, [])
        if "*" in rule.actions:
            return reqs
        return [r for r in reqs if r.action in rule.actions]

    reachable: dict[int, list[ast.Requirement]] = {}
    for rule in rules:
        pat = reach.get(id(rule))
        reqs = governed(rule)
        if pat is None or not reqs:
            continue  # unknown actions are the checker's SOS201
        hits = [r for r in reqs if meets_shape(pat, _shape(r))]
        reachable[id(rule)] = hits
        if not hits:
            shown = "; ".join(
                f"{r.tool}: {resource_text(r.resource)}" for r in reqs[:3] if r.resource
            )
            more = f" (and {len(reqs) - 3} more)" if len(reqs) > 3 else ""
            out.warn(
                "SOS504",
                f"{rule.effect} {rule.rule_id} never matches: pattern {rule.pattern.raw!r} cannot match "
                f"the resource of any requirement it governs ({shown}{more})",
                rule.pattern.span,
            )
        elif len(hits) < len(reqs) and rule.effect != "permit":
            _warn_partly_matched(rule, [r for r in reqs if r not in hits], out)

    ns_actions = {ns: {r.action for r in reqs if r.action} for ns, reqs in by_ns.items()}

    def effective_actions(rule: ast.Rule) -> frozenset[str]:
        known = ns_actions.get(rule.namespace, set())
        return frozenset(known if "*" in rule.actions else set(rule.actions) & known)

    # Forbids per namespace, in a trie over their literal prefixes: for path
    # resources a forbid can only cover a permit whose pattern starts with the
    # forbid's literal segments, so only the forbids met along the permit's
    # own literal prefix need the full coverage test.
    tries: dict[str, TrieNode[ast.Rule]] = {}
    everything: dict[str, list[ast.Rule]] = {}
    for rule in rules:
        if rule.effect == "forbid" and _always_applies(rule, named) and id(rule) in resolved:
            tries.setdefault(rule.namespace, TrieNode()).insert(
                literal_prefix(resolved[id(rule)]), rule
            )
            everything.setdefault(rule.namespace, []).append(rule)
    forbid_actions = {id(r): effective_actions(r) for rs in everything.values() for r in rs}

    permitted: dict[str, set[str]] = {}
    for rule in rules:
        if rule.effect == "permit":
            permitted.setdefault(rule.namespace, set()).update(effective_actions(rule))
    for permit in rules:
        matched_reqs = reachable.get(id(permit))
        if permit.effect == "forbid" or not matched_reqs:
            continue
        approval = permit.effect == "approval"
        if approval and not effective_actions(permit) & permitted.get(permit.namespace, set()):
            out.warn(
                "SOS516",
                f"approval rule {permit.rule_id} never takes effect: no permit of namespace "
                f"{permit.namespace!r} allows {' or '.join(sorted(effective_actions(permit)))}, "
                "and an approval rule never grants",
                permit.span,
            )
            continue
        ppat = resolved[id(permit)]
        wanted = effective_actions(permit)
        shapes = [_shape(req) for req in matched_reqs]
        if not all(meets_shape(ppat, shape) for shape in shapes):
            # the placeholder spelling meets no resource of some shape the rule can
            # reach (coverage of it would hold vacuously): weigh what the permit can
            # reach in any context instead
            ppat = reach[id(permit)]
        if all(shape == ("path",) for shape in shapes):
            candidates = list(tries.get(permit.namespace, TrieNode()).along(literal_prefix(ppat)))
        else:
            candidates = everything.get(permit.namespace, [])
        for forbid in candidates:
            if not wanted or not wanted <= forbid_actions[id(forbid)]:
                continue
            fpat = resolved[id(forbid)]
            if all(covers_within(fpat, ppat, shape) for shape in shapes) and approval:
                out.warn(
                    "SOS516",
                    f"approval rule {permit.rule_id} never takes effect: forbid {forbid.rule_id}"
                    + (f" (at {forbid.span.file}:{forbid.span.line})" if forbid.explicit_id else "")
                    + f" forbids its actions on {permit.pattern.raw!r} unconditionally, and a "
                    "forbid wins over any approval",
                    permit.span,
                )
                break
            if all(covers_within(fpat, ppat, shape) for shape in shapes):
                out.warn(
                    "SOS503",
                    f"permit {permit.rule_id} can never allow anything: forbid {forbid.rule_id}"
                    + (f" (at {forbid.span.file}:{forbid.span.line})" if forbid.explicit_id else "")
                    + f" covers its actions and pattern {permit.pattern.raw!r} unconditionally",
                    permit.span,
                )
                break


def _warn_partly_matched(rule: ast.Rule, missed: Sequence[ast.Requirement], out: _Out) -> None:
    """SOS504 for a forbid or approval rule whose pattern meets the resource of only
    some of the tools its actions govern: for the others it never applies, although
    it reads as covering them (``forbid * on "sharedos/security"`` over a tool whose
    resource is ``"repos/{args.owner}/{args.repo}"`` never forbids that tool's calls)."""
    shown = "; ".join(f"{r.tool}: {resource_text(r.resource)}" for r in missed[:3] if r.resource)
    more = f" (and {len(missed) - 3} more)" if len(missed) > 3 else ""
    effect = (
        "those calls are never forbidden"
        if rule.effect == "forbid"
        else "those calls never need an approval"
    )
    out.warn(
        "SOS504",
        f"{rule.effect} {rule.rule_id} never matches the resource of some tools its actions "
        f"govern ({shown}{more}): pattern {rule.pattern.raw!r} cannot match it, so {effect}",
        rule.pattern.span,
        "add a rule with a pattern for that resource, or narrow the rule's actions to the "
        "tools it can match",
    )


# -- a condition reading the raw argument a requirement canonicalizes (SOS512)


def _canonicalized(node: ast.Expr) -> set[int]:
    """Ids of the nodes under a ``path(...)`` call (canonicalized where they are read)."""
    inside: set[int] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and sub.func == "path":
            for arg in sub.args:
                inside.update(id(n) for n in ast.walk(arg))
    return inside


def _lint_raw_resource_reads(
    files: Sequence[ast.PolicyFile],
    requirements: Mapping[str, ast.Requirement],
    named: Mapping[str, Mapping[str, ast.Expr]],
    out: _Out,
) -> None:
    """``permit read on "/**" when segment(args.path, 1) == "public"`` reads the argument
    as sent, while the resource is its canonical form: ``/public/../private/x`` is
    ``public`` to the condition and ``/private/x`` to the decision."""
    by_ns: dict[str, list[ast.Requirement]] = {}
    for req in requirements.values():
        if isinstance(req.resource, ast.PathResource) and req.resource.arg.root == "args":
            by_ns.setdefault(req.namespace, []).append(req)
    for f in files:
        for rule in f.rules:
            reqs = [
                r
                for r in by_ns.get(rule.namespace, [])
                if "*" in rule.actions or r.action in rule.actions
            ]
            if not reqs:
                continue
            canon = {r.resource.arg.path: r for r in reqs}  # type: ignore[union-attr]
            for cond in _inlined(rule, named):
                safe = _canonicalized(cond)
                has_refs = {id(n.ref) for n in ast.walk(cond) if isinstance(n, ast.Has)}
                seen: set[tuple[str, ...]] = set()
                for ref in _refs(cond, "args"):
                    hit = canon.get(ref.path)
                    if hit is None or id(ref) in safe or id(ref) in has_refs or ref.path in seen:
                        continue
                    seen.add(ref.path)
                    out.warn(
                        "SOS512",
                        f"{rule.effect} {rule.rule_id} reads {ref.dotted} as sent, but "
                        f"{hit.tool} canonicalizes it as the resource: the condition can "
                        "read '/a/../b' where the decision sees '/b'",
                        ref.span,
                        f"read the canonical form: `resource`, or path({ref.dotted})",
                    )


# -- run policies (SOS509, SOS510) and tests (SOS511)


def _lint_tool_policies(
    files: Sequence[ast.PolicyFile], requirements: Mapping[str, ast.Requirement], out: _Out
) -> None:
    tools = sorted(requirements)
    for f in files:
        for tp in f.tool_policies:
            seen: dict[str, str] = {}
            for clause in ("managed", "harness_local", "external_direct"):
                for entry in getattr(tp, clause) or ():
                    if entry.value in seen:
                        out.warn(
                            "SOS510",
                            f"toolpolicy {tp.name} lists {entry.value!r} again"
                            + (
                                f" (already in {seen[entry.value]})"
                                if seen[entry.value] != clause
                                else ""
                            ),
                            entry.span,
                        )
                    else:
                        seen[entry.value] = clause
                    if clause == "managed" and tools and not _matches_any(entry.value, tools):
                        close = difflib.get_close_matches(entry.value, tools, n=1, cutoff=0.6)
                        if not close:  # a misspelt namespace: compare the first segments
                            heads = sorted({t.split(".")[0] for t in tools})
                            head = difflib.get_close_matches(entry.value.split(".")[0], heads, n=1)
                            close = (
                                [entry.value.replace(entry.value.split(".")[0], head[0], 1)]
                                if head
                                else []
                            )
                        out.warn(
                            "SOS509",
                            f"toolpolicy {tp.name}: managed {entry.value!r} matches no tool any "
                            "requirement declares"
                            + (f" (did you mean {close[0]!r}?)" if close else ""),
                            entry.span,
                        )


def _matches_any(pattern: str, tools: Sequence[str]) -> bool:
    from pydantic import ValidationError

    from sharedos.toolpolicy import RunMode, ToolPolicy

    try:
        policy = ToolPolicy(name="lint", mode=RunMode.OPEN, managed=(pattern,))
    except ValidationError:
        return True  # an invalid pattern is the checker's SOS303
    return any(policy.is_managed(t) for t in tools)


def _lint_tests(
    files: Sequence[ast.PolicyFile], requirements: Mapping[str, ast.Requirement], out: _Out
) -> None:
    policies = {tp.name: tp for f in files for tp in f.tool_policies}
    for f in files:
        for test in f.tests:
            for span in test.duplicate_keys:
                out.warn(
                    "SOS511",
                    f"test {test.name!r} writes the key at {span.line}:{span.col} twice in one "
                    "object; only the last value counts",
                    span,
                )
            if test.expect_effect == "deny" and test.expect_reason is None and test.skip is None:
                _lint_vacuous_denial(test, requirements, policies, out)


def _lint_vacuous_denial(
    test: ast.TestBlock,
    requirements: Mapping[str, ast.Requirement],
    policies: Mapping[str, ast.ToolPolicyDecl],
    out: _Out,
) -> None:
    """SOS517: a test that expects ``deny`` (no reason) of a call refused before any
    rule is weighed -- outside its run policy, or whose arguments name no resource (a
    misspelt argument, a relative path) -- passes whatever the rules say, so a test
    written for a forbid goes on passing when the forbid is gone."""
    req = requirements.get(test.tool or "")
    if req is None:
        return  # SOS401, or a test of tool_unavailable
    why: str | None = None
    reason = "unresolvable_resource"
    decl = policies.get(test.policy or "")
    managed = decl.managed if decl is not None else None
    if managed is not None and not any(_matches_any(entry.value, [req.tool]) for entry in managed):
        why, reason = f"toolpolicy {test.policy} does not manage {req.tool}", "not_in_run_policy"
    else:
        resolver = _static_resolver(req.resource)
        if resolver is not None:
            try:
                resolver(test.args)
            except Unresolvable as exc:
                why = str(exc)
    if why is None:
        return
    out.warn(
        "SOS517",
        f"test {test.name!r} expects deny, and its call is denied {reason} before any rule is "
        f"weighed ({why}): it passes whatever the rules say",
        test.call_span or test.span,
        f"fix the call, or write 'expect deny {reason}' if that is what the test is for",
    )


def _static_resolver(res: ast.ResourceExpr | None) -> Resolver | None:
    """The call-time resolver of a requirement's resource (None when it is invalid:
    the checker reports it)."""
    if isinstance(res, ast.PathResource):
        return path_resolver(res.arg.path) if res.arg.root == "args" and res.arg.path else None
    if isinstance(res, ast.TemplateResource) and all(
        isinstance(p, str) or (p.root == "args" and p.path) for p in res.parts
    ):
        return template_resolver(encode_resource(res))
    return None


# -- catalogue (SOS505, SOS506)


def _arg_known(schema: AttrSchema, path: Sequence[str]) -> bool:
    status, _, _ = lookup(schema, path)
    return status == "ok"


def _lint_catalog(
    files: Sequence[ast.PolicyFile],
    requirements: Mapping[str, ast.Requirement],
    named: Mapping[str, Mapping[str, ast.Expr]],
    catalog: Mapping[str, CatalogTool],
    out: _Out,
) -> None:
    for req in requirements.values():
        tool = catalog.get(req.tool)
        if tool is None:
            out.warn(
                "SOS506",
                f"requirement {req.tool}: the catalogue has no tool {req.tool!r}",
                req.tool_span,
            )
            continue
        res = req.resource
        refs: list[ast.Ref] = []
        if isinstance(res, ast.PathResource):
            refs.append(res.arg)
        elif isinstance(res, ast.TemplateResource):
            refs.extend(p for p in res.parts if isinstance(p, ast.Ref))
        for ref in refs:
            if ref.root == "args" and ref.path and not _arg_known(tool.args, ref.path):
                out.warn(
                    "SOS505",
                    f"requirement {req.tool} reads {ref.dotted}, which {req.tool}'s inputSchema does not declare",
                    ref.span,
                    _declared_hint(tool, ref.path[0]),
                )
    by_ns: dict[str, list[ast.Requirement]] = {}
    for req in requirements.values():
        by_ns.setdefault(req.namespace, []).append(req)
    for f in files:
        for stmt in f.statements:
            if isinstance(stmt, ast.Rule):
                reqs = by_ns.get(stmt.namespace, [])
                tools = [
                    catalog[r.tool]
                    for r in reqs
                    if r.tool in catalog and ("*" in stmt.actions or r.action in stmt.actions)
                ]
                if not tools:
                    continue
                for cond in _inlined(stmt, named):
                    guarded = _guarded_refs(cond)
                    seen: set[tuple[str, ...]] = set()
                    for ref in _refs(cond, "args"):
                        knows = [t for t in tools if _arg_known(t.args, ref.path)]
                        if not knows:
                            names = ", ".join(sorted(t.name for t in tools))
                            out.warn(
                                "SOS505",
                                f"{stmt.effect} {stmt.rule_id} reads {ref.dotted}, which no tool it governs declares ({names})",
                                ref.span,
                            )
                        elif len(knows) < len(tools) and id(ref) not in guarded:
                            if ref.path in seen:
                                continue  # one warning per argument and condition
                            seen.add(ref.path)
                            _warn_partly_declared(stmt, ref, tools, knows, out)
                    _lint_values(cond, _arg_schemas(tools), out)
            elif isinstance(stmt, ast.TestBlock) and stmt.tool is not None and stmt.tool in catalog:
                ctool = catalog[stmt.tool]
                for key in stmt.args:
                    if not _arg_known(ctool.args, [key]):
                        out.warn(
                            "SOS505",
                            f"test {stmt.name!r} passes argument {key!r}, which {stmt.tool}'s inputSchema does not declare",
                            stmt.tool_span or stmt.span,
                            _declared_hint(ctool, key),
                        )


def _arg_schemas(tools: Sequence[CatalogTool]) -> Callable[[ast.Expr], list[AttrSchema]]:
    """What the inputSchemas of ``tools`` say about the argument a node reads: one
    schema per tool that declares it (the kernel validates arguments against them
    before any rule is weighed); empty when one leaves it open, or for other nodes."""

    def schemas(node: ast.Expr) -> list[AttrSchema]:
        if not isinstance(node, ast.Ref) or node.root != "args" or not node.path:
            return []
        found: list[AttrSchema] = []
        for tool in tools:
            status, schema, _ = lookup(tool.args, node.path)
            if status != "ok":
                continue  # not declared: SOS505 says so
            if schema is None:
                return []
            found.append(schema)
        return found

    return schemas


def _warn_partly_declared(
    rule: ast.Rule,
    ref: ast.Ref,
    tools: Sequence[CatalogTool],
    knows: Sequence[CatalogTool],
    out: _Out,
) -> None:
    """A rule reads an argument only some of the tools it governs declare: for the
    others its condition errors, so a forbid applies to every call of theirs (and a
    permit never does), which reads as narrow and decides broadly."""
    lacking = sorted(t.name for t in tools if t not in knows)
    having = sorted(t.name for t in knows)
    shown = ", ".join(lacking[:3]) + (f" (and {len(lacking) - 3} more)" if len(lacking) > 3 else "")
    effect = (
        "the permit never applies to them"
        if rule.effect == "permit"
        else f"the {'forbid' if rule.effect == 'forbid' else 'approval rule'} applies to every "
        "call of theirs"
    )
    out.warn(
        "SOS505",
        f"{rule.effect} {rule.rule_id} reads {ref.dotted}, which {shown} "
        f"{'does' if len(lacking) == 1 else 'do'} not declare ({', '.join(having[:3])} "
        f"{'does' if len(having) == 1 else 'do'}): for "
        f"{'that tool' if len(lacking) == 1 else 'those tools'} the condition errors and {effect}",
        ref.span,
        f"test the argument first (when has {ref.dotted} and ...), or narrow the rule's actions "
        "to the tools that have it",
    )


def _guarded_refs(cond: ast.Expr) -> set[int]:
    """The ``args`` references of ``cond`` that a presence test guards: an operand of an
    ``and`` after ``has args.x``, or of an ``or`` after ``not has args.x`` (the same
    argument or one inside it), and the presence tests' own references."""
    guarded: set[int] = set()
    for node in ast.walk(cond):
        if isinstance(node, ast.Has):
            guarded.add(id(node.ref))
        if not isinstance(node, ast.BoolOp):
            continue
        tested: list[tuple[str, ...]] = []
        for operand in node.operands:
            for ref in _refs(operand, "args"):
                if any(ref.path[: len(p)] == p or p[: len(ref.path)] == ref.path for p in tested):
                    guarded.add(id(ref))
            inner = operand.operand if isinstance(operand, ast.Not) else operand
            if (
                isinstance(inner, ast.Has)
                and inner.ref.root == "args"
                and isinstance(operand, ast.Not) == (node.op == "or")
            ):
                tested.append(inner.ref.path)
    return guarded


def _declared_hint(tool: CatalogTool, name: str | None = None) -> str:
    members = tool.args.members
    if members is None:
        return CODES["SOS505"].hint
    hint = f"{tool.name} declares: {', '.join(sorted(members)) or 'no arguments'}"
    close = difflib.get_close_matches(name, list(members), n=1) if name else []
    return hint + (f" (did you mean {close[0]!r}?)" if close else "")

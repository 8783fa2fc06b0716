"""The checker: meaning errors the grammar cannot see, across every file compiled together.

``check(files)`` returns diagnostics and never raises. It also builds the
``ToolPolicy`` objects (through the ToolPolicy validators, which are the ones
that decide; this module only positions their verdicts).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sharedos.names import is_valid_tool_name
from sharedos.outcomes import ReasonCode
from sharedos.policy import ast
from sharedos.policy.conditions import ORDERING
from sharedos.policy.diagnostics import Diagnostic, make, source_line
from sharedos.policy.functions import ANY, BOOLEAN, FUNCTIONS, INTEGER, LIST, NUMBER, STRING
from sharedos.policy.grammar import is_keyword
from sharedos.policy.patterns import PatternSyntaxError, parse_pattern
from sharedos.terminal import ignorable
from sharedos.toolpolicy import RunMode, ToolPolicy

#: Reasons a decision can carry (what a test block may expect).
DECISION_REASONS = (
    ReasonCode.ALLOWED,
    ReasonCode.TOOL_UNAVAILABLE,
    ReasonCode.UNRESOLVABLE_RESOURCE,
    ReasonCode.NO_MATCHING_PERMIT,
    ReasonCode.FORBIDDEN,
    ReasonCode.APPROVAL_REQUIRED,
)
#: the effect each reason goes with in a test's ``expect`` (every other reason: deny)
_EXPECTED_EFFECT = {
    ReasonCode.ALLOWED.value: "allow",
    ReasonCode.APPROVAL_REQUIRED.value: "approval",
}
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Annotations a rule may carry.
ANNOTATIONS = ("id", "description")

#: The most nodes one condition may have once its named conditions are expanded
#: (a list of literals counts as one node). Named conditions are expanded where
#: they are used, so ``condition c1 = c0 and c0``, ``c2 = c1 and c1``, ... doubles
#: with every line: unbounded, twenty lines would take the compiler, every
#: decision and every tool that reads the policy hours (SOS217).
MAX_EXPANDED_NODES = 10_000


@dataclass
class CheckResult:
    """Diagnostics plus what later stages need (valid tool policies by name)."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    tool_policies: dict[str, ToolPolicy] = field(default_factory=dict)
    #: raw pattern -> parsed (encoded) pattern, for every valid pattern seen
    patterns: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: namespace -> named condition -> its expression, named conditions inlined
    conditions: dict[str, dict[str, ast.Expr]] = field(default_factory=dict)


class _Ctx:
    def __init__(self, files: Sequence[ast.PolicyFile], *, quiet: bool = False) -> None:
        self.sources = {f.path: f.source for f in files}
        self.out: list[Diagnostic] = []
        self.quiet = quiet
        #: id of an expanded named condition -> its expanded size (nodes)
        self.sizes: dict[int, int] = {}

    def err(
        self,
        code: str,
        message: str,
        span: ast.Span,
        *,
        hint: str | None = None,
        severity: Any = "error",
    ) -> None:
        if self.quiet:
            return
        end_col = span.end_col if span.end_line == span.line else None
        self.out.append(
            make(
                code,
                message,
                file=span.file,
                source=self.sources.get(span.file, ""),
                line=span.line,
                col=span.col,
                end_col=end_col,
                hint=hint,
                severity=severity,
            )
        )


def check(files: Sequence[ast.PolicyFile], names: Mapping[str, str] | None = None) -> CheckResult:
    """Check every file together (namespaces, ids and tool names are global).

    ``names`` maps a file's path as given to the name the compiled program
    records for it (default: as given): a rule without ``@id`` is named
    ``NAME:LINE`` by it, and every rule's id must be unique.
    """
    ctx = _Ctx(files)
    result = CheckResult(diagnostics=ctx.out)
    for file in files:
        _check_characters(ctx, file)
    result.conditions = _check_named_conditions(ctx, files)
    requirements: dict[str, ast.Requirement] = {}
    actions: dict[str, set[str]] = {}
    for file in files:
        for req in file.requirements:
            _check_requirement(ctx, req)
            first = requirements.get(req.tool)
            if first is not None:
                ctx.err(
                    "SOS202",
                    f"requirement {req.tool} is already declared at {first.tool_span}",
                    req.tool_span,
                )
                continue
            requirements[req.tool] = req
            if req.action is not None:
                actions.setdefault(req.namespace, set()).add(req.action)
    ids: dict[str, ast.Span] = {}
    policies: dict[str, ast.ToolPolicyDecl] = {}
    policy_names = {tp.name for f in files for tp in f.tool_policies}
    tests: dict[str, ast.TestBlock] = {}
    for file in files:
        for stmt in file.statements:
            if isinstance(stmt, ast.Rule):
                _check_rule(
                    ctx,
                    stmt,
                    actions,
                    ids,
                    result.patterns,
                    result.conditions.get(stmt.namespace, {}),
                )
            elif isinstance(stmt, ast.ToolPolicyDecl):
                if stmt.name in policies:
                    ctx.err(
                        "SOS305",
                        f"toolpolicy {stmt.name} is already declared at {policies[stmt.name].name_span}",
                        stmt.name_span,
                    )
                    continue
                policies[stmt.name] = stmt
                policy = _check_toolpolicy(ctx, stmt)
                if policy is not None:
                    result.tool_policies[stmt.name] = policy
            elif isinstance(stmt, ast.TestBlock):
                if stmt.name in tests:
                    ctx.err(
                        "SOS404",
                        f"test {stmt.name!r} is already declared at {tests[stmt.name].span}",
                        stmt.span,
                    )
                else:
                    tests[stmt.name] = stmt
                _check_test(ctx, stmt, requirements, policy_names)
    _check_automatic_ids(ctx, files, ids, names or {})
    return result


def _check_automatic_ids(
    ctx: _Ctx,
    files: Sequence[ast.PolicyFile],
    explicit: Mapping[str, ast.Span],
    names: Mapping[str, str],
) -> None:
    """A rule without ``@id`` is named ``FILE:LINE`` (FILE as the program records
    it): two such rules on one line, or an ``@id`` spelt as another rule's
    automatic id, would give two rules one id, and a decision, its evidence and
    every report citing it could not say which of them decided."""
    automatic: dict[str, ast.Rule] = {}
    for file in files:
        recorded = names.get(file.path, file.path)
        for rule in file.rules:
            if rule.explicit_id:
                continue
            rid = f"{recorded}:{rule.span.line}"
            first = automatic.get(rid)
            if rid in explicit:
                ctx.err(
                    "SOS210",
                    f"rule id {rid!r} is the automatic id of the {rule.effect} at {rule.span} "
                    "(a rule without @id is named FILE:LINE)",
                    explicit[rid],
                    hint="give this rule another @id, or give the rule at "
                    f"{rule.span} an @id of its own",
                )
            elif first is not None:
                ctx.err(
                    "SOS210",
                    f"the {rule.effect} at {rule.span} and the {first.effect} at {first.span} "
                    f"share the automatic id {rid!r} (a rule without @id is named FILE:LINE)",
                    rule.span,
                    hint="put each rule on its own line (sharedos-policy fmt does), or give it "
                    "an @id",
                )
            else:
                automatic[rid] = rule


# ----------------------------------------------------------------- requirements


def _check_requirement(ctx: _Ctx, req: ast.Requirement) -> None:
    if not is_valid_tool_name(req.tool):
        ctx.err("SOS206", f"{req.tool!r} is not a valid tool name", req.tool_span)
    elif "." in req.tool and req.tool.split(".", 1)[0] != req.namespace:
        # Rules govern only their namespace's requirements: a files.* tool
        # declared elsewhere would escape every forbid of namespace files. (A
        # name without a dot claims no namespace: external contracts fix some
        # tool names, such as the MCP conformance suite's test_wait.)
        prefix = req.tool.split(".", 1)[0]
        where = (
            "before any 'namespace' statement (namespace 'default')"
            if req.namespace == ast.DEFAULT_NAMESPACE
            else f"in namespace {req.namespace!r}"
        )
        ctx.err(
            "SOS212",
            f"requirement {req.tool} is declared {where}: the rules of namespace "
            f"{prefix!r}, forbids included, would not govern it",
            req.tool_span,
            hint=f"declare it after 'namespace {prefix}'"
            + (
                ""
                if req.namespace == ast.DEFAULT_NAMESPACE
                else f", or name the tool {req.namespace}.<name> if it belongs to namespace {req.namespace!r}"
            ),
        )
    if req.action is None:
        ctx.err("SOS209", f"requirement {req.tool} has no 'action NAME'", req.tool_span)
    if req.resource is None:
        ctx.err("SOS209", f"requirement {req.tool} has no 'resource EXPR'", req.tool_span)
        return
    res = req.resource
    if isinstance(res, ast.PathResource):
        if res.arg.root != "args" or not res.arg.path:
            ctx.err(
                "SOS208",
                f"path() of a resource must read an argument such as args.path, not {res.arg.dotted}",
                res.arg.span,
            )
        return
    holes = [p for p in res.parts if isinstance(p, ast.Ref)]
    for hole in holes:
        if hole.root != "args" or not hole.path:
            ctx.err(
                "SOS208",
                f"resource template holes read arguments ({{args.name}}), not {{{hole.dotted}}}",
                hole.span,
            )
    if not holes:
        ctx.err(
            "SOS208",
            "resource template has no {args.x} hole: every call would have the same resource",
            res.span,
            severity="warning",
        )
    # Segment structure: the literal text decides where '/' splits segments.
    text = "".join(p if isinstance(p, str) else "\x00" for p in res.parts)
    body = text[1:] if text.startswith("/") else text
    for seg in body.split("/"):
        if seg == "" or seg in (".", ".."):
            ctx.err(
                "SOS208",
                f"resource template {res.raw!r} has an empty, '.' or '..' segment",
                res.span,
            )
            break
    if _CONTROL_RE.search(text.replace("\x00", "")):
        ctx.err("SOS208", "resource template contains a control character", res.span)


# ------------------------------------------------------------------------ rules


def _check_rule(
    ctx: _Ctx,
    rule: ast.Rule,
    actions: dict[str, set[str]],
    ids: dict[str, ast.Span],
    patterns: dict[str, dict[str, Any]],
    names: Mapping[str, ast.Expr],
) -> None:
    known = actions.get(rule.namespace, set())
    spans = rule.action_spans or (rule.span,) * len(rule.actions)
    for action, span in zip(rule.actions, spans, strict=False):
        if action == "*":
            if not known:
                ctx.err(
                    "SOS201",
                    f"'*' names no action: namespace {rule.namespace!r} has no requirements",
                    span,
                    hint=f"add a requirement to namespace {rule.namespace!r} or move the rule to the namespace it governs",
                )
        elif action not in known:
            listing = ", ".join(sorted(known)) or "none"
            ctx.err(
                "SOS201",
                f"no requirement of namespace {rule.namespace!r} has action {action!r}"
                + _did_you_mean(action, known),
                span,
                hint=f"actions of namespace {rule.namespace!r}: {listing}",
            )
    seen_ann: set[str] = set()
    for ann in rule.annotations:
        if ann.name not in ANNOTATIONS:
            ctx.err(
                "SOS211",
                f"unknown annotation @{ann.name}" + _did_you_mean(ann.name, ANNOTATIONS),
                ann.span,
            )
            continue
        if ann.name in seen_ann:
            ctx.err("SOS211", f"a rule takes one @{ann.name}", ann.span)
            continue
        seen_ann.add(ann.name)
        if ann.name != "id":
            continue
        if not ann.value or _CONTROL_RE.search(ann.value):
            ctx.err(
                "SOS210",
                "a rule id must be a non-empty string without control characters",
                ann.span,
            )
            continue
        if ann.value in ids:
            ctx.err(
                "SOS210", f"rule id {ann.value!r} is already used at {ids[ann.value]}", ann.span
            )
        else:
            ids[ann.value] = ann.span
    try:
        if rule.pattern.raw not in patterns:
            patterns[rule.pattern.raw] = parse_pattern(rule.pattern.raw)
    except PatternSyntaxError as exc:
        sp = rule.pattern.span
        # +1 for the opening quote (exact unless the literal used escapes)
        col = sp.col + 1 + exc.offset
        ctx.err(
            "SOS207",
            f"invalid pattern {rule.pattern.raw!r}: {exc}",
            ast.Span(sp.file, sp.line, col, sp.line, col + max(exc.length, 1)),
        )
    parsed = patterns.get(rule.pattern.raw)
    glob_escape = _GLOB_ESCAPE_RE.search(_literal_text(ctx, rule.pattern.span))
    if parsed is not None and glob_escape is not None:
        # '\u002a' decodes to '*', which is a glob all the same: the text reads as
        # an escaped (literal) star and matches every name in its segment.
        escape = glob_escape.group(1)
        ctx.err(
            "SOS207",
            f"pattern {rule.pattern.raw!r} writes {chr(int(escape[2:], 16))!r} as the escape "
            f"{escape}, which is pattern syntax all the same: a pattern has no literal "
            "'*', '{' or '}'",
            rule.pattern.span,
            hint="write the glob or the {context.x} hole as such, without escapes",
        )
    if parsed is not None and _interpolates_now(parsed):
        ctx.err(
            "SOS207",
            f"pattern {rule.pattern.raw!r} interpolates context.now, which changes with "
            "every call: a pattern names resources, not times",
            rule.pattern.span,
            hint="test the time in a condition: when context.now.hour >= 9",
        )
    for condition in rule.conditions:
        _check_condition(ctx, condition, names)
        size = _expanded_size(condition, names, ctx.sizes)
        if size > MAX_EXPANDED_NODES:
            _too_large(ctx, f"this {rule.effect} condition", size, condition.span)
    if rule.effect == "approval":
        _check_approvers(ctx, rule)


#: an escape in a pattern literal that decodes to glob or hole syntax
_GLOB_ESCAPE_RE = re.compile(
    r"(?<!\\)(?:\\\\)*(\\(?:u00(?:2[aA]|7[bBdD])|U0000(?:002[aA]|007[bBdD])))"
)


def _literal_text(ctx: _Ctx, span: ast.Span) -> str:
    """The source text of a one-line literal at ``span`` ("" when unknown)."""
    if span.end_line != span.line:
        return ""
    return source_line(ctx.sources.get(span.file, ""), span.line)[span.col - 1 : span.end_col - 1]


def _check_approvers(ctx: _Ctx, rule: ast.Rule) -> None:
    """An approval rule names who may approve: roles and host-resolved groups, each once."""
    seen: dict[tuple[str, str], ast.Span] = {}
    for approver in rule.approvers:
        name = approver.name
        problem = None
        if not name or name != name.strip():
            problem = "is empty or starts or ends with white space"
        elif _CONTROL_RE.search(name):
            problem = "contains a control character"
        elif not unicodedata.is_normalized("NFC", name):
            problem = "is not in Unicode NFC (a role or group name has one spelling)"
        if problem is not None:
            ctx.err("SOS216", f"approver {approver.kind} {name!r} {problem}", approver.span)
            continue
        key = (approver.kind, name)
        if key in seen:
            ctx.err(
                "SOS216",
                f"approver {approver.kind} {name!r} is already listed at {seen[key]}",
                approver.span,
            )
            continue
        seen[key] = approver.span


def _interpolates_now(penc: Mapping[str, Any]) -> bool:
    return any(
        seg[0] == "G" and any(p[0] == "c" and p[1][:1] == ["now"] for p in seg[1])
        for seg in penc["segs"]
    )


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ------------------------------------------------------------ named conditions


def named_conditions(files: Sequence[ast.PolicyFile]) -> dict[str, dict[str, ast.Expr]]:
    """The named conditions of ``files`` per namespace, inlined (the faulty ones left out)."""
    return _check_named_conditions(_Ctx(files, quiet=True), files)


def _check_named_conditions(
    ctx: _Ctx, files: Sequence[ast.PolicyFile]
) -> dict[str, dict[str, ast.Expr]]:
    """Check every ``condition NAME = EXPR``; return them inlined, per namespace."""
    decls: dict[str, dict[str, ast.ConditionDecl]] = {}
    for file in files:
        for decl in file.conditions:
            mine = decls.setdefault(decl.namespace, {})
            if decl.name in ast.REF_ROOTS or is_keyword(decl.name) or decl.name in FUNCTIONS:
                ctx.err(
                    "SOS214",
                    f"{decl.name!r} cannot name a condition: it is a "
                    + (
                        "root conditions read"
                        if decl.name in ast.REF_ROOTS
                        else "keyword"
                        if is_keyword(decl.name)
                        else "function"
                    ),
                    decl.name_span,
                )
            elif decl.name in mine:
                ctx.err(
                    "SOS214",
                    f"condition {decl.name} is already declared in namespace "
                    f"{decl.namespace!r} at {mine[decl.name].name_span}",
                    decl.name_span,
                )
            else:
                mine[decl.name] = decl
    out: dict[str, dict[str, ast.Expr]] = {}
    for ns, named in decls.items():
        resolved: dict[str, ast.Expr] = {}
        failed: set[str] = set()
        for name in named:
            _resolve(ctx, name, named, resolved, [], failed)
        out[ns] = resolved
        for decl in named.values():
            if decl.name in resolved:
                _check_condition(ctx, decl.expr, resolved, boolean=False)
    return out


def _resolve(
    ctx: _Ctx,
    name: str,
    named: Mapping[str, ast.ConditionDecl],
    resolved: dict[str, ast.Expr],
    stack: list[str],
    failed: set[str],
) -> ast.Expr | None:
    """``name`` inlined, or ``None`` (reported once) if it or a condition it uses is faulty.

    Each name is resolved once, failures included: ``c1 = c0 and c0``, ``c2 =
    c1 and c1``, ... over a faulty ``c0`` would otherwise resolve (and report)
    ``c0`` once per path to it, 2**n times.
    """
    if name in resolved:
        return resolved[name]
    if name in failed:
        return None
    if name in stack:
        members = stack[stack.index(name) :]
        for i, member in enumerate(members):
            if member not in failed:
                cycle = " -> ".join([*members[i:], *members[:i], member])
                ctx.err(
                    "SOS215",
                    f"condition {member} refers to itself ({cycle})",
                    named[member].name_span,
                )
                failed.add(member)
        return None
    decl = named[name]
    stack.append(name)
    uses: dict[str, ast.Expr] = {}
    ok = True
    for node in ast.walk(decl.expr):
        if isinstance(node, ast.Ref) and not node.path and node.root in named:
            sub = _resolve(ctx, node.root, named, resolved, stack, failed)
            if sub is None:
                ok = False
            else:
                uses[node.root] = sub
    stack.pop()
    size = _expanded_size(decl.expr, uses, ctx.sizes) if ok else 0
    if ok and size > MAX_EXPANDED_NODES:
        _too_large(ctx, f"condition {name}", size, decl.name_span)
        ok = False
    if not ok:
        failed.add(name)
        return None
    expr = ast.inline(decl.expr, uses) if uses else decl.expr
    resolved[name] = expr
    ctx.sizes[id(expr)] = size
    return expr


def _expanded_size(expr: ast.Expr, names: Mapping[str, ast.Expr], sizes: Mapping[int, int]) -> int:
    """The nodes ``expr`` has once its named conditions are expanded (linear in ``expr``'s text)."""
    total = 0
    for node in ast.walk(expr):
        if isinstance(node, ast.Ref) and not node.path and node.root in names:
            total += sizes.get(id(names[node.root]), 1)
        elif isinstance(node, ast.ListExpr) and all(
            isinstance(item, ast.Literal) for item in node.items
        ):
            total += 1 - len(node.items)  # the walk counts each item once more
        else:
            total += 1
    return total


def _too_large(ctx: _Ctx, what: str, size: int, span: ast.Span) -> None:
    ctx.err(
        "SOS217",
        f"{what} expands to {size:,} nodes, more than {MAX_EXPANDED_NODES:,}: "
        "each use of a named condition is a copy of its expression",
        span,
    )


# ----------------------------------------------------------------- expressions


def _kind_of(expr: ast.Expr, names: Mapping[str, ast.Expr]) -> str:
    """A cheap static type: exact for literals, refs to resource/action, named conditions and calls."""
    t = type(expr)
    if t is ast.Compare or t is ast.BoolOp or t is ast.Not or t is ast.Has:
        return BOOLEAN
    if isinstance(expr, ast.Literal):
        v = expr.value
        if isinstance(v, bool):
            return BOOLEAN
        if isinstance(v, int | float):
            return NUMBER
        return STRING
    if isinstance(expr, ast.ListExpr):
        return LIST
    if isinstance(expr, ast.Ref):
        if expr.root in ("resource", "action") and not expr.path:
            return STRING
        if not expr.path and expr.root in names:
            return _kind_of(names[expr.root], names)
        return ANY
    if isinstance(expr, ast.Call):
        fn = FUNCTIONS.get(expr.func)
        return fn.result if fn is not None else ANY
    if isinstance(expr, ast.Concat):
        return STRING
    return BOOLEAN


def _check_condition(
    ctx: _Ctx, expr: ast.Expr, names: Mapping[str, ast.Expr], *, boolean: bool = True
) -> None:
    """Every problem of a condition: each subexpression checked on its own."""
    if boolean:
        _expect_boolean(ctx, expr, names)
    for node in ast.walk(expr):
        _check_node(ctx, node, names)


def _expect_boolean(ctx: _Ctx, expr: ast.Expr, names: Mapping[str, ast.Expr]) -> None:
    kind = _kind_of(expr, names)
    if kind not in (BOOLEAN, ANY):
        ctx.err("SOS204", f"expected a boolean condition, found a {kind}", expr.span)


def _expect(ctx: _Ctx, expr: ast.Expr, names: Mapping[str, ast.Expr], want: str, what: str) -> None:
    kind = _kind_of(expr, names)
    if want == INTEGER:
        # segment(resource, 1.0) would check clean and always error at run time
        if isinstance(expr, ast.Literal) and type(expr.value) is float:
            ctx.err(
                "SOS204",
                f"{what} takes an integer, found {expr.value!r}",
                expr.span,
                hint="write the position without a fraction or exponent: 1 is the first segment, -1 the last",
            )
            return
        want = NUMBER
    if want != ANY and kind not in (want, ANY):
        ctx.err("SOS204", f"{what} takes a {want}, found a {kind}", expr.span)


def _check_node(ctx: _Ctx, expr: ast.Expr, names: Mapping[str, ast.Expr]) -> None:
    """The checks of one node given its children's static types (not the children's own)."""
    if type(expr) is ast.Literal:
        return
    if isinstance(expr, ast.Ref):
        if expr.root in names:
            if expr.path:
                ctx.err(
                    "SOS204",
                    f"{expr.root} is a named condition; it has no attribute {expr.path[0]!r}",
                    expr.span,
                )
        elif expr.root not in ast.REF_ROOTS:
            ctx.err(
                "SOS203",
                f"undefined name {expr.dotted!r}"
                + _did_you_mean(expr.root, (*ast.REF_ROOTS, *names)),
                expr.span,
                hint="conditions read context.*, args.*, resource, action and the named "
                "conditions of their namespace; quote it if you meant a string",
            )
        elif expr.root in ("resource", "action") and expr.path:
            ctx.err(
                "SOS204",
                f"{expr.root} is a string; it has no attribute {expr.path[0]!r}",
                expr.span,
            )
    elif isinstance(expr, ast.Call):
        fn = FUNCTIONS.get(expr.func)
        if fn is None:
            ctx.err(
                "SOS205",
                f"unknown function {expr.func!r}" + _did_you_mean(expr.func, FUNCTIONS),
                expr.span,
            )
            return
        if len(expr.args) != len(fn.params):
            n = len(fn.params)
            ctx.err(
                "SOS213",
                f"{fn.signature} takes {n} argument{'s' if n != 1 else ''}, got {len(expr.args)}",
                expr.span,
            )
        for arg, want in zip(expr.args, fn.params, strict=False):
            _expect(ctx, arg, names, want, f"{expr.func}()")
        if expr.func == "segment" and len(expr.args) == 2:
            pos = expr.args[1]
            if isinstance(pos, ast.Literal) and type(pos.value) is int and pos.value == 0:
                ctx.err(
                    "SOS204",
                    "segment(s, 0) never exists: 1 is the first segment and -1 the last",
                    pos.span,
                )
        if expr.func == "path" and expr.args:
            arg = expr.args[0]
            if (
                isinstance(arg, ast.Literal)
                and isinstance(arg.value, str)
                and not arg.value.startswith("/")
            ):
                ctx.err(
                    "SOS204", f"path({arg.value!r}) is not absolute and never resolves", arg.span
                )
    elif isinstance(expr, ast.Compare):
        lk, rk = _kind_of(expr.left, names), _kind_of(expr.right, names)
        if expr.op in ("in", "not in"):
            if rk not in (LIST, ANY):
                ctx.err(
                    "SOS204",
                    f"'{expr.op}' needs a list on the right, found a {rk}"
                    + ("; for a substring use contains(haystack, needle)" if rk == STRING else ""),
                    expr.right.span,
                )
        elif expr.op in ORDERING:
            for side, kind in ((expr.left, lk), (expr.right, rk)):
                if kind not in (NUMBER, ANY):
                    ctx.err("SOS204", f"'{expr.op}' orders numbers, found a {kind}", side.span)
        elif ANY not in (lk, rk) and lk != rk:
            ctx.err(
                "SOS204",
                f"'{expr.op}' compares a {lk} with a {rk}: the result is always {'false' if expr.op == '==' else 'true'}",
                expr.span,
            )
    elif isinstance(expr, ast.Concat):
        for operand in expr.operands:
            _expect(ctx, operand, names, STRING, "'+'")
    elif isinstance(expr, ast.BoolOp):
        for operand in expr.operands:
            _expect_boolean(ctx, operand, names)
    elif isinstance(expr, ast.Not):
        _expect_boolean(ctx, expr.operand, names)
    elif isinstance(expr, ast.Has):
        ref = expr.ref
        if ref.root in ("args", "context") and not ref.path:
            ctx.err(
                "SOS204",
                f"'has {ref.root}' tests nothing: name the attribute, e.g. has {ref.root}.x",
                expr.span,
            )
        elif ref.root in ("resource", "action") or ref.root in names:
            ctx.err(
                "SOS204",
                f"'has' tests an attribute of args or context, not {ref.dotted}",
                expr.span,
                hint="write has args.x or has context.attributes.x",
            )


# ------------------------------------------------------------------ characters

#: what _check_characters looks at: everything but tab, LF, printable ASCII and the CR
#: of a CRLF (a CR alone ends a line for editors and terminals, not for a comment)
_SUSPECT_RE = re.compile(r"[^\t\n\r\x20-\x7e]|\r(?!\n)")
#: Unicode categories that change how text displays without being seen:
#: format characters (bidi controls, zero-width marks) and line/paragraph separators.
INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})
#: ... and control characters (tab, LF and the CR of a CRLF never reach the check)
_FLAGGED_CATEGORIES = INVISIBLE_CATEGORIES | {"Cc"}


def _check_characters(ctx: _Ctx, file: ast.PolicyFile) -> None:
    """Warn about raw invisible or bidirectional characters anywhere in the text
    (Trojan Source: they make code read differently than it runs), the
    default-ignorable code points Unicode renders as nothing included."""
    # A raw control character (other than tab, LF, a CRLF's CR) is one too: VT,
    # FF, the C0 separators, NEL and a CR alone end a line for editors, terminals
    # and str.splitlines, not for a '#' comment, so '# note<VT>forbid ...' shows a
    # forbid that is not there.
    text = file.source
    # where each line's '#' comment starts (its column)
    comment_at = {c.span.line: c.span.col for c in file.comments}
    shown: set[int] = set()  # lines with a flagged character so far
    line, line_start = 1, 0
    for m in _SUSPECT_RE.finditer(text):
        ch = m.group(0)
        flagged = unicodedata.category(ch) in _FLAGGED_CATEGORIES
        if not flagged and not ignorable(ch):
            continue
        line += text.count("\n", line_start, m.start())
        line_start = text.rfind("\n", 0, m.start()) + 1
        col = m.start() - line_start + 1
        if flagged:
            shown.add(line)  # past a CR or a VT the rest shows as code: warn there
        elif line not in shown and comment_at.get(line, col + 1) < col:
            # A default-ignorable code point that is no format character (a variation
            # selector, the combining grapheme joiner, a Hangul filler) shows as nothing:
            # in a string "/secret\u034f/**" reads as "/secret/**". In a comment it hides
            # nothing, as it neither moves nor ends other text (a bidi control, a line
            # separator or a CR does): the emoji selector of '# \u26a0\ufe0f keep this
            # first' was warned about, and failed check --strict, for no reason.
            continue
        name = unicodedata.name(ch, f"U+{ord(ch):04X}")
        ctx.err(
            "SOS106",
            f"invisible character U+{ord(ch):04X} ({name}): the text does not read as it runs",
            ast.Span(file.path, line, col, line, col + 1),
            hint=f"write it as the escape \\u{ord(ch):04x} inside a string"
            if ord(ch) <= 0xFFFF
            else f"write it as the escape \\U{ord(ch):08x} inside a string",
            severity="warning",
        )


# ------------------------------------------------------------------ toolpolicy


def _validator_message(err: Any) -> str:
    msg = str(err.get("msg", ""))
    return msg.removeprefix("Value error, ")


def _check_toolpolicy(ctx: _Ctx, decl: ast.ToolPolicyDecl) -> ToolPolicy | None:
    seen: dict[str, ast.Span] = {}
    ok = True
    for key, span in decl.clause_spans:
        if key in seen:
            ctx.err("SOS307", f"toolpolicy {decl.name} has more than one '{key}' clause", span)
            ok = False
        seen[key] = span
    if decl.mode is None:
        ctx.err("SOS307", f"toolpolicy {decl.name} has no 'mode strict|open'", decl.name_span)
        return None
    try:
        RunMode(decl.mode)
    except ValueError:
        ctx.err(
            "SOS306",
            f"toolpolicy mode must be 'strict' or 'open', got {decl.mode!r}",
            decl.mode_span or decl.name_span,
        )
        return None
    # Entries the field validators reject are located one by one (through the
    # same model, in open mode, so only the field check can fail).
    clean: dict[str, tuple[str, ...]] = {}
    for field_name, code in (
        ("managed", "SOS303"),
        ("harness_local", "SOS304"),
        ("external_direct", "SOS304"),
    ):
        entries: tuple[ast.ToolPolicyEntry, ...] = getattr(decl, field_name) or ()
        good: list[str] = []
        for entry in entries:
            try:
                ToolPolicy(name=decl.name, mode=RunMode.OPEN, **{field_name: (entry.value,)})
            except ValidationError as exc:
                ok = False
                ctx.err(code, _validator_message(exc.errors()[0]), entry.span)
                continue
            good.append(entry.value)
        clean[field_name] = tuple(good)
    try:
        policy = ToolPolicy(
            name=decl.name,
            mode=RunMode(decl.mode),
            managed=clean["managed"],
            harness_local=clean["harness_local"],
            external_direct=clean["external_direct"],
        )
    except ValidationError as exc:
        message = "; ".join(_validator_message(e) for e in exc.errors())
        if decl.mode == RunMode.STRICT and clean["external_direct"]:
            first = (decl.external_direct or ())[0]
            ctx.err("SOS301", message, _clause_span(decl, "external_direct") or first.span)
        elif decl.mode == RunMode.STRICT and not clean["harness_local"]:
            ctx.err("SOS302", message, _clause_span(decl, "harness_local") or decl.name_span)
        else:  # pragma: no cover - every validator is mapped above
            ctx.err("SOS307", message, decl.name_span)
        return None
    return policy if ok else None


def _clause_span(decl: ast.ToolPolicyDecl, key: str) -> ast.Span | None:
    for name, span in decl.clause_spans:
        if name == key:
            return span
    return None


# ------------------------------------------------------------------------ tests


def _check_test(
    ctx: _Ctx,
    test: ast.TestBlock,
    requirements: dict[str, ast.Requirement],
    policy_names: set[str],
) -> None:
    if test.policy is not None and test.policy not in policy_names:
        listing = ", ".join(sorted(policy_names)) or "none"
        ctx.err(
            "SOS405",
            f"test {test.name!r} runs under toolpolicy {test.policy!r}, which is not declared"
            + _did_you_mean(test.policy, policy_names),
            test.policy_span or test.span,
            hint=f"declared toolpolicies: {listing}",
        )
    if test.tool is None:
        ctx.err("SOS402", f"test {test.name!r} has no 'call TOOL {{...}}'", test.span)
    if test.expect_effect is None:
        ctx.err("SOS402", f"test {test.name!r} has no 'expect allow|deny|approval'", test.span)
    reason = test.expect_reason
    allowed_reasons = {r.value for r in DECISION_REASONS}
    if test.policy is not None:
        allowed_reasons.add(ReasonCode.NOT_IN_RUN_POLICY.value)
    if reason is not None and reason not in allowed_reasons:
        ctx.err(
            "SOS403",
            f"unknown reason {reason!r}",
            test.reason_span or test.span,
        )
    elif (
        reason is not None
        and test.expect_effect is not None
        and _EXPECTED_EFFECT.get(reason, "deny") != test.expect_effect
    ):
        ctx.err(
            "SOS403",
            f"reason {reason!r} cannot go with 'expect {test.expect_effect}'",
            test.reason_span or test.span,
        )
    if test.approver is not None:
        _check_test_approver(ctx, test)
    if test.tool is not None and test.tool not in requirements:
        expects_unavailable = test.expect_effect == "deny" and reason in (
            ReasonCode.TOOL_UNAVAILABLE,
            ReasonCode.NOT_IN_RUN_POLICY,
        )
        if not expects_unavailable:
            ctx.err(
                "SOS401",
                f"test {test.name!r} calls {test.tool!r}, which no requirement declares"
                + _did_you_mean(test.tool, requirements),
                test.tool_span or test.span,
            )


#: the keys of a test's ``approver {...}`` and what each must be
_APPROVER_KEYS = {
    "principal": "a string",
    "roles": "a list of strings",
    "groups": "a list of strings",
}


def _check_test_approver(ctx: _Ctx, test: ast.TestBlock) -> None:
    """``approver { principal: "maya", roles: [...], groups: [...] }``: who approved the call."""
    where = test.approver_span or test.span
    value = test.approver or {}
    if "principal" not in value:
        ctx.err("SOS406", f"test {test.name!r}: approver has no 'principal'", where)
    for key, sub in value.items():
        want = _APPROVER_KEYS.get(key)
        if want is None:
            ctx.err(
                "SOS406",
                f"test {test.name!r}: approver has no key {key!r} (it takes "
                f"{', '.join(_APPROVER_KEYS)})",
                where,
            )
            continue
        ok = (
            isinstance(sub, str) and bool(sub)
            if key == "principal"
            else isinstance(sub, list) and all(isinstance(x, str) and x for x in sub)
        )
        if not ok:
            ctx.err("SOS406", f"test {test.name!r}: approver {key} must be {want}", where)

"""Compile checked ASTs into the program: a JSON-ready decision tree.

The program is the single compiled form: ``PolicySet`` executes it and
bundles store it verbatim. Layout::

    {"requirements": {tool: {...}},
     "rules": {column: [one entry per rule], ..., "files": [...], "namespaces": [...]},
     "groups": [[rule position, ...], ...],
     "buckets": [0 | [[plain rule position, ...], {role: [rule position, ...]}
                      (, [[first, copy, ...], ...])], ...],
     "index": {ns: {action: [absolute walk, relative walk]}},
     "tool_policies": {name: ToolPolicy fields},
     "sources": {file: sha256},
     "reads_turn_id": bool,
     "reads_clock": bool,
     "approvals": {"rules": {column: [...], ...},        (only with approval rules)
                   "approvers": [[[kind, name], ...], ...],
                   "index": {ns: {action: [[absolute rule positions], [relative ...]]}}}}

The rule table is columnar (``ir.RULE_COLUMNS``): each rule's id, effect,
place, pattern, packed condition, description and ready-made matcher
(``matchers.static_spec``) sit at its position in one list per field. A
walk (``index``) is a segment trie over the literal prefixes of the
patterns whose nodes list the rule groups a resource reaching them can
meet; a decision descends it and reads one node. ``buckets`` (one per group,
``prefilter``) sorts the rules of a group by the role their condition needs,
so a decision looks up the caller's roles instead of testing each rule, and
names the copies of a rule in the group (tested once, through the first).
Everything is plain JSON that a decision uses as it is, so a bundle is ready once ``json.loads``
returns: no rule is re-parsed, no regex compiled, no index built.

Approval rules (``require approval by ...``) are kept apart, in
``approvals``: a table of the same columns (their ``effect`` is 1, so that a
condition that errors or an unsafe interpolation makes them apply: fail
closed, like a forbid), who may approve per rule, and per (namespace, action)
the positions of the rules over absolute and relative resources. They are
read only after a permit allowed a call (``sharedos.policy.approvals``); a
policy without them compiles to exactly the program it compiled to before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sharedos.policy import ast
from sharedos.policy.conditions import encode
from sharedos.policy.index import IndexBuilder
from sharedos.policy.ir import CONDITION_KINDS, RULE_COLUMNS, encode_rules
from sharedos.policy.matchers import MatchKind, static_spec
from sharedos.policy.patterns import is_context_dependent, literal_prefix, parse_pattern
from sharedos.policy.prefilter import context_plan, group_buckets, role_form

if TYPE_CHECKING:
    from sharedos.toolpolicy import ToolPolicy

_pack = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_CKIND: dict[str | None, int] = {k: i for i, k in enumerate(CONDITION_KINDS)}


def resource_text(res: ast.ResourceExpr) -> str:
    """A requirement's resource expression as source text."""
    if isinstance(res, ast.PathResource):
        return f"path({res.arg.dotted})"
    return '"' + res.raw + '"'


def encode_resource(res: ast.ResourceExpr) -> dict[str, Any]:
    """Requirement resource -> encoded form (``path`` or ``template``)."""
    if isinstance(res, ast.PathResource):
        return {"kind": "path", "arg": list(res.arg.path)}
    text_parts: list[list[Any]] = [[]]
    for part in res.parts:
        if isinstance(part, str):
            chunks = part.split("/")
            for i, chunk in enumerate(chunks):
                if i > 0:
                    text_parts.append([])
                if chunk:
                    text_parts[-1].append(["t", chunk])
        else:
            text_parts[-1].append(["h", list(part.path)])
    absolute = bool(res.raw.startswith("/"))
    segs = text_parts[1:] if absolute else text_parts
    return {"kind": "template", "abs": absolute, "segs": segs}


def rule_condition(
    rule: ast.Rule, named: Mapping[str, ast.Expr]
) -> tuple[ast.Expr | None, str | None]:
    """A rule's one compiled condition and its kind, named conditions inlined.

    ``when A unless B`` is ``A and not B`` with kind ``"when unless"`` (so the
    explainer can print it as written): it applies iff A holds and B does not,
    and an error in either makes the rule indeterminate, exactly as written.
    """
    when = ast.inline(rule.when, named) if rule.when is not None and named else rule.when
    unless = ast.inline(rule.unless, named) if rule.unless is not None and named else rule.unless
    if when is not None and unless is not None:
        return ast.BoolOp("and", (when, ast.Not(unless, unless.span)), rule.span), "when unless"
    if when is not None:
        return when, "when"
    if unless is not None:
        return unless, "unless"
    return None, None


def compile_program(
    files: Sequence[ast.PolicyFile],
    tool_policies: Mapping[str, ToolPolicy],
    patterns: Mapping[str, dict[str, Any]] | None = None,
    conditions: Mapping[str, Mapping[str, ast.Expr]] | None = None,
    names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Build the program from checked files (call only when the checker found no errors).

    ``patterns`` are the checker's parsed patterns (re-parsed when absent);
    ``conditions`` its named conditions per namespace, inlined. ``names``
    maps a file's path as given to the name the program records for it (a
    path relative to a declared root: the compiled program, and so its hash,
    does not depend on how paths were spelled on a command line).

    The stages, in order: the requirements (and which actions each namespace
    declares), the rule tables and walks, the source hashes, then the program
    assembled from them. Each stage is a function below; the order of the
    program's keys and of every list is what it always was, so a bundle's
    hash does not depend on how the compiler is organised.
    """
    renamed = names or {}

    def name(path: str) -> str:
        return renamed.get(path, path)

    requirements, ns_actions = _compile_requirements(files, name)
    tables = _Tables.declared(ns_actions, name, patterns or {}, conditions or {})
    for file in files:
        for rule in file.rules:
            tables.add(rule, ns_actions.get(rule.namespace, []))
    return _assemble(requirements, tables, tool_policies, _source_hashes(files, name))


def _compile_requirements(
    files: Sequence[ast.PolicyFile], name: Callable[[str], str]
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Stage 1: each tool's first complete requirement, encoded, and per namespace
    the actions its requirements declare (in the order first seen)."""
    requirements: dict[str, dict[str, Any]] = {}
    ns_actions: dict[str, list[str]] = {}
    for file in files:
        for req in file.requirements:
            if req.tool in requirements or req.action is None or req.resource is None:
                continue
            requirements[req.tool] = {
                "ns": req.namespace,
                "action": req.action,
                "resource_text": resource_text(req.resource),
                "resource": encode_resource(req.resource),
                "file": name(req.span.file),
                "line": req.span.line,
                "col": req.span.col,
            }
            acts = ns_actions.setdefault(req.namespace, [])
            if req.action not in acts:
                acts.append(req.action)
    return requirements, ns_actions


@dataclass
class _Tables:
    """Stage 2's state: the rule table and its walks, and the approval rules' table
    with who approves each and its per-action index."""

    rules: _Columns
    approvals: _Columns
    builder: IndexBuilder
    approvers: list[list[list[str]]] = field(default_factory=list)
    approval_index: dict[str, dict[str, list[list[int]]]] = field(default_factory=dict)

    @classmethod
    def declared(
        cls,
        ns_actions: Mapping[str, Sequence[str]],
        name: Callable[[str], str],
        patterns: Mapping[str, dict[str, Any]],
        named_by_ns: Mapping[str, Mapping[str, ast.Expr]],
    ) -> _Tables:
        """Empty tables, the walks declaring every (namespace, action) a requirement names."""
        builder = IndexBuilder()
        for ns, acts in ns_actions.items():
            for action in acts:
                builder.declare(ns, action)
        return cls(
            _Columns(name, patterns, named_by_ns), _Columns(name, patterns, named_by_ns), builder
        )

    def add(self, rule: ast.Rule, targets: Sequence[str]) -> None:
        """Add one rule for the declared actions ``targets`` of its namespace: an
        approval rule to the approval table, a permit or forbid to the table and walks."""
        actions = targets if "*" in rule.actions else [a for a in rule.actions if a in targets]
        if rule.effect == "approval":
            idx, penc = self.approvals.add(rule, forbid=True)
            self.approvers.append([[a.kind, a.name] for a in rule.approvers])
            side = 0 if penc["abs"] else 1
            by_action = self.approval_index.setdefault(rule.namespace, {})
            for action in dict.fromkeys(actions):
                by_action.setdefault(action, [[], []])[side].append(idx)
            return
        forbid = rule.effect == "forbid"
        idx, penc = self.rules.add(rule, forbid=forbid)
        prefix = tuple(literal_prefix(penc))
        for action in dict.fromkeys(actions):
            self.builder.add(rule.namespace, action, forbid, bool(penc["abs"]), prefix, idx)


def _source_hashes(files: Sequence[ast.PolicyFile], name: Callable[[str], str]) -> dict[str, str]:
    """Stage 3: each file's recorded name -> the sha256 of its text."""
    return {
        name(f.path): hashlib.sha256(f.source.encode("utf-8", "surrogatepass")).hexdigest()
        for f in files
    }


def _assemble(
    requirements: dict[str, dict[str, Any]],
    tables: _Tables,
    tool_policies: Mapping[str, ToolPolicy],
    sources: dict[str, str],
) -> dict[str, Any]:
    """Stage 4: the program, its keys in their fixed order (the bundle hash covers it)."""
    cols, approval_cols, builder = tables.rules, tables.approvals, tables.builder
    index = builder.build()  # before reading builder.groups, which it completes
    program: dict[str, Any] = {
        "requirements": requirements,
        "rules": cols.encoded(),
        "groups": builder.groups,
        # per group, the rules by the role they need (``prefilter``)
        "buckets": group_buckets(
            builder.groups, cols.cols["rkey"], cols.cols["rform"], cols.signatures()
        ),
        "index": index,
        "tool_policies": {
            name: policy.model_dump(mode="json") for name, policy in sorted(tool_policies.items())
        },
        "sources": sources,
        # Per-context caches are keyed without the turn id (AccessContext.cache_key),
        # so a policy that reads context.turn_id is never cached per context.
        "reads_turn_id": cols.reads_turn or approval_cols.reads_turn,
        # The host supplies context.now with every call only to a policy that reads it.
        "reads_clock": cols.reads_clock or approval_cols.reads_clock,
    }
    if approval_cols.n:
        program["approvals"] = {
            "rules": approval_cols.encoded(),
            "approvers": tables.approvers,
            "index": tables.approval_index,
        }
    return program


class _Columns:
    """One rule table being built column by column (``ir.RULE_COLUMNS``)."""

    def __init__(
        self,
        name: Any,
        patterns: Mapping[str, dict[str, Any]],
        named_by_ns: Mapping[str, Mapping[str, ast.Expr]],
    ) -> None:
        self.name = name
        self.patterns = patterns
        self.named_by_ns = named_by_ns
        self.cols: dict[str, list[Any]] = {column: [] for column in RULE_COLUMNS}
        self.n = 0
        self.files: dict[str, int] = {}
        self.namespaces: dict[str, int] = {}
        self.reads_turn = False
        self.reads_clock = False

    def add(self, rule: ast.Rule, *, forbid: bool) -> tuple[int, dict[str, Any]]:
        """Append ``rule``; (its position, its parsed pattern). ``forbid`` is the stored
        effect bit (a forbid, or an approval rule: both fail closed)."""
        penc = self.patterns.get(rule.pattern.raw) or parse_pattern(rule.pattern.raw)
        expr, kind = rule_condition(rule, self.named_by_ns.get(rule.namespace, {}))
        ctx_only = False
        enc = encode(expr) if expr is not None else None
        rkey, rform = role_form(enc, kind, forbid)
        if expr is not None:
            read, turn, clock = _reads(expr)
            # a condition on the time is not a property of the context: it
            # is evaluated on every call, never cached per context
            ctx_only = read <= {"context"} and not clock
            self.reads_turn = self.reads_turn or turn
            self.reads_clock = self.reads_clock or clock
        dynamic = is_context_dependent(penc)
        self.reads_turn = self.reads_turn or (dynamic and _interpolates_turn_id(penc))
        mkind: int
        plan = None
        if dynamic:
            mkind, depth, head, tail, tests = int(MatchKind.CONTEXT), 0, "", "", None
            plan = context_plan(penc)
        else:
            mkind, depth, head, tail, tests = static_spec(penc)
        fname = self.name(rule.span.file)
        idx = self.n
        self.n += 1
        for column, value in (
            ("id", rule.explicit_id or f"{fname}:{rule.span.line}"),
            ("effect", 1 if forbid else 0),
            ("file", self.files.setdefault(fname, len(self.files))),
            ("line", rule.span.line),
            ("col", rule.span.col),
            ("ns", self.namespaces.setdefault(rule.namespace, len(self.namespaces))),
            ("pattern", rule.pattern.raw),
            ("cond", _pack(enc) if enc is not None else None),
            ("ckind", _CKIND[kind]),
            ("ctx", 1 if ctx_only else 0),
            ("desc", rule.description),
            ("mkind", int(mkind)),
            ("mdepth", depth),
            ("mhead", head),
            ("mtail", tail),
            ("mtests", tests),
            ("rkey", rkey),
            ("rform", rform),
            ("mplan", plan),
        ):
            self.cols[column].append(value)
        return idx, penc

    def signatures(self) -> list[tuple[Any, ...]]:
        """Per rule, what decides whether it applies: pattern, condition and effect."""
        c = self.cols
        return list(zip(c["pattern"], c["cond"], c["ckind"], c["effect"], strict=True))

    def encoded(self) -> dict[str, Any]:
        """The table as the program stores it."""
        return encode_rules(self.cols, list(self.files), list(self.namespaces))


def _interpolates_turn_id(penc: Mapping[str, Any]) -> bool:
    return any(
        seg[0] == "G" and any(p[0] == "c" and p[1][:1] == ["turn_id"] for p in seg[1])
        for seg in penc["segs"]
    )


def _reads(expr: ast.Expr) -> tuple[set[str], bool, bool]:
    """The roots ``expr`` reads, and whether it reads ``context.turn_id`` and
    ``context.now`` (one walk)."""
    roots: set[str] = set()
    turn = clock = False
    for node in ast.walk(expr):
        if isinstance(node, ast.Ref):
            roots.add(node.root)
            if node.root == "context":
                turn = turn or node.path[:1] == ("turn_id",)
                clock = clock or node.path[:1] == ("now",)
    return roots, turn, clock

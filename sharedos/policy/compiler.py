"""Compile checked ASTs into the program: a JSON-ready decision tree.

The program is the single compiled form: ``PolicySet`` executes it and
bundles store it verbatim. Layout::

    {"requirements": {tool: {...}},
     "rules": [[id, effect, file, line, col, ns, pattern_raw, None, cond_enc | None,
                "when" | "unless" | "when unless" | None, context_only, description], ...],
     "index": {ns: {action: [forbid_abs, forbid_rel, permit_abs, permit_rel]}},
     "tool_policies": {name: ToolPolicy fields},
     "sources": {file: sha256}}

Each index entry lists the rules by their literal pattern prefix:
``{"projects/p1/src": [rule indexes], "": [...]}`` (segments joined by ``/``,
which no segment contains; ``""`` is the root). The runtime builds a segment
trie from it (``index.TrieNode``), and a decision walks the resource's
segments down that trie, so rules whose literal prefix differs from the
resource are never looked at. In a bundle (and in
``PolicySet.program``) each rule record and each ``[forbid_abs, ...]`` entry is
packed as one compact JSON string, decoded on first use: loading a bundle then
parses long strings rather than hundreds of thousands of small containers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from sharedos.policy import ast
from sharedos.policy.conditions import encode
from sharedos.policy.index import PrefixTable
from sharedos.policy.ir import encode_rule
from sharedos.policy.patterns import literal_prefix, parse_pattern
from sharedos.toolpolicy import ToolPolicy


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
    """
    known = patterns or {}
    named_by_ns = conditions or {}
    renamed = names or {}

    def name(path: str) -> str:
        return renamed.get(path, path)

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
    rules: list[list[Any]] = []
    reads_turn = False
    index: dict[str, dict[str, list[PrefixTable]]] = {}
    for ns, acts in ns_actions.items():
        index[ns] = {a: [{}, {}, {}, {}] for a in acts}
    for file in files:
        for rule in file.rules:
            penc = known.get(rule.pattern.raw) or parse_pattern(rule.pattern.raw)
            expr, kind = rule_condition(rule, named_by_ns.get(rule.namespace, {}))
            cond = encode(expr) if expr is not None else None
            ctx_only = False
            if expr is not None:
                read, turn = _reads(expr)
                ctx_only = read <= {"context"}
                reads_turn = reads_turn or turn
            reads_turn = reads_turn or _interpolates_turn_id(penc)
            idx = len(rules)
            rules.append(
                encode_rule(
                    rule.explicit_id or f"{name(rule.span.file)}:{rule.span.line}",
                    rule.effect,
                    name(rule.span.file),
                    rule.span.line,
                    rule.span.col,
                    rule.namespace,
                    rule.pattern.raw,
                    cond,
                    kind,
                    ctx_only,
                    rule.description,
                )
            )
            targets = ns_actions.get(rule.namespace, [])
            actions = targets if "*" in rule.actions else [a for a in rule.actions if a in targets]
            slot = (0 if rule.effect == "forbid" else 2) + (0 if penc["abs"] else 1)
            prefix = "/".join(literal_prefix(penc))
            for action in dict.fromkeys(actions):
                table = index[rule.namespace][action][slot]
                entry = table.get(prefix)
                if entry is None:
                    table[prefix] = [idx]
                else:
                    entry.append(idx)
    sources = {
        name(f.path): hashlib.sha256(f.source.encode("utf-8", "surrogatepass")).hexdigest()
        for f in files
    }
    return {
        "requirements": requirements,
        "rules": rules,
        "index": index,
        "tool_policies": {
            name: policy.model_dump(mode="json") for name, policy in sorted(tool_policies.items())
        },
        "sources": sources,
        # Per-context caches are keyed without the turn id (AccessContext.cache_key),
        # so a policy that reads context.turn_id is never cached per context.
        "reads_turn_id": reads_turn,
    }


def _interpolates_turn_id(penc: Mapping[str, Any]) -> bool:
    return any(
        seg[0] == "G" and any(p[0] == "c" and p[1][:1] == ["turn_id"] for p in seg[1])
        for seg in penc["segs"]
    )


def _reads(expr: ast.Expr) -> tuple[set[str], bool]:
    """The roots ``expr`` reads, and whether it reads ``context.turn_id`` (one walk)."""
    roots: set[str] = set()
    turn = False
    for node in ast.walk(expr):
        if isinstance(node, ast.Ref):
            roots.add(node.root)
            turn = turn or (node.root == "context" and node.path[:1] == ("turn_id",))
    return roots, turn

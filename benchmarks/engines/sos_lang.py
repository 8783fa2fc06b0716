"""The ``random`` workload (``workload_random``) as a ``.sos`` file."""

from __future__ import annotations

import json
from typing import Any

from benchmarks.workload_random import Expr, LangRule, RandomWorkload, Resource, Seg


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def expr_text(e: Expr) -> str:
    """An expression in SharedOS syntax (every compound in parentheses)."""
    kind = e[0]
    if kind == "named":
        return str(e[1])
    if kind == "lit":
        v = e[1]
        if v is True:
            return "true"
        if v is False:
            return "false"
        if isinstance(v, str):
            return _q(v)
        return repr(v)
    if kind == "list":
        return "[" + ", ".join(expr_text(x) for x in e[1]) + "]"
    if kind == "ref":
        return ".".join([e[1], *e[2]])
    if kind == "has":
        return "(has " + ".".join([e[1], *e[2]]) + ")"
    if kind == "call":
        return f"{e[1]}(" + ", ".join(expr_text(a) for a in e[2]) + ")"
    if kind == "cmp":
        return f"({expr_text(e[2])} {e[1]} {expr_text(e[3])})"
    if kind in ("and", "or"):
        return "(" + f" {kind} ".join(expr_text(o) for o in e[1:]) + ")"
    if kind == "concat":
        return "(" + " + ".join(expr_text(o) for o in e[1:]) + ")"
    if kind == "not":
        return f"(not {expr_text(e[1])})"
    raise ValueError(f"unknown expression {e!r}")


def _piece(p: tuple[Any, ...]) -> str:
    if p[0] == "t":
        return str(p[1])
    if p[0] == "w":
        return "*"
    return "{" + ".".join(["context", *p[1]]) + "}"


def seg_text(seg: Seg) -> str:
    """One pattern segment in glob syntax."""
    kind = seg[0]
    if kind == "lit":
        return str(seg[1])
    if kind == "star":
        return "*"
    if kind == "dstar":
        return "**"
    return "".join(_piece(p) for p in seg[1])


def pattern_text(rule: LangRule) -> str:
    """The rule's glob pattern."""
    body = "/".join(seg_text(s) for s in rule.pattern)
    return ("/" if rule.absolute else "") + body


def rule_text(rule: LangRule) -> str:
    """One rule in SharedOS syntax, with its id."""
    actions = "*" if rule.actions is None else ", ".join(rule.actions)
    text = f"@id({_q(rule.rule_id)})\n{rule.effect} {actions} on {_q(pattern_text(rule))}"
    if rule.when is not None:
        text += f" when {expr_text(rule.when)}"
    if rule.unless is not None:
        text += f" unless {expr_text(rule.unless)}"
    return text


def resource_text(res: Resource) -> str:
    """A requirement's resource expression."""
    if res.kind == "path":
        return f"path(args.{res.arg})"
    segs = []
    for seg in res.segs:
        segs.append("".join(v if k == "t" else "{args." + v + "}" for k, v in seg))
    return _q(("/" if res.absolute else "") + "/".join(segs))


def policy_text(wl: RandomWorkload) -> str:
    """The whole workload as one ``.sos`` file."""
    out = [f"namespace {wl.namespace}"]
    for tool, action in wl.tools.items():
        out.append(
            f"requirement {tool} {{ action {action}; resource {resource_text(wl.resources[tool])} }}"
        )
    for name, cond in wl.named.items():
        out.append(f"condition {name} = {expr_text(cond)}")
    out.extend(rule_text(r) for r in wl.rules)
    return "\n".join(out) + "\n"

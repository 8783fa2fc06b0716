"""Cedar adapter (``cedarpy``): the workload as Cedar policies over ``context``.

Translation (the idiomatic Cedar for path ACLs, as ToolHive and AgentCore
write MCP policies): the canonical path is ``context.path`` (a string);
``like`` patterns match it. Cedar's ``*`` crosses ``/`` and Cedar has no
string concatenation, so

- ``/p/**``      -> ``context.path == "/p" || context.path like "/p/*"``
- ``/p/*``       -> ``context.depth == k && context.path like "/p/*"``
- ``/p/*.md``    -> ``context.depth == k && context.path like "/p/*.md"``
- a pattern with ``{context.principal}`` is matched segment by segment over
  ``context.seg`` (``{"s0": "teams", "s1": ...}``), guarded by ``context.depth``
  so no attribute is ever missing (Cedar skips a policy that errors — a
  forbid would then *not* apply, which is not fail-closed); ``context.psafe``
  says whether the principal is safe to interpolate (docs, "Interpolation
  safety"): when it is not, a permit's principal segment matches nothing and
  a forbid's any one segment, as in SharedOS.

``context.roles`` is a set (``.contains``), arguments live in ``context.args``.
The policy set is parsed once into a ``cedarpy.PolicySet`` handle and the
(empty) entity set once into an ``Entities`` handle; each request's context is
serialised to JSON before timing (``is_authorized`` accepts it as a string),
so a decision is timed as Cedar's own work plus cedarpy's result decoding.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import cedarpy

from benchmarks.engines.base import Native
from benchmarks.engines.langref import safe_interpolation
from benchmarks.workload import Cond, Request, Rule, Seg, Workload


def _q(text: str) -> str:
    return json.dumps(text)


def _pattern(pattern: tuple[Seg, ...], forbid: bool = False) -> str:
    head, last = pattern[:-1], pattern[-1]
    if any(s[0] != "lit" for s in head) or last[0] == "principal":
        return _segment_pattern(pattern, forbid)
    prefix = "/" + "/".join(s[1] for s in head)
    base = prefix.rstrip("/")
    if last[0] == "dstar":
        if not head:
            return "true"
        return f"(context.path == {_q(prefix)} || context.path like {_q(prefix + '/*')})"
    if last[0] == "lit":
        return f"context.path == {_q(base + '/' + last[1])}"
    glob = "*" if last[0] == "star" else f"{last[1]}*{last[2]}"
    return f"context.depth == {len(pattern)} && context.path like {_q(base + '/' + glob)}"


def _segment_pattern(pattern: tuple[Seg, ...], forbid: bool) -> str:
    parts = []
    dstar = pattern[-1][0] == "dstar"
    fixed = len(pattern) - (1 if dstar else 0)
    parts.append(f"context.depth {'>=' if dstar else '=='} {fixed}")
    for i, s in enumerate(pattern[:fixed]):
        if s[0] == "lit":
            parts.append(f"context.seg.s{i} == {_q(s[1])}")
        elif s[0] == "principal" and forbid:  # an unsafe value: any one segment
            parts.append(f"(!context.psafe || context.seg.s{i} == context.principal)")
        elif s[0] == "principal":  # an unsafe value: nothing
            parts.append(f"context.psafe && context.seg.s{i} == context.principal")
        elif s[0] == "glob":
            parts.append(f"context.seg.s{i} like {_q(s[1] + '*' + s[2])}")
    return " && ".join(parts)


def _cond(cond: Cond) -> str:
    op = cond[0]
    if op == "role":
        return f"context.roles.contains({_q(cond[1])})"
    if op == "tenant":
        return f"context.tenant == {_q(cond[1])}"
    if op == "arg_eq":
        return f"context.args.{cond[1]} == {_q(cond[2])}"
    if op == "arg_in":
        return f"[{', '.join(_q(v) for v in cond[2])}].contains(context.args.{cond[1]})"
    if op == "arg_le":
        return f"context.args.{cond[1]} <= {int(cond[2])}"
    if op == "arg_gt":
        return f"context.args.{cond[1]} > {int(cond[2])}"
    if op == "and":
        return f"({_cond(cond[1])}) && ({_cond(cond[2])})"
    raise ValueError(f"unknown condition {cond!r}")


def rule_text(rule: Rule) -> str:
    """One rule as a Cedar policy."""
    if rule.star:
        action = "action"
    elif len(rule.actions) == 1:
        action = f"action == Action::{_q(rule.actions[0])}"
    else:
        action = "action in [" + ", ".join(f"Action::{_q(a)}" for a in rule.actions) + "]"
    text = f"@id({_q(rule.rule_id)})\n{rule.effect} (principal, {action}, resource)\n"
    text += f"  when {{ {_pattern(rule.pattern, rule.effect == 'forbid')} }}"
    if rule.cond is not None:
        text += f"\n  {'unless' if rule.unless else 'when'} {{ {_cond(rule.cond)} }}"
    return text + ";"


class CedarEngine:
    """Cedar via ``cedarpy.is_authorized`` with pre-parsed policy and entity handles."""

    name = "cedar"

    def __init__(self) -> None:
        from importlib.metadata import version

        self.version = f"cedarpy {version('cedarpy')}"
        self.policies: Any = None
        self.entities: Any = None

    def native(self, wl: Workload) -> dict[str, str]:
        """The Cedar policy file."""
        if getattr(wl, "kind", "") == "lang":
            from benchmarks.engines.base import Unsupported

            raise Unsupported("not translated yet")
        return {f"{wl.name}.cedar": "\n".join(rule_text(r) for r in wl.rules) + "\n"}

    def load(self, files: dict[str, str], wl: Workload) -> None:
        """``PolicySet.from_str`` (parse once, reuse)."""
        ((_, text),) = files.items()
        self.policies = cedarpy.PolicySet.from_str(text)
        self.entities = cedarpy.Entities.from_json_str("[]")

    def prepare(self) -> bool:
        """Cedar has no separate preparation step."""
        return False

    def translate(self, req: Request) -> Native:
        """A Cedar request: principal, action, resource, and the context as JSON text."""
        path = req.args["path"]
        segs = path[1:].split("/") if len(path) > 1 else []
        ctx = {
            "path": path,
            "depth": len(segs),
            "seg": {f"s{i}": s for i, s in enumerate(segs)},
            "principal": req.context["principal"],
            "psafe": safe_interpolation(req.context["principal"]) is not None,
            "tenant": req.context["tenant"],
            "roles": list(req.context["roles"]),
            "args": {k: v for k, v in req.args.items() if k != "path"},
        }
        request = {
            "principal": {"type": "User", "id": req.context["principal"]},
            "action": {"type": "Action", "id": req.tool.split(".", 1)[1]},
            "resource": {"type": "File", "id": path},
            "context": json.dumps(ctx),
        }
        return (request, self.policies, self.entities), {}

    @property
    def call(self) -> Callable[..., Any]:
        """``cedarpy.is_authorized``."""
        return cedarpy.is_authorized

    def allowed(self, answer: Any) -> bool:
        """``AuthzResult.allowed``; an evaluation error is a failure of the adapter, never a deny."""
        errors = answer.diagnostics.errors
        if errors:
            raise RuntimeError(f"cedar evaluation errors: {errors}")
        return bool(answer.allowed)

"""Rego adapter (``regopy``, the rego-cpp interpreter): one Rego rule body per workload rule.

Translation: the request is ``input`` = {action, path, segs, principal,
psafe, roles, tenant, args}. A permit is one body of the boolean rule ``permitted``,
a forbid one body of ``forbidden`` (OPA's incremental definitions: any body
that holds makes the rule true); ``allow`` is ``permitted and not forbidden``,
default false. Patterns:

- ``/p/**`` -> ``under(input.path, "/p")`` (equal, or starts with ``"/p/"``:
  exact on canonical paths);
- ``/p/*``, ``/p/*.md`` -> ``glob.match(pattern, ["/"], input.path)`` (``*``
  stays within a segment with ``/`` as the delimiter);
- a pattern with ``{context.principal}`` -> segment tests on ``input.segs``
  (Rego cannot interpolate into a glob without building the glob string per
  request), with ``count(input.segs)`` for the depth; ``input.psafe`` says
  whether the principal is safe to interpolate (docs, "Interpolation
  safety"): when it is not, a permit's principal segment matches nothing and
  a forbid's any one segment (``forbid_principal``), as in SharedOS;
- an ``unless`` condition is a helper rule negated with ``not``.

The module is compiled once into a bundle (``Interpreter.build``); a decision
is ``set_input`` + ``query_bundle``, timed together (the input is passed as a
pre-serialised JSON term), and the answer read from the query's binding.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import regopy

from benchmarks.engines.base import Native
from benchmarks.engines.langref import safe_interpolation
from benchmarks.workload import Cond, Request, Seg, Workload

HEADER = """package authz

import rego.v1

default allow := false

allow if {
    permitted
    not forbidden
}

under(p, prefix) if p == prefix

under(p, prefix) if startswith(p, concat("", [prefix, "/"]))

forbid_principal(s) if {
    input.psafe
    s == input.principal
}

forbid_principal(_) if not input.psafe
"""


def _q(text: str) -> str:
    return json.dumps(text)


def _pattern(pattern: tuple[Seg, ...], forbid: bool = False) -> list[str]:
    head, last = pattern[:-1], pattern[-1]
    if any(s[0] == "principal" for s in pattern) or any(s[0] != "lit" for s in head):
        return _segment_pattern(pattern, forbid)
    prefix = "/" + "/".join(s[1] for s in head)
    if last[0] == "dstar":
        return [f"under(input.path, {_q(prefix)})"] if head else []
    base = prefix.rstrip("/")
    if last[0] == "lit":
        return [f"input.path == {_q(base + '/' + last[1])}"]
    glob = "*" if last[0] == "star" else f"{last[1]}*{last[2]}"
    return [f'glob.match({_q(base + "/" + glob)}, ["/"], input.path)']


def _segment_pattern(pattern: tuple[Seg, ...], forbid: bool) -> list[str]:
    dstar = pattern[-1][0] == "dstar"
    fixed = len(pattern) - (1 if dstar else 0)
    out = [f"count(input.segs) {'>=' if dstar else '=='} {fixed}"]
    for i, s in enumerate(pattern[:fixed]):
        if s[0] == "lit":
            out.append(f"input.segs[{i}] == {_q(s[1])}")
        elif s[0] == "principal" and forbid:  # an unsafe value: any one segment
            out.append(f"forbid_principal(input.segs[{i}])")
        elif s[0] == "principal":  # an unsafe value: nothing
            out.extend(["input.psafe", f"input.segs[{i}] == input.principal"])
        elif s[0] == "glob":
            out.append(f"glob.match({_q(s[1] + '*' + s[2])}, [], input.segs[{i}])")
    return out


def _cond(cond: Cond) -> list[str]:
    op = cond[0]
    if op == "role":
        return [f"{_q(cond[1])} in input.roles"]
    if op == "tenant":
        return [f"input.tenant == {_q(cond[1])}"]
    if op == "arg_eq":
        return [f"input.args.{cond[1]} == {_q(cond[2])}"]
    if op == "arg_in":
        return [f"input.args.{cond[1]} in {{{', '.join(_q(v) for v in cond[2])}}}"]
    if op == "arg_le":
        return [f"input.args.{cond[1]} <= {int(cond[2])}"]
    if op == "arg_gt":
        return [f"input.args.{cond[1]} > {int(cond[2])}"]
    if op == "and":
        return _cond(cond[1]) + _cond(cond[2])
    raise ValueError(f"unknown condition {cond!r}")


def module_text(wl: Workload) -> str:
    """The whole workload as one Rego module."""
    out = [HEADER]
    for n, rule in enumerate(wl.rules):
        body: list[str] = []
        if not rule.star:
            if len(rule.actions) == 1:
                body.append(f"input.action == {_q(rule.actions[0])}")
            else:
                body.append(f"input.action in {{{', '.join(_q(a) for a in rule.actions)}}}")
        body.extend(_pattern(rule.pattern, rule.effect == "forbid"))
        if rule.cond is not None:
            if rule.unless:
                helper = f"cond_{n}"
                out.append(
                    f"# {rule.rule_id}: unless\n{helper} if {{\n    "
                    + "\n    ".join(_cond(rule.cond))
                    + "\n}\n"
                )
                body.append(f"not {helper}")
            else:
                body.extend(_cond(rule.cond))
        head = "forbidden" if rule.effect == "forbid" else "permitted"
        if not body:
            body = ["true"]
        out.append(f"# {rule.rule_id}\n{head} if {{\n    " + "\n    ".join(body) + "\n}\n")
    return "\n".join(out)


class RegoEngine:
    """Rego via regopy: ``Interpreter.build`` once, then ``set_input_term`` + ``query_bundle``."""

    name = "rego"

    def __init__(self) -> None:
        from importlib.metadata import version

        self.version = f"regopy {version('regopy')} (rego-cpp)"
        self.interp: Any = None
        self.bundle: Any = None

    def native(self, wl: Workload) -> dict[str, str]:
        """The Rego module."""
        if getattr(wl, "kind", "") == "lang":
            from benchmarks.engines.base import Unsupported

            raise Unsupported("not translated yet")
        return {"authz.rego": module_text(wl)}

    def load(self, files: dict[str, str], wl: Workload) -> None:
        """Add the module and build the bundle (compile)."""
        interp = regopy.Interpreter()
        ((_, text),) = files.items()
        interp.add_module("authz", text)
        self.bundle = interp.build("x = data.authz.allow")
        self.interp = interp

    def prepare(self) -> bool:
        """Rego has no separate preparation step."""
        return False

    def translate(self, req: Request) -> Native:
        """The input document as a JSON term."""
        path = req.args["path"]
        doc = {
            "action": req.tool.split(".", 1)[1],
            "path": path,
            "segs": path[1:].split("/") if len(path) > 1 else [],
            "principal": req.context["principal"],
            "psafe": safe_interpolation(req.context["principal"]) is not None,
            "roles": list(req.context["roles"]),
            "tenant": req.context["tenant"],
            "args": {k: v for k, v in req.args.items() if k != "path"},
        }
        return (json.dumps(doc),), {}

    @property
    def call(self) -> Callable[..., Any]:
        """``set_input_term`` then ``query_bundle``."""
        interp, bundle = self.interp, self.bundle

        def decide(term: str) -> Any:
            interp.set_input_term(term)
            return interp.query_bundle(bundle)

        return decide

    def allowed(self, answer: Any) -> bool:
        """The ``x`` binding of the query; a query error fails the run, never counts as a deny."""
        if not answer.ok():
            raise RuntimeError(f"rego query failed: {answer}")
        value = json.loads(str(answer.binding("x")))
        if type(value) is not bool:
            raise RuntimeError(f"rego answered {value!r}, not a boolean")
        return value

"""Casbin adapter (``pycasbin``): a model written for the workload plus one policy line per rule.

Model: requests carry (action, first path segment, path, principal, roles,
tenant, args); policy lines carry (action, first pattern segment, effect,
kind, glob, negate, and one column per condition kind). ``FastEnforcer`` is
keyed on (action, first segment) — the only index Casbin offers is exact
equality on leading fields — so a request scans only the lines of its action
and top-level directory; ``*`` actions are expanded into one line per action
for that index. A literal prefix followed by ``**`` matches with ``keyMatch`` (a string
prefix test, exact on canonical paths because the prefix ends in ``/``) or
equality with the prefix itself; other patterns with Casbin's ``globMatch``
(wcmatch with GLOBSTAR: ``*`` stays within a segment), which is several times
slower (it compiles the glob on every call); a
``{context.principal}`` segment is written ``{p}`` and substituted with
``str.replace`` in the matcher, by the principal escaped as a glob literal
(SharedOS inserts it literally); a principal unsafe to interpolate (docs,
"Interpolation safety") is a segment no path has in a permit (kind ``i``)
and ``*``, any one segment, in a forbid (kind ``j``), as in SharedOS. Effect: ``some(allow) && !some(deny)``
(forbid overrides permit, default deny). Casbin has no numeric comparison of
policy fields (they are strings), so the size bound uses two registered
functions, ``numLE``/``numGT`` — Casbin's documented way to extend matchers.
An ``unless`` rule has ``neg`` set: a line applies when its condition's
truth differs from ``neg`` (one copy of the condition in the matcher: pycasbin
re-parses the matcher on every ``enforce``, so its length is paid per call).
Casbin's per-request logging is switched off (it logs every deny at WARNING).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import casbin
from casbin.model import FastModel
from casbin.persist.adapters.string_adapter import StringAdapter

from benchmarks.engines.base import Native
from benchmarks.engines.langref import safe_interpolation
from benchmarks.workload import Cond, Request, Rule, Seg, Workload

_COND = (
    '(p.role == "" || p.role in r.roles)'
    ' && (p.tenant == "" || p.tenant == r.tenant)'
    ' && (p.eqk == "" || r.args[p.eqk] == p.eqv)'
    ' && (p.ink == "" || r.args[p.ink] in p.inv.split(" "))'
    ' && (p.lek == "" || numLE(r.args[p.lek], p.lev))'
    ' && (p.gtk == "" || numGT(r.args[p.gtk], p.gtv))'
)
_PATH = (
    '(p.kind == "k" && (r.path == p.base || keyMatch(r.path, p.pat))'
    ' || p.kind == "g" && globMatch(r.path, p.pat)'
    ' || p.kind == "i" && globMatch(r.path, p.pat.replace("{p}", r.principal))'
    ' || p.kind == "j" && globMatch(r.path, p.pat.replace("{p}", r.fprincipal)))'
)
MODEL = f"""
[request_definition]
r = act, top, path, principal, fprincipal, roles, tenant, args

[policy_definition]
p = act, top, eft, kind, pat, base, neg, role, tenant, eqk, eqv, ink, inv, lek, lev, gtk, gtv

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = ((p.neg == "") == ({_COND})) && {_PATH}
"""

_FIELDS = ("role", "tenant", "eqk", "eqv", "ink", "inv", "lek", "lev", "gtk", "gtv")


def _glob(pattern: tuple[Seg, ...]) -> str:
    out = []
    for s in pattern:
        if s[0] == "lit":
            out.append(s[1])
        elif s[0] == "star":
            out.append("*")
        elif s[0] == "glob":
            out.append(f"{s[1]}*{s[2]}")
        elif s[0] == "principal":
            out.append("{p}")
        else:
            out.append("**")
    return "/" + "/".join(out)


def _flatten(cond: Cond | None, out: dict[str, str]) -> None:
    if cond is None:
        return
    op = cond[0]
    if op == "and":
        _flatten(cond[1], out)
        _flatten(cond[2], out)
        return
    if op == "role":
        key, values = "role", {"role": cond[1]}
    elif op == "tenant":
        key, values = "tenant", {"tenant": cond[1]}
    elif op == "arg_eq":
        key, values = "eqk", {"eqk": cond[1], "eqv": cond[2]}
    elif op == "arg_in":
        key, values = "ink", {"ink": cond[1], "inv": " ".join(cond[2])}
    elif op == "arg_le":
        key, values = "lek", {"lek": cond[1], "lev": str(int(cond[2]))}
    elif op == "arg_gt":
        key, values = "gtk", {"gtk": cond[1], "gtv": str(int(cond[2]))}
    else:
        raise ValueError(f"unknown condition {cond!r}")
    if out.get(key):
        raise ValueError(f"the casbin model holds one {op} per rule: {cond!r}")
    out.update(values)


def policy_lines(rule: Rule) -> list[str]:
    """The policy lines of one rule (one per action: the index is exact on the action)."""
    if rule.pattern[0][0] != "lit":
        raise ValueError("the casbin model indexes on a literal first segment")
    fields: dict[str, str] = {}
    _flatten(rule.cond, fields)
    pat, base = _glob(rule.pattern), ""
    if any(s[0] == "principal" for s in rule.pattern):
        kind = "j" if rule.effect == "forbid" else "i"
    elif rule.pattern[-1][0] == "dstar" and all(s[0] == "lit" for s in rule.pattern[:-1]):
        # a literal prefix and "**": keyMatch's prefix test is exact on canonical
        # paths ("/p/*" needs the "/"), and the prefix itself is "/p/**" with zero segments
        kind, base, pat = "k", pat[:-3], pat[:-1]
    else:
        kind = "g"
    eft = "allow" if rule.effect == "permit" else "deny"
    rest = [fields.get(f, "") for f in _FIELDS]
    lines = []
    for action in rule.actions:
        row = [action, rule.pattern[0][1], eft, kind, pat, base, "1" if rule.unless else ""]
        lines.append("p, " + ", ".join(row + rest))
    return lines


# no canonical path holds a NUL: the segment a permit's unsafe principal matches
_NO_SEGMENT = "\x00"


def _glob_literal(value: str) -> str:
    """``value`` as a glob that matches exactly it (every non-alphanumeric escaped:
    globMatch reads ``* ? [ ] { } ,`` and ``\\`` as syntax, SharedOS inserts literally)."""
    return "".join(ch if ch.isalnum() else "\\" + ch for ch in value)


def _num_le(value: Any, bound: str) -> bool:
    return type(value) in (int, float) and value <= int(bound)


def _num_gt(value: Any, bound: str) -> bool:
    return type(value) in (int, float) and value > int(bound)


class CasbinEngine:
    """pycasbin ``FastEnforcer`` keyed on (action, first path segment)."""

    name = "casbin"

    def __init__(self) -> None:
        from importlib.metadata import version

        self.version = f"pycasbin {version('pycasbin')}"
        self.enforcer: Any = None
        logging.getLogger("casbin").setLevel(logging.CRITICAL)

    def native(self, wl: Workload) -> dict[str, str]:
        """``model.conf`` and ``policy.csv``."""
        if getattr(wl, "kind", "") == "lang":
            from benchmarks.engines.base import Unsupported

            raise Unsupported("not translated yet")
        lines = [line for r in wl.rules for line in policy_lines(r)]
        return {"model.conf": MODEL, "policy.csv": "\n".join(lines) + "\n"}

    def load(self, files: dict[str, str], wl: Workload) -> None:
        """Build the model from text and load every policy line into the fast index."""
        model = FastModel([0, 1])
        model.load_model_from_text(files["model.conf"])
        enforcer = casbin.FastEnforcer(
            model, StringAdapter(files["policy.csv"]), cache_key_order=[0, 1]
        )
        enforcer.add_function("numLE", _num_le)
        enforcer.add_function("numGT", _num_gt)
        logging.getLogger("casbin").setLevel(logging.CRITICAL)
        self.enforcer = enforcer

    def prepare(self) -> bool:
        """Casbin has no separate preparation step."""
        return False

    def translate(self, req: Request) -> Native:
        """The request values in the model's order."""
        path = req.args["path"]
        top = path[1:].split("/", 1)[0]
        args = {k: v for k, v in req.args.items() if k != "path"}
        principal = safe_interpolation(req.context["principal"])
        rvals = (
            req.tool.split(".", 1)[1],
            top,
            path,
            _glob_literal(principal) if principal is not None else _NO_SEGMENT,
            _glob_literal(principal) if principal is not None else "*",
            tuple(req.context["roles"]),
            req.context["tenant"],
            args,
        )
        return rvals, {}

    @property
    def call(self) -> Callable[..., Any]:
        """``FastEnforcer.enforce``."""
        return self.enforcer.enforce  # type: ignore[no-any-return]

    def allowed(self, answer: Any) -> bool:
        """``enforce`` answers a bool."""
        return bool(answer)

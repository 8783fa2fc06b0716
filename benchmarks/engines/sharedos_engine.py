"""SharedOS adapter: the workload as a ``.sos`` file, decided by ``PolicySet.decide``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from benchmarks.engines.base import Native
from benchmarks.workload import Cond, Request, Rule, Workload, pattern_text


def _q(text: str) -> str:
    return json.dumps(text)


def cond_text(cond: Cond) -> str:
    """A workload condition in SharedOS syntax."""
    op = cond[0]
    if op == "role":
        return f"{_q(cond[1])} in context.roles"
    if op == "tenant":
        return f"context.tenant == {_q(cond[1])}"
    if op == "arg_eq":
        return f"args.{cond[1]} == {_q(cond[2])}"
    if op == "arg_in":
        return f"args.{cond[1]} in [{', '.join(_q(v) for v in cond[2])}]"
    if op == "arg_le":
        return f"args.{cond[1]} <= {int(cond[2])}"
    if op == "arg_gt":
        return f"args.{cond[1]} > {int(cond[2])}"
    if op == "and":
        return f"{_paren(cond[1])} and {_paren(cond[2])}"
    raise ValueError(f"unknown condition {cond!r}")


def _paren(cond: Cond) -> str:
    text = cond_text(cond)
    return f"({text})" if cond[0] == "and" else text


def rule_text(rule: Rule, annotations: tuple[str, ...] = ()) -> str:
    """One rule in SharedOS syntax, with the requested annotations (``id``, ``description``)."""
    lines = []
    if "id" in annotations:
        lines.append(f"@id({_q(rule.rule_id)})")
    if "description" in annotations:
        lines.append(f"@description({_q('benchmark rule ' + rule.rule_id + ' of the workload')})")
    actions = "*" if rule.star else ", ".join(rule.actions)
    text = f"{rule.effect} {actions} on {_q(pattern_text(rule.pattern))}"
    if rule.cond is not None:
        text += f" {'unless' if rule.unless else 'when'} {cond_text(rule.cond)}"
    lines.append(text)
    return "\n".join(lines)


def policy_text(wl: Workload, annotations: tuple[str, ...] = ()) -> str:
    """The whole workload as one ``.sos`` file."""
    out = [f"namespace {wl.namespace}"]
    for tool, action in wl.tools.items():
        out.append(f"requirement {tool} {{ action {action}; resource path(args.path) }}")
    out.extend(rule_text(r, annotations) for r in wl.rules)
    return "\n".join(out) + "\n"


class SharedOSEngine:
    """SharedOS: ``compile_source`` then ``PolicySet.decide(tool, args, context, context_key=)``."""

    name = "sharedos"

    def __init__(self) -> None:
        import sharedos
        from sharedos.policy import COMPILER_VERSION

        self.version = (
            f"sharedos {getattr(sharedos, '__version__', '?')} (compiler {COMPILER_VERSION})"
        )
        self.policy: Any = None

    def warm_up(self) -> None:
        """Pay the once-per-process cost (SharedOS builds its Lark parser on first use).

        The cold-start probe measures that cost on its own; ``load_ms`` is the
        compile of the policy, comparable across sizes and workloads.
        """
        from sharedos.policy import compile_source

        compile_source("namespace warm\n", "warm.sos")

    def native(self, wl: Workload) -> dict[str, str]:
        """The ``.sos`` text."""
        if getattr(wl, "kind", "") == "lang":  # the random workload: the whole language
            from benchmarks.engines.sos_lang import policy_text as lang_text

            return {f"{wl.name}.sos": lang_text(wl)}  # type: ignore[arg-type]
        return {f"{wl.name}.sos": policy_text(wl)}

    def load(self, files: dict[str, str], wl: Workload) -> None:
        """``compile_source`` (parse, check, compile)."""
        from sharedos.policy import compile_source

        ((name, text),) = files.items()
        self.policy = compile_source(text, name)

    def prepare(self) -> bool:
        """``PolicySet.prepare()``: what a long-running host calls once at start-up."""
        prepare = getattr(self.policy, "prepare", None)
        if prepare is None:
            return False
        prepare()
        return True

    def translate(self, req: Request) -> Native:
        """``decide``'s arguments; the context key is the kernel's ``AccessContext.cache_key``."""
        return (req.tool, req.args, req.context), {"context_key": req.context_key}

    @property
    def call(self) -> Callable[..., Any]:
        """``PolicySet.decide``."""
        return self.policy.decide  # type: ignore[no-any-return]

    def allowed(self, answer: Any) -> bool:
        """``Decision.allowed``."""
        return bool(answer.allowed)

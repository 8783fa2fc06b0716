"""Sentences written for a model: what a refusal or failure means and whether retrying helps.

The bridge reuses them as the text block of an ``isError`` result. They name
the tool, the canonical resource and the rule ids, and say plainly that an
authorization decision does not change on retry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sharedos.kernel.policy_api import rule_location
from sharedos.outcomes import ReasonCode

_FINAL = "This is an authorization decision; retrying the same call will not succeed."


def shown_name(tool: object, limit: int = 80) -> str:
    """A tool name safe to quote in a sentence (repr'd when odd, truncated when long)."""
    text = tool if isinstance(tool, str) else repr(tool)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    printable = text.isprintable() and " " not in text
    return text if printable and text else repr(text)


def _rules(rule_ids: Iterable[Any]) -> str:
    refs = [rule_location(r) for r in rule_ids]
    if not refs:
        return ""
    return ("rule " if len(refs) == 1 else "rules ") + ", ".join(refs)


def refusal_message(
    reason: ReasonCode,
    tool: object,
    *,
    resource: str | None = None,
    rule_ids: Iterable[Any] = (),
    detail: str | None = None,
) -> str:
    """The model-facing sentence for a denial, a failure or a cancellation."""
    name = shown_name(tool)
    on = f" on {resource}" if resource else ""
    if reason is ReasonCode.TOOL_UNAVAILABLE:
        return (
            f"SharedOS has no tool named {name} available in this turn (tool_unavailable). {_FINAL}"
        )
    if reason is ReasonCode.NOT_IN_RUN_POLICY:
        return (
            f"SharedOS policy denied {name}: the tool is not in this run's managed tool set "
            f"(not_in_run_policy). {_FINAL}"
        )
    if reason is ReasonCode.NOT_IN_TURN_CATALOG:
        return (
            f"SharedOS policy denied {name}: the tool was not published in this turn's catalogue "
            f"(not_in_turn_catalog). {_FINAL}"
        )
    if reason is ReasonCode.UNRESOLVABLE_RESOURCE:
        why = f": {detail}" if detail else ""
        return (
            f"SharedOS policy denied {name}: the resource could not be resolved to a canonical "
            f"resource (unresolvable_resource){why}. {_FINAL}"
        )
    if reason is ReasonCode.FORBIDDEN:
        rules = _rules(rule_ids)
        by = f"forbidden by {rules}" if rules else "forbidden"
        return f"SharedOS policy denied {name}{on} ({by}). {_FINAL}"
    if reason is ReasonCode.NO_MATCHING_PERMIT:
        return f"SharedOS policy denied {name}{on} (no permit rule matches: default deny). {_FINAL}"
    if reason is ReasonCode.TURN_CLOSED:
        return f"SharedOS refused {name}: this turn has closed (turn_closed). {_FINAL}"
    if reason is ReasonCode.INVALID_ARGUMENTS:
        return (
            f"SharedOS rejected the arguments for {name}: {detail or 'they do not match its inputSchema'}. "
            "Fix the arguments to match the tool's inputSchema and call again."
        )
    if reason is ReasonCode.TIMEOUT:
        return (
            f"{name} did not finish within its time limit ({detail or 'timeout'}) and was stopped."
        )
    if reason is ReasonCode.HANDLER_ERROR:
        return f"{name} failed{on}: {detail or 'the tool reported an error'}."
    if reason is ReasonCode.CANCELLED:
        return f"The call to {name} was cancelled."
    why = f": {detail}" if detail else ""
    return (
        f"SharedOS failed internally while handling {name} (internal_error){why}. "
        "The call may or may not have taken effect; report this to the operator."
    )

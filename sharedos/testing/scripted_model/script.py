"""The script's one decision: given what a request shows, what does the model do next?

Stateless on purpose. Step k is the number of tool results in the request for
calls this script minted (their ids carry ``CALL_PREFIX``), so a harness that
re-sends a request (Claude Code's non-streaming fallback) gets the same answer,
and tool results for anything else (``WaitForMcpServers``) do not advance it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.testing.scripted_model.local import local_arguments
from sharedos.testing.scripted_model.plan import (
    CALL_PREFIX,
    WAIT_PREFIX,
    ScriptedAttempt,
    ToolAlias,
)

#: Claude Code's built-in tool offered while MCP servers are still connecting.
WAIT_TOOL = "WaitForMcpServers"
MAX_WAITS = 3


@dataclass(frozen=True)
class Step:
    """What to answer: a tool call (``alias`` set) or a final text (``text`` set)."""

    step: int
    attempt: ScriptedAttempt | None = None
    alias: ToolAlias | None = None
    call_id: str | None = None
    arguments: Mapping[str, Any] | None = None
    text: str | None = None
    wait: bool = False


def call_id_for(step: int, attempt: ScriptedAttempt, style: str) -> str:
    """A deterministic id for step k (the same request always yields the same id).

    ``style`` follows each API's own id look: ``toolu_`` for Anthropic,
    ``call_`` for OpenAI. The id only has to carry the prefix the script counts.
    """
    digest = hashlib.sha256(f"{step}:{attempt.key}:{attempt.tool}".encode()).hexdigest()[:12]
    head = "toolu_" if style == "anthropic" else "call_"
    return f"{head}{CALL_PREFIX}{step:03d}{digest}"


def is_scripted_id(call_id: object) -> bool:
    """True for ids this script minted for manifest attempts."""
    return isinstance(call_id, str) and (
        call_id.startswith(f"toolu_{CALL_PREFIX}0")
        or call_id.startswith(f"call_{CALL_PREFIX}0")
        or call_id.startswith(f"{CALL_PREFIX}0")
    )


def is_wait_id(call_id: object) -> bool:
    """True for ids of the script's WaitForMcpServers calls."""
    return isinstance(call_id, str) and WAIT_PREFIX in call_id


def attemptable(
    plan: Sequence[ScriptedAttempt], aliases: Mapping[str, ToolAlias]
) -> list[tuple[ScriptedAttempt, ToolAlias]]:
    """The plan's attempts the harness made possible, in plan order."""
    return [(a, aliases[a.tool]) for a in plan if a.tool in aliases]


def decide(
    plan: Sequence[ScriptedAttempt],
    aliases: Mapping[str, ToolAlias],
    *,
    done: int,
    waits: int,
    wait_offered: bool,
    style: str,
) -> Step:
    """Choose the next answer for a request with ``done`` scripted tool results in it.

    Harness-local attempts (``attempt.local``) go to the CLI's own tools, which are
    there from the first request; they wait for the catalogue like the rest, so the
    order of the attempts never depends on when the MCP tools arrived: while a
    plan with catalogue attempts has none of them offered, nothing is attempted.
    """
    catalogue = {k: v for k, v in aliases.items() if v.local is None}
    wants_catalogue = any(a.local is None for a in plan)
    if wants_catalogue and not catalogue:
        if wait_offered and waits < MAX_WAITS:
            # Claude Code's -p race: MCP tools not applied yet. Ask it to wait, as a
            # model would; the next request carries the mcp__ tools.
            head = "toolu_" if style == "anthropic" else "call_"
            return Step(step=done, call_id=f"{head}{WAIT_PREFIX}{waits:02d}", wait=True)
        aliases = {}
    todo = attemptable(plan, aliases)
    if done < len(todo):
        attempt, alias = todo[done]
        args: Mapping[str, Any] = dict(attempt.arguments)
        if alias.kind == "proxy":
            args = {"tool": alias.target, "args": dict(attempt.arguments)}
        elif alias.local is not None and attempt.local is not None:
            args = local_arguments(attempt.local, alias.local)
        return Step(
            step=done,
            attempt=attempt,
            alias=alias,
            call_id=call_id_for(done, attempt, style),
            arguments=args,
        )
    skipped = [a.tool for a in plan if a.tool not in aliases]
    text = f"Scripted model: issued {len(todo)} of {len(plan)} planned tool calls."
    if skipped:
        shown = ", ".join(sorted({repr(t[:40]) for t in skipped}))
        text += f" Not offered by the harness, so not attempted: {shown}."
    return Step(step=done, text=text)

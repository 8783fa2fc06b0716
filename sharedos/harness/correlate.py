"""Tie each evidence record to the call the model issued and to the harness's own report of it.

Grading itself matches rows on tool + canonical resource (a harness mints its
own ids). This module only adds diagnostics to each attempt: the alias the
model used, the harness's correlation key, and whether the harness marked the
result as an error, so a report can show that a denial reached the model as
an error and that denied and failed stayed distinguishable end to end.

A record is tied to an issued call by the harness's correlation key when it
sends one (each adapter names its keys: Claude Code ``claudecode/toolUseId``,
Codex ``callId``, both equal to the model's call id), otherwise by tool +
arguments in issue order (Pi, dsh).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sharedos.evidence import record_dict
from sharedos.harness.adapters import correlation_keys
from sharedos.harness.outputs import HarnessToolEvent
from sharedos.names import codex_sanitized, dsh_public_name, harness_sanitized, pi_public_names
from sharedos.testing.scripted_model.plan import IssuedCall


@dataclass(frozen=True)
class CallLink:
    """What one evidence record is tied to.

    ``issued``: the model's call; ``event``: the harness's report of it;
    ``correlation``: (key, value) of the harness's own id on the record;
    ``arguments_changed``: the harness altered the arguments between the model
    and the wire.
    """

    record: dict[str, Any]
    issued: IssuedCall | None
    event: HarnessToolEvent | None
    correlation: tuple[str, str] | None
    arguments_changed: bool


def correlation_key(record: dict[str, Any]) -> tuple[str, str] | None:
    """(key name, value) of the harness's own correlation id on the record, if any."""
    diag = record.get("diagnostics") or {}
    corr = diag.get("correlation") if isinstance(diag, dict) else None
    if isinstance(corr, dict):
        for key in correlation_keys():
            if isinstance(corr.get(key), str):
                return key, corr[key]
    return None


def _match_calls(
    rows: Sequence[dict[str, Any]],
    keys: Sequence[tuple[str, str] | None],
    issued: Sequence[IssuedCall],
) -> list[IssuedCall | None]:
    """Passes, in order: correlation key; tool + identical arguments; tool alone (no key)."""
    unused = list(issued)
    matches: list[IssuedCall | None] = [None] * len(rows)

    def take(i: int, pred: Any) -> None:
        hit = next((c for c in unused if pred(c)), None)
        if hit is not None:
            matches[i] = hit
            unused.remove(hit)

    for i, key in enumerate(keys):
        if key is not None:
            take(i, lambda c, v=key[1]: c.call_id == v)
    for i, rec in enumerate(rows):
        if matches[i] is None:
            take(
                i,
                lambda c, r=rec: (
                    c.tool == r.get("tool") and dict(c.arguments) == r.get("arguments")
                ),
            )
    for i, rec in enumerate(rows):
        if matches[i] is None and keys[i] is None:
            # a harness that coerced the arguments, as Pi turns 42 into "42"
            take(i, lambda c, r=rec: c.tool == r.get("tool"))
    return matches


def alias_candidates(server: str, tool: str) -> set[str]:
    """Every name a pinned harness may show the model for ``tool`` on MCP server ``server``.

    Claude Code and Pi's built-in client ``mcp__<server>__<tool>`` (Pi also turns
    ``-`` into ``_``, and hashes a name longer than 64 characters), Codex ``mcp__<server>/<tool>`` (namespace / function, as its
    events are read; ``-`` becomes ``_`` there too), pi-mcp-adapter ``<server>_<tool>``, dsh its hashed form.
    """
    srv, name = harness_sanitized(server), harness_sanitized(tool)
    return {
        f"mcp__{srv}__{name}",
        f"mcp__{srv}__{name.replace('-', '_')}",
        f"mcp__{codex_sanitized(server)}/{codex_sanitized(tool)}",
        f"{srv}_{name}",
        dsh_public_name(server, tool),
        *pi_public_names(server, tool),
    }


def resolve_event_tools(
    events: Sequence[HarnessToolEvent], catalog_names: Sequence[str], server: str = "sharedos"
) -> None:
    """Fill in the canonical tool of events a harness reported only by alias (in place).

    A name two catalogue tools could both be shown as is left unresolved (never guessed).
    """
    owners: dict[str, set[str]] = {}
    for tool in catalog_names:
        for alias in alias_candidates(server, tool):
            owners.setdefault(alias, set()).add(tool)
    for event in events:
        if event.tool is None:
            found = owners.get(event.alias, set())
            if len(found) == 1:
                event.tool = next(iter(found))


def aliases_from_events(events: Sequence[HarnessToolEvent]) -> dict[str, str]:
    """canonical tool -> the name the model used for it, from the harness's own events."""
    return {e.tool: e.alias for e in events if e.tool is not None}


def correlate(
    records: Sequence[Any], issued: Sequence[IssuedCall], events: Sequence[HarnessToolEvent]
) -> list[CallLink]:
    """One ``CallLink`` per record, in record order."""
    rows = [record_dict(r) for r in records]
    keys = [correlation_key(r) for r in rows]
    matches = _match_calls(rows, keys, issued)
    by_call = {e.call_id: e for e in events}
    issued_ids = {c.call_id for c in issued}
    # Harnesses that report no model call id (Codex's item ids) are matched in order.
    ordered_events = [e for e in events if e.call_id not in issued_ids]
    out: list[CallLink] = []
    for rec, match, key in zip(rows, matches, keys, strict=True):
        event = by_call.get(match.call_id) if match is not None else None
        if event is None and key is not None and key[1] in by_call:
            # no scripted call to go through (an operator-supplied model): the harness's
            # correlation key is its own id for the call (Claude Code's tool_use id)
            event = by_call[key[1]]
            if event in ordered_events:
                ordered_events.remove(event)
        if event is None:
            event = next((e for e in ordered_events if e.tool == rec.get("tool")), None)
            if event is not None:
                ordered_events.remove(event)
        out.append(
            CallLink(
                record=rec,
                issued=match,
                event=event,
                correlation=key,
                arguments_changed=match is not None
                and dict(match.arguments) != rec.get("arguments"),
            )
        )
    return out

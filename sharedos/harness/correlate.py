"""Tie each evidence record to the call the model issued and to the harness's own report of it.

Grading itself matches rows on tool + canonical resource (a harness mints its
own ids). This module only adds diagnostics to each attempt: the alias the
model used, the harness's correlation key, and whether the harness marked the
result as an error, so a report can show that a denial reached the model as
an error and that denied and failed stayed distinguishable end to end.

A record is tied to an issued call by the harness's correlation key when it
sends one (Claude Code ``claudecode/toolUseId``, Codex ``callId``: both equal
the model's call id), otherwise by tool + arguments in issue order (Pi).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sharedos.evidence import record_dict
from sharedos.harness.outputs import HarnessToolEvent
from sharedos.harness.scripted_model.plan import IssuedCall

_KEYS = ("claudecode/toolUseId", "callId")


def correlation_key(record: dict[str, Any]) -> tuple[str, str] | None:
    """(key name, value) of the harness's own correlation id on the record, if any."""
    diag = record.get("diagnostics") or {}
    corr = diag.get("correlation") if isinstance(diag, dict) else None
    if isinstance(corr, dict):
        for key in _KEYS:
            if isinstance(corr.get(key), str):
                return key, corr[key]
    return None


def correlate(
    records: Sequence[Any], issued: Sequence[IssuedCall], events: Sequence[HarnessToolEvent]
) -> list[dict[str, Any]]:
    """One dict per record: ``issued`` (the model's call), ``event`` (the harness's report),
    ``argumentsChanged`` (the harness altered the arguments between the model and the wire).

    Passes, in order: the harness's correlation key; tool + identical arguments;
    then tool alone, in issue order (a harness that coerced the arguments, as Pi
    turns ``42`` into ``"42"``).
    """
    rows = [record_dict(r) for r in records]
    unused = list(issued)
    matches: list[IssuedCall | None] = [None] * len(rows)
    keys = [correlation_key(r) for r in rows]
    for i, key in enumerate(keys):
        if key is not None:
            hit = next((c for c in unused if c.call_id == key[1]), None)
            if hit is not None:
                matches[i] = hit
                unused.remove(hit)
    for i, rec in enumerate(rows):
        if matches[i] is None:
            hit = next(
                (
                    c
                    for c in unused
                    if c.tool == rec.get("tool") and dict(c.arguments) == rec.get("arguments")
                ),
                None,
            )
            if hit is not None:
                matches[i] = hit
                unused.remove(hit)
    for i, rec in enumerate(rows):
        if matches[i] is None and keys[i] is None:
            hit = next((c for c in unused if c.tool == rec.get("tool")), None)
            if hit is not None:
                matches[i] = hit
                unused.remove(hit)
    by_call = {e.call_id: e for e in events}
    issued_ids = {c.call_id for c in issued}
    # Harnesses that report no model call id (Codex's item ids) are matched in order.
    ordered_events = [e for e in events if e.call_id not in issued_ids]
    out: list[dict[str, Any]] = []
    for rec, match, key in zip(rows, matches, keys, strict=True):
        event = by_call.get(match.call_id) if match is not None else None
        if event is None:
            event = next((e for e in ordered_events if e.tool == rec.get("tool")), None)
            if event is not None:
                ordered_events.remove(event)
        out.append(
            {
                "issued": match.as_dict() if match is not None else None,
                "correlation": {key[0]: key[1]} if key else None,
                "event": event.as_dict() if event is not None else None,
                "argumentsChanged": match is not None
                and dict(match.arguments) != rec.get("arguments"),
            }
        )
    return out

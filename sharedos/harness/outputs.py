"""A harness's own account of a turn, in one shape for every harness.

The evidence store, not these events, is what grading reads: a harness's
output is its own account of the turn. It is kept so a report can show what
the harness saw (the alias it offered, whether it marked the result as an
error) next to what the kernel recorded. Each adapter
(``sharedos.harness.adapters.<harness>``) reads its CLI's event stream into
``HarnessOutput``; the helpers here are what they share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HarnessToolEvent:
    """One tool call as the harness reported it."""

    call_id: str
    alias: str
    tool: str | None = None  # the canonical (wire) name when the harness reports it
    is_error: bool | None = None
    text: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "callId": self.call_id,
            "alias": self.alias,
            "tool": self.tool,
            "isError": self.is_error,
            "text": self.text,
        }


@dataclass
class HarnessOutput:
    """A harness's account of one turn."""

    events: list[dict[str, Any]] = field(default_factory=list)
    tool_events: list[HarnessToolEvent] = field(default_factory=list)
    mcp_status: str | None = None  # connected / failed / pending, when reported
    final_text: str | None = None
    unparsed_lines: int = 0
    #: the harness's own report that its turn failed (its model call did) when its exit
    #: status does not say so (Pi exits 0 then); a failed turn, whatever the exit status
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the raw events are kept separately, on disk)."""
        return {
            "toolEvents": [e.as_dict() for e in self.tool_events],
            "mcpStatus": self.mcp_status,
            "finalText": self.final_text,
            "events": len(self.events),
            "unparsedLines": self.unparsed_lines,
            "error": self.error,
        }


def json_lines(stdout: str) -> HarnessOutput:
    """Newline-delimited JSON objects of ``stdout``; other lines are counted, never fatal."""
    out = HarnessOutput()
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            out.unparsed_lines += 1
            continue
        if isinstance(event, dict):
            out.events.append(event)
    return out


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (harness output is untrusted)."""
    return value if isinstance(value, dict) else {}


def text_of(content: Any) -> str | None:
    """The text of a tool result (a string, or a list of text blocks), cut to 500 characters."""
    if isinstance(content, str):
        return content[:500]
    if isinstance(content, list):
        parts = [c.get("text", "") for c in content if isinstance(c, dict)]
        return "\n".join(p for p in parts if p)[:500] or None
    return None

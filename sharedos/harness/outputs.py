"""Read each harness's own event stream into one shape, for diagnostics.

The evidence store, not these events, is what grading reads: a harness's
output is its own account of the turn. It is kept so a report can show what
the harness saw (the alias it offered, whether it marked the result as an
error) next to what the kernel recorded.

- Claude Code ``--output-format stream-json``: ``system/init`` (``mcp_servers``
  status), ``assistant`` events with ``tool_use`` blocks, ``user`` events with
  ``tool_result`` blocks (``is_error``), a final ``result``.
- Codex ``exec --json``: ``item.completed`` with ``type: mcp_tool_call``
  (``status`` failed for ``isError`` and for transport errors).
- Pi ``--mode json``: ``tool_execution_end`` (``toolCallId``, ``toolName``, ``isError``).
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

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the raw events are kept separately, on disk)."""
        return {
            "toolEvents": [e.as_dict() for e in self.tool_events],
            "mcpStatus": self.mcp_status,
            "finalText": self.final_text,
            "events": len(self.events),
            "unparsedLines": self.unparsed_lines,
        }


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (harness output is untrusted)."""
    return value if isinstance(value, dict) else {}


def _text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content[:500]
    if isinstance(content, list):
        parts = [c.get("text", "") for c in content if isinstance(c, dict)]
        return "\n".join(p for p in parts if p)[:500] or None
    return None


def parse_output(fmt: str, stdout: str) -> HarnessOutput:
    """Parse a harness's stdout; lines that are not JSON are counted, never fatal."""
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
    if fmt == "stream-json":
        _claude(out)
    elif fmt == "codex-json":
        _codex(out)
    elif fmt == "pi-json":
        _pi(out)
    return out


def _claude(out: HarnessOutput) -> None:
    by_id: dict[str, HarnessToolEvent] = {}
    for ev in out.events:
        kind = ev.get("type")
        if kind == "system" and ev.get("subtype") == "init":
            for server in ev.get("mcp_servers") or []:
                if isinstance(server, dict) and server.get("name") == "sharedos":
                    out.mcp_status = str(server.get("status"))
        content = _obj(ev.get("message")).get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if kind == "assistant" and block.get("type") == "tool_use":
                te = HarnessToolEvent(call_id=str(block.get("id")), alias=str(block.get("name")))
                by_id[te.call_id] = te
                out.tool_events.append(te)
            elif kind == "user" and block.get("type") == "tool_result":
                answered = by_id.get(str(block.get("tool_use_id")))
                if answered is not None:
                    answered.is_error = bool(block.get("is_error", False))
                    answered.text = _text_of(block.get("content"))
        if kind == "result":
            out.final_text = ev.get("result") if isinstance(ev.get("result"), str) else None


def _codex(out: HarnessOutput) -> None:
    for ev in out.events:
        item = ev.get("item") if isinstance(ev.get("item"), dict) else None
        if ev.get("type") != "item.completed" or item is None:
            continue
        if item.get("type") == "mcp_tool_call":
            result = _obj(item.get("result"))
            error = item.get("error")
            out.tool_events.append(
                HarnessToolEvent(
                    call_id=str(item.get("id")),
                    alias=f"mcp__{item.get('server')}/{item.get('tool')}",
                    tool=str(item.get("tool")),
                    is_error=item.get("status") == "failed",
                    text=_text_of(result.get("content"))
                    if result
                    else (str(error)[:500] if error else None),
                )
            )
        elif item.get("type") == "agent_message":
            out.final_text = item.get("text")
    out.mcp_status = "connected" if out.events else None


def _pi(out: HarnessOutput) -> None:
    for ev in out.events:
        if ev.get("type") == "tool_execution_end":
            result = _obj(ev.get("result"))
            details = _obj(result.get("details"))
            out.tool_events.append(
                HarnessToolEvent(
                    call_id=str(ev.get("toolCallId")),
                    alias=str(ev.get("toolName")),
                    tool=details.get("tool") if isinstance(details.get("tool"), str) else None,
                    is_error=bool(ev.get("isError")),
                    text=_text_of(result.get("content")),
                )
            )
        elif ev.get("type") == "agent_end":
            msgs = ev.get("messages") or []
            for m in reversed(msgs):
                if isinstance(m, dict) and m.get("role") == "assistant":
                    out.final_text = _text_of(m.get("content"))
                    break

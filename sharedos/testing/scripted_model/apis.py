"""The three model APIs, reduced to what the script needs: offered tools, progress, answers.

Each API has three functions: ``*_offered`` (the tools a request offers, as
plain names or ``ToolAlias`` for namespaced ones), ``*_progress`` (scripted
tool results and waits already in the request) and ``*_events`` / ``*_json``
(the answer in that API's streaming or plain shape). Shapes follow what the
pinned CLIs accept (see docs/harnesses.md): Anthropic Messages for Claude Code,
OpenAI Responses with namespace tools for Codex, chat completions for Pi.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from sharedos.testing.scripted_model.plan import ToolAlias
from sharedos.testing.scripted_model.script import Step, is_scripted_id, is_wait_id

Event = tuple[str | None, dict[str, Any] | str]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _reply_text(content: Any) -> str:
    """A tool result's text, whether the API sent a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [c.get("text") for c in content if isinstance(c, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def tool_replies(api: str, body: dict[str, Any]) -> dict[str, str]:
    """What the harness answered the model for each scripted call in this request.

    This is the harness's own word to the model (a kernel refusal relayed from
    the bridge, or the harness's client-side refusal of a name it did not
    offer), keyed by the call id the script minted.
    """
    out: dict[str, str] = {}
    if api == "anthropic":
        for msg in body.get("messages") or []:
            content = msg.get("content") if isinstance(msg, dict) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    tid = block.get("tool_use_id")
                    if is_scripted_id(tid):
                        out[str(tid)] = _reply_text(block.get("content"))
    elif api == "responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                cid = item.get("call_id")
                if is_scripted_id(cid):
                    out[str(cid)] = _reply_text(item.get("output"))
    elif api == "chat":
        for msg in body.get("messages") or []:
            if isinstance(msg, dict) and msg.get("role") == "tool":
                cid = msg.get("tool_call_id")
                if is_scripted_id(cid):
                    out[str(cid)] = _reply_text(msg.get("content"))
    return out


# --------------------------------------------------------------------------- Anthropic
def anthropic_offered(body: dict[str, Any]) -> list[ToolAlias | str]:
    """Tool names in a Messages request."""
    return [t["name"] for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t]


def anthropic_schemas(body: dict[str, Any]) -> dict[str, Any]:
    """Each offered tool's argument schema (``input_schema``), by name."""
    return {
        str(t["name"]): t.get("input_schema")
        for t in body.get("tools") or []
        if isinstance(t, dict) and "name" in t
    }


def anthropic_progress(body: dict[str, Any]) -> tuple[int, int]:
    """(scripted tool results, wait results) in the conversation.

    Role ``system`` entries (Claude Code's mid-conversation-system beta) are
    skipped like any other non-user message.
    """
    done = waits = 0
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                tid = block.get("tool_use_id")
                if is_scripted_id(tid):
                    done += 1
                elif is_wait_id(tid):
                    waits += 1
    return done, waits


def _anthropic_block(step: Step) -> dict[str, Any]:
    if step.text is not None:
        return {"type": "text", "text": step.text}
    name = "WaitForMcpServers" if step.wait else step.alias.name  # type: ignore[union-attr]
    return {
        "type": "tool_use",
        "id": step.call_id,
        "name": name,
        "input": dict(step.arguments or {}),
    }


def anthropic_json(step: Step, model: str) -> dict[str, Any]:
    """A complete (non-streaming) Messages response."""
    block = _anthropic_block(step)
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": "end_turn" if step.text is not None else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def anthropic_events(step: Step, model: str) -> Iterator[Event]:
    """The SSE event sequence of a streamed Messages response."""
    msg = anthropic_json(step, model)
    block = msg["content"][0]
    start = dict(msg, content=[], stop_reason=None)
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    if block["type"] == "text":
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
    else:
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {
                    "type": "tool_use",
                    "id": block["id"],
                    "name": block["name"],
                    "input": {},
                },
            },
        )
        delta = {"type": "input_json_delta", "partial_json": _dumps(block["input"])}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
    )
    yield "message_stop", {"type": "message_stop"}


# --------------------------------------------------------------------------- OpenAI Responses
def responses_offered(body: dict[str, Any]) -> list[ToolAlias | str]:
    """Function names and namespaced functions (Codex: namespace ``mcp__sharedos``)."""
    out: list[ToolAlias | str] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            ns = str(tool.get("name", ""))
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and "name" in inner and ns.startswith("mcp__"):
                    out.append(ToolAlias("", inner["name"], "namespace", ns))
        elif tool.get("type") == "function" and "name" in tool:
            out.append(str(tool["name"]))
    return out


def responses_schemas(body: dict[str, Any]) -> dict[str, Any]:
    """Each plain (not namespaced) function's argument schema (``parameters``), by name."""
    return {
        str(t["name"]): t.get("parameters")
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function" and "name" in t
    }


def responses_progress(body: dict[str, Any]) -> tuple[int, int]:
    """Scripted ``function_call_output`` items in ``input``."""
    done = 0
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if (
            isinstance(item, dict)
            and item.get("type") == "function_call_output"
            and is_scripted_id(item.get("call_id"))
        ):
            done += 1
    return done, 0


def _responses_item(step: Step) -> dict[str, Any]:
    if step.text is not None:
        return {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{uuid.uuid4().hex[:16]}",
            "status": "completed",
            "content": [{"type": "output_text", "text": step.text, "annotations": []}],
        }
    alias = step.alias
    assert alias is not None
    item: dict[str, Any] = {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex[:16]}",
        "status": "completed",
        "call_id": step.call_id,
        "name": alias.name,
        "arguments": _dumps(dict(step.arguments or {})),
    }
    if alias.kind == "namespace":
        item["namespace"] = alias.namespace
    return item


def responses_json(step: Step, model: str) -> dict[str, Any]:
    """A complete (non-streaming) Responses object."""
    return {
        "id": f"resp_{uuid.uuid4().hex[:16]}",
        "object": "response",
        "status": "completed",
        "model": model,
        "output": [_responses_item(step)],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }


def responses_events(step: Step, model: str) -> Iterator[Event]:
    """``response.created`` → ``output_item.added/done`` → ``response.completed``."""
    resp = responses_json(step, model)
    item = resp["output"][0]
    created = dict(resp, status="in_progress", output=[])
    yield "response.created", {"type": "response.created", "response": created}
    yield (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": item,
        },
    )
    yield (
        "response.output_item.done",
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    )
    yield "response.completed", {"type": "response.completed", "response": resp}


# --------------------------------------------------------------------------- chat completions
def chat_offered(body: dict[str, Any]) -> list[ToolAlias | str]:
    """Function names in a chat-completions request."""
    out: list[ToolAlias | str] = []
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and "name" in fn:
            out.append(str(fn["name"]))
    return out


def chat_schemas(body: dict[str, Any]) -> dict[str, Any]:
    """Each offered function's argument schema (``function.parameters``), by name."""
    out: dict[str, Any] = {}
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and "name" in fn:
            out[str(fn["name"])] = fn.get("parameters")
    return out


#: ``api`` name -> its ``*_schemas`` reader (harness-local attempts read the schemas)
SCHEMAS = {"anthropic": anthropic_schemas, "responses": responses_schemas, "chat": chat_schemas}


def chat_progress(body: dict[str, Any]) -> tuple[int, int]:
    """Scripted ``role: tool`` messages."""
    done = 0
    for msg in body.get("messages") or []:
        if (
            isinstance(msg, dict)
            and msg.get("role") == "tool"
            and is_scripted_id(msg.get("tool_call_id"))
        ):
            done += 1
    return done, 0


def chat_json(step: Step, model: str) -> dict[str, Any]:
    """A complete (non-streaming) chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    finish = "stop"
    if step.text is None:
        assert step.alias is not None
        finish = "tool_calls"
        message["tool_calls"] = [
            {
                "id": step.call_id,
                "type": "function",
                "function": {
                    "name": step.alias.name,
                    "arguments": _dumps(dict(step.arguments or {})),
                },
            }
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def chat_events(step: Step, model: str) -> Iterator[Event]:
    """Chunks with ``delta.tool_calls`` or ``delta.content``, a finish chunk, usage, ``[DONE]``."""
    full = chat_json(step, model)
    base = {"id": full["id"], "object": "chat.completion.chunk", "created": 0, "model": model}
    message = full["choices"][0]["message"]
    delta: dict[str, Any] = {"role": "assistant"}
    if "tool_calls" in message:
        delta["content"] = None
        delta["tool_calls"] = [dict(tc, index=i) for i, tc in enumerate(message["tool_calls"])]
    else:
        delta["content"] = message["content"]
    yield None, dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}])
    finish = full["choices"][0]["finish_reason"]
    yield None, dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}])
    yield None, dict(base, choices=[], usage=full["usage"])
    yield None, "[DONE]"

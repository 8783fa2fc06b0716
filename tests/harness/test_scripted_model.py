"""The scripted model endpoint, spoken to over real HTTP in each API's own shape."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedos.testing.scripted_model import (
    SCRIPTED_MODEL_NAME,
    ScriptedAttempt,
    ScriptedModelServer,
    ToolAlias,
    guess_aliases,
    resolve_aliases,
)

PLAN = [
    ScriptedAttempt("public-read", "files.read", {"path": "/public/a.txt"}),
    ScriptedAttempt("unpublished", "files.exec", {"path": "/x"}),
    ScriptedAttempt("write", "files.write", {"path": "/home/a/x", "content": "y"}),
]


@pytest.fixture
def model(tmp_path: Path) -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(PLAN, log_path=tmp_path / "model.jsonl") as server:
        yield server


def post(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[str, bytes]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers.get("Content-Type", ""), resp.read()


def sse(raw: bytes) -> list[tuple[str | None, Any]]:
    events: list[tuple[str | None, Any]] = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name = None
        data = None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                payload = line[6:]
                data = payload if payload == "[DONE]" else json.loads(payload)
        events.append((name, data))
    return events


CLAUDE_TOOLS = [
    {"name": "Read"},
    {"name": "mcp__sharedos__files_read"},
    {"name": "mcp__sharedos__files_write"},
]


def test_anthropic_stream_walks_the_plan_in_claude_codes_shape(model: ScriptedModelServer) -> None:
    url = f"{model.url}/v1/messages?beta=true"
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    _, raw = post(url, {"model": "x", "stream": True, "tools": CLAUDE_TOOLS, "messages": messages})
    events = sse(raw)
    assert [n for n, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[2][1]["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "mcp__sharedos__files_read"
    assert json.loads(events[3][1]["delta"]["partial_json"]) == {"path": "/public/a.txt"}
    assert events[5][1]["delta"]["stop_reason"] == "tool_use"
    assert events[0][1]["message"]["model"] == SCRIPTED_MODEL_NAME
    # The harness answers; a mid-conversation "system" entry must not confuse the step count.
    messages += [
        {"role": "assistant", "content": [start]},
        {"role": "system", "content": "mid-conversation reminder"},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": start["id"], "content": "ok"}],
        },
    ]
    _, raw = post(url, {"model": "x", "stream": True, "tools": CLAUDE_TOOLS, "messages": messages})
    second = sse(raw)[2][1]["content_block"]
    # files.exec is not offered: the model guesses it under the harness's own pattern.
    assert second["name"] == "mcp__sharedos__files_exec"
    refusal = (
        "<tool_use_error>Error: No such tool available: mcp__sharedos__files_exec</tool_use_error>"
    )
    messages += [
        {"role": "assistant", "content": [second]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": second["id"],
                    "content": refusal,
                    "is_error": True,
                }
            ],
        },
    ]
    _, raw = post(url, {"model": "x", "stream": True, "tools": CLAUDE_TOOLS, "messages": messages})
    third = sse(raw)[2][1]["content_block"]
    assert third["name"] == "mcp__sharedos__files_write"
    messages += [
        {"role": "assistant", "content": [third]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": third["id"],
                    "content": [{"type": "text", "text": "x"}],
                }
            ],
        },
    ]
    _, raw = post(url, {"model": "x", "stream": False, "tools": CLAUDE_TOOLS, "messages": messages})
    final = json.loads(raw)
    assert final["stop_reason"] == "end_turn"
    assert "issued 3 of 3" in final["content"][0]["text"]
    assert [(c.key, c.alias, c.guessed) for c in model.issued] == [
        ("public-read", "mcp__sharedos__files_read", False),
        ("unpublished", "mcp__sharedos__files_exec", True),
        ("write", "mcp__sharedos__files_write", False),
    ]
    # What the harness answered the model for each call is kept (its refusal of the guess).
    assert [c.reply for c in model.issued] == ["ok", refusal, "x"]


def test_replayed_request_gets_the_same_answer(model: ScriptedModelServer) -> None:
    """Claude Code's non-streaming fallback re-sends a request: the script is stateless."""
    body = {"model": "x", "tools": CLAUDE_TOOLS, "messages": [{"role": "user", "content": "go"}]}
    first = json.loads(post(f"{model.url}/v1/messages", body)[1])
    again = json.loads(post(f"{model.url}/v1/messages", body)[1])
    assert first["content"][0]["id"] == again["content"][0]["id"]
    assert len(model.issued) == 1


def test_wait_for_mcp_servers_race(model: ScriptedModelServer) -> None:
    """First request without mcp__ tools but with WaitForMcpServers: wait, then start at step 0."""
    url = f"{model.url}/v1/messages"
    early = {
        "model": "x",
        "tools": [{"name": "Read"}, {"name": "WaitForMcpServers"}],
        "messages": [{"role": "user", "content": "go"}],
    }
    block = json.loads(post(url, early)[1])["content"][0]
    assert block["name"] == "WaitForMcpServers"
    later = {
        "model": "x",
        "tools": CLAUDE_TOOLS,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [block]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": block["id"], "content": "ready"}
                ],
            },
        ],
    }
    nxt = json.loads(post(url, later)[1])["content"][0]
    assert nxt["name"] == "mcp__sharedos__files_read" and nxt["input"] == {"path": "/public/a.txt"}


def test_head_probe_answers_200(model: ScriptedModelServer) -> None:
    req = urllib.request.Request(model.url + "/", method="HEAD")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def test_responses_api_uses_codex_namespace(model: ScriptedModelServer) -> None:
    tools = [
        {"type": "function", "name": "shell"},
        {
            "type": "namespace",
            "name": "mcp__sharedos",
            "tools": [
                {"type": "function", "name": "files_read"},
                {"type": "function", "name": "files_write"},
            ],
        },
    ]
    url = f"{model.url}/v1/responses"
    events = sse(post(url, {"model": "m", "stream": True, "tools": tools, "input": []})[1])
    names = [n for n, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    item = next(d["item"] for n, d in events if n == "response.output_item.done")
    assert item["type"] == "function_call"
    assert item["namespace"] == "mcp__sharedos" and item["name"] == "files_read"
    assert json.loads(item["arguments"]) == {"path": "/public/a.txt"}
    done = [
        {
            "type": "function_call",
            "call_id": item["call_id"],
            "name": "files_read",
            "namespace": "mcp__sharedos",
        },
        {
            "type": "function_call_output",
            "call_id": item["call_id"],
            "output": [{"type": "input_text", "text": "ok"}],
        },
    ]
    events = sse(post(url, {"model": "m", "stream": True, "tools": tools, "input": done})[1])
    item2 = next(d["item"] for n, d in events if n == "response.output_item.done")
    # files.exec is not listed: the model guesses it in the same namespace, then files_write.
    assert (item2["namespace"], item2["name"]) == ("mcp__sharedos", "files_exec")
    done += [
        {"type": "function_call", "call_id": item2["call_id"], "name": "files_exec"},
        {
            "type": "function_call_output",
            "call_id": item2["call_id"],
            "output": "unsupported call: mcp__sharedosfiles_exec",
        },
    ]
    events = sse(post(url, {"model": "m", "stream": True, "tools": tools, "input": done})[1])
    item3 = next(d["item"] for n, d in events if n == "response.output_item.done")
    assert (item3["namespace"], item3["name"]) == ("mcp__sharedos", "files_write")
    assert model.issued[1].reply == "unsupported call: mcp__sharedosfiles_exec"


def test_chat_completions_stream_for_pi(model: ScriptedModelServer) -> None:
    tools = [
        {"type": "function", "function": {"name": "read"}},
        {"type": "function", "function": {"name": "mcp__sharedos__files_read"}},
    ]
    events = sse(
        post(
            f"{model.url}/v1/chat/completions",
            {"model": "m", "stream": True, "tools": tools, "messages": []},
        )[1]
    )
    datas = [d for _, d in events]
    assert datas[-1] == "[DONE]"
    call = datas[0]["choices"][0]["delta"]["tool_calls"][0]
    assert call["function"]["name"] == "mcp__sharedos__files_read" and call["index"] == 0
    assert datas[1]["choices"][0]["finish_reason"] == "tool_calls"
    assert datas[2]["usage"]["total_tokens"] >= 1 and datas[2]["choices"] == []
    # files.exec and files.write are not offered here: the model guesses each under
    # Pi's pattern (what Pi answers is the harness's business), then ends the turn.
    msgs: list[dict[str, Any]] = [{"role": "tool", "tool_call_id": call["id"], "content": "ok"}]
    guessed = []
    for _ in range(2):
        events = sse(
            post(
                f"{model.url}/v1/chat/completions",
                {"model": "m", "stream": True, "tools": tools, "messages": msgs},
            )[1]
        )
        nxt = events[0][1]["choices"][0]["delta"]["tool_calls"][0]
        guessed.append(nxt["function"]["name"])
        msgs.append({"role": "tool", "tool_call_id": nxt["id"], "content": "Tool not found"})
    assert guessed == ["mcp__sharedos__files_exec", "mcp__sharedos__files_write"]
    events = sse(
        post(
            f"{model.url}/v1/chat/completions",
            {"model": "m", "stream": True, "tools": tools, "messages": msgs},
        )[1]
    )
    first = events[0][1]["choices"][0]["delta"]
    assert "tool_calls" not in first and "issued 3 of 3" in first["content"]


def test_log_records_requests_but_never_headers(model: ScriptedModelServer) -> None:
    post(
        f"{model.url}/v1/messages",
        {"model": "x", "tools": CLAUDE_TOOLS, "messages": []},
        {"x-api-key": "sk-ant-SECRET-123"},
    )
    assert model.log_path is not None
    lines = model.log_path.read_text().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["answer"]["alias"] == "mcp__sharedos__files_read"
    assert "sk-ant-SECRET-123" not in model.log_path.read_text()


def test_bad_json_is_a_400_not_a_crash(model: ScriptedModelServer) -> None:
    req = urllib.request.Request(f"{model.url}/v1/messages", data=b"{nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 400


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        (
            ["mcp__sharedos__files_read"],
            {"files.read": "mcp__sharedos__files_read"},
        ),  # Claude Code, Pi built-in
        (["sharedos_files_read"], {"files.read": "sharedos_files_read"}),  # pi-mcp-adapter
        (
            [ToolAlias("", "files_read", "namespace", "mcp__sharedos")],
            {"files.read": "mcp__sharedos/files_read"},
        ),
        (
            ["mcp__sharedos__my_tool_v2"],
            {"my-tool.v2": "mcp__sharedos__my_tool_v2"},
        ),  # Pi: '-' -> '_'
        (
            ["read", "files_read", "mcp__other__files_read"],
            {},
        ),  # local tools / other servers never match
    ],
)
def test_alias_resolution(offered: list[Any], expected: dict[str, str]) -> None:
    found = resolve_aliases(offered, ["files.read", "my-tool.v2"])
    assert {k: v.shown for k, v in found.items()} == expected


def test_malformed_names_get_no_alias_even_when_sanitization_collides() -> None:
    """'files read' sanitizes to files_read, but it cannot be published: no alias is its."""
    found = resolve_aliases(
        ["mcp__sharedos__files_read"], ["files.read", "files read", "files\u2024read", "f" * 200]
    )
    assert list(found) == ["files.read"]
    only_bad = resolve_aliases(["mcp__sharedos__files_read"], ["files read"])
    assert only_bad == {}


BAD_NAMES = ["files.exec", "files read", "files\u2024read", "f" * 200]


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        # Claude Code / Pi built-in: the harness's own prefix, dots written as '_',
        # a space or a look-alike kept (so a guess never equals an offered alias).
        (
            ["Read", "mcp__sharedos__files_read"],
            [
                "mcp__sharedos__files_exec",
                "mcp__sharedos__files read",
                "mcp__sharedos__files\u2024read",
            ],
        ),
        # Codex: the same namespace, an unlisted name in it.
        (
            [ToolAlias("", "files_read", "namespace", "mcp__sharedos")],
            [
                "mcp__sharedos/files_exec",
                "mcp__sharedos/files read",
                "mcp__sharedos/files\u2024read",
            ],
        ),
        # pi-mcp-adapter: its `mcp` proxy tool with the exact name as a string.
        (
            ["read", "mcp", "sharedos_files_read"],
            ["mcp(files.exec)", "mcp(files read)", "mcp(files\u2024read)"],
        ),
    ],
)
def test_guesses_follow_each_harness_route(offered: list[Any], expected: list[str]) -> None:
    seen = resolve_aliases(offered, ["files.read", *BAD_NAMES])
    guesses = guess_aliases(["files.read", *BAD_NAMES], seen, offered)
    assert set(guesses) == set(BAD_NAMES)  # files.read is offered: never guessed
    assert all(g.guessed for g in guesses.values())
    assert [guesses[t].shown for t in BAD_NAMES[:3]] == expected
    assert len(guesses["f" * 200].shown) > 200  # the long name is sent whole, not trimmed
    offered_names = {a.shown for a in seen.values()}
    assert offered_names.isdisjoint(g.shown for g in guesses.values())


def test_no_guess_without_a_catalogue() -> None:
    """The live column, or a client still connecting: no SharedOS alias, nothing to guess from."""
    assert guess_aliases(["files.read"], {}, ["Read", "Bash"]) == {}
    assert guess_aliases(["files.read"], {}, ["read", "mcp"]) == {}


def test_adapter_proxy_mode_guesses_by_exact_name(tmp_path: Path) -> None:
    """directTools off: catalogue tools go by their prefixed name, anything else by its exact name."""
    plan = [
        ScriptedAttempt("ok", "files.read", {"path": "/p"}),
        ScriptedAttempt("space", "files read", {"path": "/p"}),
    ]
    tools = [{"type": "function", "function": {"name": n}} for n in ("read", "mcp")]
    with ScriptedModelServer(plan, catalog_names=["files.read"]) as server:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        calls = []
        for _ in range(2):
            _, raw = post(f"{server.url}/v1/chat/completions", {"tools": tools, "messages": msgs})
            call = json.loads(raw)["choices"][0]["message"]["tool_calls"][0]
            calls.append(json.loads(call["function"]["arguments"]))
            msgs += [
                {"role": "assistant", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": "r"},
            ]
    assert calls == [
        {"tool": "sharedos_files_read", "args": {"path": "/p"}},
        {"tool": "files read", "args": {"path": "/p"}},  # never sharedos_files_read
    ]
    assert [c.guessed for c in server.issued] == [False, True]


def test_a_harness_that_drops_its_connection_prints_no_traceback(
    model: ScriptedModelServer, capfd: pytest.CaptureFixture[str]
) -> None:
    """A harness killed (or resetting) mid-request made the endpoint's server thread print
    a raw Python traceback into ``sharedos run``'s stderr, between the run's own lines."""
    import socket
    import struct
    import threading
    import time
    from urllib.parse import urlparse

    from tests.timing import bound

    where = urlparse(model.url)
    assert where.hostname is not None and where.port is not None
    body = json.dumps(
        {
            "model": "m",
            "max_tokens": 10,
            "stream": True,
            "messages": [{"role": "user", "content": "go"}],
        }
    ).encode()
    for _ in range(20):  # a reset lands before the answer is written in most of them
        with socket.create_connection((where.hostname, where.port)) as conn:
            conn.sendall(
                b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            # leave with a reset, as a killed process's socket does with data unread
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    deadline = time.monotonic() + bound(30)
    while time.monotonic() < deadline and any(
        "process_request_thread" in t.name for t in threading.enumerate()
    ):
        time.sleep(0.01)
    # the endpoint still answers the next request
    kind, raw = post(
        f"{model.url}/v1/messages",
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]},
    )
    assert "json" in kind and raw
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err + captured.out, captured.err[-2000:]

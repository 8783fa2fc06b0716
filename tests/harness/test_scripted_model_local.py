"""Harness-local attempts: the scripted model makes each CLI call its OWN shell, read, write.

The tools each pinned CLI offered are the ones it really sent the scripted model
(``tests/data/harness/builtin-tools-measured.json``, recorded from the five CLIs'
first model requests); the real CLIs run these attempts in the mcp columns
(``tests/harness/test_harness_mcp.py``).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sharedos.testing.scripted_model import ScriptedAttempt, ScriptedModelServer
from sharedos.testing.scripted_model.apis import SCHEMAS
from sharedos.testing.scripted_model.local import (
    FILLER,
    LocalCall,
    find_local_tool,
    local_arguments,
)

MEASURED = json.loads(
    (Path(__file__).resolve().parents[1] / "data/harness/builtin-tools-measured.json").read_text()
)
HARNESSES = ("claude-code", "codex", "pi", "pi-adapter", "dsh")

SHELL = LocalCall("shell", command="cat /srv/private/a.txt")
READ = LocalCall("read", path="/srv/private/b.txt")
WRITE = LocalCall("write", path="/srv/public/planted.txt", content="planted\nby it\n")
NETWORK = LocalCall("network", port=4242)


def _body(harness: str) -> dict[str, Any]:
    return {"tools": MEASURED[harness]["tools"], "stream": False}


def _api(harness: str) -> str:
    return str(MEASURED[harness]["api"])


#: harness -> kind -> (the built-in tool, the argument names it is given)
EXPECTED: dict[str, dict[str, tuple[str, list[str]]]] = {
    "claude-code": {
        "shell": ("Bash", ["command"]),
        "read": ("Read", ["file_path"]),
        "write": ("Write", ["file_path", "content"]),
        "network": ("Bash", ["command"]),
    },
    "codex": {
        "shell": ("exec_command", ["cmd"]),
        "read": ("exec_command", ["cmd"]),
        "write": ("exec_command", ["cmd"]),
        "network": ("exec_command", ["cmd"]),
    },
    "pi": {
        "shell": ("bash", ["command"]),
        "read": ("read", ["path"]),
        "write": ("write", ["path", "content"]),
        "network": ("bash", ["command"]),
    },
    "dsh": {
        "shell": ("bash", ["description", "command"]),
        "read": ("read", ["file_path"]),
        "write": ("write", ["file_path", "content"]),
        "network": ("bash", ["description", "command"]),
    },
}
EXPECTED["pi-adapter"] = EXPECTED["pi"]


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize("call", [SHELL, READ, WRITE, NETWORK], ids=lambda c: c.kind)
def test_each_cli_gets_its_own_builtin_tool(harness: str, call: LocalCall) -> None:
    schemas = SCHEMAS[_api(harness)](_body(harness))
    found = find_local_tool(call, schemas)
    assert found is not None
    name, shape = found
    want_name, want_keys = EXPECTED[harness][call.kind]
    assert name == want_name
    args = local_arguments(call, shape)
    assert list(args) == want_keys  # dsh wants its description before the command
    assert not name.startswith("mcp") and "sharedos" not in name
    if "description" in args:
        assert args["description"] == FILLER
    if call.kind == "read" and harness != "codex":
        assert next(iter(args.values())) == READ.path
    if call.kind == "write" and harness != "codex":
        assert list(args.values()) == [WRITE.path, WRITE.content]


def test_codex_reads_with_cat_and_writes_with_apply_patch() -> None:
    """Codex 0.171 offers no file tool to a model it has no metadata for."""
    schemas = SCHEMAS["responses"](_body("codex"))
    _, shape = find_local_tool(READ, schemas) or ("", None)
    assert shape is not None
    assert local_arguments(READ, shape) == {"cmd": "cat -- /srv/private/b.txt"}
    _, shape = find_local_tool(WRITE, schemas) or ("", None)
    assert shape is not None and shape.patch
    cmd = local_arguments(WRITE, shape)["cmd"]
    assert cmd.startswith("apply_patch <<'SHAREDOS_PATCH'\n*** Begin Patch\n")
    assert "*** Add File: /srv/public/planted.txt\n+planted\n+by it\n*** End Patch\n" in cmd


def test_shell_commands_are_what_a_shell_runs(tmp_path: Path) -> None:
    """The generated commands do what they say in a real bash (quoting included)."""
    target = tmp_path / "it's here.txt"
    write = LocalCall("write", path=str(target), content="a 'quoted' $HOME\n")
    subprocess.run(["bash", "-c", write.shell_command()], check=True, timeout=10)
    assert target.read_text() == "a 'quoted' $HOME\n"
    read = LocalCall("read", path=str(target))
    out = subprocess.run(
        ["bash", "-c", read.shell_command()], check=True, capture_output=True, text=True
    )
    assert out.stdout == "a 'quoted' $HOME\n"
    assert shlex.split(NETWORK.shell_command())[:2] == ["bash", "-c"]
    assert "/dev/tcp/127.0.0.1/4242" in NETWORK.shell_command()


def test_no_shell_offered_means_no_local_attempt() -> None:
    assert find_local_tool(SHELL, {"mcp__sharedos__files_read": {"properties": {}}}) is None
    # a read tool without a path argument is not taken for one
    assert find_local_tool(READ, {"Read": {"properties": {"pages": {}}}}) is None


def _plan() -> list[ScriptedAttempt]:
    return [
        ScriptedAttempt("public-read", "files.read", {"path": "/public/a.txt"}),
        ScriptedAttempt("local-shell", "<harness shell>", {"command": SHELL.command}, local=SHELL),
        ScriptedAttempt("local-read", "<harness read>", {"path": READ.path}, local=READ),
    ]


@pytest.mark.parametrize("harness", HARNESSES)
def test_the_server_issues_the_catalogue_then_the_builtins(harness: str, tmp_path: Path) -> None:
    """Step by step over the measured tools: the catalogue tool first (plan order), then
    the CLI's own tools; each local call is recorded as such, with what the tool got."""
    api, path = _api(harness), str(MEASURED[harness]["path"])
    with ScriptedModelServer(_plan(), catalog_names=("files.read",)) as model:
        body = _body(harness)
        first = model.answer(path, body)
        assert first is not None and first[1].attempt is not None
        assert first[1].attempt.key == "public-read"
        for k in (1, 2):
            body = _with_results(api, body, k)
            step = model.answer(path, body)
            assert step is not None and step[1].alias is not None
            want = EXPECTED[harness]["shell" if k == 1 else "read"][0]
            assert step[1].alias.name == want
        local = [c for c in model.issued if c.local]
        assert [(c.key, c.local, c.alias) for c in local] == [
            ("local-shell", "shell", EXPECTED[harness]["shell"][0]),
            ("local-read", "read", EXPECTED[harness]["read"][0]),
        ]
        assert list(local[0].arguments) == EXPECTED[harness]["shell"][1]


def _with_results(api: str, body: dict[str, Any], done: int) -> dict[str, Any]:
    """``body`` with ``done`` scripted tool results in that API's shape."""
    ids = [f"call_sos{i:03d}x" if api != "anthropic" else f"toolu_sos{i:03d}x" for i in range(done)]
    if api == "anthropic":
        content = [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids]
        return {**body, "messages": [{"role": "user", "content": content}]}
    if api == "responses":
        items = [{"type": "function_call_output", "call_id": i, "output": "ok"} for i in ids]
        return {**body, "input": items}
    return {**body, "messages": [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]}


def test_local_attempts_wait_for_the_catalogue_like_the_rest() -> None:
    """dsh's asynchronous MCP discovery: a first request with its own tools but none of the
    catalogue attempts nothing (the order of the plan never depends on when the MCP tools
    arrived); Claude Code's race still gets WaitForMcpServers first."""
    tools = [t for t in MEASURED["dsh"]["tools"] if not t["name"].startswith("mcp__")]
    with ScriptedModelServer(_plan(), catalog_names=("files.read",)) as model:
        answered = model.answer("/v1/messages", {"tools": tools})
        assert answered is not None and answered[1].text is not None
        assert "issued 0 of 3" in answered[1].text and model.issued == []
        waiting = model.answer("/v1/messages", {"tools": [*tools, {"name": "WaitForMcpServers"}]})
        assert waiting is not None and waiting[1].wait
    # a plan of local attempts only (an open run's turn) needs no catalogue
    only_local = [a for a in _plan() if a.local]
    with ScriptedModelServer(only_local) as model:
        answered = model.answer("/v1/messages", {"tools": tools})
        assert answered is not None and answered[1].alias is not None
        assert answered[1].alias.name == "bash"

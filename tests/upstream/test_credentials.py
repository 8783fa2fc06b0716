"""Upstream credentials appear nowhere but in the upstream's own session.

A distinctive value is planted in the host environment, referenced by the
host configuration, and handed to real upstreams (the fixture, which tries
every way to leak it, and server-everything, whose ``get-env`` returns its
whole environment). Then every artifact is searched for it: tools/list,
results, ``_meta``, error messages, evidence (the SQLite files and the
export), the pin file, SharedOS's stderr and the command lines of every
process on the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import (
    FIXTURE,
    FIXTURE_RULES,
    PY,
    RUN_POLICY,
    brokered,
    node,
    npm_server,
    structured,
    text_of,
)

pytestmark = pytest.mark.anyio


def planted_forms(value: str) -> list[str]:
    """The value and the encodings it could be smuggled out in."""
    return [value, json.dumps(value)[1:-1], value.encode().hex(), value[::-1]]


def grep_bytes(blob: bytes, value: str) -> list[str]:
    """Which forms of ``value`` occur in ``blob``."""
    return [form for form in planted_forms(value) if form.encode() in blob]


def grep_tree(root: Path, value: str, *, skip: tuple[Path, ...] = ()) -> dict[str, list[str]]:
    """Every file under ``root`` holding a form of ``value`` (planted inputs excepted)."""
    hits: dict[str, list[str]] = {}
    for path in root.rglob("*"):
        if path.is_file() and path not in skip:
            found = grep_bytes(path.read_bytes(), value)
            if found:
                hits[str(path)] = found
    return hits


def process_command_lines() -> bytes:
    """Every process's command line (what ``ps`` shows), joined."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes())
            except OSError:
                continue
    return b"\n".join(out)


def dump(value: Any) -> bytes:
    return json.dumps(value, default=str).encode()


async def test_a_planted_credential_is_found_nowhere(tmp_path: Path, planted: str) -> None:
    log = tmp_path / "fx.log"
    toml = (
        f"[upstream.fx]\ncommand = {json.dumps(PY)}\n"
        f'args = {json.dumps([str(FIXTURE), "--log", str(log)])}\npinning = "off"\n'
        '[upstream.fx.credentials]\nFIXTURE_TOKEN = { env = "SHAREDOS_TEST_TOKEN" }\n'
        f"[upstream.everything]\ncommand = {json.dumps(node())}\n"
        f'args = {json.dumps([str(npm_server("server-everything")), "stdio"])}\npinning = "off"\n'
        '[upstream.everything.credentials]\nEVERYTHING_API_KEY = { env = "SHAREDOS_TEST_TOKEN" }\n'
    )
    rules = (
        FIXTURE_RULES
        + "namespace fx\nrequirement fx.leak { action read; resource path(args.path) }\n"
        + 'namespace everything\nrequirement everything.get-env { action read; resource "env" }\n'
        + 'permit read on "env"\n'
        + RUN_POLICY
    )
    environ = {"SHAREDOS_TEST_TOKEN": planted}
    seen: list[bytes] = []
    async with brokered(tmp_path, toml, rules, environ=environ) as env, env.turn() as t:
        listed = await t.client.list_tools()
        seen.append(dump([tool.model_dump(by_alias=True) for tool in listed.tools]))
        whoami = await t.call("fx.whoami", {"path": "/public/x"})
        results = [
            await t.call("fx.leak", {"how": how, "path": "/public/x"})
            for how in ("text", "error", "stderr", "crash")
        ]
        results.append(await t.call("fx.leak", {"how": "text", "path": "/public/x"}))
        env_result = await t.call("everything.get-env", {})
        results.append(env_result)
        for result in results:
            seen.append(dump(result.model_dump(by_alias=True, mode="json")))
        seen.append(process_command_lines())
        seen.append(dump(t.upstreams.as_dict()))
        seen.append("\n".join(t.upstreams.report()).encode())
    # the upstream really had the credential (so the test can fail)...
    assert structured(whoami) == {"tokenPresent": True, "tokenLength": len(planted)}
    assert "[redacted]" in text_of(results[0])
    assert structured(results[0])["token"] == "[redacted]"
    assert "[redacted]" in text_of(env_result)  # server-everything's own environment dump
    assert "EVERYTHING_API_KEY" in text_of(env_result)
    assert "[redacted]" in env.stderr.getvalue()  # the upstream wrote it to stderr
    # ...and nothing that left SharedOS carries it
    for blob in seen:
        assert grep_bytes(blob, planted) == []
    assert grep_bytes(env.stderr.getvalue().encode(), planted) == []
    export = subprocess.run(
        [
            str(Path(PY).parent / "sharedos"),
            "evidence",
            "export",
            "--db",
            str(tmp_path / "evidence.sqlite"),
        ],
        capture_output=True,
        timeout=60,
    )
    assert export.returncode == 0, export.stderr
    assert b"fx.leak" in export.stdout
    assert grep_bytes(export.stdout + export.stderr, planted) == []
    # every file the run produced: evidence db (+wal), the fixture's log, ...
    assert grep_tree(tmp_path, planted) == {}


def test_cli_commands_never_print_or_pass_the_credential(tmp_path: Path, planted: str) -> None:
    log = tmp_path / "fx.log"
    host = tmp_path / "host.toml"
    host.write_text(
        f"[upstream.fx]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps([str(FIXTURE), '--log', str(log)])}\n"
        '[upstream.fx.credentials]\nFIXTURE_TOKEN = { env = "SHAREDOS_TEST_TOKEN" }\n',
        encoding="utf-8",
    )
    sharedos = str(Path(PY).parent / "sharedos")
    environ = {**os.environ, "SHAREDOS_TEST_TOKEN": planted}
    outputs = []
    for args in (
        ["host", "check", str(host)],
        ["upstream", "pin", str(host)],
        ["upstream", "status", str(host)],
        ["upstream", "status", "--json", str(host)],
        ["upstream", "diff", str(host)],
    ):
        proc = subprocess.run(
            [sharedos, *args], capture_output=True, env=environ, timeout=120, check=False
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        outputs.append(proc.stdout + proc.stderr)
    assert b"SHAREDOS_TEST_TOKEN" in outputs[0]  # the variable's name is shown...
    for blob in outputs:
        assert grep_bytes(blob, planted) == []  # ...its value never
    assert grep_tree(tmp_path, planted) == {}


def test_a_literal_credential_in_the_host_file_is_refused_without_echoing_it(
    tmp_path: Path, planted: str
) -> None:
    host = tmp_path / "host.toml"
    host.write_text(
        '[upstream.gh]\ncommand = "mcp-server-github"\n'
        f'[upstream.gh.credentials]\nGITHUB_PERSONAL_ACCESS_TOKEN = "{planted}"\n'
        f'[upstream.gh.env]\nAPI_TOKEN = "{planted}"\n',
        encoding="utf-8",
    )
    proc = subprocess.run(
        [str(Path(PY).parent / "sharedos"), "host", "check", str(host)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert f"{host}:4:1: upstream.gh.credentials.GITHUB_PERSONAL_ACCESS_TOKEN" in proc.stderr
    assert "a literal value is not allowed" in proc.stderr
    assert f"{host}:6:1: upstream.gh.env.API_TOKEN" in proc.stderr
    assert "looks like a credential" in proc.stderr
    assert planted not in proc.stdout + proc.stderr

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

from tests.timing import bound
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


def upstream_commands_output(host: Path, environ: dict[str, str]) -> bytes:
    """What ``sharedos upstream pin``, ``status --json`` and ``diff`` of ``host`` print
    (standard output and error, in that order), run with ``environ``."""
    sharedos = str(Path(PY).parent / "sharedos")
    outputs = b""
    for args in (
        ["upstream", "pin", str(host)],
        ["upstream", "status", "--json", str(host)],
        ["upstream", "diff", str(host)],
    ):
        proc = subprocess.run([sharedos, *args], capture_output=True, env=environ, timeout=120)
        outputs += proc.stdout + proc.stderr
    return outputs


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
    # (the crash case restarts the fixture for the next call: on a loaded machine that
    # took past the client's default 5 s read timeout)
    async with (
        brokered(tmp_path, toml, rules, environ=environ) as env,
        env.turn(http_timeout=bound(30)) as t,
    ):
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


async def test_an_argument_may_name_the_upstreams_own_credential_for_it_to_expand(
    tmp_path: Path, planted: str
) -> None:
    """mcp-remote's documented ``--header "Authorization:${AUTH_HEADER}"``, with
    ``AUTH_HEADER`` in its environment, was refused by ``host check`` ("arguments are
    literal (no $VAR)") with a way out that could not work: the credential was in its
    environment already, and mcp-remote takes its headers only as arguments. An argument
    naming one of the upstream's own variables is passed as written now: the program
    expands it from its environment, and the value is on no command line."""
    args = [str(FIXTURE), "--header", "Authorization:Bearer ${FIXTURE_TOKEN}"]
    toml = (
        f"[upstream.fx]\ncommand = {json.dumps(PY)}\nargs = {json.dumps(args)}\n"
        'pinning = "off"\n'
        '[upstream.fx.credentials]\nFIXTURE_TOKEN = { env = "SHAREDOS_TEST_TOKEN" }\n'
    )
    environ = {"SHAREDOS_TEST_TOKEN": planted}
    rules = FIXTURE_RULES + RUN_POLICY
    async with brokered(tmp_path, toml, rules, environ=environ) as env, env.turn() as t:
        whoami = await t.call("fx.whoami", {"path": "/public/x"})
        command_lines = process_command_lines()
    said = structured(whoami)
    assert said["headerLengths"] == {"Authorization": len("Bearer ") + len(planted)}, said
    assert b"Authorization:Bearer ${FIXTURE_TOKEN}" in command_lines  # as written
    assert grep_bytes(command_lines, planted) == []


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


def _fixture_with_credential(log: Path, tools: Path | None = None) -> str:
    args = [str(FIXTURE), "--log", str(log), *(["--tools", str(tools)] if tools else [])]
    return (
        f"[upstream.fx]\ncommand = {json.dumps(PY)}\nargs = {json.dumps(args)}\n"
        'pinning = "off"\n'
        '[upstream.fx.credentials]\nFIXTURE_TOKEN = { env = "SHAREDOS_TEST_TOKEN" }\n'
    )


async def test_encoded_forms_of_a_credential_are_scrubbed_from_results(tmp_path: Path) -> None:
    """base64 (standard, URL-safe, unpadded, inside a longer blob), hex in both cases and
    percent-encoding are scrubbed like the raw value (issue 22); so are the forms other
    languages' encoders give it (encodeURIComponent, PHP's and Go's JSON)."""
    from tests.adversarial.planted import SecretScan

    token = "PLANTED/cred+7f3a=9c1e 5b2d&4860?x!<y>*(z)'"
    log = tmp_path / "fx.log"
    rules = (
        FIXTURE_RULES
        + "namespace fx\nrequirement fx.leak { action read; resource path(args.path) }\n"
        + RUN_POLICY
    )
    environ = {"SHAREDOS_TEST_TOKEN": token}
    async with (
        brokered(tmp_path, _fixture_with_credential(log), rules, environ=environ) as env,
        env.turn() as t,
    ):
        result = await t.call("fx.leak", {"how": "encoded", "path": "/public/x"})
    data = structured(result)
    # the upstream really sent every encoding (so the test can fail)...
    assert set(data) >= {"base64", "base64url", "hex", "HEX", "percent", "percent-plus"}
    assert "[redacted]" in data["hex"] and "[redacted]" in data["base64-inside"]
    # as an upstream in another language writes it (JavaScript, PHP, Go)
    assert data["percent-js"] == "[redacted]"
    assert data["json-php"] == data["json-go"] == '"[redacted]"'
    # ...and no form of the value is left anywhere in what the harness received
    scan = SecretScan(token)
    scan.json_value("the tool result", result.model_dump(by_alias=True, mode="json"))
    scan.evidence(tmp_path / "evidence.sqlite")
    scan.assert_clean()


def _definition_tools(planted: str) -> list[dict[str, Any]]:
    """One clean tool, and the same credential in every place a definition can carry it."""
    import base64

    schema: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}}

    def tool(name: str, **extra: Any) -> dict[str, Any]:
        out = {"name": name, "description": f"{name} tool", "inputSchema": schema}
        out.update(extra)
        return out

    def prop(**extra: Any) -> dict[str, Any]:
        props = {"path": {"type": "string"}, "x": {"type": "string", **extra}}
        return {"type": "object", "properties": props}

    encoded = base64.b64encode(planted.encode()).decode()
    return [
        tool("clean"),
        tool("in_description", description=f"use the token {planted} to log in"),
        tool("in_description_base64", description=f"auth blob {encoded}"),
        tool("in_title", title=f"Tool {planted}"),
        tool("in_default", inputSchema=prop(default=planted)),
        tool("in_enum", inputSchema=prop(enum=["a", planted])),
        tool("in_examples", inputSchema=prop(examples=[planted])),
        tool(
            "in_property_name",
            inputSchema={"type": "object", "properties": {planted: {"type": "string"}}},
        ),
        tool(
            "in_output_schema",
            outputSchema={"type": "object", "properties": {"k": {"const": planted}}},
        ),
        tool("in_annotations", annotations={"title": f"by {planted}", "readOnlyHint": True}),
        tool("in_meta", _meta={"vendor/auth": {"token": planted}}),
        tool(f"named_{planted}"),
    ]


def test_a_credential_in_a_tool_definition_is_held_back_and_never_pinned(
    tmp_path: Path, planted: str
) -> None:
    """An upstream that puts its own credential in a tool definition gets that tool held
    back: not in tools/list, not in the pin file, reported by tool without the value."""
    tools = _definition_tools(planted)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    rules = "namespace fx\n" + "".join(
        "requirement fx." + t["name"] + ' { action read; resource "r" }\n' for t in tools
    )
    rules += 'permit read on "r"\n' + RUN_POLICY

    async def listed() -> tuple[bytes, Any]:
        async with (
            brokered(
                tmp_path,
                _fixture_with_credential(tmp_path / "fx.log", tools_file),
                rules,
                environ={"SHAREDOS_TEST_TOKEN": planted},
            ) as env,
            env.turn() as t,
        ):
            wire = await t.client.list_tools()
            blob = dump([tool.model_dump(by_alias=True, mode="json") for tool in wire.tools])
            return blob, t.upstreams

    import anyio

    blob, upstreams = anyio.run(listed)
    # the bridge's tools/list (what the model reads) holds the clean tool only
    assert b'"fx.clean"' in blob
    assert grep_bytes(blob, planted) == []
    [status] = upstreams.statuses
    assert status.published == ("fx.clean",)
    refused = {r.tool: r.reason for r in status.refused}
    assert len(refused) == len(tools) - 1
    assert all("contains a credential of this upstream" in why for why in refused.values())
    assert "inputSchema.properties.x.default" in refused["in_default"]
    assert "_meta.vendor/auth.token" in refused["in_meta"]
    assert "named_[redacted]" in refused
    report = dump(upstreams.as_dict()) + "\n".join(upstreams.report()).encode()
    assert grep_bytes(report, planted) == []
    # the operator's commands: the pin file never stores it, nor does any output show it
    host = tmp_path / "host.toml"
    host.write_text(_fixture_with_credential(tmp_path / "fx.log", tools_file), encoding="utf-8")
    sharedos = str(Path(PY).parent / "sharedos")
    environ = {**os.environ, "SHAREDOS_TEST_TOKEN": planted}
    outputs = b""
    for args in (["upstream", "pin", str(host)], ["upstream", "status", "--json", str(host)]):
        proc = subprocess.run([sharedos, *args], capture_output=True, env=environ, timeout=120)
        outputs += proc.stdout + proc.stderr
    pins = (tmp_path / "host.pins.json").read_text(encoding="utf-8")
    assert '"fx.clean"' in pins
    assert grep_bytes(pins.encode(), planted) == [] and grep_bytes(outputs, planted) == []
    assert grep_tree(tmp_path, planted, skip=(tools_file,)) == {}


def test_another_upstreams_credential_in_a_tool_definition_is_held_back(
    tmp_path: Path, planted: str
) -> None:
    """An upstream's definitions were checked against its own credentials only: one that
    had learned another upstream's (read from that upstream's process or file, an
    unconfined server runs as the operator) and put it in a tool definition had it
    published to the model, stored in the pin file and printed by the operator's
    commands, while the same value in any of its results was scrubbed."""
    tools = _definition_tools(planted)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    clean_file = tmp_path / "clean.json"
    clean_file.write_text(json.dumps(tools[:1]), encoding="utf-8")
    fy = [str(FIXTURE), "--log", str(tmp_path / "fy.log"), "--tools", str(tools_file)]
    host_text = _fixture_with_credential(tmp_path / "fx.log", clean_file) + (
        f'[upstream.fy]\ncommand = {json.dumps(PY)}\nargs = {json.dumps(fy)}\npinning = "off"\n'
    )
    rules = 'namespace fx\nrequirement fx.clean { action read; resource "r" }\n'
    rules += "namespace fy\n" + "".join(
        "requirement fy." + t["name"] + ' { action read; resource "r" }\n' for t in tools
    )
    rules += 'permit read on "r"\n' + RUN_POLICY

    async def listed() -> tuple[bytes, Any]:
        async with (
            brokered(tmp_path, host_text, rules, environ={"SHAREDOS_TEST_TOKEN": planted}) as env,
            env.turn() as t,
        ):
            wire = await t.client.list_tools()
            blob = dump([tool.model_dump(by_alias=True, mode="json") for tool in wire.tools])
            return blob, t.upstreams

    import anyio

    blob, upstreams = anyio.run(listed)
    assert b'"fy.clean"' in blob
    assert grep_bytes(blob, planted) == []
    status = {s.upstream: s for s in upstreams.statuses}
    assert status["fy"].published == ("fy.clean",)
    refused = {r.tool: r.reason for r in status["fy"].refused}
    assert len(refused) == len(tools) - 1
    assert all("contains a credential of upstream fx" in why for why in refused.values())
    report = dump(upstreams.as_dict()) + "\n".join(upstreams.report()).encode()
    assert grep_bytes(report, planted) == []
    # the operator's commands: the pin file never stores it, nor does any output show it
    host = tmp_path / "host.toml"
    host.write_text(host_text, encoding="utf-8")
    outputs = upstream_commands_output(host, {**os.environ, "SHAREDOS_TEST_TOKEN": planted})
    pins = (tmp_path / "host.pins.json").read_text(encoding="utf-8")
    assert '"fy.clean"' in pins
    assert grep_bytes(pins.encode(), planted) == [] and grep_bytes(outputs, planted) == []
    assert grep_tree(tmp_path, planted, skip=(tools_file,)) == {}


def test_a_harness_env_value_in_a_tool_definition_is_held_back_from_the_first_listing(
    tmp_path: Path, planted: str
) -> None:
    """``sharedos run`` gave the broker the run's own secrets (a harness's env values, the
    keys, the store's password) only once the turn had opened: its first listing, the one
    the turn's catalogue is made of, published a tool whose description held one."""
    import sys

    tools = [
        {"name": "clean", "description": "clean", "inputSchema": {"type": "object"}},
        {"name": "leaky", "description": f"uses {planted}", "inputSchema": {"type": "object"}},
    ]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    harness = tmp_path / "harness.py"
    harness.write_text(
        'import sys\nif "--version" in sys.argv:\n    print("2.1.0 (Claude Code)")\n',
        encoding="utf-8",
    )
    fy = [str(FIXTURE), "--log", str(tmp_path / "fy.log"), "--tools", str(tools_file)]
    host = tmp_path / "host.toml"
    host.write_text(
        f"[harness.claude-code]\ncommand = {json.dumps([sys.executable, str(harness)])}\n"
        '[harness.claude-code.env]\nVENDOR_KEY = "${SHAREDOS_TEST_VENDOR_KEY}"\n'
        f'[upstream.fy]\ncommand = {json.dumps(PY)}\nargs = {json.dumps(fy)}\npinning = "off"\n',
        encoding="utf-8",
    )
    rules = tmp_path / "rules.sos"
    rules.write_text(
        "namespace fy\n"
        'requirement fy.clean { action read; resource "r" }\n'
        'requirement fy.leaky { action read; resource "r" }\n'
        'permit read on "r"\n'
        'toolpolicy run { mode open\n managed fy.*\n harness_local "shell" }\n',
        encoding="utf-8",
    )
    proc = subprocess.run(
        [
            str(Path(PY).parent / "sharedos"),
            "run",
            "--host-config",
            str(host),
            "--harness",
            "claude-code",
            "--rules",
            str(rules),
            "--policy",
            "run",
            "--principal",
            "bob",
            "--evidence",
            str(tmp_path / "ev.sqlite"),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "SHAREDOS_TEST_VENDOR_KEY": planted},
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "fy.clean" in out
    assert "upstream fy (fy.*): 1 of 2 tools published" in proc.stderr, proc.stderr
    assert grep_bytes(out.encode(), planted) == []


def test_a_host_secret_in_a_tool_definition_is_never_pinned_nor_printed(
    tmp_path: Path, planted: str
) -> None:
    """``sharedos run`` holds back a tool whose definition holds one of the host's secrets
    (a harness's model key, a key file's contents, the store's password); ``sharedos
    upstream pin``/``status``/``diff`` listed with no host secrets at all: the same tool
    was written to the pin file (readable by all) and printed."""
    tools = _definition_tools(planted)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools), encoding="utf-8")
    fy = [str(FIXTURE), "--log", str(tmp_path / "fy.log"), "--tools", str(tools_file)]
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.claude-code]\n[harness.claude-code.env]\nMODEL_KEY = "${HUNT_MODEL_KEY}"\n'
        f'[upstream.fy]\ncommand = {json.dumps(PY)}\nargs = {json.dumps(fy)}\npinning = "off"\n',
        encoding="utf-8",
    )
    outputs = upstream_commands_output(host, {**os.environ, "HUNT_MODEL_KEY": planted})
    pins = (tmp_path / "host.pins.json").read_text(encoding="utf-8")
    assert '"fy.clean"' in pins
    assert b"contains a credential of this host" in outputs, outputs.decode()[-2000:]
    assert grep_bytes(pins.encode(), planted) == [] and grep_bytes(outputs, planted) == []
    assert grep_tree(tmp_path, planted, skip=(tools_file,)) == {}

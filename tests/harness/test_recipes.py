"""Per-harness launch recipes: private files, the measured flags, secrets only where they belong."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

import pytest

from sharedos.harness import recipes
from sharedos.harness.hostconfig import HarnessConfig, parse_host_config

TOKEN = "turn-token-THIS-MUST-NOT-LEAK-0123456789"
HTTP = recipes.BridgeEndpoint(transport="http", url="http://127.0.0.1:40001/mcp", token=TOKEN)
STDIO = recipes.BridgeEndpoint(
    transport="stdio", command=["/venv/bin/sharedos", "bridge", "--stdio", "--turn", "/t/turn.json"]
)
HOST_ENV = {
    "PATH": "/usr/bin:/bin",
    "ANTHROPIC_API_KEY": "sk-host-credential-not-configured",
    "HOME": "/root",
}


def turn_dir(tmp_path: Path) -> Path:
    d = tmp_path / "turn"
    d.mkdir(mode=0o700, parents=True)
    return d


def prepare(
    cfg: HarnessConfig, tmp_path: Path, bridge: recipes.BridgeEndpoint | None = HTTP
) -> recipes.Launch:
    return recipes.prepare(
        cfg,
        bridge=bridge,
        turn_dir=turn_dir(tmp_path),
        prompt="do it",
        model_url="http://127.0.0.1:40002",
        host_env=HOST_ENV,
        command=("/bin/harness",),
    )


def assert_private(launch: recipes.Launch) -> None:
    for path in launch.files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert TOKEN not in " ".join(launch.argv)
    # A credential in the host's environment reaches no harness that was not configured with it.
    assert "sk-host-credential-not-configured" not in launch.env.values()
    assert launch.env["HOME"] != "/root"


def test_claude_code_http(tmp_path: Path) -> None:
    launch = prepare(HarnessConfig(id="claude-code", kind="claude-code"), tmp_path)
    assert_private(launch)
    cfg = json.loads(Path(launch.argv[launch.argv.index("--mcp-config") + 1]).read_text())
    server = cfg["mcpServers"]["sharedos"]
    assert server == {
        "type": "http",
        "url": HTTP.url,
        "headers": {"Authorization": f"Bearer {TOKEN}"},
    }
    for flag in ("--strict-mcp-config", "--no-session-persistence", "--verbose", "-p"):
        assert flag in launch.argv
    assert launch.argv[launch.argv.index("--allowedTools") + 1] == "mcp__sharedos"
    assert launch.argv[launch.argv.index("--output-format") + 1] == "stream-json"
    assert launch.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert launch.env["MCP_CONNECTION_NONBLOCKING"] == "0"
    assert launch.env["ENABLE_TOOL_SEARCH"] == "false"
    assert launch.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:40002"


def test_claude_code_stdio_and_live(tmp_path: Path) -> None:
    launch = prepare(HarnessConfig(id="claude-code", kind="claude-code"), tmp_path / "a", STDIO)
    cfg = json.loads(Path(launch.argv[launch.argv.index("--mcp-config") + 1]).read_text())
    assert cfg["mcpServers"]["sharedos"]["type"] == "stdio"
    assert [
        cfg["mcpServers"]["sharedos"]["command"],
        *cfg["mcpServers"]["sharedos"]["args"],
    ] == STDIO.command
    live = prepare(HarnessConfig(id="claude-code", kind="claude-code"), tmp_path / "b", None)
    cfg = json.loads(Path(live.argv[live.argv.index("--mcp-config") + 1]).read_text())
    assert cfg == {"mcpServers": {}} and "--allowedTools" not in live.argv


def test_codex_http(tmp_path: Path) -> None:
    launch = prepare(HarnessConfig(id="codex", kind="codex"), tmp_path)
    assert_private(launch)
    home = Path(launch.env["CODEX_HOME"])
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    config = tomllib.loads((home / "config.toml").read_text())
    server = config["mcp_servers"]["sharedos"]
    assert server["required"] is True and server["url"] == HTTP.url
    assert (
        server["bearer_token_env_var"] == recipes.TOKEN_ENV
        and launch.env[recipes.TOKEN_ENV] == TOKEN
    )
    assert TOKEN not in (home / "config.toml").read_text()
    assert config["features"] == {
        "plugins": False,
        "remote_plugin": False,
        "shell_snapshot": False,
        "apps": False,
    }
    assert config["analytics"]["enabled"] is False and config["otel"]["exporter"] == "none"
    provider = config["model_providers"][config["model_provider"]]
    assert (
        provider["base_url"] == "http://127.0.0.1:40002/v1" and provider["wire_api"] == "responses"
    )
    assert launch.env["RUST_BACKTRACE"] == "0"
    assert {"exec", "--json", "--ephemeral", "--skip-git-repo-check"} <= set(launch.argv)


def test_codex_vendor_config_is_merged(tmp_path: Path) -> None:
    cfg = parse_host_config(
        "[harness.codex]\nprovider='host'\ndeclared_model='gpt-x'\n"
        "[harness.codex.vendor.config]\nmodel='gpt-x'\n[harness.codex.vendor.config.features]\nplugins=true\n"
    ).get("codex")
    launch = prepare(cfg, tmp_path, STDIO)
    config = tomllib.loads((Path(launch.env["CODEX_HOME"]) / "config.toml").read_text())
    assert config["model"] == "gpt-x" and "model_providers" not in config
    assert config["features"]["plugins"] is True and config["features"]["apps"] is False
    assert config["mcp_servers"]["sharedos"]["command"] == STDIO.command[0]  # type: ignore[index]


@pytest.mark.parametrize("kind", ["pi", "pi-adapter"])
def test_pi(tmp_path: Path, kind: str) -> None:
    launch = prepare(HarnessConfig(id=kind, kind=kind), tmp_path)  # type: ignore[arg-type]
    assert_private(launch)
    agent = Path(launch.env["PI_CODING_AGENT_DIR"])
    mcp = json.loads((agent / "mcp.json").read_text())["mcpServers"]["sharedos"]
    assert TOKEN not in (agent / "mcp.json").read_text()
    assert launch.env[recipes.TOKEN_ENV] == TOKEN
    assert launch.env["PI_OFFLINE"] == "1" and launch.env["PI_TELEMETRY"] == "0"
    models = json.loads((agent / "models.json").read_text())
    assert models["providers"]["sharedos-scripted"]["api"] == "openai-completions"
    if kind == "pi":
        assert mcp["exposure"] == "direct"
        assert mcp["headers"] == {"Authorization": "Bearer ${SHAREDOS_BRIDGE_TOKEN}"}
        assert "-e" not in launch.argv
    else:
        assert mcp["directTools"] is True
        assert mcp["auth"] == "bearer" and mcp["bearerTokenEnv"] == recipes.TOKEN_ENV
        assert launch.argv[launch.argv.index("-e") + 1].endswith("pi-mcp-adapter")
        assert "--no-mcp" in launch.argv
    assert launch.argv[launch.argv.index("--mode") + 1] == "json"


def test_host_env_and_args_pass_through_opaquely(tmp_path: Path) -> None:
    cfg = parse_host_config(
        "[harness.claude-code]\nprovider='host'\ndeclared_model='claude-x'\nargs=['--model','claude-x']\n"
        "[harness.claude-code.env]\nANTHROPIC_API_KEY='${ANTHROPIC_API_KEY}'\nANTHROPIC_BASE_URL='https://gw.example'\n"
    ).get("claude-code")
    launch = prepare(cfg, tmp_path)
    assert launch.env["ANTHROPIC_API_KEY"] == "sk-host-credential-not-configured"
    assert launch.env["ANTHROPIC_BASE_URL"] == "https://gw.example"
    assert launch.argv[-4:] == ["--model", "claude-x", "--", "do it"]
    assert (
        "sk-host-credential-not-configured" in launch.secret_values
        and TOKEN in launch.secret_values
    )


def test_a_host_variable_an_env_value_is_built_from_is_scrubbed_alone_too(
    tmp_path: Path,
) -> None:
    """``AUTH = "Bearer ${KEY}"``: the harness's output was scrubbed of "Bearer <key>" only,
    so the key it printed alone (or passed into a call) was kept and shown verbatim."""
    cfg = parse_host_config(
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        "VENDOR_AUTH='Bearer ${ANTHROPIC_API_KEY}'\nJOINED='${ANTHROPIC_API_KEY}:${ANTHROPIC_API_KEY}'\n"
    ).get("claude-code")
    launch = prepare(cfg, tmp_path)
    assert launch.env["VENDOR_AUTH"] == "Bearer sk-host-credential-not-configured"
    assert "sk-host-credential-not-configured" in launch.secret_values
    assert "Bearer sk-host-credential-not-configured" in launch.secret_values


def test_an_ordinary_host_variable_an_env_value_is_built_from_is_not_scrubbed(
    tmp_path: Path,
) -> None:
    """``CLAUDE_CONFIG_DIR = "${HOME}/.claude-work"``: the harness's output had the home
    directory "[redacted]" in every path it printed; the key beside it is still scrubbed."""
    cfg = parse_host_config(
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        "CLAUDE_CONFIG_DIR='${HOME}/.claude-work'\nVENDOR_AUTH='Bearer ${ANTHROPIC_API_KEY}'\n"
    ).get("claude-code")
    home = "/home/operator-example"
    launch = recipes.prepare(
        cfg,
        bridge=None,
        turn_dir=turn_dir(tmp_path),
        prompt="p",
        model_url="http://127.0.0.1:40002",
        host_env={"HOME": home, "ANTHROPIC_API_KEY": "sk-host-credential-0123"},
        command=("/bin/harness",),
    )
    assert launch.env["CLAUDE_CONFIG_DIR"] == f"{home}/.claude-work"
    assert not {home, f"{home}/.claude-work"} & set(launch.secret_values)
    assert "sk-host-credential-0123" in launch.secret_values


@pytest.mark.parametrize("kind", ["claude-code", "codex", "pi", "pi-adapter", "dsh"])
@pytest.mark.parametrize("prompt", ["--version", "-x is wrong", "--model=evil", "-", "plain"])
def test_the_prompt_is_never_read_as_a_flag_of_the_cli(
    tmp_path: Path, kind: str, prompt: str
) -> None:
    """Every CLI parses a leading ``-`` as one of its options (measured: ``--version`` as the
    prompt printed the version and ran no turn): the prompt goes last, after ``--``, after the
    host file's own ``args``."""
    cfg = HarnessConfig(id=kind, kind=kind, args=("--verbose-extra",))  # type: ignore[arg-type]
    launch = recipes.prepare(
        cfg,
        bridge=HTTP,
        turn_dir=turn_dir(tmp_path),
        prompt=prompt,
        model_url="http://127.0.0.1:40002",
        host_env=HOST_ENV,
        command=("/bin/harness",),
    )
    given = " -" if prompt == "-" else prompt  # test_a_prompt_of_just_a_dash_is_no_stdin_marker
    assert launch.argv[-3:] == ["--verbose-extra", "--", given]
    assert launch.argv.count(given) == 1


@pytest.mark.parametrize("kind", ["claude-code", "codex", "pi", "pi-adapter", "dsh"])
def test_a_prompt_of_just_a_dash_is_no_stdin_marker(tmp_path: Path, kind: str) -> None:
    """Codex and dsh read a task of ``-`` as "the prompt is on stdin", even after ``--``
    (measured: "No prompt provided via stdin.", "a task is required"; exit 1, no model
    request): stdin is closed, so the prompt is given as `` -``."""
    launch = recipes.prepare(
        HarnessConfig(id=kind, kind=kind),  # type: ignore[arg-type]
        bridge=HTTP,
        turn_dir=turn_dir(tmp_path),
        prompt="-",
        model_url="http://127.0.0.1:40002",
        host_env=HOST_ENV,
        command=("/bin/harness",),
    )
    assert launch.argv[-2:] == ["--", " -"]


@pytest.mark.parametrize("kind", ["pi", "pi-adapter"])
def test_a_prompt_starting_with_at_is_no_file_for_pi(tmp_path: Path, kind: str) -> None:
    """Pi reads an argument starting with ``@`` as a file to attach, even after ``--``
    (measured: ``Error: File not found: …/nofile hi``): the prompt keeps its text."""
    launch = recipes.prepare(
        HarnessConfig(id=kind, kind=kind),  # type: ignore[arg-type]
        bridge=HTTP,
        turn_dir=turn_dir(tmp_path),
        prompt="@alice please review",
        model_url="http://127.0.0.1:40002",
        host_env=HOST_ENV,
        command=("/bin/harness",),
    )
    assert launch.argv[-2:] == ["--", " @alice please review"]


def _client_timeout_s(kind: str, launch: recipes.Launch) -> float:
    """The per-call MCP timeout (s) the CLI's configuration written for this turn gives it."""
    if kind == "codex":
        config = tomllib.loads((Path(launch.env["CODEX_HOME"]) / "config.toml").read_text())
        return float(config["mcp_servers"]["sharedos"]["tool_timeout_sec"])
    if kind in ("pi", "pi-adapter"):
        agent = Path(launch.env["PI_CODING_AGENT_DIR"])
        entry = json.loads((agent / "mcp.json").read_text())["mcpServers"]["sharedos"]
        return float(entry["timeout"]) if kind == "pi" else entry["requestTimeoutMs"] / 1000
    assert kind == "dsh"
    patches = [p.read_text() for p in launch.files if "toolCallTimeoutMs" in p.read_text()]
    (patch,) = patches
    (line,) = [x for x in patch.splitlines() if "toolCallTimeoutMs:" in x]
    return int(line.split(":", 1)[1]) / 1000


@pytest.mark.parametrize("kind", ["codex", "pi", "pi-adapter", "dsh"])
@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_the_clients_own_call_timeout_outlasts_the_hosts(
    tmp_path: Path, kind: str, transport: str
) -> None:
    """``sharedos run`` with an upstream of the default ``call_s`` (60 s) gives each call
    70 s; each CLI gave up on a call after 60 s (measured: Pi showed its model "MCP request
    timed out after 60000ms" while SharedOS recorded ``upstream_timeout``; with a longer
    ``call_s`` the call ran on and could succeed after the model was told it timed out).
    The client waits past the host's bound, with room for the evidence writes."""
    base = HTTP if transport == "http" else STDIO
    for within in (30.0, 70.0, 310.0):
        bridge = recipes.BridgeEndpoint(
            transport=base.transport,
            url=base.url,
            token=base.token,
            command=base.command,
            answer_within_s=within,
        )
        d = tmp_path / f"{within:g}"
        d.mkdir()
        launch = prepare(HarnessConfig(id=kind, kind=kind), d, bridge)  # type: ignore[arg-type]
        assert _client_timeout_s(kind, launch) >= within + 30, (kind, within)

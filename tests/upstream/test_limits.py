"""Limits on what an upstream sends: large listings and oversized results (issue 22, section 3).

Found by attack: 10,001 tools with one 4 MiB description blocked the host's
event loop for up to 42 s (every turn of the process froze), and a 20 MiB
result took 9.7 s to refuse, a 100 MiB one ran into the call timeout, and the
next ordinary call on that pooled session timed out too. Here the fixture
upstream (a real MCP server) sends exactly that, over stdio and streamable
HTTP, and the tests check behaviour, never wall-clock time: what is published
and refused (by tool), that another coroutine kept running while the listing
was converted, that the oversized call failed with ``upstream_error``, and
that the next call went to the same session and succeeded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.upstream import broker as broker_module
from sharedos.upstream import transport as transport_module
from sharedos.upstream.broker import UpstreamStatus
from sharedos.upstream.config import UpstreamLimits
from sharedos.upstream.transport import ListingScreen, message_id
from tests.upstream.conftest import (
    FIXTURE,
    FIXTURE_RULES,
    PY,
    RUN_POLICY,
    brokered,
    fixture_upstream,
    free_port,
    http_process,
    structured,
    text_of,
)

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


def huge_listing(path: Path) -> Path:
    """10,001 tools: one with a 4 MiB description, one with a 300 KiB schema."""
    schema: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools: list[dict[str, Any]] = [
        {"name": f"t{i:05d}", "description": f"tool {i}", "inputSchema": schema}
        for i in range(10_001)
    ]
    tools[3]["description"] = "x" * (4 * MIB)
    tools[4]["inputSchema"] = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "y" * 300} for i in range(1000)},
    }
    path.write_text(json.dumps(tools), encoding="utf-8")
    return path


RULES = (
    'namespace fx\nrequirement fx.t00000 { action read; resource "r" }\n'
    'permit read on "r"\n' + RUN_POLICY
)


@pytest.mark.parametrize("transport", ["stdio", "http-auto", "http-legacy"])
async def test_a_huge_listing_is_capped_and_every_refusal_named(
    tmp_path: Path, transport: str
) -> None:
    tools = huge_listing(tmp_path / "tools.json")
    log = tmp_path / "fx.log"
    if transport == "stdio":
        toml = fixture_upstream(
            "fx", log, extra_args=["--tools", str(tools)], extra="timeouts = { list_s = 120 }"
        )
        async with brokered(tmp_path, toml, RULES) as env:
            listing = (await env.broker.list_all())["fx"]
    else:
        port = free_port()
        protocol = transport.split("-")[1]
        toml = (
            f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
            f'protocol = "{protocol}"\ntimeouts = {{ list_s = 120 }}\n'
        )
        argv = [PY, str(FIXTURE), "--http", str(port), "--tools", str(tools), "--max-life", "300"]
        with http_process(argv, port):
            async with brokered(tmp_path, toml, RULES) as env:
                listing = (await env.broker.list_all())["fx"]
    assert listing.failure is None, listing.failure
    published = [t.name for t, _ in listing.tools]
    refused = {r.tool: r.reason for r in listing.refused}
    # the first 1000 are considered (limits.max_tools); of those, the two oversized are refused
    assert len(published) == 998 and published[0] == "fx.t00000"
    assert "fx.t00003" not in published and "fx.t00004" not in published
    assert "limits.max_description_bytes" in refused["t00003"]
    assert "input schema is over limits.max_schema_bytes" in refused["t00004"]
    assert "over limits.max_tools (1000)" in refused["t01000"]
    assert "over limits.max_tools" in refused["t10000"]
    assert len(refused) == 10_001 - 998
    # the report names them without echoing a 4 MiB description, and not 9,003 lines long
    assert all(len(r) < 300 for r in refused.values())
    status = UpstreamStatus(
        "fx", "fx", "ok", published=tuple(published), refused=tuple(listing.refused), listed=10_001
    )
    lines = status.lines()
    assert len(lines) == 22 and "8983 more tool(s)" in lines[-1]
    assert lines[-1].endswith("more tool(s) (`sharedos upstream status --json` lists every one)")
    assert len(status.as_dict()["refused"]) == 10_001 - 998


async def test_the_event_loop_stays_live_while_a_listing_is_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another coroutine keeps running while the tools are turned into definitions:
    the conversion (schema checks, ~ms a tool) is off the loop."""
    tools = huge_listing(tmp_path / "tools.json")
    toml = fixture_upstream(
        "fx",
        tmp_path / "fx.log",
        extra_args=["--tools", str(tools)],
        extra="timeouts = { list_s = 120 }",
    )
    ticks = 0
    seen: list[int] = []  # the ticker's count at each definition built
    real = broker_module.build_definition

    def build(*args: Any, **kw: Any) -> Any:
        seen.append(ticks)
        return real(*args, **kw)

    monkeypatch.setattr(broker_module, "build_definition", build)
    done = anyio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await anyio.sleep(0.001)

    async with brokered(tmp_path, toml, RULES) as env, anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await env.broker.list_all()
        done.set()
    assert len(seen) >= 998
    # on the loop, every definition would be built between two ticks (one count);
    # off it, the ticker goes on while they are built
    assert seen[-1] > seen[0], (seen[0], seen[-1])


def test_the_screen_drops_tools_over_the_limits_across_pages() -> None:
    screen = ListingScreen(UpstreamLimits(max_tools=3, max_description_bytes=10))
    screen.start()
    page1 = screen.screen({"tools": [{"name": "a"}, {"name": "b", "description": "z" * 11}]})
    page2 = screen.screen({"tools": [{"name": "c"}, {"name": "d"}], "nextCursor": None})
    assert [t["name"] for t in page1["tools"]] == ["a"]
    assert [t["name"] for t in page2["tools"]] == ["c"]
    named, unnamed = screen.take()
    dropped = dict(named)
    assert set(dropped) == {"b", "d"} and "max_tools" in dropped["d"] and unnamed == 0
    assert screen.take() == ([], 0)
    screen.start()  # a new listing counts from its first tool again
    assert len(screen.screen({"tools": [{"name": "e"}] * 3})["tools"]) == 3


def test_tools_far_past_max_tools_are_counted_not_named() -> None:
    """A listing of a million tiny tools (16 MiB) cost the host 26 s and 1.3 GB naming each
    one refused: past ``named`` of them, the rest are counted."""
    screen = ListingScreen(UpstreamLimits(max_tools=3), named=4)
    screen.start()
    kept = screen.screen({"tools": [{"name": f"t{i}"} for i in range(5)]})
    kept2 = screen.screen({"tools": [{"name": f"u{i}"} for i in range(1000)]})
    assert [t["name"] for t in kept["tools"]] == ["t0", "t1", "t2"] and kept2["tools"] == []
    named, unnamed = screen.take()
    assert [name for name, _why in named] == ["t3", "t4", "u0", "u1"]
    assert unnamed == 998


async def test_a_listing_far_past_max_tools_is_counted_in_the_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real upstream: the tools past the named ones are one refusal that
    counts them, and the status still says how many tools were listed."""
    monkeypatch.setattr(transport_module, "NAMED_PAST_MAX_TOOLS", 5)
    listed = tmp_path / "tools.json"
    schema = {"type": "object"}
    listed.write_text(json.dumps([{"name": f"t{i:03d}", "inputSchema": schema} for i in range(40)]))
    toml = fixture_upstream(
        "fx", tmp_path / "fx.log", extra_args=["--tools", str(listed)], extra=_MAX_TOOLS_10
    )
    async with brokered(tmp_path, toml, RULES) as env:
        listing = (await env.broker.list_all())["fx"]
    assert listing.failure is None, listing.failure
    assert len(listing.tools) == 10
    refused = {r.tool: r.reason for r in listing.refused}
    assert sorted(refused) == [
        "(25 more past limits.max_tools)",
        *(f"t{i:03d}" for i in range(10, 15)),
    ]
    assert "25 more tools past limits.max_tools (10)" in refused["(25 more past limits.max_tools)"]
    assert sum(item.count for item in listing.raw) == 40


_MAX_TOOLS_10 = "limits = { max_tools = 10 }"


@pytest.mark.parametrize(
    ("head", "tail", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"xxx', b"xxx", 7),
        (b'{"result":{"content":[{"text":"xx', b'xx"}]},"jsonrpc":"2.0","id":"a-1"}', "a-1"),
        (b'{"result":{"id":99,"content":"xx', b'xx"},"jsonrpc":"2.0","id":8}\n', 8),
        # decoys: an id inside the result, inside a string, or in a nested object's tail
        (b'{"result":{"id":99,"text":"xx', b'xx","id":98}}', None),
        (b'{"result":"a,\\"id\\":5,', b'x\\",\\"id\\":6}"}', None),
        (b'{"jsonrpc":"2.0","id":true,"result":', b"}", None),
    ],
)
def test_the_id_of_an_oversized_message_is_read_from_its_edges(
    head: bytes, tail: bytes, expected: Any
) -> None:
    assert message_id(head, tail) == expected


def _sessions(env: Any) -> list[Any]:
    """The broker's pooled connections (to tell a kept session from a reopened one)."""
    return [slot.connection for slot in env.broker.pool]


async def _oversized_then_ordinary(tmp_path: Path, toml: str) -> None:
    rules = FIXTURE_RULES + RUN_POLICY
    # the fixture takes seconds to produce 100 MiB before its first byte arrives (load):
    # the harness's own client must wait for it; what is checked is the answer, not time
    async with (
        brokered(tmp_path, toml, rules, handler_timeout_s=120) as env,
        env.turn(http_timeout=90) as t,
    ):
        first = await t.call("fx.echo", {"message": "before", "path": "/public/a"})
        [session] = _sessions(env)
        results = []
        for size in (20 * MIB, 100 * MIB):
            big = await t.call("fx.big", {"size": size, "path": "/public/a"})
            after = await t.call("fx.echo", {"message": "after", "path": "/public/a"})
            results.append((size, big, after))
        # the same pooled session served every call: never broken, never reopened
        assert _sessions(env) == [session] and session.usable
    for size, big, after in results:
        assert big.is_error is True, size
        data = structured(big)
        assert (data.get("outcome"), data.get("reason")) == ("failed", "upstream_error"), data
        assert "over its limit of 4194304 bytes" in text_of(big)
        # refused while it was read, not read whole first (the pre-issue-22 path said
        # "returned a result of N bytes")
        assert "stopped reading it" in text_of(big), text_of(big)
        assert "x" * 1000 not in text_of(big)
        # the very next call works, on the same session (same process, no reconnect)
        assert after.is_error is False and text_of(after) == "after", (size, text_of(after))
        if "pid" in structured(first):
            assert structured(after)["pid"] == structured(first)["pid"]
    records = [r for r in env.records() if r.tool == "fx.big"]
    assert [(str(r.outcome), str(r.reason)) for r in records] == [("failed", "upstream_error")] * 2


async def test_an_oversized_result_over_stdio_is_refused_while_read(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    toml = fixture_upstream("fx", log, extra="timeouts = { call_s = 60 }")
    await _oversized_then_ordinary(tmp_path, toml)


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_an_oversized_result_over_http_is_refused_while_read(
    tmp_path: Path, protocol: str
) -> None:
    log = tmp_path / "fx.log"
    port = free_port()
    toml = (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        f'protocol = "{protocol}"\ntimeouts = {{ call_s = 60 }}\n'
    )
    argv = [PY, str(FIXTURE), "--http", str(port), "--log", str(log), "--max-life", "300"]
    with http_process(argv, port):
        await _oversized_then_ordinary(tmp_path, toml)


# -- the bounded stdio reader on its own ------------------------------------------------

#: a "server" that answers each request line with a 3 MiB line carrying no id
_NO_ID_SERVER = (
    "import sys\n"
    "for line in sys.stdin:\n"
    '    sys.stdout.write(\'{"jsonrpc":"2.0","result":{"x":"\' + \'y\' * (3 << 20) + \'"}}\\n\')\n'
    "    sys.stdout.flush()\n"
)


async def _ask(write: Any, request_id: int) -> None:
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    request = types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="tools/call", params={})
    await write.send(SessionMessage(request))


async def test_an_oversized_line_without_an_id_fails_the_only_request_or_ends_the_session(
    tmp_path: Path,
) -> None:
    from mcp.client.stdio import StdioServerParameters

    from sharedos.upstream.transport import RESPONSE_TOO_LARGE, ReadBounds, bounded_stdio_client

    params = StdioServerParameters(command=PY, args=["-c", _NO_ID_SERVER])
    bounds = ReadBounds(result=1 << 20, listing=1 << 20)
    ended: list[bool] = []
    errlog = (tmp_path / "stderr.txt").open("w")
    async with bounded_stdio_client(
        params,
        errlog,
        bounds,
        on_unattributed=lambda: ended.append(True),  # type: ignore[arg-type]
    ) as (read, write):
        # one request outstanding: the oversized answer can only be its
        await _ask(write, 1)
        with anyio.fail_after(60):
            answer = await read.receive()
        assert answer.message.id == 1 and answer.message.error.code == RESPONSE_TOO_LARGE
        assert "SharedOS stopped reading it" in answer.message.error.message
        # two outstanding, and an answer naming neither: the session ends
        await _ask(write, 2)
        await _ask(write, 3)
        with anyio.fail_after(60), pytest.raises(anyio.EndOfStream):
            while True:
                await read.receive()
    errlog.close()
    assert ended == [True]

"""An upstream of 10,000 tools, brokered, listed and called with the real SDK client in both eras.

Before ``tools/list`` was paginated, a 2025-11-25 client could neither list
such a turn nor call in it: the one ``tools/list`` result (several MiB) is
over the 1 MiB the SDK client accepts in one server-sent event, and
``call_tool`` lists the tools first (to validate the result's structured
content). The upstream is the project's fixture server told to list 10,000
generated tools, itself in pages (so SharedOS follows an upstream's cursors
too).
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sharedos.bridge import open_turn
from tests.upstream.conftest import RUN_POLICY, brokered, fixture_upstream, read_log, text_of

pytestmark = pytest.mark.anyio

TOOLS = 10_000


def rules(n: int) -> str:
    """One requirement per generated tool (a tool without one is never listed)."""
    lines = ["namespace fx"]
    lines += [
        f"requirement fx.t{i:05d} {{ action read; resource path(args.path) }}" for i in range(n)
    ]
    lines += ['permit read on "/public/**"']
    return "\n".join(lines) + "\n" + RUN_POLICY


async def test_ten_thousand_tools_are_listed_and_called_in_both_eras(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    # over the default cap of 1,000 tools an upstream (limits.max_tools): raised on purpose
    upstream = fixture_upstream(
        "fx",
        log,
        extra_args=["--many", str(TOOLS), "--page-size", "2500"],
        extra=f"limits = {{ max_tools = {TOOLS + 10} }}\n",
    )
    async with brokered(tmp_path, upstream, rules(TOOLS)) as env:
        ctx = env.context()
        tool_policy = env.policy.tool_policies["run"]
        async with env.broker.turn(ctx) as state, open_turn(env.host, ctx, tool_policy) as turn:
            assert len(state.tools) == TOOLS + 10, state.report()  # + the fixed set
            assert len(turn.catalog) == TOOLS
            expected = sorted(turn.catalog.names)
            assert turn.endpoint is not None and turn.endpoint.pages > 1
            for mode, era in (("legacy", "2025-11-25"), ("auto", "2026-07-28")):
                async with (
                    httpx2.AsyncClient(headers=turn.headers(), timeout=60) as http,
                    Client(streamable_http_client(str(turn.url), http_client=http), mode=mode) as c,
                ):
                    assert c.protocol_version == era
                    # a call before any listing (the client lists page 1 itself)
                    first = await c.call_tool("fx.t09999", {"path": "/public/a", "message": era})
                    assert not first.is_error, text_of(first)
                    assert "t09999 called" in text_of(first)
                    pages = [await c.list_tools()]
                    while pages[-1].next_cursor is not None:
                        pages.append(await c.list_tools(cursor=pages[-1].next_cursor))
                    assert [t.name for p in pages for t in p.tools] == expected, era
                    last = await c.call_tool("fx.t05000", {"path": "/public/b"})
                    assert not last.is_error, text_of(last)
                    denied = await c.call_tool("fx.t00001", {"path": "/private/x"})
                    assert denied.is_error
    # the upstream was listed in its own pages, and only allowed calls reached it
    lists = [e for e in read_log(log) if e["method"] == "tools/list"]
    assert any(e["params"] and e["params"].get("cursor") == "7500" for e in lists)
    calls = [e["params"]["name"] for e in read_log(log) if e["method"] == "tools/call"]
    assert calls == ["t09999", "t05000", "t09999", "t05000"]

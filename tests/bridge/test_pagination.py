"""``tools/list`` pages with MCP cursors: the real SDK client, both protocol eras, bound to the turn."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.bridge.pages import InvalidCursor, PageCursors, cut_pages
from sharedos.bridge.server import TurnEndpoint
from sharedos.bridge.wire import CATALOG_HASH_META_KEY
from sharedos.kernel.context import AccessContext
from sharedos.outcomes import Outcome
from tests.bridge.conftest import OPEN_POLICY, Runtime, http_client

pytestmark = pytest.mark.anyio

MODES = [("auto", "2026-07-28"), ("legacy", "2025-11-25")]
INVALID_PARAMS = -32602


async def all_pages(client: Client) -> list[Any]:
    """Every page of the listing, following ``nextCursor`` as a client should."""
    pages = [await client.list_tools()]
    while pages[-1].next_cursor is not None:
        pages.append(await client.list_tools(cursor=pages[-1].next_cursor))
        assert len(pages) < 100, "the cursors never end"
    return pages


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_pages_add_up_to_the_catalogue_in_order(
    runtime: Runtime, alice: AccessContext, mode: str, version: str
) -> None:
    limits = TransportLimits(list_page_size=2)
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn,
        http_client(turn.url, turn.token, mode=mode) as client,
    ):
        assert client.protocol_version == version
        pages = await all_pages(client)
        # the last page's tool is callable (the SDK client validates it against the
        # listing it has seen: every page)
        last = pages[-1].tools[-1].name
    names = [t.name for page in pages for t in page.tools]
    assert names == sorted(turn.catalog.names)  # every tool once, in catalogue order
    assert len(pages) == (len(names) + 1) // 2 >= 3
    assert all(len(page.tools) <= 2 for page in pages)
    # every page carries the turn's catalogHash
    assert {(p.meta or {}).get(CATALOG_HASH_META_KEY) for p in pages} == {turn.catalog_hash}
    assert last == "slow.wait"


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_a_tool_beyond_the_first_page_is_called_without_listing_it(
    runtime: Runtime, alice: AccessContext, mode: str, version: str
) -> None:
    limits = TransportLimits(list_page_size=2)
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn,
        http_client(turn.url, turn.token, mode=mode) as client,
    ):
        first = await client.list_tools()
        assert "files.search" not in {t.name for t in first.tools}
        result = await client.call_tool("files.search", {"root": "/public", "pattern": "*"})
    assert not result.is_error, result
    assert "a.txt" in str(result.content)


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_a_cursor_of_another_turn_is_invalid_params(
    runtime: Runtime, alice: AccessContext, mode: str, version: str
) -> None:
    limits = TransportLimits(list_page_size=2)
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as earlier,
        http_client(earlier.url, earlier.token, mode=mode) as client,
    ):
        stale = (await client.list_tools()).next_cursor
    assert stale is not None
    # the same user, the same catalogue, the next turn: its pages have the same bounds,
    # yet the earlier turn's cursor is not this turn's
    later_ctx = AccessContext(principal="alice", roles=("user",))
    async with open_turn(runtime.host, later_ctx, OPEN_POLICY, limits=limits) as later:
        assert later.catalog_hash == earlier.catalog_hash
        async with http_client(later.url, later.token, mode=mode) as client:
            with pytest.raises(MCPError) as caught:
                await client.list_tools(cursor=stale)
            assert caught.value.code == INVALID_PARAMS
            assert "cursor" in str(caught.value)
            # the turn still answers: a refused cursor is not a broken listing
            fresh = await client.list_tools()
            assert fresh.next_cursor is not None and fresh.next_cursor != stale


@pytest.mark.parametrize(("mode", "version"), MODES)
async def test_altered_and_made_up_cursors_are_invalid_params(
    runtime: Runtime, alice: AccessContext, mode: str, version: str
) -> None:
    limits = TransportLimits(list_page_size=2)
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn,
        http_client(turn.url, turn.token, mode=mode) as client,
    ):
        good = (await client.list_tools()).next_cursor
        assert good is not None
        second = await client.list_tools(cursor=good)
        assert second.tools
        flipped = good[:-3] + ("A" if good[-3] != "A" else "B") + good[-2:]
        for bad in (flipped, "2", "", "x" * 200, good + "AAAA"):
            with pytest.raises(MCPError) as caught:
                await client.list_tools(cursor=bad)
            assert caught.value.code == INVALID_PARAMS, bad


async def test_in_process_client_and_the_byte_budget(
    runtime: Runtime, alice: AccessContext
) -> None:
    """Pages are also cut by bytes: one tool a page when each tool exceeds the budget."""
    catalog = runtime.host.kernel.list_tools(alice, OPEN_POLICY)
    endpoint = TurnEndpoint(
        runtime_host=runtime.host,
        context=alice,
        tool_policy=OPEN_POLICY,
        catalog=catalog,
        limits=TransportLimits(list_page_bytes=1),
    )
    assert endpoint.pages == len(catalog.tools)
    async with Client(endpoint.build_server()) as client:
        listed = [t.name for page in await all_pages(client) for t in page.tools]
    assert listed == sorted(catalog.names)


async def test_a_catalogue_that_fits_is_one_page_without_a_cursor(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with (
        open_turn(runtime.host, alice, OPEN_POLICY) as turn,
        http_client(turn.url, turn.token) as client,
    ):
        listed = await client.list_tools()
        call = await client.call_tool("files.read", {"path": "/public/a.txt"})
    assert listed.next_cursor is None
    assert {t.name for t in listed.tools} == set(turn.catalog.names)
    assert not call.is_error
    assert runtime.evidence.query(turn_id=alice.turn_id)[-1].outcome is Outcome.SUCCEEDED


def test_cut_pages_by_count_and_by_bytes() -> None:
    assert cut_pages([], max_items=2, max_bytes=10) == [(0, 0)]
    assert cut_pages([1] * 5, max_items=2, max_bytes=100) == [(0, 2), (2, 4), (4, 5)]
    assert cut_pages([4, 4, 4, 20, 1], max_items=10, max_bytes=10) == [
        (0, 2),
        (2, 3),
        (3, 4),  # larger than the budget: a page of its own
        (4, 5),
    ]
    with pytest.raises(ValueError):
        cut_pages([1], max_items=0, max_bytes=10)


def test_cursors_verify_only_under_their_own_key() -> None:
    mine, theirs = PageCursors(5), PageCursors(5)
    for page in range(1, 5):
        assert mine.page(mine.cursor(page)) == page
        with pytest.raises(InvalidCursor):
            theirs.page(mine.cursor(page))
    with pytest.raises(ValueError):
        mine.cursor(0)  # the first page is asked for without a cursor
    with pytest.raises(ValueError):
        mine.cursor(5)
    # a cursor issued for a page past the end of a shorter listing with the same key
    with pytest.raises(InvalidCursor):
        PageCursors(2, key=b"k" * 32).page(PageCursors(5, key=b"k" * 32).cursor(3))
    for junk in (None, 3, "", "!!!!", "AAAAAAAAAAAAAAAAAAAAAAAAAAAA"):
        with pytest.raises(InvalidCursor):
            mine.page(junk)


def test_page_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        TransportLimits(list_page_size=0)
    with pytest.raises(ValueError):
        TransportLimits(list_page_bytes=0)

# ruff: noqa: F811  (the servers fixture is imported from test_identity_oauth)
"""Two hosts (two ``sharedos run`` processes) sharing one principal's tokens.

Refresh tokens rotate: the authorization server refuses a spent one. When two
processes hold the same principal's tokens and the access token expires, the
first to renew spends the refresh token and saves the new pair in the shared
token store. The second must use what the store now holds, not spend the old
refresh token again (refused: its turn would lose the upstream, and the
operator be told to sign in again for nothing). Real parts: the SDK's
authorization server and protected MCP server, the encrypted token store, two
brokers with their own token sources.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.upstream.conftest import structured, text_of
from tests.upstream.test_identity_oauth import (
    Servers,
    brokered_host,
    login,
    open_store,
    servers,  # noqa: F401
    write_host,
)

pytestmark = pytest.mark.anyio


async def test_a_second_host_uses_the_tokens_the_first_renewed(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "fern"))).rc == 0
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with (
        brokered_host(tmp_path / "a", host) as a,
        a.turn(a.context("fern")) as ta,
        brokered_host(tmp_path / "b", host) as b,
        b.turn(b.context("fern")) as tb,
    ):
        # both hosts hold fern's tokens; the server expires the access token
        assert (await ta.call("docs.whoami", {"path": "a0"})).is_error is False
        assert (await tb.call("docs.whoami", {"path": "b0"})).is_error is False
        servers.admin("expire", "fern")
        first = await ta.call("docs.whoami", {"path": "a1"})
        assert structured(first).get("subject") == "fern", text_of(first)
        # host a renewed (the old refresh token is spent); host b must not spend it again
        second = await tb.call("docs.whoami", {"path": "b1"})
        assert second.is_error is False, text_of(second)
        assert structured(second).get("subject") == "fern"
    assert servers.issued("fern") == ["authorization_code", "refresh_token"]
    kept = open_store(tmp_path).load("docs", "default", "fern")
    assert kept is not None and kept.obtained_via == "refresh_token"

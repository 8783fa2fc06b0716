"""``evidence_turn``: a turn's opening and seal, on SQLite and PostgreSQL."""

# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from sharedos.evidence.turns import evidence_turn
from tests.evidence.stores import Opener, backend, opener, store  # noqa: F401  (fixtures)

pytestmark = pytest.mark.anyio


async def test_a_sealed_turn_id_is_not_opened_again(store: Any) -> None:
    """Opening a turn whose chain already held a seal wrote nothing and said nothing: the
    new turn's records went on past the old seal (vouched for by none: its own seal was
    refused as a second one). The open is refused, and the chain is left as it was."""
    async with evidence_turn(store, turn_id="t-closed", catalog_hash="c1"):
        pass
    kinds = [link.kind for link in store.iter_links("t-closed")]
    assert kinds == ["open", "seal"]
    with pytest.raises(ValueError, match="has closed"):
        async with evidence_turn(store, turn_id="t-closed", catalog_hash="c2"):
            pytest.fail("a sealed turn was opened again")
    assert [link.kind for link in store.iter_links("t-closed")] == kinds


async def test_a_turn_id_open_on_another_host_is_not_opened_again(opener: Opener) -> None:
    """Two hosts sharing a store: the id hold covers only a host's own open turns, so a
    second host opening a turn with the id of one still open on the first went on: its
    records were appended to the first's chain under its opening, its seal sealed it, the
    first's own seal was refused as a second one and its later records landed past the
    seal, and verify said clean. The open is refused, and the chain is left as it was."""
    first, second = opener(), opener()  # two hosts' stores on one database
    async with evidence_turn(first, turn_id="t-shared", catalog_hash="c1"):
        with pytest.raises(ValueError, match="has an evidence chain already"):
            async with evidence_turn(second, turn_id="t-shared", catalog_hash="c2"):
                pytest.fail("a turn open on another host was opened again")
        assert [link.kind for link in first.iter_links("t-shared")] == ["open"]
    assert [link.kind for link in first.iter_links("t-shared")] == ["open", "seal"]


async def test_a_turn_cancelled_while_its_opening_is_written_is_sealed(tmp_path: Any) -> None:
    """A turn cancelled while its opening record was being written (``sharedos run``
    interrupted as the turn opened, a task group torn down): the write, abandoned off the
    loop, landed after the cancel, and the close, seeing nothing written, sealed nothing.
    The chain was left open for good (``verify --require-seal`` reported a turn that never
    ran as unsealed, and its id was refused to a retry as another host's open turn). The
    opening is waited for, and a chain it opened is sealed."""
    import sqlite3

    import anyio

    from sharedos.evidence.url import open_store

    path = tmp_path / "evidence.db"
    store = open_store(str(path))
    lock = sqlite3.connect(str(path), isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")  # the opening's write waits for this lock

        async def release() -> None:  # while the opening's write waits for it
            await anyio.sleep(0.3)
            lock.execute("COMMIT")

        async with anyio.create_task_group() as tg:
            tg.start_soon(release)
            with anyio.move_on_after(0.1):
                async with evidence_turn(store, turn_id="t-cancel", deferred=True) as open_chain:
                    await open_chain()
                    pytest.fail("the opening was written under a held lock")
        with anyio.fail_after(5):
            while not list(store.iter_links("t-cancel")):  # an abandoned write lands now
                await anyio.sleep(0.02)
            await anyio.sleep(0.1)
        assert [link.kind for link in store.iter_links("t-cancel")] == ["open", "seal"]
    finally:
        lock.close()
        store.close()


async def test_a_turn_cancelled_at_its_undeferred_opening_is_sealed(tmp_path: Any) -> None:
    """The same, opened on entry (not deferred): the opening it wrote is sealed too."""
    import sqlite3

    import anyio

    from sharedos.evidence.url import open_store

    path = tmp_path / "evidence.db"
    store = open_store(str(path))
    lock = sqlite3.connect(str(path), isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")

        async def release() -> None:  # while the opening's write waits for it
            await anyio.sleep(0.3)
            lock.execute("COMMIT")

        async with anyio.create_task_group() as tg:
            tg.start_soon(release)
            with anyio.move_on_after(0.1):
                async with evidence_turn(store, turn_id="t-cancel"):
                    pytest.fail("the opening was written under a held lock")
        with anyio.fail_after(5):
            while not list(store.iter_links("t-cancel")):
                await anyio.sleep(0.02)
            await anyio.sleep(0.1)
        assert [link.kind for link in store.iter_links("t-cancel")] == ["open", "seal"]
    finally:
        lock.close()
        store.close()


async def test_a_turn_whose_opening_was_refused_does_not_seal_another_turns_chain(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two hosts on one PostgreSQL store: the second opens a turn with the id of one open on
    the first while the store answers nothing in time (a lock on ``chain``). Its opening was
    refused, so its id was never checked; at its close the opening, written again, found
    the chain there, and the close sealed it: the first turn's chain, under its opening, the
    first's own seal refused as a second one, and ``verify --require-seal`` said clean. A
    chain opened before this turn's opening is not sealed by it, and the log says why."""
    import anyio
    import psycopg

    from sharedos.evidence.url import open_store

    first, second = open_store(pg_url), open_store(pg_url)
    lock = psycopg.connect(pg_url, autocommit=True)
    try:
        async with evidence_turn(first, turn_id="t-shared", catalog_hash="c1"):
            lock.execute("BEGIN")
            lock.execute("LOCK TABLE chain IN ACCESS EXCLUSIVE MODE")

            async def release() -> None:  # once the second's opening has been given up on
                await anyio.sleep(0.3)
                lock.execute("COMMIT")

            async with anyio.create_task_group() as tg:
                tg.start_soon(release)
                async with evidence_turn(second, turn_id="t-shared", timeout_s=0.1):
                    await anyio.sleep(0.4)
            assert [link.kind for link in first.iter_links("t-shared")] == ["open"]
        assert [link.kind for link in first.iter_links("t-shared")] == ["open", "seal"]
        assert "opened by another turn" in caplog.text
    finally:
        lock.close()
        first.close()
        second.close()


async def test_a_seal_going_ahead_of_calls_that_took_their_approval_is_said(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The close waits (bounded) for calls that took their approval; one still running
    past the bound (a handler that ignores its cancellation) had its outcome land after the
    seal with nothing said. The host's log now says so, by turn and count."""

    async def still_running(turn_id: str) -> int:
        return 2

    with caplog.at_level("WARNING", logger="sharedos.evidence"):
        async with evidence_turn(store, turn_id="t-taken", catalog_hash="c", taken=still_running):
            pass
    assert [link.kind for link in store.iter_links("t-taken")] == ["open", "seal"]
    said = [r.getMessage() for r in caplog.records if "took their approval" in r.getMessage()]
    assert said and "t-taken" in said[0] and "2 call(s)" in said[0], caplog.text


async def test_a_turn_whose_opening_was_refused_does_not_seal_a_chain_opened_after_it(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Two hosts on one SQLite file: the second's opening is refused (a lock, its busy wait
    over) and never lands; the lock gone, the first opens a turn of that id, its opening
    dated after the second's. The close of the second took the chain for its own (an
    opening dated after its own was read as one its calls made) and sealed the first
    turn's chain under its opening. A chain whose opening is not this turn's is not sealed
    by it, whenever it was opened."""
    import sqlite3

    from sharedos.evidence.sqlite import SqliteEvidenceStore

    path = tmp_path / "evidence.db"
    first = SqliteEvidenceStore(path)
    second = SqliteEvidenceStore(path, busy_timeout_s=0.05)
    lock = sqlite3.connect(str(path), isolation_level=None)
    try:
        async with contextlib.AsyncExitStack() as stack:
            lock.execute("BEGIN IMMEDIATE")  # the second's opening waits, then gives up
            async with evidence_turn(second, turn_id="t-later", catalog_hash="c2", timeout_s=1):
                lock.execute("COMMIT")
                assert list(first.iter_links("t-later")) == []
                await stack.enter_async_context(
                    evidence_turn(first, turn_id="t-later", catalog_hash="c1")
                )
            assert [link.kind for link in first.iter_links("t-later")] == ["open"]
            assert "opened by another turn" in caplog.text
        assert [link.kind for link in first.iter_links("t-later")] == ["open", "seal"]
        assert next(iter(first.iter_links("t-later"))).values[2] == "c1"
    finally:
        lock.close()
        first.close()
        second.close()


@pytest.mark.parametrize("transport", ["http", "stdio", "standalone"])
async def test_a_host_secret_in_the_identity_is_scrubbed_from_the_turns_records(
    tmp_path: Any, transport: str
) -> None:
    """The host's secrets are scrubbed from every record field: a call's row kept the turn's
    SystemIdentity with them redacted, but the turn's opening record kept it as given (a
    credential in a declared model's endpoint, an upstream's 'not confined' reason), in
    the chain for good, next to the rows that hid it; and a standalone stdio bridge, whose
    runtime knows no host secrets, kept it on every row of its calls too."""
    import sqlite3

    from mcp import Client, StdioServerParameters

    from sharedos.bridge import StdioLaunch, open_turn
    from sharedos.kernel import RuntimeHost
    from sharedos.kernel.context import AccessContext
    from tests.bridge.conftest import DATA, OPEN_POLICY, build_runtime, http_client

    secret = "sk-live-0123456789abcdefXYZ"
    rt = build_runtime(tmp_path, with_slow=False)
    host = RuntimeHost(rt.host.kernel, rt.evidence, host_secrets=[secret])
    alice = AccessContext(principal="alice")
    identity = {"harness": "h", "declaredModel": f"m via https://u:{secret}@proxy.example"}
    launch = StdioLaunch(
        relay=transport == "stdio",
        rules=(DATA / "files.sos",),
        evidence_db=rt.evidence_path,
        sandbox_root=rt.sandbox,
    )
    read = {"path": "/home/alice/notes.txt"}
    async with open_turn(
        host,
        alice,
        OPEN_POLICY,
        transport="http" if transport == "http" else "stdio",
        identity=identity,
        stdio=launch,
    ) as turn:
        if turn.url is not None:
            async with http_client(turn.url, turn.token) as client:
                assert not (await client.call_tool("files.read", read)).is_error
        else:
            assert turn.command is not None
            params = StdioServerParameters(command=turn.command[0], args=turn.command[1:])
            async with Client(params) as client:
                assert not (await client.call_tool("files.read", read)).is_error
    with sqlite3.connect(tmp_path / "evidence.db") as con:
        rows = con.execute(
            "SELECT kind, identity FROM chain WHERE turn_id = ? ORDER BY pos", (alice.turn_id,)
        ).fetchall()
    kinds = [str(kind) for kind, _ in rows]
    assert kinds == ["open", "attempt", "outcome", "seal"], kinds
    kept = [str(text) for _, text in rows if text is not None]
    assert len(kept) == 2 and all(secret not in text for text in kept), kept
    assert all("https://u:[redacted]@proxy.example" in text for text in kept), kept

"""One open turn per turn id on a host: the id names the turn's evidence chain."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sharedos.bridge import StdioLaunch, open_turn
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.verify import verify_store
from sharedos.kernel import RuntimeHost
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, build_runtime, http_client

pytestmark = pytest.mark.anyio


def _links(path: Path, turn_id: str) -> list[str]:
    with sqlite3.connect(path) as con:
        rows = con.execute(
            "SELECT kind FROM chain WHERE turn_id = ? ORDER BY pos", (turn_id,)
        ).fetchall()
    return [str(r[0]) for r in rows]


async def test_a_turn_id_open_on_the_host_is_refused_to_another_principals_turn(
    tmp_path: Path,
) -> None:
    rt = build_runtime(tmp_path, principals=("alice", "bob"), with_slow=False)
    alice = AccessContext(principal="alice", turn_id="turn-shared")
    bob = AccessContext(principal="bob", tenant="other", turn_id="turn-shared")
    async with open_turn(rt.host, alice, OPEN_POLICY) as turn:
        for _ in range(2):  # a refused open does not free the id its holder still has
            with pytest.raises(ValueError, match="already open"):
                async with open_turn(rt.host, bob, OPEN_POLICY, transport="stdio"):
                    pytest.fail("a second turn of an open turn id was opened")
        assert turn.url is not None and turn.token is not None
        async with http_client(turn.url, turn.token) as client:
            own = await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
        assert not own.is_error
    # alice's turn alone wrote the chain: her opening, her call, her seal, in that order
    # (before, bob's close sealed it and alice's call was appended after that seal)
    assert _links(tmp_path / "evidence.db", "turn-shared") == ["open", "attempt", "outcome", "seal"]
    assert {r.principal for r in rt.evidence.query(turn_id="turn-shared")} == {"alice"}
    assert verify_store(rt.evidence, "turn-shared", require_seal=True).problems == []


async def test_the_id_of_a_turn_that_has_closed_is_refused_to_a_new_turn(tmp_path: Path) -> None:
    """The id hold lasts while a turn is open: once it had closed, another turn (another
    principal's) opened with its id ran its calls, appended past the first turn's seal under
    the first's opening; its own seal was refused as a second one, and verify said clean.
    A turn id whose chain is sealed is refused to a new turn, before anything runs."""
    rt = build_runtime(tmp_path, principals=("alice", "bob"), with_slow=False)
    alice = AccessContext(principal="alice", turn_id="turn-reused")
    bob = AccessContext(principal="bob", tenant="other", turn_id="turn-reused")
    async with open_turn(rt.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None and turn.token is not None
        async with http_client(turn.url, turn.token) as client:
            assert not (
                await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
            ).is_error
    for transport in ("http", "stdio"):
        with pytest.raises(ValueError, match="has closed"):
            async with open_turn(rt.host, bob, OPEN_POLICY, transport=transport):
                pytest.fail("a turn was opened on a sealed turn's id")
    assert _links(tmp_path / "evidence.db", "turn-reused") == ["open", "attempt", "outcome", "seal"]
    assert {r.principal for r in rt.evidence.query(turn_id="turn-reused")} == {"alice"}
    # the refused opens held nothing: a fresh id opens at once
    async with open_turn(rt.host, AccessContext(principal="bob", tenant="other"), OPEN_POLICY):
        pass


async def test_a_turn_refused_for_its_transport_leaves_its_id_free(tmp_path: Path) -> None:
    """An unknown transport was found after the turn's opening record: the turn was opened
    and sealed for nothing, and its id (sealed) refused to the retry."""
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice", turn_id="turn-retried")
    with pytest.raises(ValueError, match="unknown bridge transport"):
        async with open_turn(rt.host, alice, OPEN_POLICY, transport="carrier-pigeon"):  # type: ignore[arg-type]
            pytest.fail("a turn opened on an unknown transport")
    assert _links(tmp_path / "evidence.db", "turn-retried") == []
    async with open_turn(rt.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
    assert _links(tmp_path / "evidence.db", "turn-retried") == ["open", "seal"]


@pytest.mark.parametrize("grace_s", [float("nan"), float("inf"), -1.0, "0.5"])
async def test_a_turn_given_an_unusable_grace_is_refused_before_anything(
    tmp_path: Path, grace_s: object
) -> None:
    """``grace_s`` NaN or infinite was found by uvicorn's config, after the listener was bound:
    'cannot convert float NaN to integer', an OverflowError; a negative one was taken as 0.
    Refused first, clearly, with nothing written: the id opens again at once."""
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice", turn_id="turn-graced")
    with pytest.raises(ValueError, match="grace_s must be a finite number of seconds"):
        async with open_turn(rt.host, alice, OPEN_POLICY, grace_s=grace_s):  # type: ignore[arg-type]
            pytest.fail("a turn opened with an unusable grace")
    assert _links(tmp_path / "evidence.db", "turn-graced") == []
    async with open_turn(rt.host, alice, OPEN_POLICY, grace_s=0) as turn:
        assert turn.url is not None
    assert _links(tmp_path / "evidence.db", "turn-graced") == ["open", "seal"]


async def test_a_turn_whose_transport_fails_to_open_leaves_its_id_free(tmp_path: Path) -> None:
    """A transport that failed to open (here a stdio turn directory that does not exist;
    likewise a listener or relay socket not bound) failed after the turn's opening record:
    the turn was opened and sealed for nothing, and the retry with the same id was refused
    as a closed turn's. The opening is written once the transport is up."""
    rt = build_runtime(tmp_path, with_slow=False)
    alice = AccessContext(principal="alice", turn_id="turn-unopened")
    launch = StdioLaunch(directory=tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        async with open_turn(rt.host, alice, OPEN_POLICY, transport="stdio", stdio=launch):
            pytest.fail("a stdio turn opened in a directory that does not exist")
    assert _links(tmp_path / "evidence.db", "turn-unopened") == []
    async with open_turn(rt.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None and turn.token is not None
        async with http_client(turn.url, turn.token) as client:
            own = await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
        assert not own.is_error
    assert _links(tmp_path / "evidence.db", "turn-unopened") == [
        "open",
        "attempt",
        "outcome",
        "seal",
    ]
    assert verify_store(rt.evidence, "turn-unopened", require_seal=True).problems == []


async def test_a_turn_id_open_on_another_host_is_refused(tmp_path: Path) -> None:
    """Two hosts on one store: bob's turn on the second host, opened with the id of
    alice's turn still open on the first, ran its call into her chain under her opening,
    its close sealed her chain, her later call landed past that seal, and
    ``verify --require-seal`` said clean. The second open is refused before its turn runs."""
    rt = build_runtime(tmp_path, principals=("alice", "bob"), with_slow=False)
    other = RuntimeHost(rt.host.kernel, SqliteEvidenceStore(tmp_path / "evidence.db"))
    alice = AccessContext(principal="alice", turn_id="turn-two-hosts")
    bob = AccessContext(principal="bob", tenant="other", turn_id="turn-two-hosts")
    async with open_turn(rt.host, alice, OPEN_POLICY) as turn:
        with pytest.raises(ValueError, match="has an evidence chain already"):
            async with open_turn(other, bob, OPEN_POLICY):
                pytest.fail("a turn open on another host was opened again")
        assert turn.url is not None and turn.token is not None
        async with http_client(turn.url, turn.token) as client:
            own = await client.call_tool("files.read", {"path": "/home/alice/notes.txt"})
        assert not own.is_error
    assert _links(tmp_path / "evidence.db", "turn-two-hosts") == [
        "open",
        "attempt",
        "outcome",
        "seal",
    ]
    assert {r.principal for r in rt.evidence.query(turn_id="turn-two-hosts")} == {"alice"}


async def test_a_turn_whose_opening_was_refused_runs_no_call_into_another_turns_chain(
    tmp_path: Path, pg_url: str
) -> None:
    """Two hosts on one PostgreSQL store: bob's turn on the second, opened with the id of
    alice's turn open on the first while a lock on ``chain`` held the store past the
    opening's timeout. His opening was refused, so his id was never checked: his call ran,
    appended to her chain under her opening, sealed by her close, and ``verify
    --require-seal`` said clean. A turn's call writes its owed opening first, and is refused
    (not run, not recorded) when the chain is another turn's."""
    import anyio
    import psycopg

    from sharedos.evidence.url import open_store

    rt = build_runtime(tmp_path, principals=("alice", "bob"), with_slow=False)
    first = RuntimeHost(rt.host.kernel, open_store(pg_url), evidence_timeout_s=0.2)
    second = RuntimeHost(rt.host.kernel, open_store(pg_url), evidence_timeout_s=0.2)
    alice = AccessContext(principal="alice", turn_id="turn-pg-shared")
    bob = AccessContext(principal="bob", tenant="other", turn_id="turn-pg-shared")
    lock = psycopg.connect(pg_url, autocommit=True)
    try:
        async with open_turn(first, alice, OPEN_POLICY):
            lock.execute("BEGIN")
            lock.execute("LOCK TABLE chain IN ACCESS EXCLUSIVE MODE")

            async def release() -> None:  # once bob's opening has been given up on
                await anyio.sleep(0.5)
                lock.execute("COMMIT")

            async with anyio.create_task_group() as tg:
                tg.start_soon(release)
                async with open_turn(second, bob, OPEN_POLICY) as turn:
                    await anyio.sleep(0.6)
                    assert turn.url is not None and turn.token is not None
                    async with http_client(turn.url, turn.token) as client:
                        res = await client.call_tool("files.read", {"path": "/home/bob/notes.txt"})
                    assert res.is_error
                    assert "notes of bob" not in str(res.content)
        store = open_store(pg_url)
        try:
            assert [link.kind for link in store.iter_links("turn-pg-shared")] == ["open", "seal"]
            assert list(store.query(turn_id="turn-pg-shared")) == []
        finally:
            store.close()
    finally:
        lock.close()


async def test_a_turn_found_in_another_turns_chain_records_nothing_there_after_its_close(
    tmp_path: Path,
) -> None:
    """Two hosts on one SQLite file: bob's opening on the second is refused (a lock), and
    alice's turn of that id opens on the first once it is gone. Bob's close leaves her chain
    unsealed, but the bridge still records the calls it refuses after a turn's close (a
    relayed stdio bridge: ``turn_closed``, ``RuntimeHost.refuse``): they were appended to
    her chain, under her opening. Nothing of bob's turn goes there, after its close too."""
    import contextlib
    import sqlite3

    from sharedos.kernel.context import ToolCall
    from sharedos.outcomes import ReasonCode

    rt = build_runtime(tmp_path, principals=("alice", "bob"), with_slow=False)
    path = tmp_path / "evidence.db"
    second = RuntimeHost(rt.host.kernel, SqliteEvidenceStore(path, busy_timeout_s=0.05))
    alice = AccessContext(principal="alice", turn_id="turn-later")
    bob = AccessContext(principal="bob", tenant="other", turn_id="turn-later")
    lock = sqlite3.connect(str(path), isolation_level=None)
    try:
        async with contextlib.AsyncExitStack() as stack:
            lock.execute("BEGIN IMMEDIATE")  # bob's opening waits, then gives up
            async with open_turn(second, bob, OPEN_POLICY):
                lock.execute("COMMIT")
                await stack.enter_async_context(open_turn(rt.host, alice, OPEN_POLICY))
            late = ToolCall(
                tool="files.read", arguments={"path": "/home/bob/notes.txt"}, turn_id="turn-later"
            )
            res = await second.refuse(late, bob, OPEN_POLICY, ReasonCode.TURN_CLOSED)
            assert res.is_error
            assert _links(path, "turn-later") == ["open"]
        assert _links(path, "turn-later") == ["open", "seal"]
        assert {r.principal for r in rt.evidence.query(turn_id="turn-later")} == set()
    finally:
        lock.close()

"""A store that cannot write says so once per cause, not once per turn (issue 24).

Ten turns open and close (``evidence_turn``, as the bridge does), each with a
call, against a store that fails every write: a full disk (SQLite on a small
tmpfs) and a database gone read-only (PostgreSQL). The openings, seals and
calls all fail closed; the log says it once, and once more when the store
writes again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from sharedos.evidence.postgres import PostgresEvidenceStore
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.turns import evidence_turn
from sharedos.kernel import AccessContext, RuntimeHost, ToolCall
from sharedos.toolpolicy import RunMode, ToolPolicy

from .conftest import MountFn, fill, one_tool_host

RUN = ToolPolicy(name="r", mode=RunMode.OPEN, managed=("t.*",))


def _turns(host: RuntimeHost, store: Any, n: int, prefix: str) -> list[str]:
    outcomes: list[str] = []

    async def one(i: int) -> None:
        ctx = AccessContext(principal="alice", turn_id=f"{prefix}-{i}")
        async with evidence_turn(store, turn_id=ctx.turn_id, catalog_hash="c" * 64):
            result = await host.invoke_tool(
                ToolCall(call_id=f"{prefix}-{i}", tool="t.read", arguments={"p": "/public/a"}),
                ctx,
                RUN,
            )
            outcomes.append(f"{result.outcome}/{result.reason}")

    async def all_turns() -> None:
        for i in range(n):
            await one(i)

    anyio.run(all_turns)
    return outcomes


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "sharedos.evidence" and r.levelno >= logging.ERROR
    ]


def _recovered(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "writable again" in r.getMessage()]


def test_a_full_disk_is_said_once_for_ten_turns(
    tmpfs: MountFn, caplog: pytest.LogCaptureFixture
) -> None:
    mnt: Path = tmpfs("512k")
    store = SqliteEvidenceStore(mnt / "e.db")
    host = one_tool_host(store)
    filler = fill(mnt)
    try:
        with caplog.at_level(logging.WARNING, logger="sharedos.evidence"):
            outcomes = _turns(host, store, 10, "full")
        assert outcomes == ["failed/evidence_unavailable"] * 10  # every call failed closed
        errors = _errors(caplog)
        assert len(errors) == 1 and "disk_full" in errors[0], errors
        filler.unlink()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sharedos.evidence"):
            assert _turns(host, store, 2, "back") == ["succeeded/None"] * 2
        assert not _errors(caplog) and len(_recovered(caplog)) == 1
    finally:
        store.close()


def test_a_read_only_database_is_said_once_for_ten_turns(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The reconnection after the backends are terminated may take over the default
    # 1 s connect window on a busy machine, which the store rightly reports as a
    # failure; what is tested here is that each cause is said once, so the window is
    # wide enough for the reconnection (still inside the host's evidence timeout).
    store = PostgresEvidenceStore(f"{pg_url}&application_name=said-once", connect_timeout_s=5.0)
    host = one_tool_host(store)
    db = psycopg.conninfo.conninfo_to_dict(pg_url)["dbname"]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{db}" SET default_transaction_read_only = on')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'said-once'"
        )
    try:
        with caplog.at_level(logging.WARNING, logger="sharedos.evidence"):
            outcomes = _turns(host, store, 10, "ro")
        assert outcomes == ["failed/evidence_unavailable"] * 10
        errors = _errors(caplog)
        assert len(errors) == 1 and "read_only" in errors[0], errors
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SET default_transaction_read_only = off")  # this session's own
            admin.execute(f'ALTER DATABASE "{db}" SET default_transaction_read_only = off')
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'said-once'"
            )
    caplog.clear()
    try:
        with caplog.at_level(logging.WARNING, logger="sharedos.evidence"):
            assert _turns(host, store, 2, "back") == ["succeeded/None"] * 2
        assert not _errors(caplog) and len(_recovered(caplog)) == 1
    finally:
        store.close()

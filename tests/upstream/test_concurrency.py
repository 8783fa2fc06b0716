"""50 concurrent turns, different principals, one pooled upstream: no result crosses turns."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.upstream.conftest import FIXTURE_RULES, RUN_POLICY, brokered, fixture_upstream, read_log

pytestmark = pytest.mark.anyio

TURNS = 50


async def test_fifty_concurrent_turns_share_one_pooled_upstream(tmp_path: Path) -> None:
    log = tmp_path / "fx.log"
    results: dict[str, list[tuple[str, bool, str]]] = {}
    async with brokered(tmp_path, fixture_upstream("fx", log), FIXTURE_RULES + RUN_POLICY) as env:

        async def one_turn(i: int) -> None:
            principal = f"user{i:02d}"
            # 200 calls at once: on a loaded machine one can wait past the 5 s default
            # read timeout; what is tested is that no result crosses turns
            async with env.turn(env.context(principal), http_timeout=60.0) as t:
                got = []
                for n in range(3):
                    message = f"{principal}-{n}"
                    r = await t.call(
                        "fx.echo", {"message": message, "path": f"/home/{principal}/{n}"}
                    )
                    got.append((message, r.is_error, (r.structured_content or {}).get("echo")))
                # another user's home is refused, in every turn
                other = f"user{(i + 1) % TURNS:02d}"
                r = await t.call("fx.echo", {"message": "x", "path": f"/home/{other}/n"})
                got.append(("cross", r.is_error, (r.structured_content or {}).get("outcome")))
                results[principal] = got

        async with anyio.create_task_group() as tg:
            for i in range(TURNS):
                tg.start_soon(one_turn, i)
        pids = {e["pid"] for e in read_log(log) if e["method"] in ("tools/call", "tools/list")}
    assert len(results) == TURNS
    for principal, got in results.items():
        assert got[:3] == [(f"{principal}-{n}", False, f"{principal}-{n}") for n in range(3)]
        assert got[3] == ("cross", True, "denied")
    # one upstream process served every turn: the session is pooled, not per turn
    assert len(pids) == 1
    calls = [e["params"] for e in read_log(log) if e["method"] == "tools/call"]
    assert len(calls) == TURNS * 3
    # every record is filed under the turn and principal that made it
    records = env.records()
    assert len(records) == TURNS * 4
    by_turn: dict[str, set[str]] = {}
    for r in records:
        by_turn.setdefault(r.turn_id, set()).add(r.principal)
        if r.outcome == "succeeded":
            assert json.loads(json.dumps(r.arguments))["message"].startswith(r.principal)
    assert len(by_turn) == TURNS and all(len(p) == 1 for p in by_turn.values())

"""Per-principal and per-group static credentials, and the bounded session pool.

The upstream is the fixture server over stdio (a real MCP server process per
session): ``fx.whoami`` tells, from the upstream's side, whether a credential
reached it and how long it is (never the value), and ``fx.echo`` its process id,
so each principal's session is visible as its own process. Credentials come from
the three kinds of reference: a host environment variable (alice), a 0600 file
(the ``ops`` group), a named secret of the encrypted token store (carol, kept
with the real ``sharedos upstream secret set``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.upstream.tokenstore import decode_key, generate_key
from tests.mounts import MountFn, fill
from tests.upstream.conftest import FIXTURE, FIXTURE_RULES, PY, RUN_POLICY, structured
from tests.upstream.test_identity_oauth import SHAREDOS, brokered_host

pytestmark = pytest.mark.anyio

#: distinct lengths, so the upstream's answer tells whose credential reached it
ALICE = "alice-credential-000001"  # 23
OPS = "ops-group-credential-00000000002"  # 32
CAROL = "carol-stored-credential-0000000000003"  # 37


def write_host(tmp: Path, *, sessions: str = "") -> Path:
    """The fixture as upstream ``fx`` with per-person credentials of every kind."""
    key = tmp / "token.key"
    key.write_text(generate_key() + "\n", encoding="utf-8")
    key.chmod(0o600)
    ops = tmp / "ops.token"
    ops.write_text(OPS + "\n", encoding="utf-8")
    ops.chmod(0o600)
    host = tmp / "host.toml"
    host.write_text(
        f"""[tokens]
path = "store"
key = {{ file = "token.key" }}

[upstream.fx]
command = {json.dumps(PY)}
args = {json.dumps([str(FIXTURE), "--log", str(tmp / "fx.log")])}
pinning = "off"
identity = "per-person"
{sessions}
[upstream.fx.principals.alice]
FIXTURE_TOKEN = {{ env = "ALICE_FX_TOKEN" }}

[upstream.fx.principals.carol]
FIXTURE_TOKEN = {{ store = "carol" }}

[upstream.fx.groups.ops]
FIXTURE_TOKEN = {{ file = "ops.token" }}
""",
        encoding="utf-8",
    )
    stored = subprocess.run(
        [SHAREDOS, "upstream", "secret", "set", "fx", "carol", "--host-config", str(host)],
        input=CAROL + "\n",
        capture_output=True,
        text=True,
    )
    assert stored.returncode == 0, stored.stderr
    assert CAROL not in stored.stdout + stored.stderr
    return host


ENV = {"ALICE_FX_TOKEN": ALICE}
RULES = FIXTURE_RULES + RUN_POLICY


async def who(b: Any, principal: str, roles: tuple[str, ...] = ()) -> dict[str, Any]:
    """One turn of ``principal``: what the upstream says it was given, and its process id."""
    async with b.turn(b.context(principal, roles)) as t:
        if "fx.whoami" not in await t.names():
            return {"absent": "\n".join(t.upstreams.report())}
        seen = structured(await t.call("fx.whoami", {"path": "/public/x"}))
        pid = structured(await t.call("fx.echo", {"message": "hi", "path": "/public/x"}))["pid"]
        return {**seen, "pid": pid}


async def test_each_principal_reaches_the_upstream_with_its_own_credential(tmp_path: Path) -> None:
    host = write_host(tmp_path)
    checked = subprocess.run([SHAREDOS, "host", "check", str(host)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "principal alice: FIXTURE_TOKEN from env ALICE_FX_TOKEN" in checked.stdout
    assert OPS not in checked.stdout and CAROL not in checked.stdout
    async with brokered_host(tmp_path, host, ENV, RULES) as b:
        alice = await who(b, "alice")
        carol = await who(b, "carol")
        olga = await who(b, "olga", ("ops",))
        oscar = await who(b, "oscar", ("ops", "dev"))
        mallory = await who(b, "mallory", ("dev",))
        records = b.records()
    assert alice["tokenLength"] == len(ALICE)
    assert carol["tokenLength"] == len(CAROL)
    assert olga["tokenLength"] == oscar["tokenLength"] == len(OPS)
    # one session (process) per credential: the group's members share one, nobody else does
    assert olga["pid"] == oscar["pid"]
    assert len({alice["pid"], carol["pid"], olga["pid"]}) == 3
    assert (
        "no credential" in mallory["absent"]
        and "[upstream.fx.principals.mallory]" in (mallory["absent"])
    )
    served = {(r.principal, r.served_by) for r in records if r.served_by}
    assert served == {
        ("alice", "fx:principal:alice"),
        ("carol", "fx:principal:carol"),
        ("olga", "fx:group:ops"),
        ("oscar", "fx:group:ops"),
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_sessions_are_capped_per_upstream_and_closed_when_idle(tmp_path: Path) -> None:
    host = write_host(tmp_path, sessions="sessions = { max = 2, idle_s = 3600 }")
    async with brokered_host(tmp_path, host, ENV, RULES) as b:
        pool = b.broker.pool
        alice = await who(b, "alice")
        carol = await who(b, "carol")
        assert pool.open_count("fx") == 2
        # a third credential at the cap: the longest-unused session (alice's) is closed first
        olga = await who(b, "olga", ("ops",))
        assert olga["tokenLength"] == len(OPS)
        assert pool.open_count("fx") == 2
        assert sorted(s.key[1] for s in pool) == ["group:ops", "principal:carol"]
        with anyio.fail_after(30):
            while _alive(alice["pid"]):  # its process ended with it
                await anyio.sleep(0.05)
        # while two turns hold both sessions, a third credential gets none (it is told why)
        async with b.turn(b.context("carol")) as t1, b.turn(b.context("olga", ("ops",))) as t2:
            assert "fx.whoami" in await t1.names() and "fx.whoami" in await t2.names()
            refused = await who(b, "alice")
        assert "sessions.max = 2" in refused["absent"], refused
        # nobody uses them now: the idle sweep closes both, and their processes end
        closed = await pool.sweep({"fx": 3600.0}, now=time.monotonic() + 3601)
        assert closed == 2 and pool.open_count("fx") == 0
        with anyio.fail_after(30):
            while _alive(carol["pid"]) or _alive(olga["pid"]):
                await anyio.sleep(0.05)
        # the next turn opens a session again
        again = await who(b, "alice")
        assert again["tokenLength"] == len(ALICE) and again["pid"] != alice["pid"]


async def test_the_broker_sweeps_idle_sessions_by_itself(tmp_path: Path) -> None:
    host = write_host(tmp_path, sessions="sessions = { max = 4, idle_s = 0.5 }")
    async with brokered_host(tmp_path, host, ENV, RULES) as b:
        alice = await who(b, "alice")
        # no clock is asserted: the sweeper closes it within its interval, the test only waits
        with anyio.fail_after(60):
            while b.broker.pool.open_count("fx") or _alive(alice["pid"]):
                await anyio.sleep(0.1)


def test_the_documented_example_passes_host_check() -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "host.identity.toml"
    out = subprocess.run([SHAREDOS, "host", "check", str(example)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "principal alice: TRACKER_TOKEN from env TRACKER_TOKEN_ALICE" in out.stdout
    assert "group ops: TRACKER_TOKEN from store ops" in out.stdout
    assert "token exchange for carol from env CAROL_IDP_TOKEN" in out.stdout
    # and a literal value where a reference belongs is refused, without being repeated
    bad = example.read_text(encoding="utf-8").replace(
        '{ env = "TRACKER_TOKEN_ALICE" }', '"literal-secret-value-123"'
    )
    refused = subprocess.run(
        [SHAREDOS, "host", "check", "/dev/stdin"], input=bad, capture_output=True, text=True
    )
    assert refused.returncode != 0 and "literal value is not allowed" in refused.stderr
    assert "literal-secret-value-123" not in refused.stdout + refused.stderr


def test_a_store_key_that_cannot_be_written_leaves_no_file_and_can_be_made_later(
    tmpfs: MountFn,
) -> None:
    """Before, ``keygen`` on a full disk was a Python traceback that left an empty key file
    behind; once space returned, every ``keygen`` refused it ("exists; a key is never
    overwritten") and the host refused the empty key. Now it is one line and no file."""
    mnt = tmpfs("256k")
    key = mnt / "token.key"
    filler = fill(mnt)
    argv = [SHAREDOS, "upstream", "keygen", "--output", str(key)]
    full = subprocess.run(argv, capture_output=True, text=True)
    assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
    assert full.stderr.strip() == (
        f"error: cannot write {key}: No space left on device; nothing was written there"
    )
    assert not key.exists()
    filler.unlink()
    made = subprocess.run(argv, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert len(decode_key(key.read_text(encoding="utf-8"), str(key))) == 32


def _killed_at_fsync(argv: list[str]) -> None:
    """Run the CLI with ``argv`` in a forked child that dies, as under SIGKILL (no clean-up,
    no ``finally``), the moment it first fsyncs: after the key's bytes were handed to the
    file, before they are known to be on disk."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            from click.testing import CliRunner

            from sharedos.cli.main import main

            os.fsync = lambda fd: os._exit(9)  # the kill, at the fsync
            CliRunner().invoke(main, argv)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 9  # it did die at the fsync


def test_a_keygen_killed_midway_leaves_no_key_that_blocks_the_next(tmp_path: Path) -> None:
    """The key file was created empty, then written: a SIGKILL in between (1 kill in 4 right
    after the file appeared, measured) left an empty key, every later keygen refused it
    ("exists; a key is never overwritten") and the host refused the empty key."""
    key = tmp_path / "token.key"
    _killed_at_fsync(["upstream", "keygen", "--output", str(key)])
    assert not key.exists()
    made = subprocess.run(
        [SHAREDOS, "upstream", "keygen", "--output", str(key)], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    assert len(decode_key(key.read_text(encoding="utf-8"), str(key))) == 32


def test_the_store_key_is_made_private_and_kept_apart_from_the_store(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "token.key"
    key.parent.mkdir()
    made = subprocess.run(
        [SHAREDOS, "upstream", "keygen", "--output", str(key)], capture_output=True, text=True
    )
    assert made.returncode == 0 and key.stat().st_mode & 0o777 == 0o600
    assert key.read_text(encoding="utf-8").strip() not in made.stdout + made.stderr
    again = subprocess.run(
        [SHAREDOS, "upstream", "keygen", "--output", str(key)], capture_output=True, text=True
    )
    assert again.returncode == 1 and "never overwritten" in again.stderr
    # a key inside the store is refused by host check (a copy of the store must not carry it)
    host = tmp_path / "host.toml"
    host.write_text(
        '[tokens]\npath = "keys"\nkey = { file = "keys/token.key" }\n\n'
        '[upstream.docs]\nurl = "http://127.0.0.1:9/mcp"\n[upstream.docs.oauth]\n',
        encoding="utf-8",
    )
    checked = subprocess.run([SHAREDOS, "host", "check", str(host)], capture_output=True, text=True)
    assert checked.returncode != 0 and "inside the token store" in checked.stdout + checked.stderr
    # a credential file others can read is refused, naming the file and the fix, not the value
    loose = tmp_path / "loose.token"
    loose.write_text("loose-credential-value-0001\n", encoding="utf-8")
    loose.chmod(0o644)
    host.write_text(
        f'[upstream.fx]\ncommand = {json.dumps(PY)}\nidentity = "per-person"\n'
        f"[upstream.fx.principals.alice]\nT = {{ file = {json.dumps(str(loose))} }}\n",
        encoding="utf-8",
    )
    checked = subprocess.run([SHAREDOS, "host", "check", str(host)], capture_output=True, text=True)
    said = checked.stdout + checked.stderr
    assert checked.returncode != 0 and "chmod 600" in said and str(loose) in said
    assert "loose-credential-value" not in said


async def test_per_person_or_shared_gives_the_others_the_operators_credential(
    tmp_path: Path,
) -> None:
    host = write_host(tmp_path)
    text = host.read_text(encoding="utf-8").replace(
        'identity = "per-person"',
        'identity = "per-person-or-shared"\n'
        'credentials = { FIXTURE_TOKEN = { env = "SHARED_FX_TOKEN" } }',
    )
    host.write_text(text, encoding="utf-8")
    shared = "operator-shared-credential-00000004"  # 35 characters: unlike every other
    async with brokered_host(tmp_path, host, {**ENV, "SHARED_FX_TOKEN": shared}, RULES) as b:
        alice = await who(b, "alice")
        mallory = await who(b, "mallory")
        records = b.records()
    assert alice["tokenLength"] == len(ALICE)
    assert mallory["tokenLength"] == len(shared) and mallory["pid"] != alice["pid"]
    assert {(r.principal, r.served_by) for r in records if r.served_by} == {
        ("alice", "fx:principal:alice"),
        ("mallory", "fx:shared"),
    }


BOB = "bob-credential-0000000000000000000000004"  # 40


async def test_a_turn_id_carried_by_another_principal_gets_nothing_of_that_turn(
    tmp_path: Path,
) -> None:
    """A context of another principal carrying an open turn's id (a host's
    ``model_copy(update={"principal": ...})`` keeps it) is served nothing of that turn:
    opened at the same moment, the second open is refused (both used to open, and the
    first principal's calls then went out with the second's credential); used against
    the open turn, it lists none of its brokered tools and a call is refused."""
    host = tmp_path / "host.toml"
    host.write_text(
        f"""[upstream.fx]
command = {json.dumps(PY)}
args = {json.dumps([str(FIXTURE)])}
pinning = "off"
identity = "per-person"

[upstream.fx.principals.alice]
FIXTURE_TOKEN = {{ env = "ALICE_FX_TOKEN" }}

[upstream.fx.principals.bob]
FIXTURE_TOKEN = {{ env = "BOB_FX_TOKEN" }}
""",
        encoding="utf-8",
    )
    from sharedos.context import ToolCall

    env = {"ALICE_FX_TOKEN": ALICE, "BOB_FX_TOKEN": BOB}
    async with brokered_host(tmp_path, host, env, RULES) as b:
        alice = b.context("alice")
        bob = alice.model_copy(update={"principal": "bob"})
        assert bob.turn_id == alice.turn_id
        run = b.policy.tool_policies["run"]
        seen: dict[str, Any] = {}
        refused: list[str] = []
        entered: list[str] = []
        both_open = anyio.Event()

        async def turn_of(ctx: Any) -> None:
            try:
                async with b.broker.turn(ctx):
                    entered.append(ctx.principal)
                    await both_open.wait()
                    catalog = b.host.kernel.list_tools(ctx, run)
                    call = ToolCall(tool="fx.whoami", arguments={"path": "/public/x"})
                    got = await b.host.invoke_tool(call, ctx, run, catalog=catalog)
                    seen[ctx.principal] = got.structured
            except ValueError:
                refused.append(ctx.principal)

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn_of, alice)
            tg.start_soon(turn_of, bob)
            with anyio.fail_after(30):
                while len(entered) + len(refused) < 2:
                    await anyio.sleep(0.01)
            both_open.set()
        assert len(refused) == 1, (refused, seen)
        [opened] = seen
        own = {"alice": ALICE, "bob": BOB}[opened]
        assert seen[opened]["tokenLength"] == len(own)

        # the turn is open for alice: bob's context with its id lists and calls nothing of it
        async with b.broker.turn(alice):
            assert list(b.broker.tools_for(alice))
            assert list(b.broker.tools_for(bob)) == []
            catalog = b.host.kernel.list_tools(bob, run)
            assert "fx.whoami" not in catalog
            call = ToolCall(tool="fx.whoami", arguments={"path": "/public/x"})
            got = await b.host.invoke_tool(call, bob, run, catalog=catalog)
            assert got.is_error and got.reason == "tool_unavailable", got
            # and with alice's own catalogue handed to it by mistake, still not as alice
            mine = b.host.kernel.list_tools(alice, run)
            got = await b.host.invoke_tool(call, bob, run, catalog=mine)
            assert got.is_error and got.structured != {"tokenPresent": True, "tokenLength": 23}

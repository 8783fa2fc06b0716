# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""Store-wide checkpoints: a deleted turn and a cut tail are found, on both stores (issue 24).

Each test writes turns through the store's public methods, takes checkpoints
the way a host does, then removes rows the way someone with write access to
the database would, and checks what ``verify`` (and the CLI) reports.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.chain import Signer, load_public_key
from sharedos.evidence.checkpoint import Checkpoint, heads_hash, make_checkpoint
from sharedos.evidence.verify import verify_store
from tests.evidence.stores import Opener, Raw, backend, opener, raw, store  # noqa: F401
from tests.evidence.test_chain import attempt, ok, write_turn


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def location(store: Any) -> str:
    return str(getattr(store, "url", None) or store.path)


def found(store: Any, **kw: Any) -> list[tuple[str, str, int | None]]:
    return sorted(
        ((p.kind, p.turn_id, p.position) for p in verify_store(store, **kw).problems), key=str
    )


def unsealed_turn(store: Any, turn: str, calls: int = 3) -> None:
    """A turn still running (or whose host died): attempts and outcomes, no seal."""
    for i in range(calls):
        store.finish(store.begin(attempt(f"{turn}-{i}", turn)), ok())


def test_a_deleted_turn_is_found_once_a_checkpoint_covered_it(store: Any, raw: Raw) -> None:
    write_turn(store, "T")
    write_turn(store, "U")
    # without a checkpoint a whole turn can go without a trace (what issue 24 found)
    raw("DELETE FROM chain WHERE turn_id = 'U'")
    assert verify_store(store).clean
    write_turn(store, "V")
    assert store.take_checkpoint() is not None
    raw("DELETE FROM chain WHERE turn_id = 'V'")
    # the host's checkpoint lists what it committed: U too, though U was gone before it
    assert found(store) == [("deleted", "U", None), ("deleted", "V", None)]


def test_the_cut_tail_of_an_unsealed_turn_is_found(store: Any, raw: Raw) -> None:
    unsealed_turn(store, "running", calls=4)  # positions 0..8, no seal
    store.take_checkpoint()
    raw("DELETE FROM chain WHERE turn_id = 'running' AND pos >= 6")
    problems = verify_store(store).problems
    assert [(p.kind, p.turn_id, p.position) for p in problems] == [("deleted", "running", 8)]
    assert "checkpoint 1 covered this turn up to position 8" in problems[0].detail


def test_what_was_written_after_the_last_checkpoint_is_not_covered(store: Any, raw: Raw) -> None:
    """The documented limit: rows committed after the last checkpoint are not anchored."""
    unsealed_turn(store, "running", calls=2)
    store.take_checkpoint()
    unsealed_turn(store, "running", calls=2)  # positions 5..8, after the checkpoint
    raw("DELETE FROM chain WHERE turn_id = 'running' AND pos >= 5")
    assert verify_store(store).clean


def test_heads_edited_to_hide_a_deletion_are_found(store: Any, raw: Raw) -> None:
    write_turn(store, "T")
    write_turn(store, "U")
    store.take_checkpoint()
    raw("DELETE FROM chain WHERE turn_id = 'U'")
    raw("DELETE FROM checkpoint_heads WHERE turn_id = 'U'")
    assert ("edited", "", 1) in [
        (p.kind, p.turn_id, p.position) for p in verify_store(store).problems
    ]


def test_a_rewritten_checkpoint_chain_fails_against_an_exported_checkpoint(
    store: Any, raw: Raw, tmp_path: Path
) -> None:
    """Someone who deletes a turn and recomputes every checkpoint cannot match one kept elsewhere."""
    write_turn(store, "T")
    write_turn(store, "U")
    store.take_checkpoint()
    code, out = cli("evidence", "checkpoint", "--db", location(store))
    assert code == 0, out
    exported = tmp_path / "cp.json"
    exported.write_text(out.split("\ncheckpoint 1 of store")[0])
    Checkpoint.load(exported.read_text())  # a checkpoint file, nothing else
    raw("DELETE FROM chain WHERE turn_id = 'U'")
    raw("DELETE FROM checkpoint_heads WHERE turn_id = 'U'")
    _recompute(raw, store)
    assert verify_store(store).clean  # self-consistent again: the store alone cannot tell
    code, out = cli("evidence", "verify", "--db", location(store), "--since", str(exported))
    assert code == 1
    assert "checkpoint 1: the store's checkpoint 1 is not the one given" in out


def _recompute(raw: Raw, store: Any) -> None:
    """Recompute every checkpoint from the heads now listed, as an attacker can (unsigned)."""
    rows = raw("SELECT number, store_id, taken_at FROM checkpoints ORDER BY number")
    prev = None
    for number, store_id, taken_at in rows:
        heads = [
            (str(t), int(p), str(h))
            for t, p, h in raw(
                "SELECT turn_id, pos, hash FROM checkpoint_heads WHERE number = ?", number
            )
        ]
        from sharedos.evidence.checkpoint import checkpoint_genesis

        made = make_checkpoint(
            int(number), store_id, prev or checkpoint_genesis(store_id), heads, None, taken_at
        )
        raw(
            "UPDATE checkpoints SET heads = ?, heads_hash = ?, prev_hash = ?, hash = ? "
            "WHERE number = ?",
            made.heads,
            heads_hash(heads),
            made.prev,
            made.hash,
            number,
        )
        prev = made.hash


def test_removing_the_last_checkpoints_is_found_against_an_exported_one(
    store: Any, raw: Raw, tmp_path: Path
) -> None:
    write_turn(store, "T")
    store.take_checkpoint()
    write_turn(store, "U")
    second = store.take_checkpoint()
    exported = tmp_path / "cp.json"
    exported.write_text(json.dumps(second.to_dict()))
    raw("DELETE FROM chain WHERE turn_id = 'U'")
    raw("DELETE FROM checkpoint_heads WHERE number = 2")
    raw("DELETE FROM checkpoints WHERE number = 2")
    assert verify_store(store).clean  # the tail of the checkpoint chain is gone too
    report = verify_store(store, since=second)
    assert [(p.kind, p.checkpoint) for p in report.problems] == [("deleted", 2)]
    code, out = cli("evidence", "verify", "--db", location(store), "--since", str(exported))
    assert code == 1 and "checkpoint 2 (taken" in out and "is gone" in out


def test_signed_checkpoints_cannot_be_recomputed(opener: Opener, raw: Raw) -> None:
    signer = Signer.generate()
    store = opener(signer=signer)
    write_turn(store, "T")
    write_turn(store, "U")
    cp = store.take_checkpoint()
    assert cp.key_id == signer.key_id and cp.signature
    key, key_id = load_public_key(signer.public_pem())
    assert verify_store(store, public_keys={key_id: key}).clean
    raw("DELETE FROM chain WHERE turn_id = 'U'")
    raw("DELETE FROM checkpoint_heads WHERE turn_id = 'U'")
    _recompute(raw, store)
    kinds = {
        (p.kind, p.checkpoint) for p in verify_store(store, public_keys={key_id: key}).problems
    }
    assert ("signature", 1) in kinds


def test_a_checkpoint_of_another_store_is_refused(opener: Opener, store: Any) -> None:
    write_turn(store, "T")
    cp = store.take_checkpoint()
    other = Checkpoint.from_dict({**cp.to_dict(), "store_id": "another-store"})
    problems = verify_store(store, since=other).problems
    assert any("of store another-store, not of this store" in p.detail for p in problems)


def test_checkpoints_of_a_store_whose_own_id_was_removed_are_reported(
    opener: Opener, raw: Raw
) -> None:
    """Each checkpoint names its store; the store's ``meta.store_id`` removed left nothing to compare them with, and ``verify`` said the store was clean: a
    checkpoint of another store (its genesis that store's) then passed as this one's."""
    store = opener()
    write_turn(store, "T")
    assert store.take_checkpoint() is not None
    store.close()
    raw("DELETE FROM meta WHERE key = 'store_id'")
    readonly = opener(read_only=True)
    report = verify_store(readonly)
    assert not report.clean
    assert [p.detail for p in report.problems] == [
        f"names store {readonly_id(raw)}, but the store names none (its store_id was "
        "removed from its meta table)"
    ]
    code, out = cli("evidence", "verify", "--db", location(readonly))
    assert code == 1 and "the store names none" in out, out


def readonly_id(raw: Raw) -> str:
    """The store id the checkpoints name."""
    return str(raw("SELECT store_id FROM checkpoints")[0][0])


def test_checkpoints_number_on_from_the_store_whoever_wrote_them(
    opener: Opener, store: Any
) -> None:
    """Two writers of one store (two hosts) make one checkpoint chain."""
    other = opener()
    write_turn(store, "T")
    write_turn(other, "U")
    first = store.take_checkpoint()
    second = other.take_checkpoint()  # its idea of the last checkpoint is stale: re-read
    write_turn(store, "V")
    third = store.take_checkpoint()
    assert [first.number, second.number, third.number] == [1, 2, 3]
    assert second.prev == first.hash and third.prev == second.hash
    report = verify_store(store)
    assert report.clean and report.checkpoints == 3


def test_two_writers_of_one_turn_racing_for_a_checkpoint_number_both_checkpoint(
    opener: Opener, store: Any
) -> None:
    """Two writers of one turn (a relaunched bridge, a host sealing its turn): the one
    that lost the race for a number re-reads it and checkpoints after, whichever of the
    checkpoint's rows collided first (on PostgreSQL the shared turn's head row does)."""
    other = opener()
    store.begin(attempt("a1", "T"))
    assert store.take_checkpoint().number == 1
    other.begin(attempt("b1", "T"))
    assert other.take_checkpoint().number == 2  # also covers T
    store.begin(attempt("a2", "T"))
    third = store.take_checkpoint()  # its idea of the last checkpoint (1) is stale
    assert third is not None and third.number == 3
    report = verify_store(store)
    assert report.clean and report.checkpoints == 3, [p.line() for p in report.problems]
    heads = {lk.turn_id: lk.pos for lk in store.iter_links()}
    assert {turn: pos for turn, pos, _h, _n in store.iter_coverage()} == heads


def test_verify_with_a_key_flags_a_closed_turn_whose_seal_was_removed(
    opener: Opener, raw: Raw, tmp_path: Path
) -> None:
    signer = Signer.generate()
    store = opener(signer=signer)
    write_turn(store, "T")
    (tmp_path / "host.pub").write_bytes(signer.public_pem())
    code, out = cli(
        "evidence", "verify", "--db", location(store), "--key", str(tmp_path / "host.pub")
    )
    assert code == 0, out
    try:
        raw("DELETE FROM chain WHERE turn_id = 'T' AND kind = 'seal'")
    except Exception:  # a version-3 store (what this was checked against before the fix)
        raw("DELETE FROM seals WHERE turn_id = 'T'")
        raw("DELETE FROM links WHERE turn_id = 'T' AND kind = 'seal'")
    code, out = cli(
        "evidence", "verify", "--db", location(store), "--key", str(tmp_path / "host.pub")
    )
    assert code == 1 and "unsealed: turn T" in out


def test_a_host_checkpoints_on_its_own(opener: Opener) -> None:
    """The interval passes: the next write's recorder takes a checkpoint, off the call's path."""
    import anyio

    from sharedos.catalog import ToolRegistry
    from sharedos.catalog.definition import ToolDefinition
    from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
    from sharedos.kernel.handlers import HandlerResult
    from sharedos.policy import compile_source
    from sharedos.toolpolicy import RunMode, ToolPolicy

    async def echo(args: dict[str, Any], hctx: Any) -> HandlerResult:
        return HandlerResult(content=[{"type": "text", "text": "ok"}])

    signer = Signer.generate()
    store = opener(signer=signer, checkpoint_interval_s=0.01)
    policy = compile_source(
        "namespace t\nrequirement t.echo { action read; resource path(args.p) }\n"
        'permit read on "/public/**"\n',
        "t.sos",
    )
    tool = ToolDefinition(
        name="t.echo",
        description="echo",
        input_schema={"type": "object", "properties": {"p": {"type": "string"}}},
        handler=echo,
    )
    host = RuntimeHost(Kernel(policy, ToolRegistry([tool])), store)
    run = ToolPolicy(name="r", mode=RunMode.OPEN, managed=("t.*",))
    ctx = AccessContext(principal="alice", turn_id="host-turn")

    async def calls() -> None:
        for i in range(20):
            await host.invoke_tool(
                ToolCall(call_id=f"c{i}", tool="t.echo", arguments={"p": "/public/a"}), ctx, run
            )
            await anyio.sleep(0.02)

    anyio.run(calls)
    checkpoints = [cp for cp, _ in store.iter_checkpoints()]
    assert checkpoints and all(cp.key_id == signer.key_id for cp in checkpoints)
    key, key_id = load_public_key(signer.public_pem())
    problems = verify_store(store, public_keys={key_id: key}).problems
    assert [p.kind for p in problems] == ["unsealed"]  # the turn never closed: no seal


@pytest.mark.parametrize("take", [True, False])
def test_the_checkpoint_command(store: Any, tmp_path: Path, take: bool) -> None:
    write_turn(store, "T")
    if not take:
        code, out = cli("evidence", "checkpoint", "--db", location(store))
        assert code == 1 and "no checkpoint yet" in out
        store.take_checkpoint()
    key = tmp_path / "auditor.pem"
    signer = Signer.generate()
    key.write_bytes(signer.private_pem())
    key.chmod(0o600)  # a private key: refused when others can read it
    args = ["evidence", "checkpoint", "--db", location(store), "-o", str(tmp_path / "cp.json")]
    if take:
        args += ["--take", "--sign-key", str(key)]
    code, out = cli(*args)
    assert code == 0, out
    cp = Checkpoint.load((tmp_path / "cp.json").read_text())
    assert cp.number == 1 and cp.heads == 1
    assert (cp.key_id == signer.key_id) is take
    (tmp_path / "a.pub").write_bytes(signer.public_pem())
    code, out = cli(
        "evidence", "verify", "--db", location(store), "--since", str(tmp_path / "cp.json")
    )
    assert code == 0 and "since checkpoint 1: clean" in out


def test_take_with_a_sign_key_exports_a_checkpoint_that_key_signed(
    store: Any, tmp_path: Path
) -> None:
    """An auditor's `--take --sign-key` when the hosts' checkpoints already cover every
    head: what is exported is a checkpoint taken now and signed with the auditor's key
    (chained after the hosts' ones, so it anchors them), never the host's latest one."""
    write_turn(store, "T")
    host_cp = store.take_checkpoint()  # the host's, unsigned: nothing is left uncovered
    assert host_cp is not None and host_cp.key_id is None
    key = tmp_path / "auditor.pem"
    signer = Signer.generate()
    key.write_bytes(signer.private_pem())
    key.chmod(0o600)
    out_file = tmp_path / "cp.json"
    args = ["evidence", "checkpoint", "--db", location(store), "--take", "--sign-key", str(key)]
    code, out = cli(*args, "-o", str(out_file))
    assert code == 0, out
    cp = Checkpoint.load(out_file.read_text())
    assert cp.key_id == signer.key_id and cp.signature is not None
    assert cp.number == host_cp.number + 1 and cp.prev == host_cp.hash
    public, _key_id = load_public_key(signer.public_pem())
    from sharedos.evidence.chain import verify_seal_signature

    assert verify_seal_signature(public, cp.hash, cp.signature)
    code, out = cli("evidence", "verify", "--db", location(store), "--since", str(out_file))
    assert code == 0 and "since checkpoint 2: clean" in out, out


def test_the_checkpoint_command_says_signed_only_of_a_signature_it_checked(
    opener: Opener, raw: Raw, tmp_path: Path
) -> None:
    """`checkpoint` exports the store's latest checkpoint without keys: a `key_id` and a
    signature are what the store holds (anyone who can write it can name the host's key
    on a checkpoint that key never signed), so its line never says "signed by" them."""
    signer = Signer.generate()
    store = opener(signer=signer)
    write_turn(store, "T")
    assert store.take_checkpoint() is not None
    for signature, said in (
        ("A" * 88, f"with a signature by key {signer.key_id[:16]}… not checked here"),
        (None, f"naming key {signer.key_id[:16]}… but carrying no signature"),
    ):
        raw("UPDATE checkpoints SET signature = ?", signature)
        result = CliRunner().invoke(main, ["evidence", "checkpoint", "--db", location(store)])
        assert result.exit_code == 0, result.output
        assert said in result.stderr and "signed by key" not in result.stderr, result.stderr
    key = tmp_path / "auditor.pem"
    key.write_bytes(signer.private_pem())
    key.chmod(0o600)
    args = ("evidence", "checkpoint", "--db", location(store), "--take", "--sign-key", str(key))
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0 and f"signed by key {signer.key_id[:16]}…" in result.stderr


def test_a_head_two_writers_both_checkpointed_is_one_head(opener: Opener, store: Any) -> None:
    other = opener()
    write_turn(store, "T")
    assert other.take_checkpoint(everything=True) is not None  # an auditor's: T's head
    assert store.take_checkpoint() is not None  # the host's own: the same head of T
    report = verify_store(store)
    assert report.clean and report.checkpoints == 2, [p.line() for p in report.problems]
    assert verify_store(store, "T").clean


def test_one_turn_deleted_whole_is_reported_for_that_turn(store: Any, raw: Raw) -> None:
    write_turn(store, "T")
    store.take_checkpoint()
    raw("DELETE FROM chain WHERE turn_id = 'T'")
    code, out = cli("evidence", "verify", "--db", location(store), "--turn", "T")
    assert code == 1 and "deleted: turn T -: the whole turn is gone" in out


def test_a_later_checkpoint_cannot_vouch_for_a_rewritten_tail_the_exported_one_covered(
    opener: Opener, raw: Raw, tmp_path: Path
) -> None:
    """Every head a checkpoint recorded is checked, not only a turn's furthest one: someone
    who cuts a covered tail, writes a longer one and checkpoints it (no key needed) does not
    pass ``verify --since`` the checkpoint that covered the original tail."""
    store = opener()
    unsealed_turn(store, "running", calls=4)  # positions 0..8, no seal
    first = store.take_checkpoint()
    assert first is not None
    exported = tmp_path / "cp.json"
    exported.write_text(json.dumps(first.to_dict()))
    store.close()
    raw("DELETE FROM chain WHERE turn_id = 'running' AND pos >= 6")
    forger = opener()  # the attacker's own writer on the store: new rows 6..9, checkpointed
    unsealed_turn(forger, "running", calls=2)
    assert forger.take_checkpoint() is not None
    report = verify_store(forger, since=first)
    assert ("edited", "running", 8) in [(p.kind, p.turn_id, p.position) for p in report.problems]
    code, out = cli("evidence", "verify", "--db", location(forger), "--since", str(exported))
    assert code == 1 and "not the one checkpoint 1 covered" in out


@pytest.mark.parametrize("text", ["{not json", '{"format":' + "[" * 100_000 + "]" * 100_000 + "}"])
def test_a_since_file_that_is_not_a_checkpoint_is_a_usage_error(
    store: Any, tmp_path: Path, text: str
) -> None:
    """Not JSON, or JSON nested past the decoder's depth: exit 2 saying so, no traceback."""
    write_turn(store, "T")
    store.take_checkpoint()
    given = tmp_path / "cp.json"
    given.write_text(text)
    code, out = cli("evidence", "verify", "--db", location(store), "--since", str(given))
    assert code == 2 and "not an evidence checkpoint" in out


@pytest.mark.parametrize(
    ("field", "value"), [("signature", 5), ("key_id", ["k"]), ("heads", "2"), ("prev", None)]
)
def test_a_since_file_with_a_field_of_the_wrong_type_is_a_usage_error(
    opener: Opener, tmp_path: Path, field: str, value: object
) -> None:
    """--key --since a file whose signature is a number raised TypeError from base64."""
    signer = Signer.generate()
    store = opener(signer=signer)
    write_turn(store, "T")
    cp = store.take_checkpoint()
    assert cp is not None
    (tmp_path / "host.pub").write_bytes(signer.public_pem())
    given = tmp_path / "cp.json"
    given.write_text(json.dumps({**cp.to_dict(), field: value}))
    code, out = cli(
        *("evidence", "verify", "--db", location(store)),
        *("--key", str(tmp_path / "host.pub"), "--since", str(given)),
    )
    assert code == 2 and "not an evidence checkpoint" in out, out


def test_a_signature_of_another_type_verifies_nothing() -> None:
    from sharedos.evidence.chain import verify_seal_signature

    key, _id = load_public_key(Signer.generate().public_pem())
    for signature in (5, None, ["x"], b"AAAA"):
        assert verify_seal_signature(key, "sha256:00", signature) is False  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("number", 1),
        ("taken_at", "2020-01-01T00:00:00Z"),
        ("heads", 7),
        ("number", 2**63),  # past what RFC 8785 encodes: raised IntegerDomainError
        ("heads", 2**53),
    ],
)
def test_an_exported_checkpoint_edited_after_export_anchors_nothing(
    opener: Opener, tmp_path: Path, field: str, value: object
) -> None:
    """An exported checkpoint whose fields were edited and hash kept verified clean (a time
    or a count changed) or blamed the intact store (a number changed: 'the store was
    rewritten'); now the file itself is reported, signed or not."""
    signer = Signer.generate()
    store = opener(signer=signer)
    write_turn(store, "T")
    store.take_checkpoint()
    write_turn(store, "U")
    cp = store.take_checkpoint()
    assert cp is not None and cp.number == 2
    (tmp_path / "host.pub").write_bytes(signer.public_pem())
    given = tmp_path / "cp.json"
    given.write_text(json.dumps(cp.to_dict()))
    args = ("evidence", "verify", "--db", location(store), "--since", str(given))
    key = ("--key", str(tmp_path / "host.pub"))
    assert cli(*args)[0] == 0 and cli(*args, *key)[0] == 0
    given.write_text(json.dumps({**cp.to_dict(), field: value}))
    for extra in ((), key):
        code, out = cli(*args, *extra)
        assert code == 1 and "the checkpoint given does not match its hash" in out, out
        assert "the store was rewritten" not in out, out


@pytest.mark.parametrize(("column", "value"), [("number", 2**63 - 1), ("heads", 2**53)])
def test_a_checkpoint_number_past_what_json_encodes_is_reported(
    opener: Opener, raw: Raw, tmp_path: Path, column: str, value: int
) -> None:
    """A checkpoint whose number or head count was set past 2**53 - 1 (an integer column
    takes up to 2**63 - 1 on both backends) has no RFC 8785 encoding: verify and
    ``evidence checkpoint`` raised IntegerDomainError; now it is a checkpoint that does
    not match its hash, exit 1, and nothing is exported."""
    signer = Signer.generate()
    store = opener(signer=signer)
    write_turn(store, "T")
    assert store.take_checkpoint() is not None
    raw(f"UPDATE checkpoints SET {column} = ?", value)
    (tmp_path / "host.pub").write_bytes(signer.public_pem())
    for extra in ((), ("--key", str(tmp_path / "host.pub"))):
        result = CliRunner().invoke(main, ["evidence", "verify", "--db", location(store), *extra])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, (SystemExit, type(None))), result.exception
        assert "the checkpoint does not match its hash" in result.output, result.output
    exported = CliRunner().invoke(main, ["evidence", "checkpoint", "--db", location(store)])
    assert isinstance(exported.exception, (SystemExit, type(None))), exported.exception
    assert exported.exit_code != 0 and "nothing exported" in exported.output, exported.output


def test_a_host_after_a_checkpoint_numbered_past_what_json_encodes_fails_as_a_store(
    opener: Opener, raw: Raw
) -> None:
    """The store's last checkpoint renumbered 2**63 - 1: the next one (2**63) has no RFC
    8785 encoding, and make_checkpoint's IntegerDomainError came out of a host's
    ``close`` (which catches store errors only, leaving its connection open) and out of
    ``evidence checkpoint --take`` as a traceback. Now it is a store error: reported by
    the close, exit 1 for the command."""
    from sharedos.evidence.store import EvidenceStoreError

    first = opener()
    write_turn(first, "T")
    first.close()  # its closing checkpoint is checkpoint 1
    raw("UPDATE checkpoints SET number = ?", 2**63 - 1)
    host = opener()
    write_turn(host, "U")
    with pytest.raises(EvidenceStoreError, match="changed outside SharedOS"):
        host.take_checkpoint()
    host.close()  # raised IntegerDomainError
    assert host.failures.failing  # the close said it could not write its checkpoint
    result = CliRunner().invoke(main, ["evidence", "checkpoint", "--take", "--db", location(host)])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "changed outside SharedOS" in result.output, result.output


def test_a_checkpoint_that_failed_is_not_tried_again_at_every_write(pg_url: str) -> None:
    """Another session holds a lock on ``checkpoints`` (a ``VACUUM FULL``, an operator's
    ``LOCK TABLE``): a host's periodic checkpoint waits out the store's lock timeout and
    fails. It runs on the writer thread, ahead of the calls' writes, and it stayed due, so
    it was tried again after every write: each call waited the lock timeout once per write
    (6 calls through a host took 16 s instead of 1.5 s), and each try was logged as a lost
    record. After a failure the next try waits (``RETRY_CHECKPOINT_S``); the heads it would
    have covered are covered by the next checkpoint that lands."""
    import psycopg

    from sharedos.evidence.postgres import PostgresEvidenceStore
    from sharedos.evidence.store import EvidenceStoreError

    store = PostgresEvidenceStore(pg_url, checkpoint_interval_s=0.01, statement_timeout_s=0.3)
    try:
        store.finish(store.begin(attempt("a", turn="T1")), ok())
        time.sleep(0.05)  # past the 10 ms interval: on an idle machine the finish takes less
        with psycopg.connect(pg_url) as holder:
            holder.execute("LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
            assert store.evidence_checkpoint_due()
            with pytest.raises(EvidenceStoreError):
                store.take_checkpoint()
            store.finish(store.begin(attempt("b", turn="T2")), ok())
            assert not store.evidence_checkpoint_due(), "a failed checkpoint retried at once"
            holder.rollback()
        made = store.take_checkpoint()  # asked for: taken at once, covering both turns
        assert made is not None and made.heads == 2
        assert verify_store(store).clean
    finally:
        store.close()

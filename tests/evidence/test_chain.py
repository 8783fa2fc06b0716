# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""Tamper evidence: every kind of change to a stored turn is found, with its position, on both stores.

Each test writes the same turn through the store's public methods, then
changes the database the way someone with write access to it would (plain
SQL, behind the store's back), and checks what ``verify`` reports.

The turn ``T`` (positions)::

    0 open   1 attempt a1   2 outcome a1   3 attempt d1   4 outcome d1 (denied)
    5 attempt a2   6 attempt a3   7 outcome a3   8 outcome a2   9 seal
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from sharedos.evidence import EvidenceRecord, arguments_digest
from sharedos.evidence.appender import Opening
from sharedos.evidence.chain import (
    Signer,
    genesis,
    link_hash,
    load_public_key,
    verify_turn,
)
from sharedos.evidence.record import OutcomeRecord
from sharedos.evidence.verify import verify_store
from sharedos.outcomes import Outcome, ReasonCode
from tests.evidence.stores import (  # noqa: F401  (fixtures)
    Opener,
    Raw,
    backend,
    opener,
    raw,
    store,
)


def attempt(call: str, turn: str = "T", **kw: Any) -> EvidenceRecord:
    base: dict[str, Any] = {
        "turn_id": turn,
        "call_id": call,
        "tool": "files.write",
        "started_at": f"2026-12-02T10:00:00.{len(call):06d}Z",
        "arguments_digest": arguments_digest({"path": "/public/x"}),
        "arguments": {"path": "/public/x", "text": "hello"},
        "effect": "allow",
        "resource": "/public/x",
        "rule_ids": ("files.sos:3",),
        "catalog_hash": "c" * 64,
        "policy_hash": "p" * 64,
        "identity": {"policyBundleRevision": "r7", "policyBundleHash": "p" * 64},
    }
    base.update(kw)
    return EvidenceRecord(**base)


def ok(duration: float = 0.5) -> OutcomeRecord:
    return OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:01.000000Z", duration)


def write_turn(store: Any, turn: str = "T") -> dict[str, int]:
    """The turn of the module docstring; returns call -> seq."""
    store.open_turn(
        Opening(
            turn_id=turn,
            opened_at="2026-12-02T10:00:00.000000Z",
            catalog_hash="c" * 64,
            policy_hash="p" * 64,
            policy_revision="r7",
            identity='{"policyBundleRevision":"r7"}',
        )
    )
    seqs: dict[str, int] = {}
    seqs["a1"] = store.begin(attempt("a1", turn))
    store.finish(seqs["a1"], ok())
    seqs["d1"] = store.record(
        attempt(
            "d1",
            turn,
            effect="deny",
            resource="/private/x",
            outcome=Outcome.DENIED,
            reason=ReasonCode.FORBIDDEN,
            finished_at="2026-12-02T10:00:00.000200Z",
            duration_ms=0.125,
        )
    )
    seqs["a2"] = store.begin(attempt("a2", turn))
    seqs["a3"] = store.begin(attempt("a3", turn))
    store.finish(seqs["a3"], ok(1.0))
    store.finish(seqs["a2"], ok(2.25))
    store.seal_turn(turn, closed_at="2026-12-02T10:00:02.000000Z")
    return seqs


def found(store: Any, **kw: Any) -> list[tuple[str, int | None]]:
    report = verify_store(store, **kw)
    return sorted(((p.kind, p.position) for p in report.problems), key=str)


@pytest.fixture
def turn(store: Any) -> dict[str, int]:
    seqs = write_turn(store)
    write_turn(store, "U")  # a second, untouched turn: nothing may be reported for it
    return seqs


def test_a_clean_store_verifies(store: Any, turn: dict[str, int]) -> None:
    report = verify_store(store)
    assert report.clean, [p.line() for p in report.problems]
    assert (report.turns, report.links, report.sealed) == (2, 20, 2)
    positions = [lk.pos for lk in store.iter_links("T")]
    assert positions == list(range(10))  # gap-free per turn
    kinds = [lk.kind for lk in store.iter_links("T")]
    assert kinds[0] == "open" and kinds[-1] == "seal"
    assert verify_store(store, "U").turns == 1


def test_the_chain_is_anchored_in_the_opening_record(store: Any, turn: dict[str, int]) -> None:
    links = list(store.iter_links("T"))
    opening = links[0]
    assert opening.prev == genesis("T")
    turn_id, _opened, catalog, policy, revision, _identity = opening.values
    assert (turn_id, catalog, policy, revision) == ("T", "c" * 64, "p" * 64, "r7")
    for before, after in itertools.pairwise(links):
        assert after.prev == before.hash


def test_a_turn_without_an_explicit_opening_is_opened_by_its_first_row(store: Any) -> None:
    seq = store.begin(attempt("x", "implicit"))
    store.finish(seq, ok())
    links = list(store.iter_links("implicit"))
    assert [lk.kind for lk in links] == ["open", "attempt", "outcome"]
    # the opening takes the catalogue and policy hashes (and revision) from that row
    assert links[0].values[2:5] == ("c" * 64, "p" * 64, "r7")
    assert verify_store(store).clean


def test_an_edited_attempt_is_found(store: Any, turn: dict[str, int], raw: Raw) -> None:
    raw("UPDATE chain SET resource = '/public/x', effect = 'allow' WHERE seq = ?", turn["d1"])
    assert found(store) == [("edited", 3)]


def test_an_edited_outcome_is_found(store: Any, turn: dict[str, int], raw: Raw) -> None:
    raw("UPDATE chain SET outcome = 'succeeded', reason = NULL WHERE attempt = ?", turn["d1"])
    assert found(store) == [("edited", 4)]


def test_an_edited_opening_is_found(store: Any, turn: dict[str, int], raw: Raw) -> None:
    raw("UPDATE chain SET catalog_hash = ? WHERE turn_id = 'T' AND kind = 'open'", "e" * 64)
    assert found(store) == [("edited", 0)]


def test_an_outcome_moved_to_another_attempt_is_found(
    store: Any, turn: dict[str, int], raw: Raw
) -> None:
    # swap which attempts two outcomes conclude
    a2, a3 = turn["a2"], turn["a3"]
    raw("UPDATE chain SET attempt = NULL WHERE kind = 'outcome' AND attempt = ?", a2)
    raw("UPDATE chain SET attempt = ? WHERE kind = 'outcome' AND attempt = ?", a2, a3)
    raw(
        "UPDATE chain SET attempt = ? WHERE kind = 'outcome' AND attempt IS NULL AND turn_id = 'T'",
        a3,
    )
    assert found(store) == [("edited", 7), ("edited", 8)]


def test_a_deleted_outcome_is_found(store: Any, turn: dict[str, int], raw: Raw) -> None:
    # a row is its link: deleting one deletes both
    raw("DELETE FROM chain WHERE attempt = ?", turn["a1"])
    assert found(store) == [("deleted", 2)]


def test_content_blanked_in_place_is_found(store: Any, turn: dict[str, int], raw: Raw) -> None:
    raw(
        "UPDATE chain SET call_id = NULL, tool = NULL, arguments = NULL, resource = NULL "
        "WHERE seq = ?",
        turn["a3"],
    )
    assert found(store) == [("edited", 6)]


def test_a_deletion_with_the_chain_renumbered_is_found(
    store: Any, turn: dict[str, int], raw: Raw
) -> None:
    # remove the denied call entirely and close the gap in the positions
    raw("DELETE FROM chain WHERE attempt = ?", turn["d1"])
    raw("DELETE FROM chain WHERE seq = ?", turn["d1"])
    for pos in range(5, 10):
        raw("UPDATE chain SET pos = ? WHERE turn_id = 'T' AND pos = ?", pos - 2, pos)
    assert found(store) == [("deleted", 3)]


def test_an_inserted_row_without_a_link_is_found(
    store: Any, turn: dict[str, int], raw: Raw
) -> None:
    raw(
        "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, call_id, tool, started_at, "
        "arguments_digest) VALUES ('T', NULL, 'attempt', '', '', 'forged', 'files.read', '2026', "
        "'sha256:0')"
    )
    problems = verify_store(store).problems
    assert [(p.kind, p.turn_id, p.position) for p in problems] == [("inserted", "T", None)]


def test_a_forged_link_at_a_taken_position_is_found(
    store: Any, turn: dict[str, int], raw: Raw
) -> None:
    # a self-consistent forgery: correct hash, chained to the real link before it
    (prev_hash,) = raw("SELECT hash FROM chain WHERE turn_id = 'T' AND pos = 4")[0]
    _forge(raw, prev_hash, pos=5, renumber=False)
    assert found(store) == [("inserted", 5)]


def test_a_forged_link_with_the_chain_renumbered_is_found(
    store: Any, turn: dict[str, int], raw: Raw
) -> None:
    (prev_hash,) = raw("SELECT hash FROM chain WHERE turn_id = 'T' AND pos = 4")[0]
    _forge(raw, prev_hash, pos=5, renumber=True)
    assert found(store) == [("inserted", 5)]


def _forge(raw: Raw, prev_hash: str, *, pos: int, renumber: bool) -> None:
    values = [
        "T",
        "forged",
        "files.read",
        "2026-12-02T10:00:00.500000Z",
        "sha256:0",
        None,
        "allow",
        "/private/secret",
        None,
        "read",
        "[]",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,  # shadow (schema 5): null, left out of the hash
    ]
    h = link_hash("attempt", prev_hash, values)
    if renumber:
        for p in range(9, pos - 1, -1):
            raw("UPDATE chain SET pos = ? WHERE turn_id = 'T' AND pos = ?", p + 1, p)
    else:
        raw("DROP INDEX chain_place")  # as the owner of the database can
    raw(
        "INSERT INTO chain (turn_id, pos, kind, prev_hash, hash, call_id, tool, started_at, "
        "arguments_digest, arguments, effect, resource, namespace, action, rule_ids, "
        "catalog_hash, policy_hash, principal, tenant, diagnostics, identity, context) "
        "VALUES (?, ?, 'attempt', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        "T",
        pos,
        prev_hash,
        h,
        *values[1:-1],
    )


def _is_pg(raw: Raw) -> bool:
    try:
        raw("SELECT version()")
    except Exception:
        return False
    return True


def _drop_foreign_key(raw: Raw) -> None:
    """As the owner of the database can (SQLite's raw connection does not enforce it)."""
    if _is_pg(raw):
        raw("ALTER TABLE chain DROP CONSTRAINT chain_attempt_fkey")


def test_reordered_links_are_found(store: Any, turn: dict[str, int], raw: Raw) -> None:
    # swap the positions of the allowed a1 attempt and the denied d1 attempt
    raw("UPDATE chain SET pos = -3 WHERE turn_id = 'T' AND pos = 3")
    raw("UPDATE chain SET pos = 3 WHERE turn_id = 'T' AND pos = 1")
    raw("UPDATE chain SET pos = 1 WHERE turn_id = 'T' AND pos = -3")
    assert found(store) == [("reordered", 1), ("reordered", 3)]


def test_reordered_sequence_numbers_are_found(store: Any, turn: dict[str, int], raw: Raw) -> None:
    # make the denied call look as if it came first: swap the seqs of a1 and d1 everywhere
    a1, d1 = turn["a1"], turn["d1"]
    _drop_foreign_key(raw)
    for column, extra in (("attempt", " AND kind = 'outcome'"), ("seq", " AND kind = 'attempt'")):
        raw(f"UPDATE chain SET {column} = -7 WHERE {column} = ?{extra}", a1)
        raw(f"UPDATE chain SET {column} = ? WHERE {column} = ?{extra}", a1, d1)
        raw(f"UPDATE chain SET {column} = ? WHERE {column} = -7{extra}", d1)
    assert ("reordered", 3) in found(store)


def test_one_turn_at_a_time(store: Any, turn: dict[str, int], raw: Raw) -> None:
    raw("UPDATE chain SET tool = 'files.delete' WHERE seq = ?", turn["a2"])
    assert [p.kind for p in verify_store(store, "T").problems] == ["edited"]
    assert verify_store(store, "U").clean


def test_require_seal_reports_an_open_turn(store: Any, turn: dict[str, int]) -> None:
    store.record(
        attempt(
            "z",
            "open-turn",
            outcome=Outcome.DENIED,
            reason=ReasonCode.FORBIDDEN,
            finished_at="2026",
            duration_ms=0.1,
        )
    )
    assert verify_store(store).clean
    assert found(store, require_seal=True) == [("unsealed", None)]


def test_rows_after_the_seal_extend_the_chain(store: Any, turn: dict[str, int]) -> None:
    # a stdio bridge refuses and records a call after its turn closed
    store.record(
        attempt(
            "late",
            "T",
            outcome=Outcome.DENIED,
            reason=ReasonCode.TURN_CLOSED,
            finished_at="2026",
            duration_ms=0.1,
        )
    )
    assert [lk.pos for lk in store.iter_links("T")][-2:] == [10, 11]
    assert verify_store(store).clean


def test_a_second_seal_is_found(store: Any, turn: dict[str, int]) -> None:
    """A turn is sealed once: a second seal (two writers of the seal racing, as the close's
    given-up seal and the owed one did) is a finding, not a clean turn."""
    store.seal_turn("T", closed_at="2026-12-02T10:00:03.000000Z")
    assert found(store) == [("inserted", 10)]
    assert verify_store(store, "U").clean


# -- signed seals ----------------------------------------------------------------------------


@pytest.fixture
def signer() -> Signer:
    return Signer.generate()


def test_a_signed_seal_verifies_with_the_public_key(opener: Opener, signer: Signer) -> None:
    store = opener(signer=signer)
    write_turn(store)
    key, key_id = load_public_key(signer.public_pem())
    assert key_id == signer.key_id
    report = verify_store(store, public_keys={key_id: key})
    assert report.clean and report.signed == 1
    other = Signer.generate()
    okey, oid = load_public_key(other.public_pem())
    assert found(store, public_keys={oid: okey}) == [("signature", 9)]


def test_a_rewritten_chain_fails_its_signature(opener: Opener, signer: Signer, raw: Raw) -> None:
    """Someone who edits a row and recomputes every later hash cannot forge the signed seal."""
    store = opener(signer=signer)
    write_turn(store)
    key, key_id = load_public_key(signer.public_pem())
    raw("UPDATE chain SET resource = '/public/fine' WHERE call_id = 'd1'")
    _rehash(store, raw, "T")
    assert verify_store(store).clean  # the chain alone cannot tell: it was recomputed
    assert found(store, public_keys={key_id: key}) == [("signature", 9)]


def _rehash(store: Any, raw: Raw, turn_id: str) -> None:
    """Recompute every link hash of the turn from its (edited) content, as an attacker can."""
    links = list(store.iter_links(turn_id))
    prev = genesis(turn_id)
    new_hashes: dict[int, str] = {}
    for lk in links:
        values = list(lk.values)
        if lk.kind == "outcome":
            values[0] = next(
                new_hashes[o.pos] for o in links if o.kind == "attempt" and o.seq == lk.seq
            )
        h = link_hash(lk.kind, prev, values)
        new_hashes[lk.pos] = h
        raw(
            "UPDATE chain SET prev_hash = ?, hash = ? WHERE turn_id = ? AND pos = ?",
            prev,
            h,
            turn_id,
            lk.pos,
        )
        prev = h


def test_a_seal_signature_edited_in_place_is_found(
    opener: Opener, signer: Signer, raw: Raw
) -> None:
    store = opener(signer=signer)
    write_turn(store)
    key, key_id = load_public_key(signer.public_pem())
    raw("UPDATE chain SET signature = ? WHERE turn_id = 'T' AND kind = 'seal'", "A" * 88)
    assert found(store, public_keys={key_id: key}) == [("signature", 9)]


def test_verify_turn_on_plain_links_needs_no_store() -> None:
    """The verifier is a pure function of the links: an auditor can run it on an export."""
    assert verify_turn("empty", []).problems == []


def _forge_views(raw: Raw) -> None:
    """Redefine the views as someone with write access to the database could: the denied
    call shown as succeeded, call a3 left out. No row, link or checkpoint changes."""
    from sharedos.evidence.chain_sql import VIEWS

    denied_as_ok = (
        "CASE {p}outcome WHEN 'denied' THEN 'succeeded' ELSE {p}outcome END AS outcome",
        "CASE WHEN {p}outcome = 'denied' THEN NULL ELSE {p}reason END AS reason",
    )
    for name, prefix, where in (
        ("attempts", "", "WHERE kind = 'attempt'"),
        ("outcomes", "", None),
        ("evidence", "o.", "WHERE a.kind = 'attempt'"),
    ):
        (sql,) = [v for v in VIEWS if v.startswith(f"CREATE VIEW {name} ")]
        forged = sql.replace(f"{prefix}outcome AS outcome", denied_as_ok[0].format(p=prefix))
        forged = forged.replace(f"{prefix}reason AS reason", denied_as_ok[1].format(p=prefix))
        if where is not None:
            a = "a." if prefix else ""
            forged = forged.replace(where, f"{where} AND {a}call_id <> 'a3'")
        assert forged != sql
        raw(f"DROP VIEW {name}")
        raw(forged)


def test_readers_read_the_chain_not_views_redefined_behind_it(
    store: Any, turn: dict[str, int], raw: Raw
) -> None:
    # the views are statements kept in the database: redefined, they changed what list,
    # export and counts showed (a denied call shown as succeeded, a call hidden) while
    # verify, which reads the rows, still said clean
    _forge_views(raw)
    assert found(store) == []  # the rows themselves are untouched
    records = {r.call_id: r for r in store.iter_records("T")}
    assert set(records) == {"a1", "d1", "a2", "a3"}
    assert records["d1"].status == "denied" and str(records["d1"].reason) == "forbidden"
    assert [r.status for r in store.query(turn_id="T", outcome="denied")] == ["denied"]
    counts = store.counts("T")
    assert counts.total == 4 and counts.by_outcome == {"denied": 1, "succeeded": 3}
    assert dict(store.turns()) == {"T": 4, "U": 4}

"""Verify a whole store (``sharedos evidence verify``): its checkpoints, then every turn's chain.

Works on any store that offers ``iter_links(turn_id)`` (links with their
content, ordered by turn and position), and, for the store-wide checks,
``iter_checkpoints()`` and ``iter_coverage()`` (``sharedos.evidence.
checkpoint``): both SharedOS backends at schema 4. Memory holds one turn's
links, or one checkpoint's heads, at a time: the turns and every head the
checkpoints recorded are read as two streams in the same order and walked
side by side.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sharedos.evidence.chain import Link, Problem, TurnReport, verify_turn
from sharedos.evidence.checkpoint import Checkpoint, check_chain
from sharedos.evidence.store import EvidenceStoreError

#: (position, hash, checkpoint number): a turn's head as a checkpoint recorded it
Covered = tuple[int, str, int]

__all__ = [
    "StoreReport",
    "check_file",
    "coverage_by_turn",
    "iter_turn_reports",
    "verify_store",
]

#: the schema whose rows carry their links (``sharedos.evidence.chain_sql``)
CHAINED_SCHEMA = 4


@dataclass(slots=True)
class StoreReport:
    """Totals over the turns verified, and every problem found."""

    turns: int = 0
    links: int = 0
    sealed: int = 0
    signed: int = 0
    checkpoints: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when nothing was found."""
        return not self.problems

    def add(self, report: TurnReport) -> None:
        """Fold one turn's report in."""
        self.turns += 1
        self.links += report.links
        self.sealed += int(report.sealed)
        self.signed += int(report.signed_by is not None)
        self.problems.extend(report.problems)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready mapping."""
        return {
            "clean": self.clean,
            "turns": self.turns,
            "links": self.links,
            "sealed": self.sealed,
            "signed": self.signed,
            "checkpoints": self.checkpoints,
            "problems": [p.to_dict() for p in self.problems],
        }


class TurnNotFound(EvidenceStoreError):
    """A turn asked for by id has no record in the store: a finding when verifying it
    (the turn may have been deleted whole), not a store that could not be read."""


def _chained(store: Any) -> None:
    version = getattr(store, "schema_version", None)
    if not hasattr(store, "iter_links") or (version is not None and version < CHAINED_SCHEMA):
        raise EvidenceStoreError(
            f"this store's schema (version {version}) is older than the one this SharedOS "
            "verifies; run `sharedos evidence migrate` first (its chains are kept)",
            "io",
        )


def check_file(store: Any) -> list[Problem]:
    """The store's file checked as its database engine checks it (SQLite: ``PRAGMA
    integrity_check``), one ``damaged`` finding per line it reports.

    A verification reads the rows through the store's indexes; a file whose
    indexes no longer match its table (a byte changed in place, a row slipped
    into the table alone) hands it other rows than ``list`` and ``export`` read,
    so a clean walk of the chains would say nothing about them.
    """
    damage = getattr(store, "file_damage", None)
    if damage is None:
        return []
    return [
        Problem("damaged", "", None, None, f"the database file is damaged: {line}")
        for line in damage()
    ]


def check_checkpoints(
    store: Any,
    *,
    public_keys: Mapping[str, Any] | None = None,
    since: Checkpoint | None = None,
) -> tuple[list[Problem], int]:
    """The store's checkpoint chain checked (and ``since`` found in it); (problems, count)."""
    _chained(store)
    walk = getattr(store, "iter_checkpoints", None)
    if walk is None:
        if since is not None:
            raise EvidenceStoreError("this store keeps no checkpoints to verify against", "io")
        return [], 0
    return check_chain(
        walk(),
        # "": a store that names itself nowhere (its meta row removed, or null): every
        # checkpoint in it names a store, so that is a finding, not "nothing to compare"
        store_id=getattr(store, "store_id", None),
        public_keys=public_keys,
        since=since,
    )


def iter_turn_reports(
    store: Any,
    turn_id: str | None = None,
    *,
    public_keys: Mapping[str, Any] | None = None,
    require_seal: bool = False,
    checkpoints: bool = True,
) -> Iterator[TurnReport]:
    """One ``TurnReport`` per turn of ``store`` (or for ``turn_id`` only), in turn order.

    With ``checkpoints`` every turn must still hold, with its hash, every head a
    checkpoint recorded for it (not only the furthest: a later checkpoint does not
    vouch for what an earlier one covered), and a turn a checkpoint covered that is gone altogether
    is reported too (as a turn with no links).
    """
    _chained(store)
    coverage = coverage_by_turn(store, turn_id) if checkpoints else iter(())
    pending = next(coverage, None)
    current: str | None = None
    group: list[Link] = []

    def report(turn: str, links: list[Link]) -> Iterator[TurnReport]:
        nonlocal pending
        # covered turns that sort before this one have no links left: gone
        while pending is not None and pending[0] < turn:
            yield _gone(*pending)
            pending = next(coverage, None)
        covered = None
        if pending is not None and pending[0] == turn:
            covered = pending[1]
            pending = next(coverage, None)
        yield verify_turn(
            turn, links, public_keys=public_keys, require_seal=require_seal, covered=covered
        )

    for link in store.iter_links(turn_id):
        if link.turn_id != current:
            if current is not None:
                yield from report(current, group)
            current, group = link.turn_id, []
        group.append(link)
    if current is not None:
        yield from report(current, group)
    gone_at_end = False
    while pending is not None:
        gone_at_end = True
        yield _gone(*pending)
        pending = next(coverage, None)
    if turn_id is not None and current is None and not gone_at_end:
        raise TurnNotFound(f"no turn {turn_id!r} in this store", "io")


def coverage_by_turn(store: Any, turn_id: str | None = None) -> Iterator[tuple[str, list[Covered]]]:
    """(turn_id, every distinct head the checkpoints recorded for it, furthest last), by turn."""
    walk = getattr(store, "iter_coverage", None)
    if walk is None:
        return
    turn: str | None = None
    heads: list[Covered] = []
    seen: set[tuple[int, str]] = set()
    for t, pos, hash_, number in walk():
        if turn_id is not None and t != turn_id:
            continue
        if t != turn:
            if turn is not None:
                yield turn, heads
            turn, heads, seen = t, [], set()
        # one head once (two writers may have recorded the same one): its first checkpoint
        if (pos, hash_) not in seen:
            seen.add((pos, hash_))
            heads.append((pos, hash_, number))
    if turn is not None:
        yield turn, heads


def _gone(turn: str, heads: list[Covered]) -> TurnReport:
    pos, _hash, number = heads[-1]  # the furthest
    problem = Problem(
        "deleted",
        turn,
        None,
        None,
        f"the whole turn is gone: checkpoint {number} covered it up to position {pos}",
    )
    return TurnReport(turn_id=turn, links=0, head=None, problems=[problem])


def verify_store(
    store: Any,
    turn_id: str | None = None,
    *,
    public_keys: Mapping[str, Any] | None = None,
    require_seal: bool = False,
    since: Checkpoint | None = None,
) -> StoreReport:
    """Walk the store's checkpoints and every chain (or one turn's); total what was found."""
    total = StoreReport()
    total.problems.extend(check_file(store))
    problems, total.checkpoints = check_checkpoints(store, public_keys=public_keys, since=since)
    total.problems.extend(problems)
    for report in iter_turn_reports(
        store, turn_id, public_keys=public_keys, require_seal=require_seal
    ):
        total.add(report)
    return total

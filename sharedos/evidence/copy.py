"""``copy_store``: every turn of one store into another, with its chain intact, resumable.

From one host to a fleet (a SQLite file into the fleet's PostgreSQL) or back
(a PostgreSQL store into a file an auditor takes away). Rows are copied as
they are stored — positions, ``prev`` and ``hash``, every field — so each
turn's chain verifies on the target exactly as on the source; the target
numbers the rows itself (its ``seq``), and an outcome's attempt is mapped to
the attempt's new number.

Turn by turn, each turn in one transaction on the target: a copy that is
killed leaves every turn either whole or absent (never half-copied). Run it
again and it resumes: a turn the target already holds up to some position
is checked (the target's link at that position must carry the source's
hash, else the turn is a conflict and nothing of it is copied) and only the
rows after it are added. So a copy of a store that is still being written
picks up, on the next run, what was written since.

Rows outside every chain (what a migration found without a link, ``pos``
NULL) cannot be placed in a turn's chain and are not copied; they are
counted and reported. Checkpoints belong to the store they were taken in
and are not copied; the copy ends with a checkpoint of the target over
every head no checkpoint of the target covers yet (signed with the target's
key when it has one).

That checkpoint vouches for what was copied, so nothing is copied that the
source itself shows was changed: each turn is verified on the source first,
its chain and every head the source's checkpoints recorded for it (what
``sharedos evidence verify`` checks), and a turn with a finding is not
copied, but listed (a tail rewritten with its hashes recomputed verifies on
its own; only the source's checkpoints show it, and they stay behind). A
turn the source's checkpoints covered that is gone from it is listed too,
and so is a source whose checkpoint chain does not verify.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sharedos.evidence.appender import StaleHead
from sharedos.evidence.chain import verify_turn
from sharedos.evidence.chain_sql import CHAIN_COLUMNS
from sharedos.evidence.rows import link_from_row
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.verify import Covered, check_checkpoints, coverage_by_turn

__all__ = ["CopyResult", "copy_store"]

_POS = CHAIN_COLUMNS.index("pos") + 1  # rows are (seq, *CHAIN_COLUMNS)
_HASH = CHAIN_COLUMNS.index("hash") + 1
_KIND = CHAIN_COLUMNS.index("kind") + 1
_ATTEMPT = CHAIN_COLUMNS.index("attempt") + 1
_TURN = CHAIN_COLUMNS.index("turn_id") + 1


@dataclass(slots=True)
class CopyResult:
    """What a copy did."""

    turns: int = 0
    copied_turns: int = 0
    copied_rows: int = 0
    up_to_date: int = 0
    outside_chains: int = 0
    conflicts: list[str] = field(default_factory=list)
    #: turns not copied because a row holds a place SharedOS never writes ("turn (seq N)")
    unreadable: list[str] = field(default_factory=list)
    #: turns not copied because they do not verify on the source (chain or checkpoints)
    unverified: list[str] = field(default_factory=list)
    #: turns the source's checkpoints covered that are gone from it
    gone: list[str] = field(default_factory=list)
    #: findings about the source's own checkpoint chain
    checkpoint_problems: int = 0
    checkpoint: Any = None

    @property
    def clean(self) -> bool:
        """True when every turn of the source was copied or already there, as it verifies."""
        return not (
            self.conflicts
            or self.unreadable
            or self.unverified
            or self.gone
            or self.checkpoint_problems
        )

    def line(self, source: str, target: str) -> str:
        """One human line."""
        parts = [
            f"copied {self.copied_rows} row(s) of {self.copied_turns} turn(s) from {source} "
            f"to {target}",
            f"{self.up_to_date} turn(s) already there",
        ]
        if self.outside_chains:
            parts.append(f"{self.outside_chains} row(s) outside every chain not copied")
        if self.conflicts:
            parts.append(f"{len(self.conflicts)} turn(s) in conflict: {', '.join(self.conflicts)}")
        if self.unreadable:
            parts.append(
                f"{len(self.unreadable)} turn(s) not copied, a row's position or attempt is "
                f"not a number (changed outside SharedOS: verify the source): "
                f"{', '.join(self.unreadable)}"
            )
        if self.unverified:
            parts.append(
                f"{len(self.unverified)} turn(s) not copied, they do not verify on the source "
                f"(`sharedos evidence verify` it): {', '.join(self.unverified)}"
            )
        if self.gone:
            parts.append(
                f"{len(self.gone)} turn(s) the source's checkpoints covered are gone from it: "
                f"{', '.join(self.gone)}"
            )
        if self.checkpoint_problems:
            parts.append(
                f"the source's checkpoints do not verify ({self.checkpoint_problems} "
                "problem(s): `sharedos evidence verify` it)"
            )
        if self.checkpoint is not None:
            parts.append(f"checkpoint {self.checkpoint.number} of the target taken")
        return "; ".join(parts)


def _turns(rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    for turn, group in itertools.groupby(rows, key=lambda row: row[_TURN]):
        yield str(turn), list(group)


def copy_store(
    source: Any,
    target: Any,
    *,
    progress: Callable[[CopyResult], None] | None = None,
    every: int = 500,
) -> CopyResult:
    """Copy every turn of ``source`` into ``target`` (both schema-4 stores; see the module docstring).

    ``progress`` is called after every ``every`` turns. Raises
    ``EvidenceStoreError`` when a store fails; a turn in conflict is
    reported, not copied, and the copy goes on.
    """
    for store, what in ((source, "source"), (target, "target")):
        if not hasattr(store, "iter_chain_rows") or getattr(store, "schema_version", 4) < 4:
            raise EvidenceStoreError(
                f"the {what} store is not at schema 4; run `sharedos evidence migrate` on it",
                "io",
            )
    result = CopyResult()
    problems, _count = check_checkpoints(source)
    result.checkpoint_problems = len(problems)
    # the heads the source's checkpoints recorded, read before its rows (so every head
    # read is among the rows read, however the source is being written meanwhile)
    coverage = coverage_by_turn(source)
    pending = next(coverage, None)
    for turn_id, rows in _turns(source.iter_chain_rows()):
        result.turns += 1
        while pending is not None and pending[0] < turn_id:
            result.gone.append(pending[0])
            pending = next(coverage, None)
        covered = None
        if pending is not None and pending[0] == turn_id:
            covered = pending[1]
            pending = next(coverage, None)
        chained = [row for row in rows if row[_POS] is not None]
        result.outside_chains += len(rows) - len(chained)
        # a position or attempt that is not an integer (SQLite keeps what it is given):
        # the turn cannot be placed on the target as it is; said, not a TypeError
        bad = next((row for row in chained if not _placeable(row)), None)
        if bad is not None:
            result.unreadable.append(f"{turn_id} (seq {bad[0]})")
        elif chained and not _verifies(turn_id, chained, covered):
            result.unverified.append(turn_id)
        elif chained:
            _copy_turn(turn_id, chained, target, result)
        if progress is not None and result.turns % every == 0:
            progress(result)
    while pending is not None:
        result.gone.append(pending[0])
        pending = next(coverage, None)
    result.checkpoint = target.take_checkpoint(everything=True)
    return result


def _verifies(turn_id: str, rows: list[tuple[Any, ...]], covered: list[Covered] | None) -> bool:
    """True when the turn's chained rows verify as ``sharedos evidence verify`` verifies them
    on the source: the chain, and every head the source's checkpoints recorded for it."""
    attempts = {row[0]: row[_HASH] for row in rows if row[_KIND] == "attempt"}
    links = [
        link_from_row((*row, attempts.get(row[_ATTEMPT]) if row[_KIND] == "outcome" else None))
        for row in rows
    ]
    return not verify_turn(turn_id, links, covered=covered).problems


def _placeable(row: tuple[Any, ...]) -> bool:
    """True when the row's position (and an outcome's attempt) are integers, as written."""
    attempt = row[_ATTEMPT]
    return type(row[_POS]) is int and (attempt is None or type(attempt) is int)


def _copy_turn(turn_id: str, rows: list[tuple[Any, ...]], target: Any, result: CopyResult) -> None:
    lock = getattr(getattr(target, "appender", None), "lock", None)
    if lock is None:
        _copy_turn_locked(turn_id, rows, target, result)
        return
    with lock:  # the target's write connection is the appender's
        _copy_turn_locked(turn_id, rows, target, result)


def _copy_turn_locked(
    turn_id: str, rows: list[tuple[Any, ...]], target: Any, result: CopyResult
) -> None:
    for _ in range(3):  # a writer of the target moved the turn meanwhile: look again
        head = target.head(turn_id)
        start = 0
        if head is not None:
            pos, hash_ = head
            ours = next((row for row in rows if row[_POS] == pos), None)
            if ours is None or ours[_HASH] != hash_:
                result.conflicts.append(turn_id)  # the target's turn is another chain
                return
            start = pos + 1
        todo = [row for row in rows if row[_POS] >= start]
        if not todo:
            result.up_to_date += 1
            return
        attempts = _attempts_already_there(turn_id, rows, todo, target)
        try:
            target.import_rows(todo, attempts)
        except StaleHead:
            continue
        result.copied_turns += 1
        result.copied_rows += len(todo)
        return
    result.conflicts.append(turn_id)


def _attempts_already_there(
    turn_id: str, rows: list[tuple[Any, ...]], todo: list[tuple[Any, ...]], target: Any
) -> dict[int, int]:
    """source seq -> target seq of the attempts an outcome in ``todo`` concludes that an
    earlier copy already put on the target."""
    copying = {row[0] for row in todo if row[_KIND] == "attempt"}
    wanted = {
        int(row[_ATTEMPT])
        for row in todo
        if row[_KIND] == "outcome" and row[_ATTEMPT] is not None and row[_ATTEMPT] not in copying
    }
    mapping: dict[int, int] = {}
    if not wanted:
        return mapping
    pos_of = {int(row[0]): int(row[_POS]) for row in rows if row[_KIND] == "attempt"}
    for seq in wanted:
        pos = pos_of.get(seq)
        found = target.link_at(turn_id, pos) if pos is not None else None
        if found is not None and found[0] is not None:
            mapping[seq] = int(found[0])
    return mapping

"""Verify a whole store's chains (``sharedos evidence verify``), streaming turn by turn.

Works on any store that offers ``iter_links(turn_id)`` (links with their
content, ordered by turn and position) and ``unlinked(turn_id)`` (content
rows no link covers): both SharedOS backends at schema 3. Memory holds one
turn's links at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sharedos.evidence.chain import Link, Problem, TurnReport, verify_turn
from sharedos.evidence.store import EvidenceStoreError

__all__ = ["StoreReport", "verify_store"]


@dataclass(slots=True)
class StoreReport:
    """Totals over the turns verified, and every problem found."""

    turns: int = 0
    links: int = 0
    sealed: int = 0
    signed: int = 0
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
            "problems": [p.to_dict() for p in self.problems],
        }


def _chained(store: Any) -> None:
    version = getattr(store, "schema_version", None)
    if not hasattr(store, "iter_links") or (version is not None and version < 3):
        raise EvidenceStoreError(
            f"this store has no chain to verify (schema version {version}); "
            "run `sharedos evidence migrate` to chain it",
            "io",
        )


def iter_turn_reports(
    store: Any,
    turn_id: str | None = None,
    *,
    public_keys: Mapping[str, Any] | None = None,
    require_seal: bool = False,
) -> Iterator[TurnReport]:
    """One ``TurnReport`` per turn of ``store`` (or for ``turn_id`` only), in turn order."""
    _chained(store)
    extra: dict[str, list[Link]] = {}
    for link in store.unlinked(turn_id):
        extra.setdefault(link.turn_id, []).append(link)
    current: str | None = None
    group: list[Link] = []

    def report(turn: str, links: list[Link]) -> TurnReport:
        return verify_turn(
            turn,
            links + extra.pop(turn, []),
            public_keys=public_keys,
            require_seal=require_seal,
        )

    for link in store.iter_links(turn_id):
        if link.turn_id != current:
            if current is not None:
                yield report(current, group)
            current, group = link.turn_id, []
        group.append(link)
    if current is not None:
        yield report(current, group)
    for turn in sorted(extra):
        yield report(turn, [])
    if turn_id is not None and current is None and not extra:
        raise EvidenceStoreError(f"no turn {turn_id!r} in this store", "io")


def verify_store(
    store: Any,
    turn_id: str | None = None,
    *,
    public_keys: Mapping[str, Any] | None = None,
    require_seal: bool = False,
) -> StoreReport:
    """Walk every chain of ``store`` (or one turn's) and total what was found."""
    total = StoreReport()
    for report in iter_turn_reports(
        store, turn_id, public_keys=public_keys, require_seal=require_seal
    ):
        total.add(report)
    return total

"""``sharedos evidence``: read the evidence store (list, export, counts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from sharedos.evidence.record import EvidenceRecord
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.store import INTERRUPTED, EvidenceStoreError

_DB = click.option(
    "--db",
    "db",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Path of the SQLite evidence database.",
)
_TURN = click.option("--turn", "turn", default=None, help="Only this turn id.")


def _open(db: Path) -> SqliteEvidenceStore:
    # Reading must never create an empty database where the user mistyped a path.
    if not db.is_file():
        raise click.ClickException(f"no evidence database at {db}")
    try:
        # read-only: no probe, no migration, works on an archived or read-only copy
        return SqliteEvidenceStore(db, read_only=True)
    except EvidenceStoreError as exc:
        raise click.ClickException(str(exc)) from None


def _text_row(rec: EvidenceRecord) -> str:
    reason = str(rec.reason) if rec.reason is not None else "-"
    resource = rec.resource or "-"
    rules = ",".join(rec.rule_ids) or "-"
    return (
        f"{rec.seq:>6}  {rec.started_at}  {rec.turn_id}  {rec.call_id}  {rec.tool}  "
        f"{rec.status}  {reason}  {resource}  {rules}"
    )


def _emit(records: list[EvidenceRecord], fmt: str, out: TextIO) -> None:
    if fmt == "jsonl":
        for rec in records:
            out.write(json.dumps(rec.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    elif fmt == "json":
        json.dump([r.to_dict() for r in records], out, ensure_ascii=False, indent=2, sort_keys=True)
        out.write("\n")
    else:
        out.write("   seq  started_at  turn  call_id  tool  status  reason  resource  rules\n")
        for rec in records:
            out.write(_text_row(rec) + "\n")


@click.group()
def evidence() -> None:
    """Read the durable record of tool-call attempts."""


@evidence.command("list")
@_DB
@_TURN
@click.option(
    "--outcome",
    type=click.Choice(["succeeded", "denied", "failed", "cancelled", INTERRUPTED]),
    help="Only this status (interrupted: an attempt whose outcome was never written).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "jsonl"]), default="text")
def list_cmd(db: Path, turn: str | None, outcome: str | None, limit: int | None, fmt: str) -> None:
    """List attempts in sequence order; an attempt with no outcome shows as ``interrupted``."""
    with _open(db) as store:
        _emit(store.query(turn, outcome=outcome, limit=limit), fmt, sys.stdout)


@evidence.command("export")
@_DB
@_TURN
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json"]), default="jsonl")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here instead of standard output.",
)
def export_cmd(db: Path, turn: str | None, fmt: str, output: Path | None) -> None:
    """Export attempts as JSON Lines (one record per line) or one JSON array."""
    with _open(db) as store:
        records = store.query(turn)
    if output is None:
        _emit(records, fmt, sys.stdout)
    else:
        with output.open("w", encoding="utf-8") as fh:
            _emit(records, fmt, fh)
        click.echo(f"exported {len(records)} records to {output}", err=True)


@evidence.command("counts")
@_DB
@_TURN
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def counts_cmd(db: Path, turn: str | None, fmt: str) -> None:
    """Counts by status and by reason; the denial rate is denied/total.

    ``interrupted`` counts attempts whose outcome was never written (the host
    stopped between the attempt and its outcome): they are attempts, never
    successes.
    """
    with _open(db) as store:
        counts = store.counts(turn)
    if fmt == "json":
        payload: dict[str, Any] = counts.to_dict()
        payload["turn_id"] = turn
        click.echo(json.dumps(payload, sort_keys=True))
        return
    scope = f"turn {turn}" if turn else "all turns"
    pct = f"{counts.denial_rate * 100:.1f}%"
    click.echo(f"{scope}: {counts.total} attempts, denied {counts.denied}/{counts.total} ({pct})")
    click.echo(f"interrupted (attempt recorded, outcome never written): {counts.interrupted}")
    click.echo("by status:")
    for name, n in sorted(counts.by_outcome.items()):
        click.echo(f"  {name:<12} {n}")
    click.echo("by reason:")
    for name, n in sorted(counts.by_reason.items()):
        click.echo(f"  {name:<22} {n}")


@evidence.command("turns")
@_DB
def turns_cmd(db: Path) -> None:
    """Turn ids with their number of attempts, oldest first."""
    with _open(db) as store:
        for turn, n in store.turns():
            click.echo(f"{turn}\t{n}")

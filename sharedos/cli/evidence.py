"""``sharedos evidence``: read, verify and migrate the evidence store (SQLite file or PostgreSQL).

``--db`` is a path (or ``sqlite:///path``) or a ``postgresql://`` URL
(``sharedos.evidence.url``). Readers open the store read-only: nothing is
created, probed or migrated. ``verify`` exits 1 when it finds anything,
``migrate`` is the one command that changes a store's schema.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from sharedos.evidence.record import EvidenceRecord
from sharedos.evidence.store import INTERRUPTED, EvidenceStoreError

_DB = click.option(
    "--db",
    "db",
    required=True,
    metavar="PATH|URL",
    help="The evidence store: a SQLite file path (or sqlite:///path) or a postgresql:// URL.",
)
_TURN = click.option("--turn", "turn", default=None, help="Only this turn id.")


def _open(db: str) -> Any:
    from sharedos.evidence.url import open_store

    try:
        # read-only: no probe, no migration, nothing created where a path was mistyped
        return open_store(db, read_only=True)
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
    from sharedos.evidence.export import json_text

    if fmt == "jsonl":
        for rec in records:
            out.write(json_text(rec.to_dict()) + "\n")
    elif fmt == "json":
        out.write(json_text([r.to_dict() for r in records], indent=2))
        out.write("\n")
    else:
        out.write("   seq  started_at  turn  call_id  tool  status  reason  resource  rules\n")
        for rec in records:
            # a lone surrogate (a tool name or resource JSON could carry) is shown escaped
            out.write(_text_row(rec).encode("utf-8", "backslashreplace").decode("utf-8") + "\n")


@click.group()
def evidence() -> None:
    """Read, verify and migrate the durable record of tool-call attempts."""


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
def list_cmd(db: str, turn: str | None, outcome: str | None, limit: int | None, fmt: str) -> None:
    """List attempts in sequence order; an attempt with no outcome shows as ``interrupted``."""
    with _open(db) as store:
        _emit(store.query(turn, outcome=outcome, limit=limit), fmt, sys.stdout)


def _private_output(path: Path) -> TextIO:
    """``path`` opened for writing, created 0600 (evidence holds every turn's arguments)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    return os.fdopen(fd, "w", encoding="utf-8", newline="")


@evidence.command("export")
@_DB
@_TURN
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "csv", "json"]),
    default="jsonl",
    help="jsonl and csv stream (any size); json is one array (loads everything).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here (created 0600) instead of standard output.",
)
def export_cmd(db: str, turn: str | None, fmt: str, output: Path | None) -> None:
    """Export attempts as JSON Lines, CSV (both streamed) or one JSON array."""
    from sharedos.evidence.export import iter_records, write_csv, write_jsonl

    with _open(db) as store:
        out = _private_output(output) if output is not None else sys.stdout
        try:
            if fmt == "json":
                records = list(iter_records(store, turn))
                _emit(records, fmt, out)
                n = len(records)
            elif fmt == "csv":
                n = write_csv(iter_records(store, turn), out)
            else:
                n = write_jsonl(iter_records(store, turn), out)
        except EvidenceStoreError as exc:
            raise click.ClickException(str(exc)) from None
        finally:
            if output is not None:
                out.close()
    if output is not None:
        click.echo(f"exported {n} records to {output}", err=True)


@evidence.command("counts")
@_DB
@_TURN
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def counts_cmd(db: str, turn: str | None, fmt: str) -> None:
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
def turns_cmd(db: str) -> None:
    """Turn ids with their number of attempts, oldest first."""
    with _open(db) as store:
        for turn, n in store.turns():
            click.echo(f"{turn}\t{n}")


@evidence.command("verify")
@_DB
@_TURN
@click.option(
    "--key",
    "keys",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A trusted ed25519 public key (PEM); with any, every seal must be signed by one.",
)
@click.option("--require-seal", is_flag=True, help="Report every turn that has no seal.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def verify_cmd(
    db: str, turn: str | None, keys: tuple[Path, ...], require_seal: bool, fmt: str
) -> None:
    """Walk every turn's hash chain; report edited, deleted, inserted or reordered records.

    Exit 0 when the store is clean, 1 when anything was found (each finding
    with its turn and position), 2 for a usage error.
    """
    from sharedos.evidence.chain import load_public_key
    from sharedos.evidence.verify import iter_turn_reports

    public: dict[str, Any] = {}
    for path in keys:
        try:
            key, key_id = load_public_key(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise click.UsageError(f"{path}: {exc}") from None
        public[key_id] = key
    from sharedos.evidence.verify import StoreReport

    total = StoreReport()
    with _open(db) as store:
        try:
            for report in iter_turn_reports(
                store, turn, public_keys=public or None, require_seal=require_seal
            ):
                total.add(report)
                if fmt == "text":
                    for problem in report.problems:
                        click.echo(problem.line())
        except EvidenceStoreError as exc:
            raise click.ClickException(str(exc)) from None
    if fmt == "json":
        click.echo(json.dumps(total.to_dict(), sort_keys=True))
    else:
        signed = f", {total.signed} signed" if public else ""
        verdict = "clean" if total.clean else f"{len(total.problems)} problem(s)"
        click.echo(
            f"verified {total.turns} turn(s), {total.links} link(s): {verdict} "
            f"({total.sealed} sealed{signed})"
        )
    if not total.clean:
        raise SystemExit(1)


@evidence.command("migrate")
@_DB
def migrate_cmd(db: str) -> None:
    """Bring the store's schema to this SharedOS's version (each step one transaction)."""
    from sharedos.evidence.migrate import migrate_store

    try:
        result, shown = migrate_store(db)
    except EvidenceStoreError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(result.line(shown))

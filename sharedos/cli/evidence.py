"""``sharedos evidence``: read, verify, checkpoint, copy and migrate the evidence store.

``--db`` is a path (or ``sqlite:///path``), a ``postgresql://`` URL or a
libpq key=value string (``sharedos.evidence.url``). Readers open the store
read-only: nothing is created, probed or migrated. ``verify`` exits 1 when
it finds anything; ``migrate`` is the one command that changes a store's
schema; ``checkpoint --take`` and ``copy`` write (``copy`` only to its
``--to`` store).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO, TypeVar

import click

from sharedos import textfile
from sharedos.atomicfile import replacing
from sharedos.cli._help import with_short_help
from sharedos.cli.policy._common import guarded
from sharedos.evidence.record import EvidenceRecord
from sharedos.evidence.store import INTERRUPTED, EvidenceStoreError
from sharedos.terminal import unambiguous

_DB = click.option(
    "--db",
    "db",
    required=True,
    metavar="PATH|URL",
    help="The evidence store: a SQLite file path (or sqlite:///path) or a postgresql:// URL.",
)
_TURN = click.option("--turn", "turn", default=None, help="Only this turn id.")


class _Unusable(click.ClickException):
    """A store that could not be opened or read, for a command whose exit 1 means "found
    something" (``verify``): exit 2, as ``shadow`` and ``replay`` say of such a store."""

    exit_code = 2


def _open(db: str, *, unusable: type[click.ClickException] = click.ClickException) -> Any:
    from sharedos.evidence.url import open_store

    try:
        # read-only: no probe, no migration, nothing created where a path was mistyped
        return open_store(db, read_only=True)
    except EvidenceStoreError as exc:
        raise unusable(str(exc)) from None


def _text_row(rec: EvidenceRecord) -> str:
    reason = str(rec.reason) if rec.reason is not None else "-"
    resource = rec.resource or "-"
    rules = ",".join(rec.rule_ids) or "-"
    served = rec.served_by or "-"
    return (
        f"{rec.seq:>6}  {rec.started_at}  {rec.turn_id}  {rec.call_id}  {rec.tool}  "
        f"{rec.status}  {reason}  {resource}  {rules}  {served}"
    )


def _emit(records: Iterable[EvidenceRecord], fmt: str, out: TextIO) -> None:
    from sharedos.evidence.export import json_text

    if fmt == "jsonl":
        for rec in records:
            out.write(json_text(rec.to_dict()) + "\n")
    elif fmt == "json":
        out.write(json_text([r.to_dict() for r in records], indent=2))
        out.write("\n")
    else:
        out.write(
            "   seq  started_at  turn  call_id  tool  status  reason  resource  rules  served_by\n"
        )
        for rec in records:
            # what a call carried (a tool name from the wire, its arguments) is shown
            # spelled out: an escape sequence, a carriage return, a bidi override or a
            # lone surrogate must not rewrite or reorder the operator's terminal
            out.write(unambiguous(_text_row(rec)) + "\n")


#: a write the file system refused for want of room (a full disk, a quota, RLIMIT_FSIZE)
_NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})


def _cannot_write(exc: OSError, where: str) -> click.ClickException:
    """One line for an output that could not be written (never a traceback)."""
    return click.ClickException(f"cannot write {where}: {exc.strerror or exc}")


class _EvidenceGroup(click.Group):
    """``sharedos evidence``: an output the disk has no room for, or a store that fails while
    a command reads it (a damaged file, a server gone), is one line, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EvidenceStoreError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            from sharedos.cli._output import give_up_on_stdout, stdout_refused

            if stdout_refused(exc):  # ``> /dev/full``: exit 6, as every command does
                raise give_up_on_stdout(exc) from None
            if exc.errno not in _NO_ROOM:
                raise
            raise _cannot_write(exc, "the output") from None


@click.group(cls=_EvidenceGroup)
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
        streaming = getattr(store, "iter_records", None)
        if fmt == "json" or streaming is None:  # one JSON array: built whole
            records: Iterable[EvidenceRecord] = store.query(turn, outcome=outcome, limit=limit)
        else:  # a line per record: streamed, so memory does not grow with the store
            records = streaming(turn, outcome=outcome, limit=limit)
        _emit(records, fmt, sys.stdout)


def _not_the_store(path: Path, db: str) -> None:
    """Refuse an output that is one of the store's own files (the database, its ``-wal``,
    ``-shm`` or ``-journal``): renamed over it, the export or checkpoint replaced the
    evidence it was read from, and a host writing it found its store gone."""
    from sharedos.evidence.url import sqlite_files

    out = os.path.realpath(path)
    try:
        out_id: tuple[int, int] | None = (os.stat(out).st_dev, os.stat(out).st_ino)
    except OSError:
        out_id = None
    for name in sqlite_files(db):
        same = os.path.realpath(name) == out
        if not same and out_id is not None:
            with contextlib.suppress(OSError):
                st = os.stat(name)
                same = (st.st_dev, st.st_ino) == out_id
        if same:
            raise click.ClickException(
                f"cannot write {path}: it is the evidence store's own file {name}; "
                "nothing was written"
            )


@contextlib.contextmanager
def _private_output(path: Path, db: str) -> Iterator[TextIO]:
    """``path`` written whole or not at all, created 0600 (evidence holds every turn's arguments).

    A regular file (or a new one) is written to a temporary file beside it and
    renamed over it only once everything is written and flushed to disk: a full
    disk or a size limit mid-export leaves no cut file that reads like a
    complete one (and keeps what was at ``path``). Anything else (a pipe,
    ``/dev/stdout``) is written in place.
    """
    _not_the_store(path, db)
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot_write(exc, str(path)) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            with open(path, "w", encoding="utf-8", newline="") as direct:
                yield direct
        except OSError as exc:
            raise _cannot_write(exc, str(path)) from None
        return
    try:
        with replacing(path, mode=0o600, exact_mode=True, durable=True) as raw:
            out = io.TextIOWrapper(raw, encoding="utf-8", newline="")
            yield out
            out.flush()
            out.detach()  # ``replacing`` closes the file itself
    except OSError as exc:
        kept = "; nothing was written there" if st is None else f"; {path} was left as it was"
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}{kept}") from None


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

    with (
        _open(db) as store,
        _private_output(output, db)
        if output is not None
        else contextlib.nullcontext(sys.stdout) as out,
    ):
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
    if output is not None:
        click.echo(unambiguous(f"exported {n} records to {output}"), err=True)


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
    # a store's rows are what a tamperer wrote: what they hold is spelled out (``unambiguous``)
    scope = f"turn {unambiguous(turn)}" if turn else "all turns"
    pct = f"{counts.denial_rate * 100:.1f}%"
    click.echo(f"{scope}: {counts.total} attempts, denied {counts.denied}/{counts.total} ({pct})")
    click.echo(f"interrupted (attempt recorded, outcome never written): {counts.interrupted}")
    click.echo("by status:")
    for name, n in sorted(counts.by_outcome.items()):
        click.echo(f"  {unambiguous(name):<12} {n}")
    click.echo("by reason:")
    for name, n in sorted(counts.by_reason.items()):
        click.echo(f"  {unambiguous(name):<22} {n}")


@evidence.command("turns")
@_DB
def turns_cmd(db: str) -> None:
    """Turn ids with their number of attempts, oldest first."""
    with _open(db) as store:
        for turn, n in store.turns():
            # a turn id read from a store (a tampered one) cannot move the cursor or
            # reorder the line: spelled out like every record ``evidence list`` shows
            click.echo(f"{unambiguous(turn)}\t{n}")


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
@click.option(
    "--require-seal",
    is_flag=True,
    help="Report every turn that has no seal (implied by --key).",
)
@click.option(
    "--since",
    "since",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="A checkpoint exported earlier (sharedos evidence checkpoint): the store must still "
    "hold it, and everything it covered.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def verify_cmd(
    db: str,
    turn: str | None,
    keys: tuple[Path, ...],
    require_seal: bool,
    since: Path | None,
    fmt: str,
) -> None:
    """Walk the store's checkpoints and every turn's hash chain; report what was changed.

    Finds edited, deleted, inserted or reordered records; with checkpoints, a
    deleted turn or a cut tail committed before one; with --key, seals and
    checkpoints not signed by a trusted key and turns without a seal. Exit 0
    when the store is clean, 1 when anything was found (each finding with its
    turn and position, or its checkpoint), 2 for a usage error or a store that
    could not be opened or read (nothing found in it).
    """
    from sharedos.evidence.chain import load_public_key
    from sharedos.evidence.checkpoint import Checkpoint
    from sharedos.evidence.verify import (
        StoreReport,
        TurnNotFound,
        check_checkpoints,
        check_file,
        iter_turn_reports,
    )

    public: dict[str, Any] = {}
    for path in keys:
        try:
            key, key_id = load_public_key(textfile.read_trusted(path))
        except (OSError, ValueError) as exc:
            raise click.UsageError(f"{path}: {exc}") from None
        public[key_id] = key
    anchor = None
    if since is not None:
        try:
            anchor = Checkpoint.load(textfile.read_text(since))
        except (OSError, ValueError) as exc:
            raise click.UsageError(f"{since}: {exc}") from None
    total = StoreReport()
    with _open(db, unusable=_Unusable) as store:
        try:
            problems = check_file(store)
            found, total.checkpoints = check_checkpoints(
                store, public_keys=public or None, since=anchor
            )
            problems += found
            total.problems.extend(problems)
            if fmt == "text":
                for problem in problems:
                    # a finding names what the store holds (a tampered turn id): spelled
                    # out, so it cannot erase, conceal or rewrite the lines around it
                    click.echo(unambiguous(problem.line()))
            for report in iter_turn_reports(
                store, turn, public_keys=public or None, require_seal=require_seal
            ):
                total.add(report)
                if fmt == "text":
                    for problem in report.problems:
                        click.echo(unambiguous(problem.line()))
        except EvidenceStoreError as exc:
            # what was found stands (exit 1), and so does a turn asked for that the store
            # has no record of (deleted whole?); a store that failed before anything was
            # found established nothing, and is no finding (exit 2)
            found_something = bool(total.problems) or isinstance(exc, TurnNotFound)
            if found_something and fmt == "json":
                # the report is still the answer, with what stopped the walk: a script
                # reads what was found (and that the store is not clean) as JSON
                partial = {**total.to_dict(), "clean": False, "error": str(exc)}
                click.echo(json.dumps(partial, sort_keys=True))
            raise (click.ClickException if found_something else _Unusable)(str(exc)) from None
    if fmt == "json":
        click.echo(json.dumps(total.to_dict(), sort_keys=True))
    else:
        signed = f", {total.signed} signed" if public else ""
        verdict = "clean" if total.clean else f"{len(total.problems)} problem(s)"
        anchored = f", since checkpoint {anchor.number}" if anchor is not None else ""
        click.echo(
            f"verified {total.turns} turn(s), {total.links} link(s), "
            f"{total.checkpoints} checkpoint(s){anchored}: {verdict} "
            f"({total.sealed} sealed{signed})"
        )
    if not total.clean:
        raise SystemExit(1)


def _signer(path: Path | None) -> Any:
    if path is None:
        return None
    from sharedos.evidence.chain import Signer

    try:
        return Signer.from_pem(textfile.read_private(path))
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"{path}: {exc}") from None


_SIGN_KEY = click.option(
    "--sign-key",
    "sign_key",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="An ed25519 private key (PKCS#8 PEM) to sign the checkpoint with.",
)


@evidence.command("checkpoint")
@_DB
@click.option(
    "--take",
    is_flag=True,
    help="Take a checkpoint now over every turn head no checkpoint covers yet (over none "
    "when every head is covered; writes to the store), then export that one.",
)
@_SIGN_KEY
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the checkpoint here instead of standard output.",
)
def checkpoint_cmd(db: str, take: bool, sign_key: Path | None, output: Path | None) -> None:
    """Export the store's latest checkpoint (a signed head over everything committed before it).

    Keep the file elsewhere; later, `sharedos evidence verify --since FILE`
    shows whether anything committed before it was changed or removed. The
    store's checkpoint chain is checked first: a store whose checkpoints do
    not verify exports nothing (exit 1).
    """
    from sharedos.evidence.verify import check_checkpoints

    signer = _signer(sign_key)
    taken = None
    if take:
        from sharedos.evidence.url import open_store

        try:
            with open_store(db, signer=signer, must_exist=True) as store:
                # always one, over no heads when the hosts' checkpoints cover them all: what
                # is exported is the checkpoint taken now (signed with --sign-key, chained
                # after every one before it), never another writer's latest
                taken = store.take_checkpoint(everything=True, always=True)
        except EvidenceStoreError as exc:
            raise click.ClickException(str(exc)) from None
    elif signer is not None:
        raise click.UsageError("--sign-key signs a checkpoint taken now: give --take too")
    latest = None
    with _open(db) as store:
        try:
            problems, _n = check_checkpoints(store)
            for cp, _heads in getattr(store, "iter_checkpoints", lambda: ())():
                latest = cp
        except EvidenceStoreError as exc:
            raise click.ClickException(str(exc)) from None
    if taken is not None:
        latest = taken
    if problems:
        for problem in problems:
            click.echo(unambiguous(problem.line()), err=True)
        raise click.ClickException("the store's checkpoints do not verify; nothing exported")
    if latest is None:
        raise click.ClickException(
            "the store has no checkpoint yet (hosts write one every checkpoint_interval_s; "
            "`--take` takes one now)"
        )
    text = json.dumps(latest.to_dict(), indent=1, sort_keys=True) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        with _private_output(output, db) as out:
            out.write(text)
    # a checkpoint taken (and signed) now is signed by the key given; another's signature
    # is only what the store holds, and is not checked here
    click.echo(unambiguous(latest.line(signature_checked=taken is not None)), err=True)


@evidence.command("copy")
@click.option("--from", "source", required=True, metavar="PATH|URL", help="The store to copy.")
@click.option("--to", "target", required=True, metavar="PATH|URL", help="The store to copy into.")
@_SIGN_KEY
def copy_cmd(source: str, target: str, sign_key: Path | None) -> None:
    """Copy every turn, its chain intact, from one store into another (SQLite <-> PostgreSQL).

    Each turn is copied in one transaction; run it again after an
    interruption and it resumes (turns already there are checked, not
    copied twice; a turn that grew on the source gets its new rows). Ends
    with a checkpoint of the target (signed with --sign-key). Each turn is
    verified on the source first (its chain and the source's checkpoints). Exit 1
    when a turn of the target is another chain than the source's, or a turn
    does not verify on the source (neither copied), or the source's checkpoints
    show a turn gone or do not verify themselves.
    """
    from sharedos.evidence.copy import copy_store
    from sharedos.evidence.url import open_store, parse_store_url

    signer = _signer(sign_key)
    try:
        shown_from = parse_store_url(source).shown
        shown_to = parse_store_url(target).shown
        with open_store(source, read_only=True) as src, open_store(target, signer=signer) as dst:
            result = copy_store(
                src,
                dst,
                progress=lambda r: click.echo(
                    f"... {r.turns} turn(s) read, {r.copied_rows} row(s) copied", err=True
                ),
            )
    except (EvidenceStoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    # the turns it names (in conflict, not verifying, gone) are what the source holds: a
    # tampered turn id is spelled out, as verify spells it, never printed over the line
    click.echo(unambiguous(result.line(shown_from, shown_to)))
    if not result.clean:
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
    click.echo(unambiguous(result.line(shown)))


#: ``--kind`` spellings -> the report's kinds (as ``sharedos-policy diff``)
_KINDS = {"widened": "widened", "narrowed": "narrowed", "reason-changed": "reason changed"}
_EXIT_USAGE = 2
_F = TypeVar("_F", bound=Callable[..., Any])


def _report_options(kinds: Iterable[str], what: str) -> Callable[[_F], _F]:
    """``--kind`` (one of ``kinds``, repeatable), ``--examples`` and ``--format``: the
    options ``replay`` and ``shadow`` share, in that order in ``--help``."""

    def apply(command: _F) -> _F:
        command = click.option(
            "--format", "fmt", type=click.Choice(["text", "json"]), default="text"
        )(command)
        command = click.option(
            "--examples",
            default=3,
            show_default=True,
            type=click.IntRange(min=0),
            help="Attempts shown per group (0: every one).",
        )(command)
        return click.option(
            "--kind",
            "kinds",
            multiple=True,
            type=click.Choice(sorted(kinds)),
            help=f"Report only this kind of {what} (repeatable; default: every kind).",
        )(command)

    return apply


def _moment(value: str | None, option: str) -> Any:
    """An ISO-8601 time with an offset (``--since``/``--until``), or a usage error."""
    if value is None:
        return None
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"not an ISO-8601 time: {value!r}", param_hint=option) from None
    if moment.tzinfo is None:
        raise click.BadParameter(
            f"{value!r} has no offset (write Z for UTC, or +01:00)", param_hint=option
        )
    return moment


def _refuse_unknown_turn(store: Any, turn: str | None, db: str) -> None:
    """Exit 2 when ``--turn`` names a turn the store has no record of: a mistyped id
    would otherwise compare nothing and pass as "no change"."""
    head = getattr(store, "head", None)
    if turn is None or head is None:
        return
    try:
        missing = head(turn) is None
    except EvidenceStoreError:  # a store too old to chain: its attempts are counted, skipped
        return
    if missing:
        click.echo(unambiguous(f"error: no turn {turn!r} in {_shown(db)}"), err=True)
        raise SystemExit(_EXIT_USAGE)


def _in_window(records: Any, since: Any, until: Any) -> Any:
    """The records started at or after ``since`` and before ``until``."""
    from datetime import datetime

    for record in records:
        if since is not None or until is not None:
            try:
                started = datetime.fromisoformat(record.started_at)
            except ValueError:
                continue
            if (since is not None and started < since) or (until is not None and started >= until):
                continue
        yield record


@evidence.command("replay")
@_DB
@click.option(
    "--policy",
    "policy_path",
    required=True,
    metavar="NEW",
    help="The candidate policy: a .sos file, a directory of them, or a compiled bundle.",
)
@click.option(
    "--with",
    "also",
    multiple=True,
    type=click.Path(),
    help="Also compile these .sos files or directories with NEW (and OLD) when given as "
    "sources, e.g. the run policies; a bundle takes none.",
)
@click.option(
    "--old",
    "old_path",
    default=None,
    metavar="OLD",
    help="The policy the attempts were decided under (sources or bundle): its rules are "
    "named as diff names them, and attempts it decided are checked against it.",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Load a bundle only if this public key (PEM) signed it; repeatable.",
)
@click.option(
    "--run-policy",
    "run",
    metavar="RUN",
    default=None,
    help="Decide every attempt as a run under this toolpolicy of NEW.",
)
@_TURN
@click.option("--since", default=None, metavar="TIME", help="Only attempts started at or after.")
@click.option("--until", default=None, metavar="TIME", help="Only attempts started before.")
@click.option(
    "--time-zone",
    "time_zone",
    default="UTC",
    show_default=True,
    help="The zone of context.now for attempts recorded without their time of decision.",
)
@_report_options(_KINDS, "change")
@guarded
def replay_cmd(
    db: str,
    policy_path: str,
    also: tuple[str, ...],
    old_path: str | None,
    trusted_keys: tuple[str, ...],
    run: str | None,
    turn: str | None,
    since: str | None,
    until: str | None,
    time_zone: str,
    kinds: tuple[str, ...],
    examples: int,
    fmt: str,
) -> None:
    """Decide recorded attempts again under NEW; report the decisions that would change.

    \b
    Each attempt the kernel decided is decided again with the context recorded
    for it (principal, tenant, roles, attributes, and the time of the call) and
    its recorded arguments, and compared with the decision that was enforced;
    changes are grouped like `sharedos-policy diff` groups them (widened,
    narrowed, reason changed). Attempts recorded before schema 4 (no decision
    context) and attempts refused before any decision (tool_unavailable,
    not_in_run_policy, invalid_arguments, ...) are counted, not replayed
    (replayed all the same: tool_unavailable for a tool the host has that no
    requirement declared, which NEW may declare; not_in_turn_catalog, as the
    catalogue NEW lists may hold the tool; invalid_arguments, which NEW may
    refuse first, not listing the tool; with --run-policy,
    not_in_run_policy, as NEW's toolpolicy may now manage the tool).
    Exit 0: no recorded decision would change (in the kinds --kind looks
    for; those that would in the others are counted). 1: some would. 2: usage error
    (a store that cannot be read, a policy that does not compile or load, a
    --turn the store has no record of).
    """
    from sharedos.cli.policy._diff import load_side, refuse_unused_with
    from sharedos.evidence.approvals import approved_calls
    from sharedos.evidence.export import iter_records
    from sharedos.evidence.replay import replay
    from sharedos.policy.clock import ClockError, zone

    try:
        zone(time_zone)
    except ClockError as exc:
        raise click.BadParameter(str(exc), param_hint="--time-zone") from None
    start, end = _moment(since, "--since"), _moment(until, "--until")
    refuse_unused_with(also, [policy_path, old_path])
    new = load_side(policy_path, also, trusted_keys, "NEW")
    old = load_side(old_path, also, trusted_keys, "OLD") if old_path is not None else None
    if run is not None and run not in new.tool_policies:
        known = ", ".join(sorted(new.tool_policies)) or "none"
        raise click.BadParameter(
            f"NEW compiles no toolpolicy {run!r} (declared: {known})", param_hint="--run-policy"
        )
    from sharedos.evidence.url import open_store

    try:
        store = open_store(db, read_only=True)
    except EvidenceStoreError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(_EXIT_USAGE) from None
    with store:
        _refuse_unknown_turn(store, turn, db)
        try:
            report = replay(
                _in_window(iter_records(store, turn), start, end),
                new,
                old=old,
                approved=approved_calls(store, turn),
                time_zone=time_zone,
                run_policy=run,
                kinds=[_KINDS[k] for k in kinds] or None,  # type: ignore[misc]
                max_examples=examples,
            )
        except EvidenceStoreError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(_EXIT_USAGE) from None
    sides: dict[str, Any] = {"policy": {"path": policy_path, "bundle_hash": new.bundle_hash}}
    if old is not None:
        sides["old"] = {"path": old_path, "bundle_hash": old.bundle_hash}
    if fmt == "json":
        from sharedos.evidence.export import json_text

        doc = {"db": _shown(db), **sides, "run_policy": run, **report.to_dict()}
        click.echo(json_text(doc, indent=2))  # a recorded call may hold a lone surrogate
    else:
        click.echo(unambiguous(f"evidence: {_shown(db)}"))
        click.echo(unambiguous(f"new: {policy_path} ({new.bundle_hash[:12]})"))
        if old is not None:
            click.echo(unambiguous(f"old: {old_path} ({old.bundle_hash[:12]})"))
        if run is not None:
            click.echo(unambiguous(f"run policy: {run}"))
        click.echo(_shown_text(report.render()))
    raise SystemExit(1 if report.changed else 0)


def _shown_text(text: str) -> str:
    """A text report as the terminal shows it: each line spelled unambiguously (recorded
    arguments, tool names and resources may hold escapes, bidi controls, separators)."""
    return "\n".join(unambiguous(line) for line in text.split("\n"))


_SHADOW_KINDS = {
    "would-allow": "would allow",
    "would-deny": "would deny",
    "reason-changed": "reason changed",
}


@evidence.command("shadow")
@_DB
@_TURN
@click.option("--since", default=None, metavar="TIME", help="Only attempts started at or after.")
@click.option("--until", default=None, metavar="TIME", help="Only attempts started before.")
@click.option(
    "--policy",
    "policy_hash",
    default=None,
    metavar="HASH",
    help="Only the decisions of the shadow policy whose bundle hash starts with HASH.",
)
@_report_options(_SHADOW_KINDS, "difference")
@guarded
def shadow_cmd(
    db: str,
    turn: str | None,
    since: str | None,
    until: str | None,
    policy_hash: str | None,
    kinds: tuple[str, ...],
    examples: int,
    fmt: str,
) -> None:
    """What the shadow policy would have done: its recorded decisions against the enforced ones.

    \b
    A host with [policy] shadow records, on every attempt its policy decided,
    the candidate's decision beside the enforced one. This reports, per
    shadow policy, the attempts it would have let go further (would allow:
    deny < approval_required < allow), less far (would deny) and refused for
    another reason, grouped by tool and the rules that decided, with examples;
    counts by tool and by rule; the attempts decided the same; and the calls
    the candidate failed on. Nothing is decided again (see `replay`).
    Exit 0: every shadow decision matches the enforced one (or none was
    recorded), in the kinds --kind looks for (those that differ in the others
    are counted). 1: some differ, or the candidate failed on some call (what it
    would have decided there is not known). 2: usage error (a store that
    cannot be read, a --turn the store has no record of).
    """
    from sharedos.evidence.approvals import approved_calls
    from sharedos.evidence.export import iter_records
    from sharedos.evidence.shadow_report import shadow_report
    from sharedos.evidence.url import open_store

    start, end = _moment(since, "--since"), _moment(until, "--until")
    try:
        store = open_store(db, read_only=True)
    except EvidenceStoreError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(_EXIT_USAGE) from None
    with store:
        _refuse_unknown_turn(store, turn, db)
        try:
            report = shadow_report(
                _in_window(iter_records(store, turn), start, end),
                approved=approved_calls(store, turn),
                policy=policy_hash,
                kinds=[_SHADOW_KINDS[k] for k in kinds] or None,  # type: ignore[misc]
                max_examples=examples,
            )
        except EvidenceStoreError as exc:
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(_EXIT_USAGE) from None
    if fmt == "json":
        from sharedos.evidence.export import json_text

        click.echo(json_text({"db": _shown(db), **report.to_dict()}, indent=2))
    else:
        click.echo(unambiguous(f"evidence: {_shown(db)}"))
        click.echo(_shown_text(report.render()))
    raise SystemExit(0 if report.verdict == "unchanged" else 1)


def _shown(db: str) -> str:
    """The store as it may be shown (a URL without its password)."""
    from sharedos.evidence.url import parse_store_url

    try:
        return str(parse_store_url(db).shown)
    except ValueError:
        return "<store>"


with_short_help(evidence)

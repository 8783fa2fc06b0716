"""``sharedos approvals``: list, show, approve and deny approvals of calls (docs/approvals.md).

An approval answered here is answered *out of band*: by the operator at
this command, never by anything a harness or a model can send. Who
answered is the host's word, not the caller's: ``--as NAME`` (default: the
operating-system login running the command) with the roles and groups the
host file gives NAME (``[approvals.approvers.NAME]``, ``[approvals.groups]``).
Without a host file, ``--role`` and ``--group`` say them, and the event
records that they were asserted on the command line. Every answer is an
event in the turn's evidence chain, with the login that ran the command.

Exit codes: 0 done; 1 refused (no such approval, not pending, lapsed, the
approver may not give it, the store cannot be written); 2 usage.
"""

from __future__ import annotations

import getpass
import json
import os
import pwd
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from sharedos.cli._help import with_short_help
from sharedos.evidence.approvals import (
    Approval,
    ApprovalError,
    ApprovalLedger,
    ApprovalTaken,
)
from sharedos.evidence.store import EvidenceStoreError
from sharedos.terminal import unambiguous

_STATUSES = ("pending", "approved", "denied", "expired", "consumed", "all")


def _host(path: Path | None) -> Any:
    if path is None:
        return None
    from sharedos.harness.hostconfig import HostConfigError, load_host_config

    try:
        return load_host_config(path)
    except HostConfigError as exc:
        raise click.UsageError("; ".join(exc.problems)) from None
    except OSError as exc:
        raise click.UsageError(f"cannot read the host file {path}: {exc}") from None


def _db(db: str | None, host: Any) -> str:
    if db:
        return db
    from sharedos.harness.hostconfig import HostConfigError

    try:
        url = host.evidence_location() if host is not None else None
    except HostConfigError as exc:  # an unset ${VAR} in it
        raise click.UsageError(str(exc)) from None
    if not url:
        raise click.UsageError("give --db, or a --host-file whose [evidence] url names the store")
    return str(url)


def _open(db: str, *, write: bool) -> Any:
    from sharedos.evidence.url import open_store

    try:
        return open_store(db, must_exist=True) if write else open_store(db, read_only=True)
    except EvidenceStoreError as exc:
        raise click.ClickException(str(exc)) from None


def _ledger(store: Any) -> ApprovalLedger:
    try:
        return ApprovalLedger(store)
    except EvidenceStoreError as exc:
        raise click.ClickException(str(exc)) from None


def _max_age(host: Any) -> float | None:
    """How long after its answer the host uses an approval (its ``approval_ttl_s``), so a
    status shown with ``--host-file`` is the one that host acts on; None without one (the
    stamped expiry is then all there is to go by)."""
    return float(host.approvals.approval_ttl_s) if host is not None else None


def _asker(a: Approval) -> str:
    """Who asked: the principal and their tenant (two tenants may each have an ``alice``,
    and a yes to one is no yes to the other's call)."""
    return f"{a.binding.principal} (tenant {a.binding.tenant})"


def _line(a: Approval, now: datetime, max_age_s: float | None = None) -> str:
    b = a.binding
    return unambiguous(
        f"{a.approval_id}  {a.status_at(now, max_age_s=max_age_s):<8}  {a.requested_at}  "
        f"{b.turn_id}  "
        f"{_asker(a)}  {b.tool}  {b.resource}  needs {a.who_may_approve()}"
    )


def _common(fn: Any) -> Any:
    fn = click.option(
        "--host-file",
        "host_file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The host file: its [evidence] url, and [approvals] approvers, groups and "
        "approval_ttl_s (an approval is approved no longer than that after its answer).",
    )(fn)
    fn = click.option(
        "--db",
        "db",
        default=None,
        metavar="PATH|URL",
        help="The evidence store (default: the host file's [evidence] url).",
    )(fn)
    return fn


@click.group()
def approvals() -> None:
    """List, show, approve and deny approvals of calls that need one."""


@approvals.command("list")
@_common
@click.option("--status", type=click.Choice(_STATUSES), default="pending", show_default=True)
@click.option("--turn", "turn", default=None, help="Only this turn's approvals.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def list_cmd(
    db: str | None, host_file: Path | None, status: str, turn: str | None, fmt: str
) -> None:
    """The approvals of the store (pending ones by default), oldest first."""
    host = _host(host_file)
    now = datetime.now(UTC)
    with _open(_db(db, host), write=False) as store:
        ledger = _ledger(store)
        try:
            found = ledger.for_turn(turn) if turn else ledger.every()
        except EvidenceStoreError as exc:
            raise click.ClickException(str(exc)) from None
    max_age = _max_age(host)
    shown = [a for a in found if status == "all" or a.status_at(now, max_age_s=max_age) == status]
    if fmt == "json":
        docs = [a.to_dict(now, max_age_s=max_age) for a in shown]
        click.echo(json.dumps(docs, indent=1, sort_keys=True))
        return
    if not shown:
        click.echo(f"no {'' if status == 'all' else status + ' '}approvals", err=True)
        return
    for a in shown:
        click.echo(_line(a, now, max_age))


@approvals.command("show")
@click.argument("approval_id")
@_common
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def show_cmd(approval_id: str, db: str | None, host_file: Path | None, fmt: str) -> None:
    """One approval: the exact call it is for, who may approve, and everything that happened."""
    host = _host(host_file)
    now = datetime.now(UTC)
    with _open(_db(db, host), write=False) as store:
        approval = _get(_ledger(store), approval_id)
        records = store.query(call_id=approval.request_call) if approval.request_call else []
    arguments = next((r.arguments for r in records if r.turn_id == approval.binding.turn_id), None)
    max_age = _max_age(host)
    if fmt == "json":
        doc = approval.to_dict(now, max_age_s=max_age)
        doc["arguments"] = arguments
        click.echo(json.dumps(doc, indent=1, sort_keys=True, default=str))
        return
    b = approval.binding
    lines = [
        f"approval {approval.approval_id}: {approval.status_at(now, max_age_s=max_age)}",
        f"  call       {b.tool} on {b.resource}",
        f"  arguments  {json.dumps(arguments, sort_keys=True, default=str)} ({b.arguments_digest})",
        f"  asked by   {b.principal} (tenant {b.tenant}) in turn {b.turn_id}, call "
        f"{approval.request_call}",
        f"  policy     {b.policy_hash}",
        f"  rules      {', '.join(approval.rule_ids)}",
        f"  needs      {approval.who_may_approve()}",
        f"  requested  {approval.requested_at} (lapses {approval.request_expires_at})",
    ]
    if approval.approver:
        # the answer as it was given (its decision event), not the approval's status now: an
        # approval that lapsed or was used was still approved
        answered = next(
            (e.event for e in approval.events if e.event in ("approved", "denied")), "answered"
        )
        lines.append(
            f"  answered   {answered}"
            f" by {approval.approver} via {approval.via} at {approval.decided_at}"
            + (f" (valid until {approval.expires_at})" if approval.expires_at else "")
        )
        if approval.detail:
            lines.append(f"             {approval.detail}")
    if approval.closed_call:
        lines.append(f"  used by    call {approval.closed_call} at {approval.closed_at}")
    for e in approval.events:
        lines.append(f"  event      {e.event_at}  {e.event}  (turn position {e.pos})")
    # what the approver reads is what will run: no field may reorder, hide or break lines
    click.echo("\n".join(unambiguous(line) for line in lines))


def _get(ledger: ApprovalLedger, approval_id: str) -> Approval:
    try:
        found = ledger.get(approval_id)
    except EvidenceStoreError as exc:
        raise click.ClickException(str(exc)) from None
    if found is None:
        raise click.ClickException(f"no approval {approval_id!r} in this store")
    return found


def os_login() -> str:
    """The login of the user running this command, by its uid (the account database).

    Not ``getpass.getuser()``: that reads ``LOGNAME``, ``USER``, ``LNAME`` and
    ``USERNAME`` first, which whoever runs the command sets as they like —
    ``USER=maya sharedos approvals approve ...`` run by bob recorded "os user maya"
    beside bob's uid, and answered as maya with maya's roles from the host file. The
    environment is the fallback only for a uid with no account entry."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        return getpass.getuser()


def _who(
    name: str | None, host: Any, roles: tuple[str, ...], groups: tuple[str, ...]
) -> tuple[str, frozenset[str], frozenset[str], str]:
    """(approver, roles, groups, where they came from) as the host knows them."""
    login = os_login()
    approver = name or login
    if host is not None:
        if roles or groups:
            raise click.UsageError(
                "with --host-file the approver's roles and groups are the host file's "
                "([approvals.approvers], [approvals.groups]); --role and --group are refused"
            )
        settings = host.approvals.settings()
        return (
            approver,
            settings.roles_of(approver),
            settings.groups_of(approver),
            f"roles and groups from {host.source}",
        )
    return (
        approver,
        frozenset(roles),
        frozenset(groups),
        "roles and groups asserted on the command line",
    )


def _answer(
    approval_id: str,
    *,
    approve: bool,
    db: str | None,
    host_file: Path | None,
    name: str | None,
    roles: tuple[str, ...],
    groups: tuple[str, ...],
    note: str | None,
) -> None:
    host = _host(host_file)
    approver, have_roles, have_groups, source = _who(name, host, roles, groups)
    ttl = host.approvals.approval_ttl_s if host is not None else None
    with _open(_db(db, host), write=True) as store:
        ledger = _ledger(store)
        approval = _get(ledger, approval_id)
        if not approval.may_be_approved_by(have_roles, have_groups):
            raise click.ClickException(
                f"{approver} may not answer approval {approval_id}: it needs "
                f"{approval.who_may_approve()}; {approver} has roles "
                f"{sorted(have_roles) or 'none'} and groups {sorted(have_groups) or 'none'} "
                f"({source})"
            )
        detail = f"os user {os_login()} (uid {os.getuid()}); {source}"
        if note:
            detail += f"; note: {note}"
        try:
            kw: dict[str, Any] = {"ttl_s": ttl} if ttl is not None else {}
            done = ledger.answer(
                approval_id,
                approve=approve,
                approver=approver,
                via="cli",
                detail=detail,
                **kw,
            )
        except ApprovalTaken:
            raise click.ClickException(
                f"approval {approval_id} was answered by someone else first"
            ) from None
        except (ApprovalError, EvidenceStoreError) as exc:
            raise click.ClickException(str(exc)) from None
    verb = "approved" if approve else "denied"
    until = f"; it can be used once until {done.expires_at}" if done.expires_at else ""
    click.echo(
        unambiguous(
            f"{verb} {approval_id} as {approver}: {done.binding.tool} on "
            f"{done.binding.resource}, asked by {_asker(done)}{until}"
        )
    )


def _answer_options(fn: Any) -> Any:
    fn = click.option("--note", default=None, help="A note recorded with the answer.")(fn)
    fn = click.option(
        "--group",
        "groups",
        multiple=True,
        help="A group of the approver (only without --host-file; recorded as asserted).",
    )(fn)
    fn = click.option(
        "--role",
        "roles",
        multiple=True,
        help="A role of the approver (only without --host-file; recorded as asserted).",
    )(fn)
    fn = click.option(
        "--as",
        "name",
        default=None,
        help="Who answers (default: the operating-system login running the command).",
    )(fn)
    return _common(fn)


@approvals.command("approve")
@click.argument("approval_id")
@_answer_options
def approve_cmd(
    approval_id: str,
    db: str | None,
    host_file: Path | None,
    name: str | None,
    roles: tuple[str, ...],
    groups: tuple[str, ...],
    note: str | None,
) -> None:
    """Approve one pending request: the exact call it names may then run once."""
    _answer(
        approval_id,
        approve=True,
        db=db,
        host_file=host_file,
        name=name,
        roles=roles,
        groups=groups,
        note=note,
    )


@approvals.command("deny")
@click.argument("approval_id")
@_answer_options
def deny_cmd(
    approval_id: str,
    db: str | None,
    host_file: Path | None,
    name: str | None,
    roles: tuple[str, ...],
    groups: tuple[str, ...],
    note: str | None,
) -> None:
    """Deny one pending request: the call it names does not run (a retry asks again)."""
    _answer(
        approval_id,
        approve=False,
        db=db,
        host_file=host_file,
        name=name,
        roles=roles,
        groups=groups,
        note=note,
    )


with_short_help(approvals)

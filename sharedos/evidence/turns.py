"""``evidence_turn``: a turn's opening record when it opens, its seal when it closes.

One call for whoever opens turns (``sharedos.bridge.turn.open_turn``, a
host's own loop)::

    async with evidence_turn(runtime_host.evidence, turn_id=..., catalog_hash=...,
                             policy_hash=..., identity=...,
                             owe=runtime_host.owe_evidence,
                             settle=runtime_host.settle_owed):
        ...  # the turn's calls

On entry the store commits the turn's opening record (the anchor of its
chain: catalogHash, policy bundle hash and revision, SystemIdentity); on exit
it records the expiry of the turn's approvals still open (a closed turn's call
can no longer be retried; ``sharedos.evidence.approvals``), then appends the
seal (signed when the store has a signing key). Both run off
the event loop with a bounded wait. Neither can fail the turn: a store that
cannot write them cannot write the turn's calls either, and those fail closed
on their own (``evidence_unavailable``). A failure is logged once per cause
for the store (``store.failures``, shared with the kernel's recorder), not
once per turn: a full disk under a busy host is one line, and its recovery
another. A store without a chain (a test double, an old backend) is left alone.

A seal the store did not write as the turn closed (a lock, a full disk, a
timeout) is handed to ``owe`` (``RuntimeHost.owe_evidence``), when given: it
is written, with the time the turn closed, after the host's next write that
lands, or when the host settles its owed records before it exits
(``settle_unwritten``), unless the turn has a seal by then.

Records the host owes to calls the store refused earlier (kept until a write
lands) are written before the seal (``settle``, ``RuntimeHost.settle_owed``):
a store that answered again with no call since would otherwise take the seal
first and those records after it, where the seal vouches for none of them.
While the store still refuses them, the seal is handed to ``owe`` at once, to
follow them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel

from sharedos.evidence.appender import Opening
from sharedos.evidence.chain import ATTEMPT_FIELDS, OPEN_FIELDS
from sharedos.evidence.record import encoded_text, now_iso, storable_json_text, stored_json
from sharedos.evidence.reporting import FailureReporter, reporter_of
from sharedos.evidence.store import EvidenceStoreError
from sharedos.redaction import Redactor

__all__ = ["evidence_turn", "expire_open_approvals", "seal_closed", "seal_late"]

logger = logging.getLogger("sharedos.evidence")


async def _off_loop(
    what: str,
    turn_id: str,
    fn: Any,
    timeout_s: float,
    report: FailureReporter,
    *,
    says_writable: bool = True,
) -> Any:
    try:
        with anyio.fail_after(timeout_s):
            done = await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
    except TimeoutError:
        report.failed(
            "timeout",
            f"the evidence store did not write the {what} of turn {turn_id} within "
            f"{timeout_s:g} s (said once until the store answers again)",
        )
    except EvidenceStoreError as exc:
        report.failed(
            exc.cause,
            f"cannot write the {what} of turn {turn_id} ({exc.cause}): {exc} "
            "(said once per cause until the store writes again)",
        )
    except Exception as exc:  # never let the record of a turn break the turn
        report.failed(
            "io", f"cannot write the {what} of turn {turn_id}: {type(exc).__name__}: {exc}"
        )
    else:
        if says_writable:  # a step that may only have read proves nothing about writes
            report.succeeded()
        return done
    return None


@contextlib.asynccontextmanager
async def evidence_turn(
    store: Any,
    *,
    turn_id: str,
    catalog_hash: str | None = None,
    policy_hash: str | None = None,
    identity: Mapping[str, Any] | None = None,
    timeout_s: float = 2.0,
    owe: Callable[[Callable[[], Any], str], None] | None = None,
    settle: Callable[[], Awaitable[int]] | None = None,
    taken: Callable[[str], Awaitable[int]] | None = None,
    deferred: bool = False,
    unopened: Callable[[str, Callable[[], Awaitable[bool | None]] | None], None] | None = None,
    redactor: Redactor | None = None,
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Open the turn's chain on entry, seal it on exit (see the module docstring).

    ``owe`` (``RuntimeHost.owe_evidence``): where a seal the store did not write as the
    turn closed is kept (with the turn's id), to be written, with the close's time, once the
    store answers. ``settle`` (``RuntimeHost.settle_owed``): writes, before the seal, the
    records the host owes to calls the store refused (how many still wait); while some
    do, the seal is handed to ``owe`` at once, to follow them. ``taken``
    (``RuntimeHost.finish_taken``): waits, first, for the turn's calls that have taken their
    approval, which the close does not stop: their outcomes go before the seal. ``unopened``
    (``RuntimeHost.owe_opening``): told, when the store refused the opening record, how to
    write it before the turn's next call (True: written, the chain this turn's; False: the
    chain is another turn's; None: the store still refuses it), and told ``None`` once that
    is settled or the turn closes: the host refuses the turn's calls until it is written.
    ``redactor`` (``RuntimeHost.host_secrets``): scrubbed from the opening's identity, as
    from every call's row.

    Yields the coroutine function that writes the opening record (a no-op once it has
    run). ``deferred``: the opening is written only when the block calls it, once the
    turn's transport is up (a listener bound, a turn file written); a block that fails
    before that writes nothing, no opening and no seal, so the same turn id can be opened
    again (opened and sealed for nothing, the id was refused to the retry as a closed
    turn's). Raises ``ValueError`` (from the call, or on entry when not deferred) when the
    id names a turn that has closed."""
    open_turn = getattr(store, "open_turn", None)
    seal_turn = getattr(store, "seal_turn", None)
    if open_turn is None or seal_turn is None:

        async def nothing() -> None:
            return None

        yield nothing
        return
    report = reporter_of(store)
    ident = dict(identity) if identity else None
    revision = ident.get("policyBundleRevision") if ident else None
    declared = ident.get("policyBundleHash") if ident else None
    # the identity as every row of the turn's calls stores it: the host's secrets scrubbed,
    # capped, never failing (before, the opening kept it as given: a host secret in it,
    # scrubbed from each call's row, was in the turn's opening record for good)
    kept = stored_json(ident, redactor if redactor is not None else Redactor())
    identity_text = (encoded_text(kept) or str(storable_json_text(kept))) if kept else None
    # the opening record the store refused at the open, written at the close, before the
    # seal (a seal on a chain with no opening makes a bare one, without the turn's
    # catalogHash, policy and identity, dated after the close); empty until it is written
    written: list[Opening | None] = []

    async def open_chain() -> None:
        if written:
            return
        opening = Opening(
            turn_id=turn_id,
            opened_at=now_iso(),
            catalog_hash=catalog_hash,
            policy_hash=policy_hash or (str(declared) if declared is not None else None),
            policy_revision=str(revision) if revision is not None else None,
            identity=identity_text,
        )
        # shielded (bounded by ``timeout_s``): cancelled while off the loop, the write was
        # abandoned, not stopped; it landed after the cancel, and the close, told nothing
        # was written, sealed nothing (the chain stayed open for good, its id refused)
        with anyio.CancelScope(shield=True):
            opened = await _off_loop(
                "opening record", turn_id, lambda: open_turn(opening), timeout_s, report
            )
        if opened is not False:
            written.append(opening if opened is None else None)
        if opened is None and unopened is not None:
            # the store refused the opening (a lock, a server slow to answer): the id was not
            # checked, and a call appended meanwhile went into whatever chain has that id
            # (another turn's, open on another host sharing the store), under its opening
            unopened(turn_id, lambda: _open_before_call(opening))
        # the turn cancelled meanwhile stops here, its opening sealed by the close
        await anyio.lowlevel.checkpoint_if_cancelled()
        if opened is False:
            # the id names a chain that existed before this open: a turn that has closed,
            # or one open on another host sharing the store (the host's own id hold covers
            # only its own turns). Opened again, its calls ran and were appended to that
            # turn's chain under its opening (another principal's, perhaps): past its seal,
            # or before it, its seal then written by the second turn's close, the first's
            # own seal refused as a second one and its later calls appended past it, and
            # `verify --require-seal` said clean either way
            if await _sealed(store, turn_id, timeout_s, report):
                raise ValueError(
                    f"turn {turn_id!r} has closed (its evidence chain is sealed): a turn id "
                    "names one turn; give each turn its own"
                )
            raise ValueError(
                f"turn {turn_id!r} has an evidence chain already (a turn of that id is open "
                "on another host sharing the store, or ended without its seal): a turn id "
                "names one turn; give each turn its own"
            )

    #: what the store said of the chain when the opening was written before a call
    found: list[bool] = []

    async def _open_before_call(opening: Opening) -> bool | None:
        if found:
            return found[0]
        ours = await _off_loop(
            "opening record", turn_id, lambda: _open_own(store, opening), timeout_s, report
        )
        if ours is None or found:
            return found[0] if found else None
        found.append(bool(ours))
        if ours:
            written[0] = None  # written: the close need not write it again
            if unopened is not None:
                unopened(turn_id, None)
        else:  # kept past the close: the bridge's refusals after it are not recorded there
            _foreign(turn_id)
        return bool(ours)

    try:
        if not deferred:
            await open_chain()  # in the try: cancelled once it has written, it is sealed
        yield open_chain
    finally:
        foreign = found == [False]
        # nothing was opened (a deferred turn failed before it): nothing to seal; nor is a
        # chain a call of this turn found to be another turn's (said then) this close's
        if written and not foreign:
            closed_at = now_iso()
            with anyio.CancelScope(shield=True):
                if taken is not None:
                    # a call holding its approval runs to its outcome (its handler bounded):
                    # sealed first, the chain had that outcome past the seal, unvouched for
                    running = await taken(turn_id)
                    if running:
                        # past the bound (a handler that ignores its cancellation): the
                        # seal goes first, and their outcomes land after it; said here
                        logger.warning(
                            "sharedos: turn %s is sealed while %d call(s) that took their "
                            "approval still run past their bound; their outcomes follow the seal",
                            turn_id,
                            running,
                        )
                foreign = await _close(
                    store, turn_id, closed_at, timeout_s, report, owe, settle, written[0]
                )
        if unopened is not None and written and written[0] is not None:
            # the turn's calls are over, but a bridge still refuses (and records) those sent
            # after its close (a relayed stdio bridge): into another turn's chain, never
            unopened(turn_id, _elsewhere if foreign else None)


async def _sealed(store: Any, turn_id: str, timeout_s: float, report: FailureReporter) -> bool:
    """Whether the chain of ``turn_id``, which existed before this open, holds a seal (False
    when the store cannot say; it only picks the words of the refusal)."""
    has_seal = getattr(store, "has_seal", None)
    if not callable(has_seal):
        return False
    found = await _off_loop(
        "seal check",
        turn_id,
        lambda: bool(has_seal(turn_id)),
        timeout_s,
        report,
        says_writable=False,
    )
    return found is True


async def _close(
    store: Any,
    turn_id: str,
    closed_at: str,
    timeout_s: float,
    report: FailureReporter,
    owe: Callable[[Callable[[], Any], str], None] | None,
    settle: Callable[[], Awaitable[int]] | None,
    opening: Opening | None,
) -> bool:
    """The close: the records owed to refused calls, the opening record when the store
    refused it at the open (``opening``), the approvals' expiry, the seal. Whether the
    chain of ``turn_id`` is another turn's (left unsealed)."""
    if settle is not None and owe is not None:
        # the records of calls refused before the close (the turn's among them) go before
        # its seal: written after it, the seal would vouch for none of them
        behind = await _settled(settle, timeout_s)
        if behind:
            report.failed(
                "owed",
                f"the seal of turn {turn_id} waits for {behind} record(s) of calls the "
                "evidence store refused: it is written after them, once the store takes "
                "them (said once until the store writes again)",
            )
            owe(lambda: seal_late(store, turn_id, closed_at, opening), turn_id)
            return False
    if opening is not None:
        ours = await _off_loop(
            "opening record", turn_id, lambda: _open_own(store, opening), timeout_s, report
        )
        if ours is False:
            _foreign(turn_id)
            return True
    if callable(getattr(store, "append_approval", None)):
        await _off_loop(
            "approvals' expiry",
            turn_id,
            lambda: expire_open_approvals(store, turn_id),
            timeout_s,
            report,
            says_writable=False,
        )
    sealed = await _off_loop(
        "seal",
        turn_id,
        lambda: seal_closed(store, turn_id) or "sealed already",
        timeout_s,
        report,
    )
    if sealed is None and owe is not None:
        owe(lambda: seal_late(store, turn_id, closed_at, opening), turn_id)
    return False


async def _elsewhere() -> bool | None:
    """The chain of a closed turn's id is another turn's: nothing of this turn goes there."""
    return False


async def _settled(settle: Callable[[], Awaitable[int]], timeout_s: float) -> int:
    """``settle()`` within ``timeout_s``: how many owed records still wait (1 when it did
    not answer in time: the seal must not overtake what it may still be writing)."""
    with anyio.move_on_after(timeout_s):
        try:
            return await settle()
        except Exception:  # never let the record of a turn break the turn
            return 1
    return 1


def expire_open_approvals(store: Any, turn_id: str) -> int:
    """Record ``expired`` for each approval of the turn still pending or approved and unused
    (its call can no longer be retried once the turn closes); how many. Runs before the
    seal: nothing is appended to a sealed chain."""
    from sharedos.evidence.approvals import ApprovalLedger

    ledger = ApprovalLedger(store)
    closed = 0
    for approval in ledger.for_turn(turn_id):
        open_ = approval.status in ("pending", "approved")
        if open_ and ledger.expire(approval, detail="the turn closed") is not None:
            closed += 1
    return closed


class _StillOpen(Exception):
    """The turn has an approval still open at its seal (one asked as the turn closed)."""


class _Sealed(Exception):
    """The turn's chain holds a seal already (a write given up on as it timed out landed)."""


#: how many times the seal expires an approval asked as it was being written, and tries again
SEAL_TRIES = 5


def seal_closed(store: Any, turn_id: str, closed_at: str | None = None) -> str | None:
    """Seal the turn with none of its approvals open: the seal is written only on a chain
    with no approval pending or approved and unused (checked with nothing appended between
    the check and the seal, ``append_approval``'s ``check``). A request that a call of the
    turn wrote after ``expire_open_approvals`` read — a call the close did not stop, a
    stdio bridge that has not seen the close yet — is expired too, then the seal written.

    None, and nothing written, when the chain holds a seal already (checked atomically with
    the append too): the close's seal, given up on as it waited for a lock, and the owed
    one written in its place (``seal_late``) may both be under way at once."""
    has_seal = getattr(store, "has_seal", None)
    if not callable(getattr(store, "append_approval", None)):  # a store without approvals
        if callable(has_seal) and has_seal(turn_id):
            return None
        return str(store.seal_turn(turn_id, closed_at))
    from sharedos.evidence.approvals import ApprovalLedger

    ledger = ApprovalLedger(store)

    def unsealed() -> None:
        if callable(has_seal) and has_seal(turn_id):
            raise _Sealed

    def none_open() -> None:
        unsealed()
        if any(a.status in ("pending", "approved") for a in ledger.for_turn(turn_id)):
            raise _StillOpen

    try:
        for _ in range(SEAL_TRIES):
            try:
                return str(store.seal_turn(turn_id, closed_at, none_open))
            except _StillOpen:
                expire_open_approvals(store, turn_id)
        return str(store.seal_turn(turn_id, closed_at, unsealed))
    except _Sealed:
        return None


def seal_late(
    store: Any, turn_id: str, closed_at: str, opening: Opening | None = None
) -> str | None:
    """The seal of a turn that closed while the store refused writes (a lock, a full disk),
    written once it answers, with the time the turn closed: its open approvals expired
    first, as at the close, and its ``opening`` record first of all when the store refused
    that too (a no-op when the turn's chain has one). None when the turn has a seal already
    (a write that was given up on as it timed out may have landed after all)."""
    has_seal = getattr(store, "has_seal", None)
    if callable(has_seal) and has_seal(turn_id):
        return None
    if opening is not None and not _open_own(store, opening):
        _foreign(turn_id)
        return None
    if callable(getattr(store, "append_approval", None)):
        expire_open_approvals(store, turn_id)
    return seal_closed(store, turn_id, closed_at)


def _open_own(store: Any, opening: Opening) -> bool:
    """Write ``opening``, the record the store refused at the turn's open, unless the chain
    has one; whether the chain is this turn's: its own opening, given up on and landed
    later (the same record), or one its own first call made once the store answered again
    (dated at that call's start, under this turn's catalogue, or a bare one). Any other
    opening is another turn's (one of that id open on another host sharing the store, or
    closed), made while the store refused this one's, whose id was never checked: dated
    before this turn's opening, or after it (opened once the store answered again; read
    as this turn's by its date alone, it was sealed by this turn's close)."""
    if store.open_turn(opening):
        return True
    links = getattr(store, "iter_links", None)
    if not callable(links):
        return True  # a store that cannot show its chain: as before
    chain = iter(links(opening.turn_id))
    first = next(chain, None)
    if first is None or first.kind != "open" or not first.values:
        return True  # nothing to tell by: as before
    at = str(first.values[OPEN_FIELDS.index("opened_at")])
    if at == opening.opened_at:
        return True  # its own, landed after it was given up on
    if at < opening.opened_at:
        return False
    made = first.values[OPEN_FIELDS.index("catalog_hash")]
    if made is None:
        return True  # a bare opening (an approval's or a seal's row made it): as before
    row = next(chain, None)
    return (
        made == opening.catalog_hash
        and row is not None
        and row.kind == "attempt"
        and bool(row.values)
        and str(row.values[ATTEMPT_FIELDS.index("started_at")]) == at
    )


def _foreign(turn_id: str) -> None:
    # sealed, it was another turn's chain: the close sealed it under that turn's opening,
    # that turn's own seal was refused as a second one, its later calls landed past it, and
    # `verify --require-seal` said clean
    logger.error(
        "sharedos: turn %s is not sealed: the store refused its opening record, and the "
        "chain of that id was opened by another turn meanwhile (a turn id names one turn; "
        "give each turn its own)",
        turn_id,
    )

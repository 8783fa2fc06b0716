"""``RuntimeHost``: re-authorize the exact call, write the attempt ahead, run it, record the outcome.

One call is one straight path; every step returns to ``invoke_tool``::

    invoke_tool(call, context, run policy, catalogue, ...)
      1. auth = Authorizer.authorize(...)        a value: lookup, run policy, turn catalogue,
                                                 arguments, requirement + decision, the
                                                 call's Redactor   (sharedos.kernel.authorize)
         shadow = ShadowDecider.decide(...)      with a shadow policy, for a decided call: the
                                                 candidate's decision, for the row only
                                                 (sharedos.kernel.shadow)
         [seam: approval]                        a decision ``approval_required``:
                                                 auth = settle(auth)  (sharedos.kernel.approvals);
                                                 see "Seams" below
      2. row  = attempt_record(auth, ...)        the evidence row, redacted and scrubbed once
                                                 (sharedos.evidence.record)
         refused?  recorder.record(row + outcome) -> one commit -> the refusal (answers)
      3. seq  = recorder.begin(row)              write-ahead: durable before any effect
      4. ran  = the handler, under its timeout   (sync ones on the handler lane's threads)
      5. out  = concluded(ran)                   the outcome row, scrubbed once
      6. recorder.finish(seq, out)               durable before the answer
      7. answer(auth, row, seq, ran)             one ToolResult (sharedos.kernel.answers)

Refusals and their reasons, in order (the first is final; later steps do not run):

1. tool lookup: unknown tool, or no requirement                 -> denied ``tool_unavailable``
2. run policy: not in the ToolPolicy's managed set               -> denied ``not_in_run_policy``
3. turn catalogue (when given): not published this turn           -> denied ``not_in_turn_catalog``
4. arguments vs ``inputSchema`` (non-object or schema violation)  -> failed ``invalid_arguments``
5. ``policy.decide``: resource resolution + decision tree         -> denied ``unresolvable_resource``
                                                                     / ``no_matching_permit`` / ``forbidden``
5a. a decision ``approval_required``: the approval step           -> denied ``approval_required``
    (``sharedos.kernel.approvals.settle``): an approval of this        (a request for one pending)
    exact call is used (or asked for by elicitation) before anything runs
6. write-ahead: the attempt is committed                          -> failed ``evidence_unavailable``
7. the handler, under a timeout                                   -> failed ``handler_error`` / ``timeout``
                                                                     / the handler's ``upstream_*`` reason
8. the outcome is committed, then the answer is returned          -> failed ``evidence_unavailable``

A call refused at 1-5 is recorded with one commit (attempt and outcome
together). An allowed call is recorded with two: the attempt before the
handler runs (if it cannot be committed, the handler never runs) and the
outcome before the answer is returned (if that cannot be committed, the
answer says the tool ran and its outcome is unrecorded; the attempt row
stands and reads as ``interrupted``). Writes leave the event loop
(``EvidenceRecorder``) and wait at most ``evidence_timeout_s``.

Cancellation at any point records ``cancelled`` and re-raises — but for a call that
has taken its approval (step 5a): shielded from then on, it runs to its recorded
outcome first, so an approval is spent exactly when its call runs. Anything else
unexpected is ``failed`` / ``internal_error`` (fail closed).

Seams (docs/contracts.md, "kernel → bridge / conformance"): a step that
changes whether a call runs goes between 1 and 2 and maps one
``Authorization`` to another (an approval step: a decision that needs
approval is recorded as refused ``approval_required`` with no handler run, or
waits for an elicited yes through ``peer`` and goes on as allowed); a step
that only observes (a shadow decision: a second policy decides the same
call) is computed beside 1 from the same inputs and handed to 2 as one more
field of the row. Neither may reach past 2: the row is built once, from
values, and nothing is filled in afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

import anyio

from sharedos.catalog.definition import ToolDefinition
from sharedos.evidence.approvals import ApprovalLedger
from sharedos.evidence.record import (
    EvidenceRecord,
    OutcomeRecord,
    attempt_record,
    concluded,
    decision_context,
    now_iso,
)
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.store import EvidenceStore
from sharedos.kernel.answers import Ran, answer, unrecorded
from sharedos.kernel.approvals import ApprovalGate, ApprovalSettings, settle
from sharedos.kernel.arguments import MAX_ARGUMENT_DEPTH, handler_copy
from sharedos.kernel.authorize import Authorization, Authorizer
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult, LogHook, ProgressHook
from sharedos.kernel.kernel import Kernel, TurnCatalog
from sharedos.kernel.recorder import EvidenceRecorder, EvidenceUnavailable, RecordOnlyStore
from sharedos.kernel.result import ToolResult
from sharedos.kernel.shadow import ShadowDecider
from sharedos.kernel.threads import DaemonLane
from sharedos.outcomes import OUTCOME_OF, Effect, Outcome, ReasonCode
from sharedos.redaction import Redactor
from sharedos.toolpolicy import ToolPolicy

__all__ = ["MAX_ARGUMENT_DEPTH", "HandlerContext", "HandlerResult", "RuntimeHost", "ToolResult"]

logger = logging.getLogger("sharedos.kernel")

#: what a record of a sync handler given up on says: Python cannot stop its thread
_MAY_STILL_FINISH = (
    "the handler may already have been running on its thread, which cannot be "
    "stopped: its effect may still complete"
)

#: the reasons a handler may name for its own failure (anything else is handler_error)
_HANDLER_REASONS = frozenset(
    {
        ReasonCode.HANDLER_ERROR,
        ReasonCode.UPSTREAM_ERROR,
        ReasonCode.UPSTREAM_TIMEOUT,
        ReasonCode.UPSTREAM_UNAVAILABLE,
        ReasonCode.UPSTREAM_UNAUTHORIZED,
        ReasonCode.LINKED_RESOURCE,
    }
)
_ALLOWED = ReasonCode.ALLOWED
#: what a write given up on is concluded as, given why (see ``_given_up``)
Fallback = Callable[[str], OutcomeRecord]


class _HandlerAborted(Exception):
    """Carries a sync handler's non-``Exception`` ``BaseException`` across the thread boundary."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def _guarded(handler: Any, args: dict[str, Any], hctx: HandlerContext) -> Any:
    """Run a sync handler in its worker thread; wrap what must not cross the boundary raw."""
    try:
        return handler(args, hctx)
    except Exception:
        raise
    except BaseException as exc:  # re-raised wrapped, reported by the caller
        raise _HandlerAborted(exc) from None


def _well_formed(result: HandlerResult) -> bool:
    """True when a handler's result has the shape a transport can put on a wire."""
    return (
        type(result.content) is list
        and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in result.content)
        and (result.structured is None or isinstance(result.structured, dict))
    )


def _text_of(result: HandlerResult) -> str:
    return " ".join(
        str(block.get("text", "")) for block in result.content if isinstance(block, dict)
    ).strip()


class RuntimeHost:
    """Runs calls for one kernel and records every attempt in ``evidence``, ahead of its effect.

    ``evidence`` is a store, or the path of a SQLite database to open with
    ``synchronous`` (``"NORMAL"`` by default, ``"FULL"`` for power-loss
    durability). ``evidence_timeout_s`` bounds every evidence write (a call
    whose record cannot be committed within it fails closed).
    ``host_secrets`` are values the host knows are secret (its configuration's
    credentials): they are scrubbed from every record field and every text a
    model is given. Sync handlers run on at most ``max_handler_threads``
    daemon threads. ``shadow``: a candidate policy that decides every call the
    enforced policy decides too, recorded on the attempt and never acted on
    (``sharedos.kernel.shadow``). ``approvals`` configures the approval step
    (``sharedos.kernel.approvals``); it is on whenever the store keeps
    approvals (schema 6), with the default settings when none are given.
    """

    def __init__(
        self,
        kernel: Kernel,
        evidence: EvidenceStore | str | os.PathLike[str],
        *,
        handler_timeout_s: float = 30.0,
        evidence_timeout_s: float = 2.0,
        synchronous: Literal["NORMAL", "FULL"] | None = None,
        host_secrets: Iterable[object] = (),
        max_handler_threads: int = 16,
        shadow: ShadowDecider | None = None,
        approvals: ApprovalSettings | None = None,
    ) -> None:
        if handler_timeout_s <= 0:
            raise ValueError("handler_timeout_s must be positive")
        store: EvidenceStore
        if isinstance(evidence, str | os.PathLike):
            store = SqliteEvidenceStore(evidence, synchronous=synchronous or "NORMAL")
        else:
            store = evidence
            opened = getattr(store, "synchronous", synchronous)
            if synchronous is not None and opened != synchronous:
                raise ValueError(
                    f"the evidence store was opened with synchronous={opened!r}, "
                    f"not {synchronous!r}"
                )
        self.kernel = kernel
        #: the store as given (or opened); evidence is read back from here
        self.evidence: EvidenceStore = store
        self.handler_timeout_s = handler_timeout_s
        #: the shadow policy's decider (None: no shadow policy)
        self.shadow = shadow
        if shadow is not None and shadow.reads_clock:
            kernel.take_time()  # the records keep the moment the candidate's decisions saw
        #: the values the host knows are secret, ready to scrub (every call's redactor holds them)
        self.host_secrets = Redactor(host_secrets)
        self._authorizer = Authorizer(kernel, self.host_secrets)
        writes: Any = store if callable(getattr(store, "begin", None)) else RecordOnlyStore(store)
        self._recorder = EvidenceRecorder(writes, timeout_s=evidence_timeout_s)
        self._handler_lane = DaemonLane("sharedos-handler", max_threads=max_handler_threads)
        #: each context's recorded decision context, encoded once (a turn's calls share one)
        self._context_json: dict[tuple[str, tuple[str, ...]], Any] = {}
        #: the ids of the turns open on this host now (``open_turn_id``)
        self._open_turns: set[str] = set()
        #: turns whose opening record the store refused as they opened (``owe_opening``)
        self._unopened: dict[str, Callable[[], Awaitable[bool | None]]] = {}
        #: the approval step; None when the store keeps no approvals (such calls are refused)
        self.approvals: ApprovalGate | None = None
        if callable(getattr(store, "append_approval", None)):
            self.approvals = ApprovalGate(
                ApprovalLedger(store), approvals, timeout_s=evidence_timeout_s
            )

    @property
    def evidence_timeout_s(self) -> float:
        """The bound on every evidence write."""
        return self._recorder.timeout_s

    def owe_evidence(self, write: Callable[[], Any], turn_id: str | None = None) -> None:
        """Keep ``write`` (the seal of turn ``turn_id``, refused by the store as the turn
        closed) and write it after the records owed to refused calls, once the store takes
        writes again."""
        self._recorder.owe(write, turn_id)

    async def settle_unwritten(self) -> int:
        """Before the host goes away: write, if the store takes them now, the records of calls
        it refused for a cause that passes (a full disk, a lock; written later, saying so),
        then the turns' seals it refused; how many call records are still not in the store
        (those calls did not run, and left no record). The turns still unsealed:
        ``unsealed_turns``."""
        return await anyio.to_thread.run_sync(self._recorder.settle_unwritten)

    @contextlib.contextmanager
    def _until_released(self, hold: anyio.CancelScope, turn_id: str) -> Iterator[None]:
        """The rest of one call: once it ends, an approval it took (``hold`` shielded by
        ``ApprovalGate._use``) no longer keeps its turn's seal waiting (``finish_taken``)."""
        try:
            yield
        finally:
            if hold.shield and self.approvals is not None:
                self.approvals.release(turn_id)

    async def finish_taken(self, turn_id: str) -> int:
        """Before turn ``turn_id``'s seal: wait for its calls that have taken their approval.

        Such a call is not stopped by the turn closing (``ApprovalGate._use``): it runs to
        its recorded outcome. Sealed meanwhile, the turn's chain had that outcome after its
        seal, which does not vouch for it (docs/approvals.md: the close waits for it). Each
        is bounded (the consume by ``ApprovalGate.consume_wait_s``, the handler by
        ``handler_timeout_s``, each write by ``evidence_timeout_s``), and so is this wait;
        how many still run after it.
        """
        gate = self.approvals
        if gate is None or not gate.taken.get(turn_id):
            return 0
        bound = self.handler_timeout_s + gate.consume_wait_s + 3 * self.evidence_timeout_s
        with anyio.move_on_after(bound):
            while gate.taken.get(turn_id):
                await anyio.sleep(0.01)
        return gate.taken.get(turn_id, 0)

    async def settle_owed(self) -> int:
        """Before a turn's seal: write now, if the store takes them, the records owed to
        calls it refused earlier (kept since, waiting for a write that lands), and wait for
        the writes still queued on the writer thread (calls given up on), so that they
        precede the seal in the chain; how many still wait (0 at once when none do)."""
        recorder = self._recorder
        if not recorder.owing() and not recorder.queued():
            return 0

        def settle() -> int:
            if not recorder.drain(recorder.timeout_s):
                return recorder.owing() + recorder.queued() or 1
            if recorder.owing():
                recorder.settle_unwritten(recorder.timeout_s)
            return recorder.owing()

        return await anyio.to_thread.run_sync(settle, abandon_on_cancel=True)

    def unwritten_outcomes(self) -> int:
        """How many of the records ``settle_unwritten`` counts are outcomes (their attempts
        in the store, shown ``interrupted``)."""
        return self._recorder.unwritten_outcomes()

    def unsealed_turns(self) -> list[str]:
        """The turns whose seal the store refused as they closed and has not taken since."""
        return self._recorder.unsealed()

    def owe_opening(self, turn_id: str, write: Callable[[], Awaitable[bool | None]] | None) -> None:
        """Keep ``write``, the opening record of turn ``turn_id`` the store refused as the
        turn opened (``evidence_turn``); None: forget it (written, or the turn closed). One
        that found the chain another turn's is kept past the close (it says so at once): the
        refusals a bridge records for the turn after its close do not go there either.

        While it is kept, each call of the turn (``invoke_tool``, ``refuse``) writes it
        first, and is refused, unrecorded and not run, unless the opening is then written
        and the chain the turn's own: the turn's id was never checked, and its calls went
        into whatever chain had that id (another turn's, open on another host sharing the
        store), under that turn's opening, sealed by that turn's close."""
        if write is None:
            self._unopened.pop(turn_id, None)
        else:
            self._unopened[turn_id] = write

    async def _unopened_refusal(
        self,
        auth: Authorization,
        call: ToolCall,
        context: AccessContext,
        catalog: TurnCatalog | None,
        diagnostics: Mapping[str, Any] | None,
        identity: Mapping[str, Any] | None,
        started: float,
    ) -> ToolResult | None:
        """None when the call's turn has its opening record (written now if it was owed);
        else the refusal, with nothing written (``owe_opening``)."""
        write = self._unopened.get(context.turn_id)
        if write is None:
            return None
        with anyio.CancelScope(shield=True):  # bounded by the evidence timeout
            ours = await write()
        if ours is True:
            return None
        cause = (
            "the turn's id names another turn's evidence chain"
            if ours is False
            else "the turn's opening record is not written yet"
        )
        row = self._row(auth, call, context, catalog, diagnostics, identity, started, None)
        return unrecorded(auth, row, cause, -1, ran=False)

    @contextlib.contextmanager
    def open_turn_id(self, turn_id: str) -> Iterator[None]:
        """Hold ``turn_id`` as open on this host for the block; ``ValueError`` when a turn
        of that id is open here already.

        A turn's id names its evidence chain (opened, appended to, sealed by id): a second
        turn opened with the id of one still open (another principal's, another tenant's)
        would write its calls into the first's chain, under the first's opening record
        (its catalogHash and identity), and the first to close would seal the chain while
        the other's calls went on being appended after the seal."""
        if turn_id in self._open_turns:
            raise ValueError(
                f"turn {turn_id!r} is already open on this host: a turn id names one turn "
                "(its evidence chain); give each turn its own"
            )
        self._open_turns.add(turn_id)
        try:
            yield
        finally:
            self._open_turns.discard(turn_id)

    # -- public entry points -------------------------------------------------------

    async def invoke_tool(
        self,
        call: ToolCall,
        context: AccessContext,
        tool_policy: ToolPolicy,
        *,
        catalog: TurnCatalog | None = None,
        diagnostics: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        progress: ProgressHook | None = None,
        log: LogHook | None = None,
        peer: Any = None,
        turn_secrets: Redactor | None = None,
    ) -> ToolResult:
        """Re-authorize ``call`` for ``context`` and run it; never raises except on cancellation.

        ``diagnostics`` and ``identity`` are stored on the evidence record and
        read by no decision. ``progress`` / ``log`` / ``peer`` are transport
        hooks handed to the handler. ``turn_secrets``: what the caller's turn
        knows is secret (its bearer token), scrubbed like the host's secrets
        from this call's record and answer. The attempt is durable before the
        handler runs, the outcome before this returns.
        """
        t0, started = time.perf_counter(), time.time()
        # 1. authorization: a value
        try:
            auth = self._authorizer.authorize(call, context, tool_policy, catalog)
        except Exception as exc:  # fail closed: an internal bug is a failed call, never a crash
            logger.exception("sharedos: internal error authorizing a call")
            auth = self._authorizer.refused(
                call, context, catalog, ReasonCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"
            )
        if turn_secrets is not None:
            auth = self._authorizer.with_turn_secrets(auth, turn_secrets)
        # the shadow decision: observes only (never raises; nothing reads it but the row);
        # taken on the policy's own decision, before an approval settles it
        shadow = (
            self.shadow.decide(
                auth.tool.name,
                auth.args,
                context,
                auth.decision,
                auth.now,
                in_turn=catalog is not None,
            )
            if self.shadow is not None
            and auth.tool is not None
            and auth.args is not None
            and auth.decision is not None
            else None
        )
        # a turn whose opening the store refused: written first, or nothing is (its id unchecked)
        refused = await self._unopened_refusal(
            auth, call, context, catalog, diagnostics, identity, started
        )
        if refused is not None:
            return refused
        # the rest of the call: shielded from cancellation once an approval is taken for
        # it (``ApprovalGate._use``), so an approval is spent exactly when its call runs
        hold = anyio.CancelScope()
        with hold, self._until_released(hold, context.turn_id):
            if auth.reason is ReasonCode.APPROVAL_REQUIRED:
                # 1a. the approval step: one Authorization to another (allowed, or the refusal
                # naming an approval); its events are in the chain before the row is built
                try:
                    auth = await settle(
                        self.approvals, auth, call, context, self.kernel.policy_hash, peer, hold
                    )
                except anyio.get_cancelled_exc_class():
                    # Cancelled while the approval was being settled (the client asked, and the
                    # call cancelled or the turn closed meanwhile): the attempt is on record
                    # before the cancellation goes on, as at every other step.
                    unsettled = _refused_as(
                        auth, ReasonCode.CANCELLED, "cancelled while its approval was being settled"
                    )
                    with anyio.CancelScope(shield=True):  # bounded by the recorder's own timeout
                        await self._record_refusal(
                            unsettled,
                            call,
                            context,
                            catalog,
                            diagnostics,
                            identity,
                            started,
                            t0,
                            shadow,
                        )
                    raise
            tool = auth.tool
            if auth.reason is not _ALLOWED or tool is None or tool.handler is None:
                if auth.reason is _ALLOWED:  # allowed, but nothing to run it with
                    auth = _refused_as(auth, ReasonCode.HANDLER_ERROR, "the tool has no handler")
                return await self._record_refusal(
                    auth, call, context, catalog, diagnostics, identity, started, t0, shadow
                )
            # 2. the attempt row, from the value
            row = self._row(
                auth, call, context, catalog, diagnostics, identity, started, None, shadow
            )
            recorder = self._recorder
            # 3. write-ahead: no effect without a durable attempt
            try:
                seq = await recorder.begin(row, self._fallback(t0, ran=False))
            except EvidenceUnavailable as exc:
                return unrecorded(auth, row, exc.cause, -1, ran=False)
            assert auth.args is not None and auth.decision is not None
            # 4. the handler, on a copy of the arguments: it cannot alter what is recorded
            hctx = HandlerContext(
                call=call,
                context=context,
                decision=auth.decision,
                credentials=tool.credentials,
                progress=progress,
                log=log,
                peer=peer,
                permits=self._permits_for(context, call.tool, auth.decision),
            )
            try:
                encoded = auth.encoded[0] if auth.encoded is not None else None
                ran = await self._run_handler(tool, handler_copy(auth.args, encoded), hctx)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):  # bounded by the recorder's own timeout
                    # a sync handler already running on its thread cannot be stopped: the
                    # record says its effect may still happen, rather than that none did
                    cancelled = concluded(
                        Outcome.CANCELLED,
                        ReasonCode.CANCELLED,
                        None if tool.handler_is_async else _MAY_STILL_FINISH,
                        t0,
                        auth.redactor,
                    )
                    # a failure is reported by the recorder; the attempt row stands (interrupted)
                    with contextlib.suppress(EvidenceUnavailable):
                        await recorder.finish(seq, cancelled, lambda why: cancelled)
                raise
            except Exception as exc:  # fail closed
                logger.exception("sharedos: internal error running a handler")
                ran = Ran(Outcome.FAILED, ReasonCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            # 5. the outcome row, 6. committed, 7. the answer
            outcome = concluded(ran.outcome, ran.reason, ran.error, t0, auth.redactor)
            try:
                seq = await recorder.finish(seq, outcome, self._fallback(t0, ran=True, had=ran))
            except EvidenceUnavailable as exc:
                return unrecorded(auth, row, exc.cause, seq, ran=True)
            return answer(auth, row, seq, ran, outcome.error)
        # ``hold`` itself is never cancelled: it swallows no cancellation, so no path ends here
        raise AssertionError("unreachable")  # pragma: no cover

    async def refuse(
        self,
        call: ToolCall,
        context: AccessContext,
        tool_policy: ToolPolicy,
        reason: ReasonCode,
        *,
        catalog: TurnCatalog | None = None,
        diagnostics: Mapping[str, Any] | None = None,
        identity: Mapping[str, Any] | None = None,
        detail: str | None = None,
        turn_secrets: Redactor | None = None,
    ) -> ToolResult:
        """Record and return a refusal decided outside the kernel (e.g. ``turn_closed`` by a bridge).

        The same record, redaction and model-facing message as ``invoke_tool``
        (``turn_secrets`` included); no check runs and no handler is called.
        ``reason`` must not be ``allowed`` (that is recorded as
        ``internal_error``). Never raises (except on cancellation).
        """
        t0, started = time.perf_counter(), time.time()
        if reason is ReasonCode.ALLOWED or not isinstance(reason, ReasonCode):
            reason = ReasonCode.INTERNAL_ERROR
            detail = "refuse() was called without a refusal reason"
        auth = self._authorizer.refused(call, context, catalog, reason, detail)
        if turn_secrets is not None:
            auth = self._authorizer.with_turn_secrets(auth, turn_secrets)
        refused = await self._unopened_refusal(
            auth, call, context, catalog, diagnostics, identity, started
        )
        if refused is not None:
            return refused
        return await self._record_refusal(
            auth, call, context, catalog, diagnostics, identity, started, t0
        )

    # -- the steps ----------------------------------------------------------------------

    def _row(
        self,
        auth: Authorization,
        call: ToolCall,
        context: AccessContext,
        catalog: TurnCatalog | None,
        diagnostics: Mapping[str, Any] | None,
        identity: Mapping[str, Any] | None,
        started: float,
        ended: tuple[Outcome, ReasonCode | None, str | None, float] | None,
        shadow: Mapping[str, Any] | None = None,
    ) -> EvidenceRecord:
        """Step 2: the call's evidence row, built once from its authorization (and the
        shadow policy's decision, when there is one)."""
        key = (context.cache_key, context.roles)
        context_json = self._context_json.get(key)
        if context_json is None:
            if len(self._context_json) >= 4096:  # a long-lived host: bounded
                self._context_json.clear()
            context_json = self._context_json[key] = decision_context(context)
        if auth.now is not None and context_json is not None and "$truncated" not in context_json:
            # the moment the decision saw, for a replay: on this record's copy, never on the
            # cached JSON (shared by the context's calls), and never beside a truncation marker
            context_json = {**context_json, "now": dict(auth.now)}
        decision, tool = auth.decision, auth.tool
        return attempt_record(
            context=context,
            call_id=getattr(call, "call_id", ""),
            tool=getattr(call, "tool", None),
            started=started,
            arguments=auth.arguments,
            encoded=auth.encoded,
            secret_names=auth.secret_names,
            redactor=auth.redactor,
            decision=decision,
            namespace=(
                tool.namespace
                if tool is not None and (decision is None or not decision.namespace)
                else None
            ),
            catalog_hash=catalog.catalog_hash if catalog is not None else None,
            policy_hash=self.kernel.policy_hash,
            diagnostics=_with_approval(
                _with_served_by(_callers_own(diagnostics), tool, decision), auth
            ),
            identity=identity,
            context_json=context_json,
            ended=ended,
            shadow=shadow,
        )

    async def _record_refusal(
        self,
        auth: Authorization,
        call: ToolCall,
        context: AccessContext,
        catalog: TurnCatalog | None,
        diagnostics: Mapping[str, Any] | None,
        identity: Mapping[str, Any] | None,
        started: float,
        t0: float,
        shadow: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        """A call refused before any handler: its complete row in one commit, then the refusal."""
        reason = auth.reason
        ended = (OUTCOME_OF[reason], reason, auth.detail, t0)
        row = self._row(auth, call, context, catalog, diagnostics, identity, started, ended, shadow)
        assert row.outcome is not None
        had = Ran(row.outcome, reason, row.error)
        try:
            seq = await self._recorder.record(row, self._fallback(t0, ran=False, had=had))
        except EvidenceUnavailable as exc:
            return unrecorded(auth, row, exc.cause, -1, ran=False)
        return answer(auth, row, seq, had, row.error)

    def _fallback(self, t0: float, *, ran: bool, had: Ran | None = None) -> Fallback:
        """What to write for a write given up on (see ``_given_up``)."""
        bound = self.evidence_timeout_s
        return lambda why: _given_up(t0, why, bound, ran=ran, had=had)

    def _permits_for(
        self, context: AccessContext, running: str, allowed: Any
    ) -> Callable[[str, Mapping[str, Any]], bool]:
        """``HandlerContext.permits`` for ``context``: the policy's decision, allow or not.

        A call of the running tool (``running``, authorized by ``allowed``) that needs
        an approval counts as allowed when the running call itself ran with one, and
        that approval answered every approval rule the other call meets: an approved
        search of ``/data/archive`` reaches what the approval was asked for, its files
        below. Without it, each of those files needed an approval of its own, and the
        approved search answered "no match" for a tree full of matches. A subtree
        guarded by another approval rule stays out.

        Safe from a handler's thread (the policy's caches take their own lock). Any
        failure to decide is a no: a handler never reaches further on an error.
        """
        kernel = self.kernel
        need = getattr(allowed, "approval", None)
        approved = (
            frozenset(need.rules)
            if need is not None and getattr(allowed, "effect", None) is Effect.ALLOW
            else frozenset()
        )

        def permits(tool: str, arguments: Mapping[str, Any]) -> bool:
            try:
                decision = kernel.decide_named(tool, dict(arguments), context)
            except Exception:
                return False
            if decision.effect is Effect.ALLOW:
                return True
            asks = getattr(decision, "approval", None)
            return (
                decision.effect is Effect.APPROVAL_REQUIRED
                and tool == running
                and asks is not None
                and bool(approved)
                and bool(asks.rules)
                and approved.issuperset(asks.rules)
            )

        return permits

    async def _run_handler(
        self, tool: ToolDefinition, args: dict[str, Any], hctx: HandlerContext
    ) -> Ran:
        """Step 4: the handler under its timeout, its result judged."""
        with anyio.move_on_after(self.handler_timeout_s) as scope:
            try:
                handler = tool.handler
                assert handler is not None
                if tool.handler_is_async:
                    result = await handler(args, hctx)
                else:
                    # A sync handler runs on a daemon lane thread; on timeout it is dropped if
                    # it has not started, else abandoned (Python cannot kill it) and its
                    # result discarded.
                    result = await self._handler_lane.run_sync(_guarded, handler, args, hctx)
                    if inspect.isawaitable(result):
                        result = await result
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # security: see below
                # Any BaseException from a handler (sys.exit(), KeyboardInterrupt,
                # GeneratorExit, a custom one) is a failed, recorded call: letting it
                # escape would skip the evidence record and could stop the host.
                if isinstance(exc, _HandlerAborted):
                    exc = exc.original
                return Ran(Outcome.FAILED, ReasonCode.HANDLER_ERROR, f"{type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            late = "" if tool.handler_is_async else f"; {_MAY_STILL_FINISH}"
            return Ran(
                Outcome.FAILED,
                ReasonCode.TIMEOUT,
                f"no result within {self.handler_timeout_s:g} s{late}",
            )
        if not isinstance(result, HandlerResult):
            return Ran(
                Outcome.FAILED,
                ReasonCode.HANDLER_ERROR,
                f"handler returned {type(result).__name__}, not a HandlerResult",
            )
        if not _well_formed(result):
            # security: a result no harness can be given is a failure, never a recorded success
            return Ran(
                Outcome.FAILED,
                ReasonCode.HANDLER_ERROR,
                "handler returned malformed content (content must be a list of MCP content "
                "block objects with a string 'type'; structured must be an object or None)",
            )
        if result.is_error:
            reason = (
                result.reason if result.reason in _HANDLER_REASONS else ReasonCode.HANDLER_ERROR
            )
            return Ran(
                Outcome.FAILED, reason, _text_of(result) or "the tool reported an error", result
            )
        return Ran(Outcome.SUCCEEDED, result=result)


def _refused_as(auth: Authorization, reason: ReasonCode, detail: str) -> Authorization:
    """``auth`` turned into a refusal for ``reason`` (its findings kept, the ``now`` its
    decision saw included: the record keeps it for a replay; an approval's fields are
    not: the refusal is not the approval's)."""
    return dataclasses.replace(auth, reason=reason, detail=detail, approval=None)


def _given_up(
    t0: float, why: str, bound_s: float, *, ran: bool, had: Ran | None = None
) -> OutcomeRecord:
    """What to write for a write given up on: what the caller was told (or ``cancelled``)."""
    at, ms = now_iso(), round((time.perf_counter() - t0) * 1000.0, 3)
    if why == "cancelled":
        if had is not None and not ran:
            return OutcomeRecord(had.outcome, at, ms, had.reason, had.error)  # a refusal stands
        if ran and had is not None:
            # nobody was answered, but the tool ran to its end: its effect is done, and a
            # bare `cancelled` would read as a call that may have done nothing
            ended = str(had.outcome) + (f"/{had.reason}" if had.reason else "")
            error = (
                f"cancelled while its outcome was being committed; the tool had finished: {ended}"
            )
            return OutcomeRecord(Outcome.CANCELLED, at, ms, ReasonCode.CANCELLED, error)
        return OutcomeRecord(Outcome.CANCELLED, at, ms, ReasonCode.CANCELLED, None)
    # the store did not answer in time, or refused the write at once (its cause)
    failed = f"within {bound_s:g} s" if why == "timeout" else f"({why})"
    if ran and had is not None:
        ended = str(had.outcome) + (f"/{had.reason}" if had.reason else "")
        error = f"the outcome could not be committed {failed}; the tool had finished: {ended}"
    else:
        error = f"the attempt could not be committed {failed}; nothing ran"
    return OutcomeRecord(Outcome.FAILED, at, ms, ReasonCode.EVIDENCE_UNAVAILABLE, error)


#: diagnostics keys only the runtime writes: what it attests about the call it ran
HOST_ATTESTED_DIAGNOSTICS = frozenset({"servedBy", "approval"})


def _callers_own(diagnostics: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The caller's diagnostics without the keys the runtime attests (``servedBy``,
    ``approval``): a caller (a relayed stdio bridge process is on the harness's side) may
    describe its transport, never claim which credential served a call or which approval
    let it run. The common case (neither key present) is returned as it is."""
    if diagnostics is None or HOST_ATTESTED_DIAGNOSTICS.isdisjoint(diagnostics):
        return diagnostics
    return {k: v for k, v in diagnostics.items() if k not in HOST_ATTESTED_DIAGNOSTICS}


def _with_approval(
    diagnostics: Mapping[str, Any] | None, auth: Authorization
) -> Mapping[str, Any] | None:
    """The diagnostics plus, for a call allowed on an approval, that approval (its id, the
    approver, how they answered): the attempt's own record says what let it run."""
    decision = auth.decision
    if auth.approval is None or decision is None or decision.effect != Effect.ALLOW:
        return diagnostics
    return {**(diagnostics or {}), "approval": dict(auth.approval)}


def _with_served_by(
    diagnostics: Mapping[str, Any] | None, tool: Any, decision: Any
) -> Mapping[str, Any] | None:
    """The caller's diagnostics plus, for an allowed call of a brokered tool, its
    ``servedBy`` (which credential identity serves it: names only, never a value)."""
    served = getattr(tool, "served_by", None) if tool is not None else None
    if not served or decision is None or decision.effect != Effect.ALLOW:
        return diagnostics
    return {**(diagnostics or {}), "servedBy": served}

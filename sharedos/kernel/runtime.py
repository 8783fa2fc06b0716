"""``RuntimeHost``: re-authorize the exact call, write the attempt ahead, run it, record the outcome.

Order of checks (each step's refusal is final; later steps do not run):

1. tool lookup: malformed name, unknown tool, or no requirement -> denied ``tool_unavailable``
2. run policy: not in the ToolPolicy's managed set               -> denied ``not_in_run_policy``
3. turn catalogue (when given): not published this turn           -> denied ``not_in_turn_catalog``
4. arguments vs ``inputSchema`` (non-object or schema violation)  -> failed ``invalid_arguments``
5. ``policy.decide``: resource resolution + decision tree         -> denied ``unresolvable_resource``
                                                                     / ``no_matching_permit`` / ``forbidden``
5a. a decision ``approval_required``: the approval step           -> denied ``approval_required``
    (``sharedos.kernel.approvals``): an approval of this exact call    (a request for one pending)
    is used (or asked for by elicitation) before anything runs
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

Cancellation at any point records ``cancelled`` and re-raises. Anything else
unexpected is ``failed`` / ``internal_error`` (fail closed).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from jsonschema.exceptions import best_match

from sharedos.catalog.definition import ToolDefinition
from sharedos.evidence.approvals import ApprovalLedger
from sharedos.evidence.record import (
    MAX_STORED_ARGUMENTS,
    EncodedJson,
    OutcomeRecord,
    digest_of_canonical,
)
from sharedos.evidence.redaction import Secrets, secret_values
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.store import EvidenceStore
from sharedos.kernel.answers import answer, unrecorded
from sharedos.kernel.approvals import ApprovalGate, ApprovalSettings, settle
from sharedos.kernel.arguments import (
    MAX_ARGUMENT_DEPTH,
    copy_of,
    detached,
    json_type,
    schema_problem,
    shape_problem,
)
from sharedos.kernel.attempt import (
    Attempt,
    Ran,
    attempt_record,
    decision_context,
    given_up,
    now,
    scrubbed,
)
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult, LogHook, ProgressHook
from sharedos.kernel.kernel import Kernel, TurnCatalog
from sharedos.kernel.recorder import EvidenceRecorder, EvidenceUnavailable, RecordOnlyStore
from sharedos.kernel.result import ToolResult
from sharedos.kernel.threads import DaemonLane
from sharedos.names import is_valid_tool_name
from sharedos.outcomes import DENIAL_REASONS, Effect, Outcome, ReasonCode, outcome_for_reason
from sharedos.toolpolicy import ToolPolicy

__all__ = ["MAX_ARGUMENT_DEPTH", "HandlerContext", "HandlerResult", "RuntimeHost", "ToolResult"]

logger = logging.getLogger("sharedos.kernel")

#: arguments up to this size (bytes of canonical JSON) take the one-encoding path;
#: larger ones go through the general path, which applies the storage cap
_ONE_PASS_MAX = MAX_STORED_ARGUMENTS // 8
#: the reasons a handler may name for its own failure (anything else is handler_error)
_HANDLER_REASONS = frozenset(
    {
        ReasonCode.HANDLER_ERROR,
        ReasonCode.UPSTREAM_ERROR,
        ReasonCode.UPSTREAM_TIMEOUT,
        ReasonCode.UPSTREAM_UNAVAILABLE,
        ReasonCode.LINKED_RESOURCE,
    }
)


@dataclass(frozen=True, slots=True)
class _Refusal:
    """The verdict of a check that refuses the call; a check that passes returns None."""

    reason: ReasonCode
    detail: str | None = None


#: what a check returns: a refusal, or None to go on
Verdict = _Refusal | None


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
    daemon threads. ``approvals`` configures the approval step
    (``sharedos.kernel.approvals``); it is on whenever the store keeps
    approvals (schema 5), with the default settings when none are given.
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
        self.host_secrets = Secrets(host_secrets)
        writes: Any = store if callable(getattr(store, "begin", None)) else RecordOnlyStore(store)
        self._recorder = EvidenceRecorder(writes, timeout_s=evidence_timeout_s)
        self._handler_lane = DaemonLane("sharedos-handler", max_threads=max_handler_threads)
        #: per-tool credential secrets, keyed by the tool object (tools are immutable)
        self._tool_secrets: dict[int, tuple[ToolDefinition, Secrets]] = {}
        #: the secret argument names of every tool in a registry version (see _check_tool)
        self._view_secret_names: tuple[int, frozenset[str]] | None = None
        #: each context's recorded decision context, encoded once (a turn's calls share one)
        self._context_json: dict[tuple[str, tuple[str, ...]], Any] = {}
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
    ) -> ToolResult:
        """Re-authorize ``call`` for ``context`` and run it; never raises except on cancellation.

        ``diagnostics`` and ``identity`` are stored on the evidence record and
        read by no decision. ``progress`` / ``log`` / ``peer`` are transport
        hooks handed to the handler. The attempt is durable before the
        handler runs, the outcome before this returns.
        """
        attempt = Attempt.begin(call, context, (catalog, diagnostics, identity))
        try:
            verdict = self._authorize(attempt, tool_policy, catalog)
        except Exception as exc:  # fail closed: an internal bug is a failed call, never a crash
            logger.exception("sharedos: internal error authorizing %s", attempt.call_id)
            verdict = _Refusal(ReasonCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            self._redact_conservatively(attempt)
        if verdict is not None and verdict.reason is ReasonCode.APPROVAL_REQUIRED:
            verdict = await self._approval_step(attempt, peer)
        if verdict is not None:
            return await self._conclude(attempt, verdict.reason, verdict.detail)
        return await self._run_allowed(attempt, progress, log, peer)

    async def _approval_step(self, attempt: Attempt, peer: Any) -> Verdict:
        """5a. A call that needs approval: use an approval of this exact call, or ask, or
        refuse naming a pending one (``sharedos.kernel.approvals.settle``). None: it runs."""
        refused = await settle(self.approvals, attempt, self.kernel.policy_hash, peer)
        return None if refused is None else _Refusal(*refused)

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
    ) -> ToolResult:
        """Record and return a refusal decided outside the kernel (e.g. ``turn_closed`` by a bridge).

        The same record, redaction and model-facing message as ``invoke_tool``;
        no check runs and no handler is called. ``reason`` must not be
        ``allowed`` (that is recorded as ``internal_error``). Never raises
        (except on cancellation).
        """
        if reason is ReasonCode.ALLOWED or not isinstance(reason, ReasonCode):
            reason = ReasonCode.INTERNAL_ERROR
            detail = "refuse() was called without a refusal reason"
        attempt = Attempt.begin(
            call, context, (catalog, diagnostics, identity), getattr(call, "arguments", None)
        )
        try:  # only to know which argument values to redact
            self._learn_secrets(attempt, self._lookup(attempt))
        except Exception:
            self._redact_conservatively(attempt)
        return await self._conclude(attempt, reason, detail)

    # -- checks 1-5 -------------------------------------------------------------------

    def _authorize(
        self, attempt: Attempt, tool_policy: ToolPolicy, catalog: TurnCatalog | None
    ) -> Verdict:
        """Checks 1-5 in order; the first refusal, or None when the call may run."""
        return (
            self._check_tool(attempt)
            or self._check_run_policy(attempt, tool_policy)
            or self._check_turn_catalog(attempt, catalog)
            or self._check_arguments(attempt)
            or self._check_decision(attempt)
        )

    def _lookup(self, attempt: Attempt) -> ToolDefinition | None:
        raw = getattr(attempt.call, "tool", None)
        if not is_valid_tool_name(raw):
            return None
        # the turn's own snapshot when the call carries its turn's catalogue (a dict lookup)
        return self.kernel.view_for(attempt.context, attempt.catalog).get_tool(raw)

    def _check_tool(self, attempt: Attempt) -> Verdict:
        """1. The raw name must name a tool of this context's view that a requirement governs."""
        attempt.arguments = getattr(attempt.call, "arguments", None)
        tool = self._lookup(attempt)
        self._learn_secrets(attempt, tool)
        if tool is None or tool.name not in self.kernel.policy.requirements:
            return _Refusal(ReasonCode.TOOL_UNAVAILABLE)
        attempt.tool = tool
        return None

    def _check_run_policy(self, attempt: Attempt, tool_policy: ToolPolicy) -> Verdict:
        """2. The tool must be in the run's managed set."""
        assert attempt.tool is not None
        if not tool_policy.is_managed(attempt.tool.name):
            return _Refusal(ReasonCode.NOT_IN_RUN_POLICY)
        return None

    @staticmethod
    def _check_turn_catalog(attempt: Attempt, catalog: TurnCatalog | None) -> Verdict:
        """3. When a turn catalogue is given, the tool must have been published in it."""
        assert attempt.tool is not None
        if catalog is not None and attempt.tool.name not in catalog.names:
            return _Refusal(ReasonCode.NOT_IN_TURN_CATALOG)
        return None

    @staticmethod
    def _check_arguments(attempt: Attempt) -> Verdict:
        """4. Absent arguments are ``{}``; otherwise an object, at most 64 deep, valid for the schema."""
        tool = attempt.tool
        assert tool is not None
        raw = attempt.arguments
        args: Any = {} if raw is None else raw
        if not isinstance(args, dict):
            return _Refusal(
                ReasonCode.INVALID_ARGUMENTS,
                f"arguments must be a JSON object, got {json_type(args)}",
            )
        shape = shape_problem(args, MAX_ARGUMENT_DEPTH)
        if shape is not None:
            return _Refusal(ReasonCode.INVALID_ARGUMENTS, shape)
        try:
            # The shortcut only ever says "certainly valid"; anything else goes
            # to the full validator, which is the judge.
            fast = tool.input_fast_check
            problem = (
                None
                if fast is not None and fast(args)
                else best_match(tool.input_validator.iter_errors(args))
            )
        except Exception as exc:
            # values no JSON could carry (hostile objects from a Python caller)
            return _Refusal(
                ReasonCode.INVALID_ARGUMENTS,
                f"arguments could not be validated ({type(exc).__name__})",
            )
        if problem is not None:
            return _Refusal(
                ReasonCode.INVALID_ARGUMENTS, schema_problem(problem, tool.secret_arguments)
            )
        attempt.args = args
        return None

    def _check_decision(self, attempt: Attempt) -> Verdict:
        """5. Requirement resolution, resource canonicalization and the decision tree."""
        tool, args, context = attempt.tool, attempt.args, attempt.context
        assert tool is not None and args is not None
        decision = self.kernel.policy.decide(
            tool.name, args, self.kernel.decision_context(context), context_key=context.cache_key
        )
        attempt.decision = decision
        if decision.effect != Effect.ALLOW:
            reason = (
                decision.reason
                if decision.reason in DENIAL_REASONS
                else ReasonCode.NO_MATCHING_PERMIT
            )
            if (reason is ReasonCode.APPROVAL_REQUIRED) != (
                decision.effect is Effect.APPROVAL_REQUIRED
            ):
                reason = ReasonCode.NO_MATCHING_PERMIT  # a decision that contradicts itself
            return _Refusal(reason, decision.detail or None)
        return None

    # -- secrets ------------------------------------------------------------------------

    def _learn_secrets(self, attempt: Attempt, tool: ToolDefinition | None) -> None:
        """Which fields to redact and which values to scrub, for this call.

        A name that resolves to no tool (misspelled, an alias such as
        ``mcp__sharedos__files_read``, a portable ``files_x2e_read``, a
        non-string) could be any tool's, so every secret field of every tool
        in the context's view is redacted (conservative).
        """
        if tool is None:
            attempt.secret_names = self._all_secret_names(attempt)
        else:
            attempt.secret_names = tool.secret_arguments
        secrets = self.host_secrets
        if tool is not None and tool.credentials:
            secrets = secrets.union(self._credentials_of(tool))
        raw = attempt.arguments
        if attempt.secret_names and isinstance(raw, Mapping):
            try:
                values = [
                    v
                    for name in attempt.secret_names
                    if raw.get(name) is not None
                    for v in secret_values(raw[name])
                ]
            except Exception:  # a hostile mapping: its values cannot be read, nor recorded
                values = []
            if values:
                secrets = secrets.union(values)
        attempt.secrets = secrets

    def _redact_conservatively(self, attempt: Attempt) -> None:
        """After a failed lookup: redact every tool's secret fields, or store no arguments."""
        try:
            attempt.secret_names = attempt.secret_names or self._all_secret_names(attempt)
        except Exception:
            attempt.arguments = None  # cannot tell what is secret: keep nothing
        attempt.secrets = attempt.secrets or self.host_secrets

    def _credentials_of(self, tool: ToolDefinition) -> Secrets:
        hit = self._tool_secrets.get(id(tool))
        if hit is not None and hit[0] is tool:
            return hit[1]
        made = Secrets(tool.credentials.values())
        if len(self._tool_secrets) >= 1024:
            self._tool_secrets.clear()
        self._tool_secrets[id(tool)] = (tool, made)
        return made

    def _all_secret_names(self, attempt: Attempt) -> frozenset[str]:
        """The secret argument names of every tool in the view the call was looked up in."""
        registry = self.kernel.registry
        version = registry.version
        cached = self._view_secret_names
        view = self.kernel.view_for(attempt.context, attempt.catalog)
        if view.overlay:
            return view.secret_argument_names()  # computed once per view (per turn)
        if cached is not None and cached[0] == version:
            return cached[1]
        names = view.secret_argument_names()
        self._view_secret_names = (version, names)
        return names

    # -- steps 6-8: an allowed call -------------------------------------------------------

    def _record(self, attempt: Attempt) -> Any:
        """The attempt's evidence record, its decision context encoded once per context."""
        context = attempt.context
        key = (context.cache_key, context.roles)
        made = self._context_json.get(key)
        if made is None:
            if len(self._context_json) >= 4096:  # a long-lived host: bounded
                self._context_json.clear()
            made = self._context_json[key] = decision_context(context)
        return attempt_record(attempt, self.kernel.policy_hash, made)

    async def _run_allowed(
        self, attempt: Attempt, progress: ProgressHook | None, log: LogHook | None, peer: Any
    ) -> ToolResult:
        tool, args, decision = attempt.tool, attempt.args, attempt.decision
        assert tool is not None and args is not None and decision is not None
        if tool.handler is None:
            return await self._conclude(
                attempt, ReasonCode.HANDLER_ERROR, "the tool has no handler"
            )
        # the handler gets a copy: it cannot alter what is recorded
        handler_args, canonical = detached(args)
        if (
            canonical is not None
            and attempt.arguments is not None  # absent arguments stay absent in the record, not {}
            and not attempt.secret_names  # redacted ones are stored and digested redacted
            and len(canonical) <= _ONE_PASS_MAX
        ):
            # The same bytes give the digest and the stored text.
            attempt.stored = (
                EncodedJson(copy_of(args, canonical), canonical.decode("utf-8")),
                digest_of_canonical(canonical),
            )
        # 6. write-ahead: no effect without a durable attempt
        try:
            seq = await self._recorder.begin(
                self._record(attempt),
                lambda why: given_up(attempt, why, self.evidence_timeout_s, ran=False),
            )
        except EvidenceUnavailable as exc:
            return unrecorded(attempt, exc.cause, -1, ran=False)
        hctx = HandlerContext(
            call=attempt.call,
            context=attempt.context,
            decision=decision,
            credentials=tool.credentials,
            progress=progress,
            log=log,
            peer=peer,
        )
        # 7. the handler
        try:
            ran = await self._run_handler(tool, handler_args, hctx)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # bounded by the recorder's own timeout
                await self._finish_quietly(
                    attempt, seq, Ran(Outcome.CANCELLED, ReasonCode.CANCELLED)
                )
            raise
        except Exception as exc:  # fail closed
            logger.exception("sharedos: internal error running %s", attempt.call_id)
            ran = Ran(Outcome.FAILED, ReasonCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        # 8. the outcome, then the answer
        error = scrubbed(attempt, ran.error)
        outcome = OutcomeRecord(ran.outcome, now(), attempt.elapsed_ms(), ran.reason, error)
        try:
            seq = await self._recorder.finish(
                seq,
                outcome,
                lambda why: given_up(attempt, why, self.evidence_timeout_s, ran=True, had=ran),
            )
        except EvidenceUnavailable as exc:
            return unrecorded(attempt, exc.cause, seq, ran=True)
        return answer(attempt, seq, ran, error)

    async def _finish_quietly(self, attempt: Attempt, seq: int, ran: Ran) -> None:
        outcome = OutcomeRecord(ran.outcome, now(), attempt.elapsed_ms(), ran.reason, None)
        # a failure is reported by the recorder; the attempt row stands (interrupted)
        with contextlib.suppress(EvidenceUnavailable):
            await self._recorder.finish(seq, outcome, lambda why: outcome)

    async def _run_handler(
        self, tool: ToolDefinition, args: dict[str, Any], hctx: HandlerContext
    ) -> Ran:
        """Step 7: the handler under its timeout, its result judged."""
        with anyio.move_on_after(self.handler_timeout_s) as scope:
            try:
                result = await self._call_handler(tool, args, hctx)
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
            return Ran(
                Outcome.FAILED, ReasonCode.TIMEOUT, f"no result within {self.handler_timeout_s:g} s"
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

    async def _call_handler(
        self, tool: ToolDefinition, args: dict[str, Any], hctx: HandlerContext
    ) -> Any:
        handler = tool.handler
        assert handler is not None
        if tool.handler_is_async:
            return await handler(args, hctx)
        # A sync handler runs on a daemon lane thread; on timeout it is dropped if it
        # has not started, else abandoned (Python cannot kill it) and its result discarded.
        result = await self._handler_lane.run_sync(_guarded, handler, args, hctx)
        if inspect.isawaitable(result):
            result = await result
        return result

    # -- a call refused before any handler ------------------------------------------------

    async def _conclude(
        self, attempt: Attempt, reason: ReasonCode, detail: str | None
    ) -> ToolResult:
        """A call refused before any handler: one commit, then the refusal."""
        outcome = outcome_for_reason(reason)
        error = scrubbed(attempt, detail)
        record = self._record(attempt).with_outcome(
            OutcomeRecord(outcome, now(), attempt.elapsed_ms(), reason, error)
        )
        had = Ran(outcome, reason, error)
        try:
            seq = await self._recorder.record(
                record,
                lambda why: given_up(attempt, why, self.evidence_timeout_s, ran=False, had=had),
            )
        except EvidenceUnavailable as exc:
            return unrecorded(attempt, exc.cause, -1, ran=False)
        return answer(attempt, seq, had, error)

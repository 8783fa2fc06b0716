"""``RuntimeHost``: re-authorize the exact call, write the attempt ahead, run it, record the outcome.

Order of checks (each step's refusal is final; later steps do not run):

1. tool lookup: malformed name, unknown tool, or no requirement -> denied ``tool_unavailable``
2. run policy: not in the ToolPolicy's managed set               -> denied ``not_in_run_policy``
3. turn catalogue (when given): not published this turn           -> denied ``not_in_turn_catalog``
4. arguments vs ``inputSchema`` (non-object or schema violation)  -> failed ``invalid_arguments``
5. ``policy.decide``: resource resolution + decision tree         -> denied ``unresolvable_resource``
                                                                     / ``no_matching_permit`` / ``forbidden``
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
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
from jsonschema.exceptions import best_match

from sharedos.catalog.definition import ToolDefinition
from sharedos.evidence.record import (
    MAX_STORED_ARGUMENTS,
    EncodedJson,
    EvidenceRecord,
    OutcomeRecord,
    arguments_digest,
    digest_of_canonical,
    encoded_text,
    plain_json,
    redact_arguments,
    safe_text,
    storable_arguments,
)
from sharedos.evidence.redaction import NO_SECRETS, Secrets, non_object_marker, secret_values
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.store import EvidenceStore
from sharedos.kernel.arguments import (
    MAX_ARGUMENT_DEPTH,
    copy_of,
    detached,
    json_type,
    schema_problem,
    too_deep,
)
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult, LogHook, ProgressHook
from sharedos.kernel.kernel import Kernel, TurnCatalog
from sharedos.kernel.messages import refusal_content
from sharedos.kernel.policy_api import DecisionLike, rule_id
from sharedos.kernel.recorder import (
    EvidenceRecorder,
    EvidenceUnavailable,
    GiveUp,
    RecordOnlyStore,
)
from sharedos.kernel.threads import DaemonLane
from sharedos.names import is_valid_tool_name
from sharedos.outcomes import DENIAL_REASONS, Effect, Outcome, ReasonCode, outcome_for_reason
from sharedos.toolpolicy import ToolPolicy

__all__ = ["MAX_ARGUMENT_DEPTH", "HandlerContext", "HandlerResult", "RuntimeHost", "ToolResult"]

logger = logging.getLogger("sharedos.kernel")

_MAX_ERROR = 2000
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
    }
)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The answer to one call. ``outcome`` succeeded / denied / failed (cancelled re-raises).

    ``content`` and ``structured`` are exactly what the harness is given: for a
    success the handler's; for anything else the one refusal text of
    ``sharedos.kernel.messages`` and its payload (or, for a handler failure
    with ``passthrough``, the handler's own error result).
    """

    call_id: str
    tool: str
    outcome: Outcome
    reason: ReasonCode | None
    decision: DecisionLike | None
    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    error: str | None
    #: the evidence record's sequence number; -1 when no record could be written
    evidence_seq: int

    @property
    def is_error(self) -> bool:
        """True for every outcome but ``succeeded`` (MCP ``isError``)."""
        return self.outcome is not Outcome.SUCCEEDED

    def to_mcp(self) -> dict[str, Any]:
        """An MCP ``CallToolResult`` in wire spelling (a refusal is a result, never an error)."""
        out: dict[str, Any] = {"content": self.content, "isError": self.is_error}
        if self.structured is not None:
            out["structuredContent"] = self.structured
        return out

    @classmethod
    def refusal(
        cls,
        reason: ReasonCode,
        tool: str,
        call_id: str,
        *,
        detail: str | None = None,
        decision: DecisionLike | None = None,
        evidence_seq: int = -1,
        ran: bool = False,
    ) -> ToolResult:
        """A non-success result, its text and payload written by ``sharedos.kernel.messages``."""
        resource = decision.resource if decision is not None else None
        rules = tuple(decision.rule_ids) if decision is not None else ()
        content, structured = refusal_content(
            reason, tool, call_id, resource=resource, rule_ids=rules, detail=detail, ran=ran
        )
        return cls(
            call_id=call_id,
            tool=tool,
            outcome=outcome_for_reason(reason),
            reason=reason,
            decision=decision,
            content=content,
            structured=structured,
            error=detail,
            evidence_seq=evidence_seq,
        )


@dataclass(frozen=True, slots=True)
class _Refusal:
    """The verdict of a check that refuses the call; a check that passes returns None."""

    reason: ReasonCode
    detail: str | None = None


#: what a check returns: a refusal, or None to go on
Verdict = _Refusal | None


@dataclass(frozen=True, slots=True)
class _Ran:
    """What the handler step ended in."""

    outcome: Outcome
    reason: ReasonCode | None = None
    error: str | None = None
    result: HandlerResult | None = None


@dataclass(slots=True)
class _Attempt:
    """What is known about an attempt so far; becomes the evidence record."""

    call: ToolCall
    context: AccessContext
    tool_name: str
    call_id: str
    started_at: str
    t0: float
    catalog: TurnCatalog | None
    diagnostics: Mapping[str, Any] | None
    identity: Mapping[str, Any] | None
    tool: ToolDefinition | None = None
    arguments: Any = None
    args: dict[str, Any] | None = None
    decision: DecisionLike | None = None
    secret_names: frozenset[str] = frozenset()
    secrets: Secrets = NO_SECRETS
    #: the stored arguments and their digest, when made from the one canonical encoding
    #: before the handler ran (else they are derived from ``arguments``)
    stored: tuple[Any, str] | None = None

    @classmethod
    def begin(
        cls,
        call: ToolCall,
        context: AccessContext,
        meta: tuple[TurnCatalog | None, Mapping[str, Any] | None, Mapping[str, Any] | None],
        arguments: Any = None,
    ) -> _Attempt:
        """A new attempt at ``call``, timed from now."""
        return cls(
            call=call,
            context=context,
            tool_name=safe_text(getattr(call, "tool", None)),
            call_id=safe_text(getattr(call, "call_id", ""), 256),
            started_at=_now(),
            t0=time.perf_counter(),
            catalog=meta[0],
            diagnostics=meta[1],
            identity=meta[2],
            arguments=arguments,
        )

    def elapsed_ms(self) -> float:
        """Milliseconds since the attempt began."""
        return round((time.perf_counter() - self.t0) * 1000.0, 3)


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


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


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
    daemon threads.
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
        attempt = _Attempt.begin(call, context, (catalog, diagnostics, identity))
        try:
            verdict = self._authorize(attempt, tool_policy, catalog)
        except Exception as exc:  # fail closed: an internal bug is a failed call, never a crash
            logger.exception("sharedos: internal error authorizing %s", attempt.call_id)
            verdict = _Refusal(ReasonCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            self._redact_conservatively(attempt)
        if verdict is not None:
            return await self._conclude(attempt, verdict.reason, verdict.detail)
        return await self._run_allowed(attempt, progress, log, peer)

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
        attempt = _Attempt.begin(
            call, context, (catalog, diagnostics, identity), getattr(call, "arguments", None)
        )
        try:  # only to know which argument values to redact
            self._learn_secrets(attempt, self._lookup(attempt))
        except Exception:
            self._redact_conservatively(attempt)
        return await self._conclude(attempt, reason, detail)

    # -- checks 1-5 -------------------------------------------------------------------

    def _authorize(
        self, attempt: _Attempt, tool_policy: ToolPolicy, catalog: TurnCatalog | None
    ) -> Verdict:
        """Checks 1-5 in order; the first refusal, or None when the call may run."""
        return (
            self._check_tool(attempt)
            or self._check_run_policy(attempt, tool_policy)
            or self._check_turn_catalog(attempt, catalog)
            or self._check_arguments(attempt)
            or self._check_decision(attempt)
        )

    def _lookup(self, attempt: _Attempt) -> ToolDefinition | None:
        raw = getattr(attempt.call, "tool", None)
        if not is_valid_tool_name(raw):
            return None
        return self.kernel.view(attempt.context).get_tool(raw)

    def _check_tool(self, attempt: _Attempt) -> Verdict:
        """1. The raw name must name a tool of this context's view that a requirement governs."""
        attempt.arguments = getattr(attempt.call, "arguments", None)
        tool = self._lookup(attempt)
        self._learn_secrets(attempt, tool)
        if tool is None or tool.name not in self.kernel.policy.requirements:
            return _Refusal(ReasonCode.TOOL_UNAVAILABLE)
        attempt.tool = tool
        return None

    def _check_run_policy(self, attempt: _Attempt, tool_policy: ToolPolicy) -> Verdict:
        """2. The tool must be in the run's managed set."""
        assert attempt.tool is not None
        if not tool_policy.is_managed(attempt.tool.name):
            return _Refusal(ReasonCode.NOT_IN_RUN_POLICY)
        return None

    @staticmethod
    def _check_turn_catalog(attempt: _Attempt, catalog: TurnCatalog | None) -> Verdict:
        """3. When a turn catalogue is given, the tool must have been published in it."""
        assert attempt.tool is not None
        if catalog is not None and attempt.tool.name not in catalog.names:
            return _Refusal(ReasonCode.NOT_IN_TURN_CATALOG)
        return None

    @staticmethod
    def _check_arguments(attempt: _Attempt) -> Verdict:
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
        if too_deep(args, MAX_ARGUMENT_DEPTH):
            return _Refusal(
                ReasonCode.INVALID_ARGUMENTS,
                f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels",
            )
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

    def _check_decision(self, attempt: _Attempt) -> Verdict:
        """5. Requirement resolution, resource canonicalization and the decision tree."""
        tool, args, context = attempt.tool, attempt.args, attempt.context
        assert tool is not None and args is not None
        decision = self.kernel.policy.decide(
            tool.name, args, context.policy_input, context_key=context.cache_key
        )
        attempt.decision = decision
        if decision.effect != Effect.ALLOW:
            reason = (
                decision.reason
                if decision.reason in DENIAL_REASONS
                else ReasonCode.NO_MATCHING_PERMIT
            )
            return _Refusal(reason, decision.detail or None)
        return None

    # -- secrets ------------------------------------------------------------------------

    def _learn_secrets(self, attempt: _Attempt, tool: ToolDefinition | None) -> None:
        """Which fields to redact and which values to scrub, for this call.

        A name that resolves to no tool (misspelled, an alias such as
        ``mcp__sharedos__files_read``, a portable ``files_x2e_read``, a
        non-string) could be any tool's, so every secret field of every tool
        in the context's view is redacted (conservative).
        """
        if tool is None:
            attempt.secret_names = self._all_secret_names(attempt.context)
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

    def _redact_conservatively(self, attempt: _Attempt) -> None:
        """After a failed lookup: redact every tool's secret fields, or store no arguments."""
        try:
            attempt.secret_names = attempt.secret_names or self._all_secret_names(attempt.context)
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

    def _all_secret_names(self, context: AccessContext) -> frozenset[str]:
        """The secret argument names of every tool in ``context``'s view."""
        registry = self.kernel.registry
        version = registry.version
        cached = self._view_secret_names
        view = self.kernel.view(context)
        if not view.overlay and cached is not None and cached[0] == version:
            return cached[1]
        names = frozenset(n for t in view.tools() for n in t.secret_arguments)
        if not view.overlay:
            self._view_secret_names = (version, names)
        return names

    # -- steps 6-8: an allowed call -------------------------------------------------------

    async def _run_allowed(
        self, attempt: _Attempt, progress: ProgressHook | None, log: LogHook | None, peer: Any
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
                self._record(attempt), lambda why: self._given_up(attempt, why, ran=False)
            )
        except EvidenceUnavailable as exc:
            return self._unrecorded(attempt, exc, -1, ran=False)
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
                    attempt, seq, _Ran(Outcome.CANCELLED, ReasonCode.CANCELLED)
                )
            raise
        except Exception as exc:  # fail closed
            logger.exception("sharedos: internal error running %s", attempt.call_id)
            ran = _Ran(Outcome.FAILED, ReasonCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        # 8. the outcome, then the answer
        error = self._scrubbed(attempt, ran.error)
        outcome = OutcomeRecord(ran.outcome, _now(), attempt.elapsed_ms(), ran.reason, error)
        try:
            seq = await self._recorder.finish(
                seq, outcome, lambda why: self._given_up(attempt, why, ran=True, had=ran)
            )
        except EvidenceUnavailable as exc:
            return self._unrecorded(attempt, exc, seq, ran=True)
        return self._answer(attempt, seq, ran, error)

    async def _finish_quietly(self, attempt: _Attempt, seq: int, ran: _Ran) -> None:
        outcome = OutcomeRecord(ran.outcome, _now(), attempt.elapsed_ms(), ran.reason, None)
        # a failure is reported by the recorder; the attempt row stands (interrupted)
        with contextlib.suppress(EvidenceUnavailable):
            await self._recorder.finish(seq, outcome, lambda why: outcome)

    async def _run_handler(
        self, tool: ToolDefinition, args: dict[str, Any], hctx: HandlerContext
    ) -> _Ran:
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
                return _Ran(
                    Outcome.FAILED, ReasonCode.HANDLER_ERROR, f"{type(exc).__name__}: {exc}"
                )
        if scope.cancelled_caught:
            return _Ran(
                Outcome.FAILED, ReasonCode.TIMEOUT, f"no result within {self.handler_timeout_s:g} s"
            )
        if not isinstance(result, HandlerResult):
            return _Ran(
                Outcome.FAILED,
                ReasonCode.HANDLER_ERROR,
                f"handler returned {type(result).__name__}, not a HandlerResult",
            )
        if not _well_formed(result):
            # security: a result no harness can be given is a failure, never a recorded success
            return _Ran(
                Outcome.FAILED,
                ReasonCode.HANDLER_ERROR,
                "handler returned malformed content (content must be a list of MCP content "
                "block objects with a string 'type'; structured must be an object or None)",
            )
        if result.is_error:
            reason = (
                result.reason if result.reason in _HANDLER_REASONS else ReasonCode.HANDLER_ERROR
            )
            return _Ran(
                Outcome.FAILED, reason, _text_of(result) or "the tool reported an error", result
            )
        return _Ran(Outcome.SUCCEEDED, result=result)

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

    # -- records and answers ----------------------------------------------------------------

    async def _conclude(
        self, attempt: _Attempt, reason: ReasonCode, detail: str | None
    ) -> ToolResult:
        """A call refused before any handler: one commit, then the refusal."""
        outcome = outcome_for_reason(reason)
        error = self._scrubbed(attempt, detail)
        record = self._record(attempt).with_outcome(
            OutcomeRecord(outcome, _now(), attempt.elapsed_ms(), reason, error)
        )
        try:
            seq = await self._recorder.record(
                record,
                lambda why: self._given_up(
                    attempt, why, ran=False, had=_Ran(outcome, reason, error)
                ),
            )
        except EvidenceUnavailable as exc:
            return self._unrecorded(attempt, exc, -1, ran=False)
        return self._answer(attempt, seq, _Ran(outcome, reason, error), error)

    def _given_up(
        self, attempt: _Attempt, why: GiveUp, *, ran: bool, had: _Ran | None = None
    ) -> OutcomeRecord:
        """What to write for a write given up on: what the caller was told (or ``cancelled``)."""
        now, ms = _now(), attempt.elapsed_ms()
        if why == "cancelled":
            if had is not None and not ran:
                return OutcomeRecord(
                    had.outcome, now, ms, had.reason, had.error
                )  # a refusal stands
            return OutcomeRecord(Outcome.CANCELLED, now, ms, ReasonCode.CANCELLED, None)
        if ran and had is not None:
            ended = str(had.outcome) + (f"/{had.reason}" if had.reason else "")
            error = (
                f"the outcome could not be committed within {self.evidence_timeout_s:g} s; "
                f"the tool had finished: {ended}"
            )
        else:
            error = (
                f"the attempt could not be committed within {self.evidence_timeout_s:g} s; "
                "nothing ran"
            )
        return OutcomeRecord(Outcome.FAILED, now, ms, ReasonCode.EVIDENCE_UNAVAILABLE, error)

    def _scrubbed(self, attempt: _Attempt, text: str | None) -> str | None:
        if text is None:
            return None
        # scrub before truncating: a secret straddling the cut would leave its prefix
        return safe_text(attempt.secrets.scrub(str(text)), _MAX_ERROR)

    def _record(self, attempt: _Attempt) -> EvidenceRecord:
        """The attempt row: everything known before the handler runs (no outcome)."""
        context, decision, tool, secrets = (
            attempt.context,
            attempt.decision,
            attempt.tool,
            attempt.secrets,
        )
        if attempt.stored is not None:
            stored_args, digest = attempt.stored
        else:
            stored_args = self._stored_arguments(attempt.arguments, attempt.secret_names)
            digest = arguments_digest(stored_args)
        if secrets:
            text = encoded_text(stored_args)
            if secrets.found_in(text if text is not None else repr(stored_args)):
                stored_args = storable_arguments(secrets.scrub_json(stored_args))
                digest = arguments_digest(stored_args)
        catalog = attempt.catalog
        return EvidenceRecord(
            turn_id=context.turn_id,
            call_id=secrets.scrub(attempt.call_id) if secrets else attempt.call_id,
            tool=secrets.scrub(attempt.tool_name) if secrets else attempt.tool_name,
            started_at=attempt.started_at,
            arguments_digest=digest,
            arguments=stored_args,
            effect=str(decision.effect) if decision is not None else None,
            # security: a resource holding a lone surrogate (JSON can carry one) must not
            # make the record unwritable, which would erase the attempt
            resource=self._scrubbed(attempt, decision.resource)
            if decision is not None and decision.resource is not None
            else None,
            namespace=(decision.namespace if decision is not None else None)
            or (tool.namespace if tool is not None else None),
            action=decision.action if decision is not None else None,
            rule_ids=tuple(rule_id(r) for r in decision.rule_ids) if decision is not None else (),
            catalog_hash=catalog.catalog_hash if catalog is not None else None,
            policy_hash=self.kernel.policy_hash,
            principal=context.principal,
            tenant=context.tenant,
            diagnostics=self._stored_json(attempt.diagnostics, secrets),
            identity=self._stored_json(attempt.identity, secrets),
        )

    @staticmethod
    def _stored_arguments(arguments: Any, secret_names: frozenset[str]) -> Any:
        """Arguments as recorded: secret fields redacted; a non-object never stored (a marker is)."""
        if arguments is None:
            return None
        if not isinstance(arguments, Mapping):
            return non_object_marker(arguments)
        try:
            return storable_arguments(redact_arguments(arguments, secret_names))
        except Exception:  # a hostile mapping: record that, never fail the record over it
            return {"$unstorable": safe_text(type(arguments).__name__)}

    @staticmethod
    def _stored_json(value: Mapping[str, Any] | None, secrets: Secrets) -> dict[str, Any] | None:
        stored = plain_json(value)
        if stored is None or not secrets:
            return stored
        text = encoded_text(stored)
        if secrets.found_in(text if text is not None else repr(stored)):
            return plain_json(secrets.scrub_json(stored))
        return stored

    def _answer(self, attempt: _Attempt, seq: int, ran: _Ran, error: str | None) -> ToolResult:
        """The result the caller is given, once its record is durable."""
        secrets = attempt.secrets
        result = ran.result
        if ran.outcome is Outcome.SUCCEEDED and result is not None:
            content, structured = list(result.content), result.structured
            if secrets:
                content, structured = self._scrub_result(attempt, content, structured)
            return ToolResult(
                call_id=attempt.call_id,
                tool=attempt.tool_name,
                outcome=Outcome.SUCCEEDED,
                reason=None,
                decision=attempt.decision,
                content=content,
                structured=structured,
                error=None,
                evidence_seq=seq,
            )
        assert ran.reason is not None
        if result is not None and result.passthrough:
            # the handler's own error result (a brokered upstream's), unchanged but scrubbed
            content, structured = self._scrub_result(
                attempt, list(result.content), result.structured
            )
            return ToolResult(
                call_id=attempt.call_id,
                tool=attempt.tool_name,
                outcome=ran.outcome,
                reason=ran.reason,
                decision=attempt.decision,
                content=content,
                structured=structured,
                error=error,
                evidence_seq=seq,
            )
        shown = error
        if ran.reason is ReasonCode.INTERNAL_ERROR and error:
            shown = "internal error (" + error.split(":", 1)[0] + ")"  # details stay in the log
        return self._refusal(attempt, ran.reason, shown, error, seq)

    def _refusal(
        self,
        attempt: _Attempt,
        reason: ReasonCode,
        shown: str | None,
        error: str | None,
        seq: int,
        *,
        ran: bool = False,
    ) -> ToolResult:
        secrets = attempt.secrets
        tool_name = secrets.scrub(attempt.tool_name) if secrets else attempt.tool_name
        call_id = secrets.scrub(attempt.call_id) if secrets else attempt.call_id
        result = ToolResult.refusal(
            reason,
            tool_name,
            call_id,
            detail=shown,
            decision=attempt.decision,
            evidence_seq=seq,
            ran=ran,
        )
        if secrets:
            content, structured = self._scrub_result(attempt, result.content, result.structured)
            return ToolResult(
                call_id=result.call_id,
                tool=result.tool,
                outcome=result.outcome,
                reason=result.reason,
                decision=result.decision,
                content=content,
                structured=structured,
                error=error,
                evidence_seq=seq,
            )
        if error is not shown:
            return ToolResult(
                call_id=result.call_id,
                tool=result.tool,
                outcome=result.outcome,
                reason=result.reason,
                decision=result.decision,
                content=result.content,
                structured=result.structured,
                error=error,
                evidence_seq=seq,
            )
        return result

    @staticmethod
    def _scrub_result(
        attempt: _Attempt, content: list[dict[str, Any]], structured: dict[str, Any] | None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """Content and payload with the call's secrets scrubbed out of every string."""
        secrets = attempt.secrets
        if not secrets:
            return content, structured
        scrubbed = secrets.scrub_json(content)
        return (
            scrubbed if isinstance(scrubbed, list) else content,
            secrets.scrub_json(structured) if structured is not None else None,
        )

    def _unrecorded(
        self, attempt: _Attempt, exc: EvidenceUnavailable, seq: int, *, ran: bool
    ) -> ToolResult:
        """The answer when the store could not commit: failed / evidence_unavailable (fail closed)."""
        if ran:
            shown = f"the evidence store could not record the outcome ({exc.cause})"
        else:
            shown = f"the evidence store is unavailable ({exc.cause}); nothing ran"
        return self._refusal(attempt, ReasonCode.EVIDENCE_UNAVAILABLE, shown, shown, seq, ran=ran)

"""``RuntimeHost``: re-authorize the exact call, run the handler, record the attempt.

Order of checks (each step's refusal is final; later steps do not run):

1. tool lookup: malformed name, unknown tool, or no requirement -> denied ``tool_unavailable``
2. run policy: not in the ToolPolicy's managed set               -> denied ``not_in_run_policy``
3. turn catalogue (when given): not published this turn           -> denied ``not_in_turn_catalog``
4. arguments vs ``inputSchema`` (non-object or schema violation)  -> failed ``invalid_arguments``
5. ``policy.decide``: resource resolution + decision tree         -> denied ``unresolvable_resource``
                                                                     / ``no_matching_permit`` / ``forbidden``
6. the handler, under a timeout                                   -> failed ``handler_error`` / ``timeout``

Cancellation at any point records ``cancelled`` and re-raises. Anything else
unexpected is ``failed`` / ``internal_error`` (fail closed). The evidence
record is written before ``invoke_tool`` returns.
"""

from __future__ import annotations

import copy
import inspect
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
from jsonschema.exceptions import best_match

from sharedos.catalog.definition import ToolDefinition
from sharedos.evidence.record import (
    MAX_STORED_ARGUMENTS,
    EncodedJson,
    EvidenceRecord,
    arguments_digest,
    digest_of_canonical,
    fast_canonical,
    plain_json,
    redact_arguments,
    safe_text,
    scrub_secrets,
    storable_arguments,
)
from sharedos.evidence.store import EvidenceStore
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult, LogHook, ProgressHook
from sharedos.kernel.kernel import Kernel, TurnCatalog
from sharedos.kernel.messages import refusal_message
from sharedos.kernel.policy_api import DecisionLike, rule_id
from sharedos.names import is_valid_tool_name
from sharedos.outcomes import DENIAL_REASONS, Effect, Outcome, ReasonCode, outcome_for_reason
from sharedos.toolpolicy import ToolPolicy

__all__ = ["HandlerContext", "HandlerResult", "RuntimeHost", "ToolResult"]

_MAX_ERROR = 2000
#: deeper arguments are refused as invalid (no JSON tool input needs more, and
#: validating or copying them recursively would exhaust the stack)
MAX_ARGUMENT_DEPTH = 64


def _too_deep(value: Any, limit: int) -> bool:
    """True when ``value`` nests dicts/lists more than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The answer to one call. ``outcome`` succeeded / denied / failed (cancelled re-raises)."""

    call_id: str
    tool: str
    outcome: Outcome
    reason: ReasonCode | None
    decision: DecisionLike | None
    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    error: str | None
    #: the evidence record's sequence number; -1 only when the store could not be written
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


@dataclass(slots=True)
class _Attempt:
    """What is known about an attempt so far; becomes the evidence record."""

    call: ToolCall
    context: AccessContext
    tool_name: str
    started_at: str
    t0: float
    tool: ToolDefinition | None = None
    arguments: Any = None
    decision: DecisionLike | None = None
    secrets: tuple[str, ...] = ()
    #: the stored arguments and their digest, when made from the one canonical encoding
    #: before the handler ran (else ``_finish`` derives both from ``arguments``)
    stored: tuple[EncodedJson, str] | None = None

    @classmethod
    def begin(cls, call: ToolCall, context: AccessContext, arguments: Any = None) -> _Attempt:
        """A new attempt at ``call``, timed from now."""
        return cls(
            call=call,
            context=context,
            tool_name=safe_text(getattr(call, "tool", None)),
            started_at=_now(),
            t0=time.perf_counter(),
            arguments=arguments,
        )


# Encoders built once: ``json.dumps`` with keyword arguments constructs a new
# encoder per call, which costs more than encoding small arguments. They hold
# only immutable configuration.
_ENCODE = json.JSONEncoder().encode
#: arguments up to this size (bytes of canonical JSON) take the one-encoding path in
#: ``_finish``; larger ones go through the general path, which applies the storage cap
_ONE_PASS_MAX = MAX_STORED_ARGUMENTS // 8


_SCALARS = frozenset({str, int, bool, type(None)})


def _detached(args: dict[str, Any]) -> tuple[dict[str, Any], bytes | None]:
    """A copy of validated arguments that shares nothing with the caller's object,
    and their RFC 8785 bytes when the fast encoder could make them (reused for the
    evidence digest and the stored copy, so the arguments are encoded once per call)."""
    canonical = fast_canonical(args)
    if canonical is not None:
        return _copy_of(args, canonical), canonical
    try:
        copied: dict[str, Any] = json.loads(_ENCODE(args))
        return copied, None
    except (TypeError, ValueError):  # non-JSON values a Python caller passed; schema allowed them
        return copy.deepcopy(args), None


def _copy_of(args: dict[str, Any], canonical: bytes) -> dict[str, Any]:
    """A detached copy of ``args``, whose RFC 8785 bytes are ``canonical``."""
    if all(type(v) in _SCALARS for v in args.values()):
        return dict(args)  # flat, immutable values: a shallow copy shares nothing
    copied: dict[str, Any] = json.loads(canonical)
    return copied


class _HandlerAborted(Exception):
    """Carries a sync handler's non-``Exception`` ``BaseException`` across the thread boundary.

    A ``GeneratorExit`` set on the worker's future and re-raised at the
    ``await`` closes the awaiting coroutine instead of reaching its ``except``.
    """

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


class RuntimeHost:
    """Runs calls for one kernel and records every attempt in ``evidence``."""

    def __init__(
        self, kernel: Kernel, evidence: EvidenceStore, *, handler_timeout_s: float = 30.0
    ) -> None:
        if handler_timeout_s <= 0:
            raise ValueError("handler_timeout_s must be positive")
        self.kernel = kernel
        self.evidence = evidence
        self.handler_timeout_s = handler_timeout_s

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
        hooks handed to the handler.
        """
        raw_tool = getattr(call, "tool", None)
        attempt = _Attempt.begin(call, context)
        meta = (catalog, diagnostics, identity)
        try:
            result = await self._authorize_and_run(
                attempt, raw_tool, tool_policy, catalog, progress, log, peer
            )
        except anyio.get_cancelled_exc_class():
            # Recording is synchronous (no await), so it completes inside a cancelled scope.
            self._finish(attempt, Outcome.CANCELLED, ReasonCode.CANCELLED, None, meta)
            raise
        except Exception as exc:  # fail closed: an internal bug is a failed call, never a crash
            return self._finish(
                attempt,
                Outcome.FAILED,
                ReasonCode.INTERNAL_ERROR,
                f"{type(exc).__name__}: {exc}",
                meta,
            )
        outcome, reason, error, handler_result = result
        return self._finish(attempt, outcome, reason, error, meta, handler_result)

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
        ``allowed`` (that is recorded as ``internal_error``). Never raises.
        """
        if reason is ReasonCode.ALLOWED:
            reason = ReasonCode.INTERNAL_ERROR
            detail = "refuse() was called with 'allowed'"
        raw_tool = getattr(call, "tool", None)
        attempt = _Attempt.begin(call, context, getattr(call, "arguments", None))
        try:  # only to know which argument values to redact
            if is_valid_tool_name(raw_tool):
                attempt.tool = self.kernel.view(context).get_tool(raw_tool)
        except Exception:
            attempt.tool = None
        if attempt.tool is not None:
            attempt.secrets = self._secret_values(attempt.tool, attempt.arguments)
        return self._finish(
            attempt, outcome_for_reason(reason), reason, detail, (catalog, diagnostics, identity)
        )

    @staticmethod
    def _secret_values(tool: ToolDefinition, raw_args: Any) -> tuple[str, ...]:
        """Values that must never appear in a recorded error: credentials, and the
        values of arguments the tool marks secret (a handler may echo them)."""
        if not tool.credentials and not tool.secret_arguments:
            return ()
        values = [c.get_secret_value() for c in tool.credentials.values()]
        if isinstance(raw_args, dict):
            values.extend(
                str(raw_args[name])
                for name in tool.secret_arguments
                if raw_args.get(name) is not None
            )
        return tuple(sorted(values, key=len, reverse=True))

    async def _authorize_and_run(
        self,
        attempt: _Attempt,
        raw_tool: object,
        tool_policy: ToolPolicy,
        catalog: TurnCatalog | None,
        progress: ProgressHook | None,
        log: LogHook | None,
        peer: Any,
    ) -> tuple[Outcome, ReasonCode | None, str | None, HandlerResult | None]:
        call, context, kernel = attempt.call, attempt.context, self.kernel
        raw_args = getattr(call, "arguments", None)
        attempt.arguments = raw_args
        # 1. tool lookup
        tool = kernel.view(context).get_tool(raw_tool) if is_valid_tool_name(raw_tool) else None
        if tool is None or tool.name not in kernel.policy.requirements:
            return self._refuse(attempt, ReasonCode.TOOL_UNAVAILABLE)
        attempt.tool = tool
        attempt.secrets = self._secret_values(tool, raw_args)
        # 2. run policy
        if not tool_policy.is_managed(tool.name):
            return self._refuse(attempt, ReasonCode.NOT_IN_RUN_POLICY)
        # 3. turn catalogue
        if catalog is not None and tool.name not in catalog.names:
            return self._refuse(attempt, ReasonCode.NOT_IN_TURN_CATALOG)
        # 4. arguments
        args: Any = {} if raw_args is None else raw_args
        if not isinstance(args, dict):
            return (
                Outcome.FAILED,
                ReasonCode.INVALID_ARGUMENTS,
                f"arguments must be a JSON object, got {type(args).__name__}",
                None,
            )
        if _too_deep(args, MAX_ARGUMENT_DEPTH):
            return (
                Outcome.FAILED,
                ReasonCode.INVALID_ARGUMENTS,
                f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels",
                None,
            )
        try:
            # The shortcut only ever says "certainly valid"; anything else goes
            # to the full validator, which is the judge and writes the message.
            fast = tool.input_fast_check
            problem = (
                None
                if fast is not None and fast(args)
                else best_match(tool.input_validator.iter_errors(args))
            )
        except Exception as exc:
            # values no JSON could carry (hostile objects from a Python caller)
            detail = f"arguments could not be validated ({type(exc).__name__})"
            return Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS, detail, None
        if problem is not None:
            where = problem.json_path
            top = problem.absolute_path[0] if problem.absolute_path else None
            if top in tool.secret_arguments:
                detail = f"{where}: value does not satisfy {problem.validator!r}"
            else:
                detail = f"{where}: {problem.message}"
            return Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS, detail[:_MAX_ERROR], None
        # 5. requirement resolution, canonicalization and the decision tree
        decision = kernel.policy.decide(
            tool.name, args, context.policy_input, context_key=context.cache_key
        )
        attempt.decision = decision
        if decision.effect != Effect.ALLOW:
            reason = (
                decision.reason
                if decision.reason in DENIAL_REASONS
                else ReasonCode.NO_MATCHING_PERMIT
            )
            return self._refuse(attempt, reason)
        # 6. the handler
        if tool.handler is None:
            return Outcome.FAILED, ReasonCode.HANDLER_ERROR, "the tool has no handler", None
        hctx = HandlerContext(
            call=call,
            context=context,
            decision=decision,
            credentials=tool.credentials,
            progress=progress,
            log=log,
            peer=peer,
        )
        # the handler gets a copy: it cannot alter what is recorded
        handler_args, canonical = _detached(args)
        if (
            canonical is not None
            and raw_args is not None  # absent arguments stay absent in the record, not {}
            and not tool.secret_arguments  # redacted ones are stored and digested redacted
            and len(canonical) <= _ONE_PASS_MAX
        ):
            # The same bytes give the digest and the stored text; the record's copy is
            # made now, before the handler (which may keep a reference to its own) runs.
            attempt.stored = (
                EncodedJson(_copy_of(args, canonical), canonical.decode("utf-8")),
                digest_of_canonical(canonical),
            )
        with anyio.move_on_after(self.handler_timeout_s) as scope:
            try:
                outcome = await self._call_handler(tool, handler_args, hctx)
            except anyio.get_cancelled_exc_class():
                raise
            except BaseException as exc:  # security: see below
                # Any BaseException from a handler (sys.exit(), KeyboardInterrupt,
                # GeneratorExit, a custom one) is a failed, recorded call: letting it
                # escape would skip the evidence record and could stop the host.
                # (Ctrl-C under asyncio arrives as cancellation, handled above.)
                if isinstance(exc, _HandlerAborted):
                    exc = exc.original
                return (
                    Outcome.FAILED,
                    ReasonCode.HANDLER_ERROR,
                    f"{type(exc).__name__}: {exc}",
                    None,
                )
        if scope.cancelled_caught:
            return (
                Outcome.FAILED,
                ReasonCode.TIMEOUT,
                f"no result within {self.handler_timeout_s:g} s",
                None,
            )
        if not isinstance(outcome, HandlerResult):
            return (
                Outcome.FAILED,
                ReasonCode.HANDLER_ERROR,
                f"handler returned {type(outcome).__name__}, not a HandlerResult",
                None,
            )
        if not _well_formed(outcome):
            # security: a result no harness can be given is a failure, never a recorded success
            return (
                Outcome.FAILED,
                ReasonCode.HANDLER_ERROR,
                "handler returned malformed content (content must be a list of MCP content "
                "block objects with a string 'type'; structured must be an object or None)",
                None,
            )
        if outcome.is_error:
            text = " ".join(
                str(block.get("text", "")) for block in outcome.content if isinstance(block, dict)
            ).strip()
            return (
                Outcome.FAILED,
                ReasonCode.HANDLER_ERROR,
                text or "the tool reported an error",
                outcome,
            )
        return Outcome.SUCCEEDED, None, None, outcome

    @staticmethod
    async def _call_handler(
        tool: ToolDefinition, args: dict[str, Any], hctx: HandlerContext
    ) -> Any:
        handler = tool.handler
        assert handler is not None
        if tool.handler_is_async:
            return await handler(args, hctx)
        # A sync handler runs in a worker thread; on timeout the thread is abandoned
        # (Python cannot kill it) and its eventual result is discarded.
        result = await anyio.to_thread.run_sync(
            _guarded, handler, args, hctx, abandon_on_cancel=True
        )
        if inspect.isawaitable(result):
            result = await result
        return result

    @staticmethod
    def _refuse(
        attempt: _Attempt, reason: ReasonCode
    ) -> tuple[Outcome, ReasonCode | None, str | None, HandlerResult | None]:
        detail = attempt.decision.detail if attempt.decision is not None else None
        return outcome_for_reason(reason), reason, detail, None

    def _finish(
        self,
        attempt: _Attempt,
        outcome: Outcome,
        reason: ReasonCode | None,
        error: str | None,
        meta: tuple[TurnCatalog | None, Mapping[str, Any] | None, Mapping[str, Any] | None],
        handler_result: HandlerResult | None = None,
    ) -> ToolResult:
        catalog, diagnostics, identity = meta
        tool, decision, context = attempt.tool, attempt.decision, attempt.context
        if error is not None:
            # scrub before truncating: a secret straddling the cut would leave its prefix
            error = safe_text(scrub_secrets(str(error), attempt.secrets), _MAX_ERROR)
        secret_names = tool.secret_arguments if tool is not None else frozenset()
        stored_args: Any
        if attempt.stored is not None:
            stored_args, digest = attempt.stored
        else:
            try:
                stored_args = storable_arguments(redact_arguments(attempt.arguments, secret_names))
            except Exception:  # a hostile mapping: record that, never fail the record over it
                stored_args = {"$unstorable": safe_text(type(attempt.arguments).__name__)}
            digest = arguments_digest(stored_args)
        call_id = safe_text(getattr(attempt.call, "call_id", ""), 256)
        record = EvidenceRecord(
            turn_id=context.turn_id,
            call_id=call_id,
            tool=attempt.tool_name,
            outcome=outcome,
            started_at=attempt.started_at,
            finished_at=_now(),
            duration_ms=round((time.perf_counter() - attempt.t0) * 1000.0, 3),
            arguments_digest=digest,
            arguments=stored_args,
            reason=reason,
            effect=str(decision.effect) if decision is not None else None,
            # security: a resource holding a lone surrogate (JSON can carry one) must not
            # make the record unwritable, which would erase the attempt
            resource=safe_text(decision.resource)
            if decision is not None and decision.resource is not None
            else None,
            namespace=(decision.namespace if decision is not None else None)
            or (tool.namespace if tool is not None else None),
            action=decision.action if decision is not None else None,
            rule_ids=tuple(rule_id(r) for r in decision.rule_ids) if decision is not None else (),
            error=error,
            catalog_hash=catalog.catalog_hash if catalog is not None else None,
            policy_hash=self.kernel.policy_hash,
            principal=context.principal,
            tenant=context.tenant,
            diagnostics=plain_json(diagnostics),
            identity=plain_json(identity),
        )
        try:
            seq = self.evidence.record(record)
        except Exception as exc:
            # No record, no success: the caller is told the call failed.
            print(f"sharedos: evidence write failed for {call_id}: {exc}", file=sys.stderr)
            reason, outcome, seq = ReasonCode.INTERNAL_ERROR, Outcome.FAILED, -1
            error = "the evidence record could not be written"
            handler_result = None
        return self._result(attempt, call_id, outcome, reason, error, handler_result, seq)

    @staticmethod
    def _result(
        attempt: _Attempt,
        call_id: str,
        outcome: Outcome,
        reason: ReasonCode | None,
        error: str | None,
        handler_result: HandlerResult | None,
        seq: int,
    ) -> ToolResult:
        decision = attempt.decision
        tool_name = attempt.tool_name
        if outcome is Outcome.SUCCEEDED and handler_result is not None:
            return ToolResult(
                call_id=call_id,
                tool=tool_name,
                outcome=outcome,
                reason=None,
                decision=decision,
                content=list(handler_result.content),
                structured=handler_result.structured,
                error=None,
                evidence_seq=seq,
            )
        assert reason is not None
        resource = decision.resource if decision is not None else None
        rule_refs = tuple(decision.rule_ids) if decision is not None else ()
        message = refusal_message(
            reason, attempt.tool_name, resource=resource, rule_ids=rule_refs, detail=error
        )
        structured: dict[str, Any] = {
            "outcome": str(outcome),
            "reason": str(reason),
            "tool": tool_name,
            "callId": call_id,
            "message": message,
        }
        if resource is not None:
            structured["resource"] = resource
        if rule_refs:
            structured["ruleIds"] = [rule_id(r) for r in rule_refs]
        if error is not None and outcome is not Outcome.DENIED:
            structured["error"] = error
        return ToolResult(
            call_id=call_id,
            tool=tool_name,
            outcome=outcome,
            reason=reason,
            decision=decision,
            content=[{"type": "text", "text": message}],
            structured=structured,
            error=error,
            evidence_seq=seq,
        )

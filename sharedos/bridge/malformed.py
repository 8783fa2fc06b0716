"""Recording what a turn's transport could not deliver: every call, and garbage within bounds.

Two kinds of attempt never reach the SDK's server (``sharedos.bridge.frames``):

- a ``tools/call`` that can be made out but not delivered (a batch, invalid
  UTF-8, a lone surrogate, nesting too deep, a missing id ...). Each is
  refused and recorded one by one (``failed`` / ``malformed_request``), like
  every call, and answered as a result when it has a usable id;
- a frame from which nothing can be made out (not JSON, truncated,
  oversized). It is recorded as a ``malformed_request`` attempt with what can
  be said — transport, size, whether it looked like a ``tools/call``, and the
  SHA-256 of its first 64 bytes, never the bytes (they may hold secrets).

Garbage is cheap to send, so the second kind is bounded: the first
``malformed_burst`` frames are recorded one by one, then at most
``malformed_per_second``; the rest are counted and written together in one
aggregate record (``diagnostics.malformed.aggregated`` = how many) as soon
as the rate allows, and at the latest when the turn closes. The count of
attempts stays honest; the evidence store's growth stays bounded.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sharedos.bridge.answers import INVALID_REQUEST, PARSE_ERROR, error_message, result_message
from sharedos.bridge.diagnostics import bounded
from sharedos.bridge.frames import MALFORMED_TOOL, PROBLEM_TEXT, CallAttempt, Frame, Problem
from sharedos.bridge.limits import TransportLimits, TransportStats
from sharedos.context import ToolCall
from sharedos.kernel import ToolResult
from sharedos.outcomes import ReasonCode

logger = logging.getLogger(__name__)

#: records a refusal through ``RuntimeHost.refuse`` (the endpoint binds context, policy, catalogue)
Refuse = Callable[[ToolCall, ReasonCode, Mapping[str, Any], str], Awaitable[ToolResult]]

#: problems that leave nothing to make out of a frame (recorded under the rate limit)
UNPARSEABLE = frozenset(
    {
        Problem.INVALID_UTF8,
        Problem.LONE_SURROGATE,
        Problem.TOO_DEEP,
        Problem.TRUNCATED,
        Problem.NOT_JSON,
        Problem.EMPTY,
        Problem.OVERSIZED,
        Problem.NON_FINITE,
        Problem.NUMBER_TOO_LONG,
    }
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class _Pending:
    """Unparseable frames counted but not yet recorded (rate limit)."""

    count: int = 0
    size: int = 0
    problems: Counter[str] = field(default_factory=Counter)
    first_at: str = ""
    last_at: str = ""


class WireRecorder:
    """One turn's recorder for undeliverable calls and unparseable frames."""

    def __init__(
        self,
        refuse: Refuse,
        *,
        turn_id: str,
        transport: str,
        server_name: str,
        canonical_name: Callable[[str], str],
        limits: TransportLimits,
        stats: TransportStats,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._refuse = refuse
        self._turn_id = turn_id
        self._bridge = {"transport": transport, "server": server_name}
        self._canonical = canonical_name
        self._limits = limits
        self.stats = stats
        self._clock = clock
        self._tokens = float(limits.malformed_burst)
        self._refilled = clock()
        self._pending = _Pending()

    async def refuse_call(
        self,
        attempt: CallAttempt,
        problem: Problem,
        *,
        size: int,
        status: int | None = None,
        reason: ReasonCode = ReasonCode.MALFORMED_REQUEST,
        detail: str | None = None,
    ) -> ToolResult:
        """Refuse and record one ``tools/call`` the transport cannot deliver; never run it."""
        name = attempt.name
        tool = name if isinstance(name, str) else json.dumps(name, default=repr)[:1024]
        tool = self._canonical(tool)
        diagnostics: dict[str, Any] = {
            "bridge": self._bridge,
            "rejectedByTransport": {
                "problem": str(problem),
                "bytes": size,
                "httpStatus": status,
                "jsonrpcId": bounded(attempt.request_id),
                "argumentsIntact": attempt.arguments_intact,
            },
        }
        if detail is None:
            detail = (
                f"{PROBLEM_TEXT[problem]}; the MCP transport could not deliver this tools/call "
                "and it was not run"
            )
        self.stats.calls_refused += 1
        call = ToolCall(tool=tool, arguments=attempt.arguments, turn_id=self._turn_id)
        return await self._refuse(call, reason, diagnostics, detail)

    async def refuse(
        self, frame: Frame, *, status: int | None = None, version: str | None = None
    ) -> list[dict[str, Any]]:
        """Record everything an undeliverable frame carries; the JSON-RPC answers owed for it.

        Each ``tools/call`` made out is refused and recorded, and answered as a
        result when its id is usable (``version``: the protocol revision the
        transport negotiated, when the call does not name one). Other requests
        with a usable id get an "invalid request" error. A frame with nothing
        to make out is recorded under the rate limit and gets a parse error
        (id null) — unless it was empty, which owes nothing.
        """
        answers: list[dict[str, Any]] = []
        problem = frame.problem or Problem.NOT_JSONRPC
        cap = self._limits.batch_calls_recorded
        for attempt in frame.calls[:cap]:
            result = await self.refuse_call(attempt, problem, size=frame.size, status=status)
            if attempt.request_id is not None:
                answers.append(
                    result_message(attempt.request_id, result, attempt.protocol_version or version)
                )
            elif attempt.has_id:  # an id JSON-RPC does not allow: the error goes to id null
                answers.append(error_message(None, INVALID_REQUEST, PROBLEM_TEXT[problem]))
        if len(frame.calls) > cap:
            answers.extend(await self._refuse_beyond(frame, cap, problem, status))
        text = PROBLEM_TEXT[problem]
        # the id of a frame that could not be parsed whole (oversized, truncated, not JSON)
        # is read from its edges: a parse error, as the frame gets without one
        request_code = PARSE_ERROR if frame.from_edges else INVALID_REQUEST
        for request_id in frame.requests:
            answers.append(error_message(request_id, request_code, text))
        if not frame.calls:
            # nothing could be made out as a call: the frame itself is the attempt
            await self.refuse_frame(frame, status=status)
            if not frame.requests and problem is not Problem.EMPTY:
                code = INVALID_REQUEST if problem is Problem.NOT_JSONRPC else PARSE_ERROR
                answers.append(error_message(None, code, text))
        return answers

    async def _refuse_beyond(
        self, frame: Frame, cap: int, problem: Problem, status: int | None
    ) -> list[dict[str, Any]]:
        """The calls of ``frame`` past the first ``cap``: refused, never run, recorded in one
        aggregate record (how many, and their tools), each answered with an error.

        One frame of a few MiB holds tens of thousands of calls: recorded and answered
        one by one they cost a minute of the turn and tens of MB of answer.
        """
        rest = frame.calls[cap:]
        self.stats.calls_refused += len(rest)
        tools: Counter[str] = Counter()
        for attempt in rest:
            name = attempt.name
            tools[self._canonical(name) if isinstance(name, str) else "null"] += 1
        diagnostics = {
            "bridge": self._bridge,
            "rejectedByTransport": {
                "problem": str(problem),
                "bytes": frame.size,
                "httpStatus": status,
                "aggregated": len(rest),
                "tools": dict(tools.most_common(20)),
            },
        }
        await self._record(
            diagnostics,
            f"{len(rest)} more tools/calls of one frame ({PROBLEM_TEXT[problem]}) recorded "
            f"together past the first {cap}; none was run",
        )
        text = f"{PROBLEM_TEXT[problem]}; not run (past the first {cap} calls of this frame)"
        # an id JSON-RPC does not allow gets its error with id null; a notification, none
        return [
            error_message(a.request_id, INVALID_REQUEST, text)
            for a in rest
            if a.request_id is not None or a.has_id
        ]

    async def refuse_frame(self, frame: Frame, *, status: int | None = None) -> None:
        """Record an unparseable frame (nothing could be made out of it), within the rate limit."""
        if frame.problem is None or frame.problem not in UNPARSEABLE:
            return
        if frame.problem is Problem.OVERSIZED:
            self.stats.oversized_frames += 1
        await self.flush_if_allowed()
        if not self._take():
            pending = self._pending
            pending.count += 1
            pending.size += frame.size
            pending.problems[str(frame.problem)] += 1
            pending.first_at = pending.first_at or _now()
            pending.last_at = _now()
            return
        self.stats.malformed_recorded += 1
        diagnostics = {
            "bridge": self._bridge,
            "malformed": {
                "problem": str(frame.problem),
                "bytes": frame.size,
                "head": frame.fingerprint,
                "looksLikeCall": frame.looks_like_call,
                "httpStatus": status,
            },
        }
        await self._record(diagnostics, f"{PROBLEM_TEXT[frame.problem]}; nothing was run")

    async def flush(self) -> None:
        """Write the aggregate record of frames counted under the rate limit (at close)."""
        pending = self._pending
        if pending.count == 0:
            return
        self._pending = _Pending()
        self.stats.malformed_aggregated += pending.count
        self.stats.malformed_aggregates += 1
        diagnostics = {
            "bridge": self._bridge,
            "malformed": {
                "aggregated": pending.count,
                "bytes": pending.size,
                "problems": dict(pending.problems),
                "firstAt": pending.first_at,
                "lastAt": pending.last_at,
            },
        }
        await self._record(
            diagnostics,
            f"{pending.count} malformed requests recorded together (rate limit); nothing was run",
        )

    async def flush_if_allowed(self) -> None:
        """Write the pending aggregate record now if the rate limit allows (a periodic check)."""
        if self._pending.count and self._take():
            await self.flush()

    def _take(self) -> bool:
        now = self._clock()
        rate = self._limits.malformed_per_second
        self._tokens = min(
            float(self._limits.malformed_burst), self._tokens + (now - self._refilled) * rate
        )
        self._refilled = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    async def _record(self, diagnostics: Mapping[str, Any], detail: str) -> None:
        call = ToolCall(tool=MALFORMED_TOOL, arguments=None, turn_id=self._turn_id)
        try:
            await self._refuse(call, ReasonCode.MALFORMED_REQUEST, diagnostics, detail)
        except Exception:  # refuse() never raises; a broken runtime must not crash the transport
            logger.warning("bridge: could not record a malformed request", exc_info=False)

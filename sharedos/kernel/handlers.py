"""What a managed tool's handler receives and returns (docs/contracts.md, "handlers").

A handler is ``async def handler(args, hctx) -> HandlerResult`` or a plain
function (run in a worker thread). It acts on ``hctx.decision.resource``, the
canonical resource the call was authorized for, never on a path it re-derives
from the raw arguments.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.outcomes import ReasonCode

if TYPE_CHECKING:
    from sharedos.kernel.policy_api import DecisionLike

#: ``progress(progress, total, message)``, supplied by a transport (the bridge) or absent.
ProgressHook = Callable[[float, float | None, str | None], Awaitable[None]]
#: ``log(level, data)``, supplied by a transport or absent.
LogHook = Callable[[str, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HandlerContext:
    """Everything a handler may know about the call it is serving."""

    call: ToolCall
    context: AccessContext
    #: the allow decision; ``decision.resource`` is the canonical resource to act on
    decision: DecisionLike
    #: the tool's credentials (authority side; never published, never recorded)
    credentials: Mapping[str, SecretStr] = field(default_factory=dict)
    progress: ProgressHook | None = None
    log: LogHook | None = None
    #: an object for server->client requests (sampling, elicitation); None without a back channel
    peer: Any = None
    #: ``permits(tool, arguments)``: would the policy allow that call for this caller
    #: now (a decision only: nothing runs, nothing is recorded)? For a handler that
    #: reaches past its own resource (a search walking a tree), so it reaches nothing
    #: the caller could not have named in a call of its own. A call of the same tool
    #: that needs an approval counts as allowed when this call ran with an approval that
    #: answered every approval rule it meets. None: no policy behind it.
    permits: Callable[[str, Mapping[str, Any]], bool] | None = None

    @property
    def resource(self) -> str:
        """The canonical resource this call was authorized for."""
        resource = self.decision.resource
        if resource is None:
            raise LookupError("this call was authorized without a resource")
        return str(resource)


@dataclass(frozen=True, slots=True)
class HandlerResult:
    """MCP content blocks (dicts), optional structured content, and whether the handler failed."""

    content: list[dict[str, Any]] = field(default_factory=list)
    structured: dict[str, Any] | None = None
    is_error: bool = False
    #: for a failure: the reason code to record (``handler_error`` when None); a
    #: brokered upstream says ``upstream_error`` / ``upstream_timeout`` /
    #: ``upstream_unavailable`` here
    reason: ReasonCode | None = None
    #: for a failure: pass ``content``/``structured`` to the caller unchanged (a
    #: brokered upstream's own ``isError`` result) instead of SharedOS's refusal text
    passthrough: bool = False

    @classmethod
    def text(cls, text: str, *, structured: dict[str, Any] | None = None) -> HandlerResult:
        """A successful result with one text block."""
        return cls(content=[{"type": "text", "text": text}], structured=structured)

    @classmethod
    def error(cls, message: str) -> HandlerResult:
        """A handler-reported failure (outcome failed / handler_error)."""
        return cls(content=[{"type": "text", "text": message}], is_error=True)


#: The handler signature.
HandlerFn = Callable[[dict[str, Any], HandlerContext], "Awaitable[HandlerResult] | HandlerResult"]

"""The handler that forwards an authorized call to its upstream and relays the answer.

It runs as the tool's handler, so by the kernel's contract the attempt is
already durable (write-ahead evidence) and the call was authorized on the
canonical resource before anything here runs: a denied call never reaches
this code, and so never reaches the upstream.

What it promises:

- the upstream's result is passed back unchanged: content blocks,
  ``structuredContent`` and ``isError`` (an upstream's own ``isError`` result
  is a failed outcome whose content reaches the caller as the upstream wrote
  it: ``passthrough``);
- a protocol error, crash, disconnect or timeout is a failed outcome with an
  ``upstream_*`` reason code and an ``isError`` result, never an exception;
- cancellation propagates (the SDK tells the upstream); progress is relayed;
- the path resource the call was authorized for is what is forwarded: an
  argument the requirement reads as ``path(args.X)`` is replaced by the
  canonical path (``/srv/git/../x`` arrives upstream as ``/x``, exactly what
  was decided);
- the object at that path is the one decided: a path resource reached through
  a link on disk (a symbolic link, a hard link, a git pointer; see
  ``localpaths``) is refused (``linked_resource``) and never reaches the
  upstream;
- credential values are scrubbed from everything relayed, in every encoding;
- a result larger than the upstream's ``max_result_bytes`` is refused.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio

from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import ReasonCode
from sharedos.upstream.connection import UpstreamFailure
from sharedos.upstream.content import LARGE_BINARY, binary_size, content_problem

if TYPE_CHECKING:
    from sharedos.upstream.broker import UpstreamBroker


def _failure(reason: ReasonCode, message: str) -> HandlerResult:
    return HandlerResult(content=[{"type": "text", "text": message}], is_error=True, reason=reason)


def _replace(arguments: dict[str, Any], keys: list[str], value: str) -> bool:
    """Put ``value`` at the (nested) ``keys`` of ``arguments``, copying every object on the
    way so the caller's arguments are untouched; False when that place is not there."""
    *parents, last = keys
    node = arguments
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            return False
        node[key] = child = dict(child)
        node = child
    if last not in node:
        return False
    node[last] = value
    return True


class ForwardHandler:
    """``async (args, hctx) -> HandlerResult`` for one upstream tool (see the module docstring)."""

    __slots__ = ("broker", "raw_name", "upstream_id")

    def __init__(self, broker: UpstreamBroker, upstream_id: str, raw_name: str) -> None:
        self.broker = broker
        self.upstream_id = upstream_id
        self.raw_name = raw_name

    async def __call__(self, args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        tool = hctx.call.tool
        broker = self.broker
        config = broker.upstreams.get(self.upstream_id)
        if config is None:
            return _failure(
                ReasonCode.UPSTREAM_UNAVAILABLE, f"upstream {self.upstream_id!r} is not configured"
            )
        arguments = dict(args)
        resource = hctx.decision.resource
        resource_arg = broker.resource_argument(tool)
        # forward exactly the canonical resource that was authorized (the upstream's
        # OS would resolve a raw "link/.." after following the link, not lexically)
        if (
            resource_arg is not None
            and resource is not None
            and not _replace(arguments, resource_arg.split("."), str(resource))
        ):
            return _failure(
                ReasonCode.LINKED_RESOURCE,
                f"{resource}: the argument {resource_arg} could not be replaced by the "
                "canonical path that was authorized; SharedOS did not forward the call",
            )
        if resource is not None and broker.path_resource(tool):
            # ...and only if that path leads straight to its object on disk: the upstream
            # follows links the decision never saw
            problem = await broker.check_path(config, str(resource))
            if problem is not None:
                return _failure(ReasonCode.LINKED_RESOURCE, problem)
        try:
            conn = await broker.connection_for_call(hctx.context, self.upstream_id, tool)
            result = await conn.call_tool(self.raw_name, arguments, progress=hctx.progress)
        except UpstreamFailure as exc:
            return _failure(exc.reason, exc.message)
        except anyio.get_cancelled_exc_class():
            raise
        scrub = conn.scrubber
        try:
            content = [
                block.model_dump(by_alias=True, exclude_none=True, mode="json")
                for block in result.content
            ]
        except Exception as exc:  # a block the SDK parsed but cannot serialize back
            return _failure(
                ReasonCode.UPSTREAM_ERROR,
                f"upstream {self.upstream_id!r} returned content SharedOS cannot relay "
                f"({type(exc).__name__})",
            )
        structured = result.structured_content
        if structured is not None and not isinstance(structured, dict):
            return _failure(
                ReasonCode.UPSTREAM_ERROR,
                f"upstream {self.upstream_id!r} returned non-object structuredContent "
                f"({type(structured).__name__}), which MCP 2025-11-25 clients cannot receive",
            )
        if scrub:
            # scrubbed before the outputSchema check: what is checked is what is relayed (a
            # string holding a credential becomes "[redacted]", which a pattern, maxLength or
            # enum of the schema may refuse; the harness's client would then refuse a result
            # recorded succeeded)
            content = scrub.scrub_json(content)
            structured = scrub.scrub_json(structured) if structured is not None else None
        # blocks the Python SDK parsed but the harness's client (the TypeScript SDK's) refuses
        # whole: the harness would get an error, the evidence a success (content.py)
        if binary_size(content) > LARGE_BINARY:
            bad = await anyio.to_thread.run_sync(
                content_problem, content, limiter=broker.result_checks
            )
        else:
            bad = content_problem(content)
        if bad is not None:
            return _failure(
                ReasonCode.UPSTREAM_ERROR,
                f"upstream {self.upstream_id!r} returned a result for {tool} that MCP clients "
                f"refuse: {bad}; nothing of it is relayed",
            )
        state = broker.state_for(hctx.context)
        published = state.tools.get(tool) if state is not None else None
        if published is not None and published.output_schema is not None and not result.is_error:
            # the harness's client validates against the schema this turn published, not
            # against whatever the upstream lists now; a result the accept-only shortcut does
            # not take is validated in a worker thread (jsonschema spends ~10 us an item: a
            # few MiB of structuredContent held the event loop, every turn, for seconds)
            fast = published.output_fast_check
            if structured is not None and fast is not None and fast(structured):
                problem = None
            else:
                problem = await anyio.to_thread.run_sync(
                    published.output_problem, structured, limiter=broker.result_checks
                )
            if problem is not None:
                return _failure(
                    ReasonCode.UPSTREAM_ERROR,
                    f"upstream {self.upstream_id!r} returned a result for {tool} that does not "
                    f"satisfy the outputSchema this turn published: "
                    f"{scrub.scrub(problem)[:300] if scrub else problem[:300]}",
                )
        return relay(
            content,
            structured,
            is_error=bool(result.is_error),
            limit=config.limits.max_result_bytes,
            upstream=self.upstream_id,
        )


def relay(
    content: list[dict[str, Any]],
    structured: dict[str, Any] | None,
    *,
    is_error: bool,
    limit: int,
    upstream: str,
) -> HandlerResult:
    """The HandlerResult for an upstream's answer (already scrubbed): size-checked, isError
    kept."""
    try:
        size = len(
            json.dumps(
                {"content": content, "structuredContent": structured}, default=str, allow_nan=False
            )
        )
    except ValueError:  # NaN or an infinity: no JSON number, the harness would get null
        return _failure(
            ReasonCode.UPSTREAM_ERROR,
            f"upstream {upstream!r} returned a result holding NaN or an infinity, which is "
            "no JSON number; nothing of it is relayed",
        )
    if size > limit:
        return _failure(
            ReasonCode.UPSTREAM_ERROR,
            f"upstream {upstream!r} returned a result of {size} bytes, over its limit of "
            f"{limit} bytes (limits.max_result_bytes); nothing of it is relayed",
        )
    if is_error:
        # the upstream tool's own error: failed (handler_error), relayed as it wrote it
        return HandlerResult(
            content=content, structured=structured, is_error=True, passthrough=True
        )
    return HandlerResult(content=content, structured=structured)

"""The SDK's OpenTelemetry middleware stays on a turn server only when tracing is configured."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from sharedos.bridge.server import TurnEndpoint, tracing_configured
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime


def _middleware_names(runtime: Runtime, ctx: AccessContext) -> list[str]:
    endpoint = TurnEndpoint(
        runtime_host=runtime.host,
        context=ctx,
        tool_policy=OPEN_POLICY,
        catalog=runtime.host.kernel.list_tools(ctx, OPEN_POLICY),
    )
    return [getattr(m, "__name__", type(m).__name__) for m in endpoint.build_server().middleware]


def test_without_a_tracer_provider_the_no_op_spans_are_dropped(
    runtime: Runtime, alice: AccessContext
) -> None:
    assert not tracing_configured()  # the test process configures no OpenTelemetry
    assert _middleware_names(runtime, alice) == ["record_malformed_calls"]


def test_with_a_tracer_provider_the_sdk_spans_are_kept(
    runtime: Runtime, alice: AccessContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.NoOpTracerProvider())
    assert tracing_configured()
    assert _middleware_names(runtime, alice) == [
        "OpenTelemetryMiddleware",
        "record_malformed_calls",
    ]

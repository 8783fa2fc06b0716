"""Adversarial review of ``RuntimeHost.invoke_tool``: it must never raise (except
cancellation), never skip the evidence write, never return before it.

Findings (fixed):
- a handler raising a ``BaseException`` that is not ``Exception``/``SystemExit``
  (``KeyboardInterrupt``, ``GeneratorExit``, a custom one) escaped
  ``invoke_tool`` with no evidence record: an attempt that left no trace;
- a handler returning a ``HandlerResult`` whose content is not a list of
  content-block dicts was recorded ``succeeded`` although no harness could be
  given that result (the bridge then failed the call a second time);
- a secret echoed by a handler at the 2,000-character cut of a recorded error
  was truncated before it was scrubbed, so its first characters were stored.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import Kernel, RuntimeHost, ToolCall, ToolResult
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from tests.timing import bound

from .conftest import ALICE, ALL, misc_tool

pytestmark = pytest.mark.anyio


class _Custom(BaseException):
    pass


def _host(
    kernel: Kernel, store: SqliteEvidenceStore, tool: ToolDefinition, timeout: float = 2.0
) -> RuntimeHost:
    return RuntimeHost(
        Kernel(kernel.policy, ToolRegistry([tool])), store, handler_timeout_s=timeout
    )


async def _call(
    host: RuntimeHost, call_id: str, arguments: Any = None, tool: Any = "misc.echo"
) -> ToolResult:
    args = {"path": "/x"} if arguments is None else arguments
    return await host.invoke_tool(
        ToolCall.model_construct(call_id=call_id, tool=tool, arguments=args, turn_id=None),
        ALICE,
        ALL,
    )


def _recorded(store: SqliteEvidenceStore, result: ToolResult) -> Any:
    (rec,) = store.query(call_id=result.call_id)
    assert rec.seq == result.evidence_seq
    assert (rec.outcome, rec.reason) == (result.outcome, result.reason)
    return rec


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, GeneratorExit, _Custom])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_handler_raising_any_base_exception_is_a_recorded_failure(
    kernel: Kernel, store: SqliteEvidenceStore, exc_type: type[BaseException], sync: bool
) -> None:
    def raising(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        raise exc_type("from the handler")

    async def araising(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        raise exc_type("from the handler")

    host = _host(kernel, store, misc_tool(raising if sync else araising))
    result = await _call(host, f"base-{exc_type.__name__}-{sync}")
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    assert exc_type.__name__ in (result.error or "")
    _recorded(store, result)


@pytest.mark.parametrize(
    "junk",
    [
        HandlerResult(content="not a list"),  # type: ignore[arg-type]
        HandlerResult(content=[object()]),  # type: ignore[list-item]
        HandlerResult(content=[{"text": "no type"}]),
        HandlerResult(content=[{"type": 7}]),
        HandlerResult(content=None),  # type: ignore[arg-type]
        HandlerResult(content=[], structured=["not", "a", "dict"]),  # type: ignore[arg-type]
    ],
    ids=["str", "object", "no-type", "int-type", "none", "list-structured"],
)
async def test_a_handler_returning_junk_is_a_recorded_failure_never_a_success(
    kernel: Kernel, store: SqliteEvidenceStore, junk: HandlerResult
) -> None:
    async def returns(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        return junk

    result = await _call(_host(kernel, store, misc_tool(returns)), f"junk-{id(junk)}")
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    _recorded(store, result)


async def test_a_secret_at_the_truncation_cut_is_scrubbed_whole(
    kernel: Kernel, tmp_path: Path
) -> None:
    store = SqliteEvidenceStore(tmp_path / "cut.db")
    secret = "SECRETVALUE-0123456789-abcdefghijklmnop"
    credential = "CREDENTIAL-zyxwvutsrq-9876543210"

    async def echoes(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        pad = "x" * int(args["pad"])
        raise RuntimeError(pad + args["token"] + " / " + hctx.credentials["api"].get_secret_value())

    tool = ToolDefinition(
        name="misc.echo",
        description="Echoes its secret in an error.",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "token": {"type": "string"},
                "pad": {"type": "integer"},
            },
            "required": ["path", "token", "pad"],
        },
        credentials={"api": SecretStr(credential)},
        secret_arguments=frozenset({"token"}),
        handler=echoes,
    )
    host = _host(kernel, store, tool)
    prefix = len("RuntimeError: ")
    for cut in (5, 12, 20, 30):  # the secret straddles the 2,000-character cut at several points
        args = {"path": "/x", "token": secret, "pad": 2000 - prefix - cut}
        result = await _call(host, f"cut-{cut}", args)
        assert result.reason is ReasonCode.HANDLER_ERROR
        rec = _recorded(store, result)
        for shown in (
            result.error or "",
            rec.error or "",
            str(result.structured),
            str(result.content),
        ):
            assert secret[:cut] not in shown, cut
        assert rec.arguments["token"] == "[redacted]"
    # the credential straddling the cut (after the secret argument)
    args = {"path": "/x", "token": secret, "pad": 2000 - prefix - len(secret) - 3 - 10}
    result = await _call(host, "cut-cred", args)
    assert credential[:10] not in (_recorded(store, result).error or "")
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("cut.db*"))
    assert secret[:5].encode() not in raw and credential[:10].encode() not in raw


async def test_a_sync_handler_spinning_the_cpu_times_out_and_is_recorded(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    stop = threading.Event()

    def spins(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        n = 0
        while not stop.is_set():  # never sleeps, never yields
            n += 1
        return HandlerResult.text(str(n))

    host = _host(kernel, store, misc_tool(spins), timeout=0.3)
    try:
        t0 = time.perf_counter()
        result = await _call(host, "spin")
        assert time.perf_counter() - t0 < bound(5.0)
        assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.TIMEOUT)
        _recorded(store, result)
    finally:
        stop.set()


_HUGE = "x" * 2_000_000


@pytest.mark.parametrize(
    ("tool", "arguments", "reason"),
    [
        ("a" * 1_000_000, {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        ("misc.echo\udc80", {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        ("\ud800", {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        ("misc.echo\x00", {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        ("misc.ech\u043e", {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),  # Cyrillic o
        ("MISC.ECHO", {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        (b"misc.echo", {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        (None, {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        (["misc.echo"], {"path": "/x"}, ReasonCode.TOOL_UNAVAILABLE),
        (
            "misc.echo",
            {"path": "/x", "n": math.nan},
            ReasonCode.INVALID_ARGUMENTS,
        ),  # not JSON (issue 23)
        ("misc.echo", {"path": "/x", "n": math.inf}, ReasonCode.INVALID_ARGUMENTS),
        ("misc.echo", {"path": "/x", "deep": [{"n": -math.inf}]}, ReasonCode.INVALID_ARGUMENTS),
        ("misc.echo", {"path": "/x\udc80"}, ReasonCode.UNRESOLVABLE_RESOURCE),
        ("misc.echo", {"path": "/private/x\udc80"}, ReasonCode.UNRESOLVABLE_RESOURCE),
        ("misc.echo", {"path": "/x", "big": _HUGE}, ReasonCode.ALLOWED),
        ("misc.echo", {"path": _HUGE}, ReasonCode.UNRESOLVABLE_RESOURCE),
        ("misc.echo", {"path": "/x", 1: "non-string key"}, ReasonCode.ALLOWED),
        ("misc.echo", {"path": "/x", "set": {1, 2}}, ReasonCode.ALLOWED),
        ("misc.echo", {"path": "/x", "b": b"\xff"}, ReasonCode.ALLOWED),
        ("misc.echo", [("path", "/x")], ReasonCode.INVALID_ARGUMENTS),
        ("misc.echo", "path=/x", ReasonCode.INVALID_ARGUMENTS),
    ],
)
async def test_weird_names_and_arguments_always_produce_a_recorded_result(
    kernel: Kernel, store: SqliteEvidenceStore, tool: Any, arguments: Any, reason: ReasonCode
) -> None:
    host = _host(kernel, store, misc_tool())
    result = await _call(
        host, f"weird-{id(arguments)}-{hash(repr(tool)[:50])}", arguments, tool=tool
    )
    if reason is ReasonCode.ALLOWED:
        # the schema allows extra properties: the call runs (or fails cleanly), never raises
        assert result.outcome in (Outcome.SUCCEEDED, Outcome.FAILED), result.error
    else:
        assert result.reason is reason, result.error
    rec = _recorded(store, result)
    assert len(rec.tool) < 1100  # a huge name is stored truncated, not whole
    result.to_mcp()  # the answer can always be put on a wire


async def test_a_lone_surrogate_in_a_template_resource_is_refused_and_still_recorded(
    store: SqliteEvidenceStore,
) -> None:
    # JSON can carry "\udc80"; a record that cannot be written would erase the attempt.
    # A lone surrogate is not text (an OS maps it to raw bytes): a template hole holding
    # one is unresolvable, as a path holding one is, and the refusal is recorded.
    policy = compile_source(
        "namespace repo\n"
        'requirement repo.get { action read; resource "{args.owner}/{args.name}" }\n'
        'forbid read on "secret/*"\n'
        'permit read on "*/*"\n'
    )

    async def ok(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        return HandlerResult.text("ok")

    tool = ToolDefinition(
        name="repo.get",
        description="Get a repository.",
        input_schema={
            "type": "object",
            "properties": {"owner": {"type": "string"}, "name": {"type": "string"}},
        },
        handler=ok,
    )
    host = RuntimeHost(Kernel(policy, ToolRegistry([tool])), store)
    run = ToolPolicy(name="r", mode=RunMode.OPEN, managed=("repo.*",))
    for i, (owner, name, reason) in enumerate(
        [
            ("secret", "x", ReasonCode.FORBIDDEN),
            ("a\udc80", "x", ReasonCode.UNRESOLVABLE_RESOURCE),
            ("\ud800x", "x\udfff", ReasonCode.UNRESOLVABLE_RESOURCE),
            ("a", "x\udfff", ReasonCode.UNRESOLVABLE_RESOURCE),
        ]
    ):
        call = ToolCall(
            call_id=f"sur-{i}", tool="repo.get", arguments={"owner": owner, "name": name}
        )
        result = await host.invoke_tool(call, ALICE, run)
        assert (result.outcome, result.reason) == (Outcome.DENIED, reason), result.error
        _recorded(store, result)
    ok_call = ToolCall(call_id="sur-ok", tool="repo.get", arguments={"owner": "a", "name": "x"})
    assert (await host.invoke_tool(ok_call, ALICE, run)).outcome is Outcome.SUCCEEDED

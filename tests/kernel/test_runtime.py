"""RuntimeHost.invoke_tool: the order of checks, outcomes, messages, and the evidence record."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import SecretStr

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.evidence.record import arguments_digest, safe_text
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall, ToolResult
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Outcome, ReasonCode
from tests.timing import bound

from .conftest import ADMIN, ALICE, ALL, NO_DELETE, misc_tool

pytestmark = pytest.mark.anyio


async def call(
    host: RuntimeHost,
    tool: Any,
    arguments: Any = None,
    context: AccessContext = ALICE,
    policy: Any = ALL,
    **kw: Any,
) -> ToolResult:
    return await host.invoke_tool(ToolCall(tool=tool, arguments=arguments), context, policy, **kw)


def the_record(store: SqliteEvidenceStore, result: ToolResult) -> Any:
    (rec,) = store.query(call_id=result.call_id)
    assert rec.seq == result.evidence_seq
    return rec


async def test_public_read_is_allowed_and_recorded(
    host: RuntimeHost, store: SqliteEvidenceStore
) -> None:
    catalog = host.kernel.list_tools(ALICE, ALL)
    result = await call(host, "files.read", {"path": "/public/a.txt"}, catalog=catalog)
    assert result.outcome is Outcome.SUCCEEDED and not result.is_error
    assert result.content == [{"type": "text", "text": "public A"}]
    assert result.to_mcp()["isError"] is False
    rec = the_record(store, result)
    assert (rec.outcome, rec.reason, rec.effect) == (Outcome.SUCCEEDED, None, "allow")
    assert (rec.resource, rec.action, rec.namespace) == ("/public/a.txt", "read", "files")
    assert rec.rule_ids == ("kernel-test.sos:10",)
    assert rec.catalog_hash == catalog.catalog_hash
    assert rec.policy_hash == host.kernel.policy_hash
    assert (rec.principal, rec.tenant, rec.turn_id) == ("alice", "acme", "turn-alice")
    assert rec.arguments == {"path": "/public/a.txt"}
    assert rec.arguments_digest.startswith("sha256:")
    assert rec.duration_ms >= 0 and rec.started_at <= rec.finished_at


async def test_private_read_is_forbidden_with_rule_ids_and_a_sentence_for_a_model(
    host: RuntimeHost, store: SqliteEvidenceStore
) -> None:
    result = await call(host, "files.read", {"path": "/private/a.txt"})
    assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.FORBIDDEN)
    text = result.content[0]["text"]
    assert text == (
        "SharedOS policy denial: the call to tool files.read on /private/a.txt was refused: "
        "the access policy forbids it (forbidden by rule private-admins-only). This is an "
        "authorization decision, not a malfunction; retrying the same call will not help."
    )
    assert result.structured is not None and result.structured["message"] == text
    assert result.to_mcp()["isError"] is True
    assert result.structured is not None
    assert result.structured["outcome"] == "denied"
    assert result.structured["ruleIds"] == ["private-admins-only"]
    assert "PRIVATE" not in str(result.to_mcp())
    rec = the_record(store, result)
    assert (rec.outcome, rec.reason, rec.effect, rec.rule_ids) == (
        Outcome.DENIED,
        ReasonCode.FORBIDDEN,
        "deny",
        ("private-admins-only",),
    )


async def test_admin_may_read_private(host: RuntimeHost) -> None:
    result = await call(host, "files.read", {"path": "/private/a.txt"}, context=ADMIN)
    assert result.outcome is Outcome.SUCCEEDED
    assert result.content[0]["text"] == "PRIVATE A"


async def test_dotdot_escape_is_decided_on_the_canonical_resource(host: RuntimeHost) -> None:
    result = await call(host, "files.read", {"path": "/public/../private/a.txt"})
    assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.FORBIDDEN)
    assert result.decision is not None and result.decision.resource == "/private/a.txt"


async def test_default_deny(host: RuntimeHost, store: SqliteEvidenceStore) -> None:
    result = await call(host, "files.read", {"path": "/etc/passwd"})
    assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.NO_MATCHING_PERMIT)
    assert "no_matching_permit: default deny" in result.content[0]["text"]
    assert the_record(store, result).resource == "/etc/passwd"


@pytest.mark.parametrize("path", ["/../etc/passwd", "relative/a.txt", "/a\x00b", 42])
async def test_unresolvable_resource(host: RuntimeHost, path: Any) -> None:
    schema_ok = isinstance(path, str)
    result = await call(host, "files.read", {"path": path})
    if schema_ok:
        assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.UNRESOLVABLE_RESOURCE)
    else:  # a non-string path already fails the inputSchema
        assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS)


WEIRD_NAMES: list[Any] = [
    "no.such.tool",
    "",
    "x" * 200,
    "files read",
    "fïles.read",
    "files.read\x00",
    "\ud800",
    "mcp__sharedos__files_read",
    "files_dread",
    "unruled.tool",  # registered, but no requirement
]


@pytest.mark.parametrize("name", WEIRD_NAMES)
async def test_unknown_malformed_or_unruled_names_are_tool_unavailable_and_recorded(
    host: RuntimeHost, store: SqliteEvidenceStore, name: str
) -> None:
    result = await call(host, name, {"path": "/public/a.txt"})
    assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.TOOL_UNAVAILABLE)
    assert result.content[0]["type"] == "text"
    rec = the_record(store, result)
    assert rec.reason is ReasonCode.TOOL_UNAVAILABLE
    assert rec.tool == safe_text(name)  # the raw string (escaped only when not storable)
    assert rec.tool == name or name == "\ud800"


async def test_non_string_tool_values_never_raise(
    host: RuntimeHost, store: SqliteEvidenceStore
) -> None:
    for weird in (200, None, ["files.read"], {"name": "files.read"}, b"files.read"):
        raw_call = ToolCall.model_construct(call_id=f"c-{weird!r}", tool=weird, arguments={})
        result = await host.invoke_tool(raw_call, ALICE, ALL)
        assert result.reason is ReasonCode.TOOL_UNAVAILABLE
        assert the_record(store, result).tool == repr(weird)


async def test_not_in_run_policy_is_checked_before_arguments(host: RuntimeHost) -> None:
    result = await call(host, "files.delete", "not even an object", policy=NO_DELETE)
    assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.NOT_IN_RUN_POLICY)
    allowed = await call(host, "files.read", {"path": "/public/a.txt"}, policy=NO_DELETE)
    assert allowed.outcome is Outcome.SUCCEEDED


async def test_not_in_turn_catalog(host: RuntimeHost) -> None:
    alice_catalog = host.kernel.list_tools(ALICE, ALL)
    admin_catalog = host.kernel.list_tools(ADMIN, ALL)
    assert "admin.reset" not in alice_catalog and "admin.reset" in admin_catalog
    # Without a catalogue the decision refuses it; with one, the catalogue check comes first.
    bare = await call(host, "admin.reset", {"path": "/x"})
    assert bare.reason is ReasonCode.NO_MATCHING_PERMIT
    scoped = await call(host, "admin.reset", {"path": "/x"}, catalog=alice_catalog)
    assert (scoped.outcome, scoped.reason) == (Outcome.DENIED, ReasonCode.NOT_IN_TURN_CATALOG)
    # An admin's catalogue handed to alice's call does not help: the decision still runs.
    borrowed = await call(host, "admin.reset", {"path": "/x"}, catalog=admin_catalog)
    assert borrowed.reason is ReasonCode.NO_MATCHING_PERMIT


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        (["/public/a.txt"], "must be a JSON object, got array"),
        ("/public/a.txt", "must be a JSON object, got string"),
        (7, "must be a JSON object, got number"),
        ({}, "'path' is a required property"),
        ({"path": 1}, "1 is not of type 'string'"),
        ({"path": "/public/a.txt", "extra": 1}, "Additional properties are not allowed"),
    ],
)
async def test_invalid_arguments_fail_and_are_not_denials(
    host: RuntimeHost, store: SqliteEvidenceStore, arguments: Any, fragment: str
) -> None:
    result = await call(host, "files.read", arguments)
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS)
    assert result.decision is None  # no authorization decision was made
    assert fragment in (result.error or "")
    assert "Fix the arguments" in result.content[0]["text"]
    assert the_record(store, result).outcome is Outcome.FAILED


async def test_missing_arguments_mean_an_empty_object(host: RuntimeHost) -> None:
    result = await call(host, "files.read", None)
    assert result.reason is ReasonCode.INVALID_ARGUMENTS
    assert "'path' is a required property" in (result.error or "")


def _host_with(
    tool: ToolDefinition, kernel: Kernel, store: SqliteEvidenceStore, timeout: float = 2.0
) -> RuntimeHost:
    registry = ToolRegistry([tool])
    return RuntimeHost(Kernel(kernel.policy, registry), store, handler_timeout_s=timeout)


#: request-scoped state a host or a handler keeps the usual way (structlog's
#: ``bind_contextvars``, an OpenTelemetry span): a context variable
_WHO: contextvars.ContextVar[str | None] = contextvars.ContextVar("test_who", default=None)


async def test_a_sync_handler_runs_in_its_call_s_context_not_its_thread_s_leftovers(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    """A sync handler sees the context variables of the call that runs it, and what it
    sets stays with that call: on one handler thread, one principal's turn used to see
    what the previous turn's handler set there (and never its own caller's)."""
    seen: list[tuple[str, str | None]] = []

    def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        seen.append((hctx.context.principal, _WHO.get()))
        _WHO.set(f"set by {hctx.context.principal}'s handler")  # never reset, as bind_* do
        return HandlerResult.text("ok")

    host = RuntimeHost(
        Kernel(kernel.policy, ToolRegistry([misc_tool(handler)])), store, max_handler_threads=1
    )
    for ctx in (ALICE, ADMIN):  # two principals' turns, one handler thread
        token = _WHO.set(f"{ctx.principal}'s call")
        try:
            result = await call(host, "misc.echo", {"path": "/x"}, ctx)
        finally:
            _WHO.reset(token)
        assert result.outcome is Outcome.SUCCEEDED, result
    assert seen == [("alice", "alice's call"), ("root", "root's call")]


async def test_a_raising_handler_is_a_failure_not_a_crash(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    def boom(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        raise RuntimeError("disk on fire")

    async def aboom(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        raise SystemExit(3)

    for handler, text in ((boom, "RuntimeError: disk on fire"), (aboom, "SystemExit: 3")):
        host = _host_with(misc_tool(handler), kernel, store)
        result = await call(host, "misc.echo", {"path": "/x"})
        assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
        assert result.error == text
        assert the_record(store, result).error == text


async def test_handler_reported_error_and_wrong_return_type(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    async def reports(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        return HandlerResult.error("upstream said 503")

    async def wrong(args: dict[str, Any], hctx: HandlerContext) -> Any:
        return "just a string"

    result = await call(_host_with(misc_tool(reports), kernel, store), "misc.echo", {"path": "/x"})
    assert (result.reason, result.error) == (ReasonCode.HANDLER_ERROR, "upstream said 503")
    result = await call(_host_with(misc_tool(wrong), kernel, store), "misc.echo", {"path": "/x"})
    assert result.reason is ReasonCode.HANDLER_ERROR
    assert "not a HandlerResult" in (result.error or "")


async def test_timeouts_for_async_and_sync_handlers(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    async def slow(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        await anyio.sleep(10)
        return HandlerResult.text("late")

    def blocking(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        time.sleep(1.0)
        return HandlerResult.text("late")

    for handler in (slow, blocking):
        host = _host_with(misc_tool(handler), kernel, store, timeout=0.2)
        t0 = time.perf_counter()
        result = await call(host, "misc.echo", {"path": "/x"})
        assert time.perf_counter() - t0 < bound(0.9)
        assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.TIMEOUT)
        assert the_record(store, result).reason is ReasonCode.TIMEOUT


async def test_cancellation_is_recorded_then_propagates(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    started = anyio.Event()

    async def waits(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        started.set()
        await anyio.sleep(10)
        return HandlerResult.text("never")

    host = _host_with(misc_tool(waits), kernel, store, timeout=30)
    the_call = ToolCall(call_id="cancel-me", tool="misc.echo", arguments={"path": "/x"})
    task = asyncio.ensure_future(host.invoke_tool(the_call, ALICE, ALL))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (rec,) = store.query(call_id="cancel-me")
    assert (rec.outcome, rec.reason) == (Outcome.CANCELLED, ReasonCode.CANCELLED)

    # the same through an anyio cancel scope (how the MCP SDK cancels a request)
    started = anyio.Event()
    with anyio.move_on_after(0.2):
        await host.invoke_tool(
            ToolCall(call_id="scope", tool="misc.echo", arguments={"path": "/x"}), ALICE, ALL
        )
    (rec,) = store.query(call_id="scope")
    assert rec.outcome is Outcome.CANCELLED


async def test_a_sync_handler_given_up_on_is_recorded_as_possibly_still_running(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    """Python cannot stop a sync handler's thread: a record of one cancelled or timed
    out says its effect may still complete, never that nothing happened."""
    started = threading.Event()
    release = threading.Event()

    def blocking(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        started.set()
        release.wait(5)
        return HandlerResult.text("late")

    host = _host_with(misc_tool(blocking), kernel, store, timeout=30)
    try:
        with anyio.move_on_after(5) as scope:
            async with anyio.create_task_group() as tg:

                async def go() -> None:
                    await host.invoke_tool(
                        ToolCall(call_id="sync-cancel", tool="misc.echo", arguments={"path": "/x"}),
                        ALICE,
                        ALL,
                    )

                tg.start_soon(go)
                await anyio.to_thread.run_sync(started.wait, 5)
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        (rec,) = store.query(call_id="sync-cancel")
        assert rec.outcome is Outcome.CANCELLED
        assert "may still complete" in (rec.error or "")
    finally:
        release.set()


async def test_secret_arguments_and_credentials_never_reach_the_record(
    kernel: Kernel, tmp_path: Path
) -> None:
    db = tmp_path / "secret.db"
    store = SqliteEvidenceStore(db)

    async def leaky(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        token = hctx.credentials["api"].get_secret_value()
        raise RuntimeError(f"upstream rejected token {token} for {args['password']}")

    tool = ToolDefinition(
        name="misc.echo",
        description="Uses a credential.",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "password": {"type": "string", "minLength": 20},
            },
            "required": ["path"],
        },
        credentials={"api": SecretStr("CRED-abcdef123456")},
        secret_arguments=frozenset({"password"}),
        handler=leaky,
    )
    host = _host_with(tool, kernel, store)
    short = await call(host, "misc.echo", {"path": "/x", "password": "PW-short"})
    assert short.reason is ReasonCode.INVALID_ARGUMENTS
    assert "PW-short" not in (short.error or "") and "password" in (short.error or "")
    failed = await call(host, "misc.echo", {"path": "/x", "password": "PW-long-enough-1234567"})
    assert failed.reason is ReasonCode.HANDLER_ERROR
    assert "CRED-abcdef123456" not in (failed.error or "")
    assert the_record(store, failed).arguments == {"path": "/x", "password": "[redacted]"}
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("secret.db*"))
    for secret in (b"PW-short", b"PW-long-enough", b"CRED-abcdef123456"):
        assert secret not in raw


async def test_diagnostics_and_identity_are_stored_and_never_decide(
    host: RuntimeHost, store: SqliteEvidenceStore
) -> None:
    diag = {"alias": "mcp__sharedos__files_read", "clientInfo": {"name": "claude-code"}}
    ident = {"harness": "claude-code", "column": "mcp", "catalogHash": "x"}
    for d, i in ((None, None), (diag, ident), ({"roles": ["admin"]}, {"principal": "root"})):
        result = await call(
            host, "files.read", {"path": "/private/a.txt"}, diagnostics=d, identity=i
        )
        assert result.reason is ReasonCode.FORBIDDEN
    recs = store.query(turn_id="turn-alice")
    assert recs[1].diagnostics == diag and recs[1].identity == ident


async def test_evidence_write_failure_fails_closed(kernel: Kernel, tmp_path: Path) -> None:
    store = SqliteEvidenceStore(tmp_path / "e.db")
    host = RuntimeHost(kernel, store)
    store.close()
    result = await call(host, "files.read", {"path": "/public/a.txt"})
    assert (result.outcome, result.reason, result.evidence_seq) == (
        Outcome.FAILED,
        ReasonCode.EVIDENCE_UNAVAILABLE,
        -1,
    )
    assert "nothing ran" in result.content[0]["text"]


async def test_symlink_in_public_to_private_fails_through_the_whole_path(host: RuntimeHost) -> None:
    result = await call(host, "files.read", {"path": "/public/link.txt"})
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    assert "symbolic link" in (result.error or "")
    assert "PRIVATE" not in str(result.to_mcp())


async def test_handler_cannot_alter_the_recorded_arguments(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    async def mutate(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        args["path"] = "/tampered"
        return HandlerResult.text("ok")

    result = await call(_host_with(misc_tool(mutate), kernel, store), "misc.echo", {"path": "/x"})
    assert the_record(store, result).arguments == {"path": "/x"}


async def test_every_attempt_is_recorded_in_order(
    host: RuntimeHost, store: SqliteEvidenceStore
) -> None:
    results = [
        await call(host, "files.read", {"path": "/public/a.txt"}),
        await call(host, "nope", {}),
        await call(host, "files.read", {"path": "/private/a.txt"}),
        await call(host, "files.read", []),
    ]
    recs = store.query(turn_id="turn-alice")
    assert [r.call_id for r in recs] == [r.call_id for r in results]
    assert [r.outcome for r in recs] == ["succeeded", "denied", "denied", "failed"]
    counts = store.counts("turn-alice")
    assert (counts.total, counts.denied) == (4, 2)


async def test_many_concurrent_turns_get_their_own_answers(
    host: RuntimeHost, store: SqliteEvidenceStore
) -> None:
    async def one(i: int) -> None:
        ctx = AccessContext(
            principal=f"u{i}", roles=("admin",) if i % 2 else (), turn_id=f"turn-{i}"
        )
        result = await call(host, "files.read", {"path": "/private/a.txt"}, context=ctx)
        expected = Outcome.SUCCEEDED if i % 2 else Outcome.DENIED
        assert result.outcome is expected, (i, result)

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(one, i)
    assert store.counts().total == 40
    assert store.counts().denied == 20


async def test_transport_hooks_and_credentials_reach_the_handler(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    seen: list[Any] = []

    async def uses_hooks(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        assert hctx.progress is not None and hctx.log is not None
        await hctx.progress(0.5, 1.0, "half")
        await hctx.log("info", {"resource": hctx.resource})
        seen.append(hctx.peer)
        seen.append(hctx.credentials["k"].get_secret_value())
        return HandlerResult.text("ok")

    events: list[Any] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        events.append(("progress", p, total, message))

    async def log(level: str, data: Any) -> None:
        events.append(("log", level, data))

    tool = misc_tool(uses_hooks).model_copy(update={"credentials": {"k": SecretStr("v")}})
    host = _host_with(tool, kernel, store)
    peer = object()
    result = await call(host, "misc.echo", {"path": "/x"}, progress=progress, log=log, peer=peer)
    assert result.outcome is Outcome.SUCCEEDED
    assert events == [("progress", 0.5, 1.0, "half"), ("log", "info", {"resource": "/x"})]
    assert seen == [peer, "v"]


async def test_a_misbehaving_provider_fails_closed(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    class Clashing:
        def tools_for(self, context: AccessContext) -> list[ToolDefinition]:
            return [misc_tool()]

    registry = ToolRegistry([misc_tool()])
    registry.add_provider(Clashing())
    host = RuntimeHost(Kernel(kernel.policy, registry), store)
    result = await call(host, "misc.echo", {"path": "/x"})
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.INTERNAL_ERROR)
    assert "already has" in (result.error or "")
    assert the_record(store, result).reason is ReasonCode.INTERNAL_ERROR


async def test_refuse_records_a_refusal_decided_outside_the_kernel(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    tool = misc_tool().model_copy(update={"secret_arguments": frozenset({"token"})})
    host = _host_with(tool, kernel, store)
    late = ToolCall(call_id="late", tool="misc.echo", arguments={"path": "/x", "token": "T0KEN"})
    result = await host.refuse(late, ALICE, ALL, ReasonCode.TURN_CLOSED, detail="the turn ended")
    assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.TURN_CLOSED)
    assert "this turn has closed" in result.content[0]["text"]
    rec = the_record(store, result)
    assert rec.arguments == {"path": "/x", "token": "[redacted]"}
    assert rec.reason is ReasonCode.TURN_CLOSED
    odd = ToolCall.model_construct(call_id="odd", tool=12, arguments="x")
    weird = await host.refuse(odd, ALICE, ALL, ReasonCode.ALLOWED)
    assert weird.reason is ReasonCode.INTERNAL_ERROR and weird.outcome is Outcome.FAILED


class _NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(levels):
        cur["a"] = {}
        cur = cur["a"]
    return root


@pytest.mark.parametrize("tool", ["misc.echo", "no.such.tool"])
async def test_hostile_arguments_never_raise_and_are_recorded(
    kernel: Kernel, store: SqliteEvidenceStore, tool: str
) -> None:
    host = _host_with(misc_tool(), kernel, store)
    cases: list[Any] = [
        {"path": "/x", "deep": _deep(100_000)},
        _deep(100_000),
        _NoRepr(),
        {"path": _NoRepr()},
    ]
    for i, arguments in enumerate(cases):
        hostile = ToolCall.model_construct(call_id=f"h{i}-{tool}", tool=tool, arguments=arguments)
        result = await host.invoke_tool(
            hostile, ALICE, ALL, diagnostics={"odd": _NoRepr(), "deep": _deep(100_000)}
        )
        expected = (
            ReasonCode.INVALID_ARGUMENTS if tool == "misc.echo" else ReasonCode.TOOL_UNAVAILABLE
        )
        assert result.reason is expected, (i, result.error)
        rec = the_record(store, result)
        assert rec.reason is expected
    (deep_args,) = store.query(call_id=f"h0-{tool}")
    assert deep_args.arguments == {"$unstorable": "dict"}  # the type, never a repr of them
    if tool == "misc.echo":
        assert "nest deeper than 64" in (deep_args.error or "")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (2.0, None),  # integral float: valid JSON Schema integer (the full validator decides)
        (True, "True is not of type 'integer'"),  # a bool is not an integer
        (0, "0 is less than the minimum of 1"),
        ("3", "'3' is not of type 'integer'"),
    ],
)
async def test_argument_shortcut_defers_boundary_values_to_the_validator(
    kernel: Kernel, store: SqliteEvidenceStore, value: Any, fragment: str | None
) -> None:
    """Simple schemas take the accept-only shortcut; whatever it does not accept is judged
    (and worded) by the Draft 2020-12 validator exactly as before."""
    tool = misc_tool(limit={"type": "integer", "minimum": 1})
    assert tool.input_fast_check is not None
    result = await call(
        _host_with(tool, kernel, store), "misc.echo", {"path": "/x", "limit": value}
    )
    if fragment is None:
        assert result.outcome is Outcome.SUCCEEDED
    else:
        assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS)
        assert fragment in (result.error or "")
    assert the_record(store, result).outcome is result.outcome


async def test_stored_arguments_are_the_exact_bytes_the_digest_covers(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    """The arguments are encoded once, canonically (RFC 8785): the stored text is what
    ``arguments_digest`` hashes, so anyone can re-check a record's digest from its row."""
    seen: list[dict[str, Any]] = []

    async def mutating(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        seen.append(dict(args))
        args["path"] = "/changed"  # the handler's copy only
        args["extra"] = [1]
        return HandlerResult.text("ok")

    host = _host_with(misc_tool(mutating, note={}), kernel, store)
    arguments = {"path": "/x/é", "note": {"z": [1, "ü", True, None], "a": {"b": -2}}}
    result = await call(host, "misc.echo", arguments)
    assert result.outcome is Outcome.SUCCEEDED
    assert seen == [arguments]
    assert arguments == {"path": "/x/é", "note": {"z": [1, "ü", True, None], "a": {"b": -2}}}
    rec = the_record(store, result)
    assert rec.arguments == arguments
    assert rec.arguments_digest == arguments_digest(arguments)  # the general path agrees
    (text, digest) = store._conn.execute(
        "SELECT arguments, arguments_digest FROM evidence WHERE call_id = ?", (result.call_id,)
    ).fetchone()
    assert text == '{"note":{"a":{"b":-2},"z":[1,"ü",true,null]},"path":"/x/é"}'
    assert digest == "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


async def test_secret_and_float_arguments_take_the_general_path(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    tool = misc_tool(token={"type": "string"}, ratio={"type": "number"}).model_copy(
        update={"secret_arguments": frozenset({"token"})}
    )
    host = _host_with(tool, kernel, store)
    secret = await call(host, "misc.echo", {"path": "/x", "token": "s3cr3t"})
    floats = await call(host, "misc.echo", {"path": "/x", "ratio": 0.1})
    rec = the_record(store, secret)
    assert rec.arguments == {"path": "/x", "token": "[redacted]"}
    assert rec.arguments_digest == arguments_digest({"path": "/x", "token": "[redacted]"})
    rec = the_record(store, floats)
    assert rec.arguments == {"path": "/x", "ratio": 0.1}
    assert rec.arguments_digest == arguments_digest({"path": "/x", "ratio": 0.1})


async def test_flat_arguments_are_copied_for_the_handler_and_the_record(
    kernel: Kernel, store: SqliteEvidenceStore
) -> None:
    kept: list[dict[str, Any]] = []

    async def keeps_and_mutates(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        kept.append(args)
        args["path"] = "/elsewhere"
        return HandlerResult.text("ok")

    host = _host_with(misc_tool(keeps_and_mutates, n={"type": "integer"}), kernel, store)
    arguments = {"path": "/x", "n": 3}
    result = await call(host, "misc.echo", arguments)
    kept[0]["n"] = 99  # after the call, too
    assert arguments == {"path": "/x", "n": 3}
    assert the_record(store, result).arguments == {"path": "/x", "n": 3}

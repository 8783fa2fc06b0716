"""Approvals through a real bridge and the official SDK client (issue 28).

* Elicitation (form mode) on a channel that can carry a request to the client
  (the handshake era over HTTP, stateful): the person at the client is asked
  on the same call — tool, canonical resource, arguments digest — when the
  turn's principal may approve; their accept runs the call, their decline or
  silence refuses it. A principal who may not approve is never asked: the
  call is refused out of band, whatever their client would have answered.
* Out of band everywhere else (the 2026-07-28 era, which has no
  server-to-client requests; a client that declared no elicitation): the
  refusal is a result (``isError``, reason ``approval_required``) naming an
  approval id; an operator approves it with ``sharedos approvals approve``;
  the same call, retried in the same turn, runs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp_types import ElicitResult

from sharedos.bridge import open_turn
from sharedos.catalog.registry import ToolRegistry
from sharedos.cli.main import main as cli_main
from sharedos.evidence.approvals import ApprovalLedger
from sharedos.evidence.record import arguments_digest
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.kernel.approvals import ApprovalSettings
from sharedos.kernel.context import AccessContext
from sharedos.kernel.kernel import Kernel
from sharedos.kernel.runtime import RuntimeHost
from sharedos.policy import compile_source
from sharedos.toolpolicy import ToolPolicy
from sharedos.tools.files import register_files_tools
from tests.bridge.conftest import http_client
from tests.timing import bound

pytestmark = pytest.mark.anyio

POLICY = """
namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
permit read, write on "/shared/**"
@id("release-needs-maintainer")
require approval by role "m" for write on "/shared/release/**"
"""
RUN = ToolPolicy(name="approvals", mode="open", managed=("files.*",))
ARGS = {"path": "/shared/release/notes.txt", "content": "v1\n"}


class Setup:
    def __init__(self, tmp: Path, **settings: Any) -> None:
        self.sandbox = tmp / "sandbox"
        (self.sandbox / "shared" / "release").mkdir(parents=True)
        self.db = tmp / "evidence.db"
        self.store = SqliteEvidenceStore(self.db)
        registry = ToolRegistry()
        register_files_tools(registry, self.sandbox)
        policy = compile_source(POLICY, "approvals.sos")
        self.host = RuntimeHost(
            Kernel(policy, registry), self.store, approvals=ApprovalSettings(**settings)
        )
        self.written = self.sandbox / "shared" / "release" / "notes.txt"


class Person:
    """An elicitation callback: what the person at the client answers, and what they saw."""

    def __init__(self, answer: ElicitResult | None) -> None:
        self.answer = answer
        self.asked: list[Any] = []

    async def __call__(self, context: object, params: Any) -> ElicitResult:
        self.asked.append(params)
        if self.answer is None:  # the person never answers
            import anyio

            await anyio.sleep(60)
        assert self.answer is not None
        return self.answer


MAYA = AccessContext(principal="maya", tenant="acme", roles=("m",))
BOB = AccessContext(principal="bob", tenant="acme", roles=("developer",))


async def test_an_approver_accepting_at_the_client_runs_the_call(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    async with (
        open_turn(s.host, MAYA, RUN) as turn,
        http_client(turn.url, turn.token, mode="legacy", elicitation_callback=person) as client,
    ):
        result = await client.call_tool("files.write", ARGS)
    assert not result.is_error, result.content
    assert s.written.read_text() == "v1\n"
    (params,) = person.asked
    message = params.message
    assert "files.write" in message and "/shared/release/notes.txt" in message
    assert arguments_digest(ARGS) in message  # the digest of exactly these arguments
    assert params.requested_schema["required"] == ["approve"]
    (approval,) = ApprovalLedger(s.store).for_turn(MAYA.turn_id)
    assert approval.status == "consumed" and approval.via == "elicitation"
    assert approval.approver == "maya"
    # the client that answered, by the name it gave in initialize
    assert approval.detail is not None and "answered accept at the client (" in approval.detail
    records = s.store.query(MAYA.turn_id)
    assert [(r.effect, str(r.outcome)) for r in records] == [("allow", "succeeded")]
    assert "release-needs-maintainer" in records[0].rule_ids


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (ElicitResult(action="decline"), "declined"),
        (ElicitResult(action="cancel"), "cancelled"),
        (ElicitResult(action="accept", content={"approve": False}), "did not approve"),
        (None, "no answer from the client"),
    ],
)
async def test_decline_cancel_no_or_silence_refuses(
    tmp_path: Path, answer: ElicitResult | None, said: str
) -> None:
    s = Setup(tmp_path, elicitation_timeout_s=0.5)
    person = Person(answer)
    async with (
        open_turn(s.host, MAYA, RUN) as turn,
        http_client(turn.url, turn.token, mode="legacy", elicitation_callback=person) as client,
    ):
        result = await client.call_tool("files.write", ARGS)
    assert result.is_error and len(person.asked) == 1
    payload = result.structured_content or {}
    assert payload["reason"] == "approval_required" and said in payload["detail"]
    assert not s.written.exists()
    (approval,) = ApprovalLedger(s.store).for_turn(MAYA.turn_id)
    assert approval.status == ("expired" if answer is None else "denied")
    records = s.store.query(MAYA.turn_id)
    assert [(r.effect, str(r.reason)) for r in records] == [
        ("approval_required", "approval_required")
    ]


async def test_a_non_approver_is_not_asked_and_an_operator_approves_out_of_band(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)
    # bob's client would accept anything: it is never asked (bob may not approve)
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    async with (
        open_turn(s.host, BOB, RUN) as turn,
        http_client(turn.url, turn.token, mode="legacy", elicitation_callback=person) as client,
    ):
        first = await client.call_tool("files.write", ARGS)
        assert first.is_error and person.asked == []
        payload = first.structured_content or {}
        approval_id = payload["approvalId"]
        assert payload["reason"] == "approval_required" and payload["retry"] is True
        assert "not asked at the client: bob may not give this approval" in payload["detail"]
        text = first.content[0].text  # type: ignore[union-attr]
        assert approval_id in text and "retry this same call" in text
        assert not s.written.exists()
        ok = CliRunner().invoke(
            cli_main,
            ["approvals", "approve", approval_id, "--db", str(s.db), "--as", "maya", "--role", "m"],
        )
        assert ok.exit_code == 0, ok.output
        again = await client.call_tool("files.write", ARGS)
    assert not again.is_error, again.content
    assert s.written.read_text() == "v1\n"
    approval = ApprovalLedger(s.store).get(approval_id)
    assert approval is not None and approval.status == "consumed" and approval.via == "cli"


@pytest.mark.parametrize("mode", ["auto", "legacy-without-elicitation"])
async def test_without_a_channel_to_ask_an_approver_gets_the_out_of_band_path(
    tmp_path: Path, mode: str
) -> None:
    s = Setup(tmp_path)
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    kw: dict[str, Any] = {"elicitation_callback": person} if mode == "auto" else {}
    async with (
        open_turn(s.host, MAYA, RUN) as turn,
        http_client(turn.url, turn.token, mode=mode.split("-")[0], **kw) as client,
    ):
        result = await client.call_tool("files.write", ARGS)
    # 2026-07-28 (auto) cannot carry a server-to-client request; the other client
    # declared no elicitation: nobody is asked, the call is refused naming an approval
    assert result.is_error and person.asked == []
    payload = result.structured_content or {}
    assert payload["reason"] == "approval_required" and payload["approvalId"].startswith("apr-")
    why = (
        "this call's channel cannot carry a request to the client"
        if mode == "auto"
        else "the client declared no elicitation"
    )
    assert f"not asked at the client: {why}" in payload["detail"]
    assert not s.written.exists()
    (record,) = s.store.query(MAYA.turn_id)  # and the evidence says why
    assert why in (record.error or "")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_over_stdio_the_relayed_bridge_asks_on_a_handshake_session(
    tmp_path: Path, mode: str
) -> None:
    from mcp import Client, StdioServerParameters

    s = Setup(tmp_path)
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    async with open_turn(s.host, MAYA, RUN, transport="stdio") as turn:
        assert turn.command is not None
        params = StdioServerParameters(command=turn.command[0], args=turn.command[1:])
        async with Client(params, mode=mode, elicitation_callback=person) as client:
            result = await client.call_tool("files.write", ARGS)
    if mode == "legacy":  # stdio carries the question back through the relay to the host
        assert not result.is_error, result.content
        assert len(person.asked) == 1 and s.written.read_text() == "v1\n"
        (approval,) = ApprovalLedger(s.store).for_turn(MAYA.turn_id)
        assert approval.status == "consumed" and approval.via == "elicitation"
        # the client's initialize name came through the relay too
        assert approval.detail is not None and "answered accept at the client (" in approval.detail
    else:  # 2026-07-28 over stdio: no server-to-client requests either
        assert result.is_error and person.asked == []
        assert "cannot carry a request" in (result.structured_content or {})["detail"]
        assert not s.written.exists()


async def test_an_approval_of_a_closed_turn_cannot_be_answered(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    async with (
        open_turn(s.host, BOB, RUN) as turn,
        http_client(turn.url, turn.token, mode="auto") as client,
    ):
        first = await client.call_tool("files.write", ARGS)
    approval_id = (first.structured_content or {})["approvalId"]
    # the turn closed: its call can no longer be retried; the request's expiry was recorded
    # before the seal, and nothing is appended after it
    closed = ApprovalLedger(s.store).get(approval_id)
    assert closed is not None and closed.status == "expired"
    assert [e.event for e in closed.events] == ["requested", "expired"]
    assert closed.events[-1].detail == "the turn closed"
    late = CliRunner().invoke(
        cli_main,
        ["approvals", "approve", approval_id, "--db", str(s.db), "--as", "maya", "--role", "m"],
    )
    assert late.exit_code == 1 and "is expired, not pending" in late.output
    kinds = [link.kind for link in s.store.iter_links(BOB.turn_id)]
    assert kinds[-1] == "seal" and kinds.count("approval") == 2


@pytest.mark.parametrize("cancelled_by", ["client", "turn close"])
async def test_a_call_cancelled_while_its_approver_is_asked_is_recorded(
    tmp_path: Path, cancelled_by: str
) -> None:
    """The approval step runs before the attempt row; a cancellation there (the client's
    ``notifications/cancelled`` while the form is shown, or the turn closing) left no
    record of the call at all: ``evidence counts`` said 0 attempts."""
    import anyio

    s = Setup(tmp_path)
    person = Person(None)  # asked, never answers

    async def call(client: Any) -> None:
        with contextlib.suppress(Exception):  # the turn closed under the call: no answer
            await client.call_tool("files.write", ARGS)

    async def asked() -> None:
        with anyio.fail_after(bound(30)):
            while not person.asked:
                await anyio.sleep(0.02)

    async with anyio.create_task_group() as tg:
        async with (
            open_turn(s.host, MAYA, RUN) as turn,
            http_client(turn.url, turn.token, mode="legacy", elicitation_callback=person) as c,
        ):
            if cancelled_by == "client":
                async with anyio.create_task_group() as calls:
                    calls.start_soon(call, c)
                    await asked()
                    calls.cancel_scope.cancel()  # the SDK sends notifications/cancelled
                with anyio.fail_after(bound(30)):
                    while not s.store.query(MAYA.turn_id):
                        await anyio.sleep(0.02)
            else:
                tg.start_soon(call, c)
                await asked()
        tg.cancel_scope.cancel()
    records = s.store.query(MAYA.turn_id)
    assert [(str(r.outcome), str(r.reason)) for r in records] == [("cancelled", "cancelled")]
    assert records[0].tool == "files.write" and records[0].resource == ARGS["path"]
    assert not s.written.exists()


async def test_a_call_cancelled_while_its_request_is_written_leaves_the_retry_asked(
    tmp_path: Path,
) -> None:
    """The client cancels a call while its approval request is being written (a slow store:
    the write goes on in its thread and lands after the call went away). The request was
    left pending with no one asked: the retry of the same call found it pending and was
    refused "waiting for an approver" without being asked at the client, until the request
    lapsed (an hour by default), as a2c3353 fixed for a cancel while the form is shown."""
    import threading
    import time

    import anyio

    s = Setup(tmp_path)
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    gate = s.host.approvals
    assert gate is not None
    ledger = gate.ledger
    original = ledger.request
    started = threading.Event()

    def slow_request(*args: Any, **kwargs: Any) -> Any:
        started.set()
        time.sleep(0.5)  # the store is slow: the client cancels meanwhile
        return original(*args, **kwargs)

    ledger.request = slow_request  # type: ignore[method-assign]
    async with (
        open_turn(s.host, MAYA, RUN) as turn,
        http_client(turn.url, turn.token, mode="legacy", elicitation_callback=person) as c,
    ):
        async with anyio.create_task_group() as calls:

            async def first() -> None:
                with contextlib.suppress(Exception):
                    await c.call_tool("files.write", ARGS)

            calls.start_soon(first)
            with anyio.fail_after(bound(30)):
                while not started.is_set():
                    await anyio.sleep(0.01)
            calls.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        with anyio.fail_after(bound(30)):  # the request lands, after the call went away
            while not ledger.for_turn(MAYA.turn_id) or not s.store.query(MAYA.turn_id):
                await anyio.sleep(0.02)
        await anyio.sleep(0.1)
        ledger.request = original  # type: ignore[method-assign]
        retry = await c.call_tool("files.write", ARGS)
    assert len(person.asked) == 1, "the retry was not asked at the client"
    assert not retry.is_error, retry.content
    assert s.written.read_text() == "v1\n"
    first_request, second = ApprovalLedger(s.store).for_turn(MAYA.turn_id)
    assert first_request.status == "expired", first_request
    assert second.status == "consumed"


async def test_a_client_that_declared_url_elicitation_only_is_not_sent_a_form(
    tmp_path: Path,
) -> None:
    """2025-11-25 lets a client declare URL-mode elicitation alone, and forbids a server
    to send it a mode it did not declare. SharedOS asked such a client with a form
    anyway: the client refused it, the request was closed ``expired`` at once with
    ``retry: false``, and every retry did the same, so no approval of that client's
    calls could ever reach an operator. It takes the out-of-band path instead."""
    import json

    import anyio

    from tests.bridge.rawwire import INITIALIZED, StdioBridge, call, frame

    s = Setup(tmp_path)
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"url": {}}},
            "clientInfo": {"name": "url-only", "version": "1"},
        },
    }
    sent: list[dict[str, Any]] = []  # the questions the client was sent
    async with open_turn(s.host, MAYA, RUN, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.send_line(frame(hello))
            await bridge.wait_reply(0)
            await bridge.send_line(frame(INITIALIZED))
            await bridge.send_line(frame(call(1, "files.write", ARGS)))
            with anyio.fail_after(bound(30)):
                while bridge.reply(1) is None:
                    asked = [m for m in bridge.replies if m.get("method") == "elicitation/create"]
                    for request in asked:  # what a URL-only client answers to a form
                        bridge.replies.remove(request)
                        sent.append(request)
                        refusal = {"code": -32602, "message": "form mode not supported"}
                        await bridge.send_line(
                            frame({"jsonrpc": "2.0", "id": request["id"], "error": refusal})
                        )
                    if bridge.reply(1) is None:
                        assert await bridge._read_some()
            reply = bridge.reply(1)
        finally:
            await bridge.kill()
    assert reply is not None
    payload = reply["result"]["structuredContent"]
    assert payload["reason"] == "approval_required", json.dumps(payload)
    assert payload["approvalStatus"] == "pending" and payload["retry"] is True, payload
    assert "not asked at the client" in payload["detail"]
    assert not sent
    assert not s.written.exists()


async def test_over_stdio_a_question_left_unanswered_still_answers_the_call(
    tmp_path: Path,
) -> None:
    """Over stdio the question goes through the relayed bridge process. When the client
    did not answer within ``elicitation_timeout_s`` the host refused the call and sent
    its result, but the bridge process was still waiting for the client's answer and
    read nothing else of that call: the refusal was recorded, yet the ``tools/call``
    never got a response (the client hung for as long as its person stayed away)."""
    import anyio
    from mcp import Client, StdioServerParameters

    s = Setup(tmp_path, elicitation_timeout_s=0.5)
    person = Person(None)  # asked, never answers
    async with open_turn(s.host, MAYA, RUN, transport="stdio") as turn:
        assert turn.command is not None
        params = StdioServerParameters(command=turn.command[0], args=turn.command[1:])
        async with Client(params, mode="legacy", elicitation_callback=person) as client:
            with anyio.fail_after(bound(20)):
                result = await client.call_tool("files.write", ARGS)
            assert len(person.asked) == 1
            assert result.is_error
            payload = result.structured_content or {}
            assert payload["reason"] == "approval_required"
            assert "no answer from the client" in payload["detail"]
    assert not s.written.exists()


async def test_a_standalone_stdio_bridge_keeps_the_hosts_approval_settings(
    tmp_path: Path,
) -> None:
    """A standalone stdio turn (``StdioLaunch(relay=False)``) is served by a runtime the
    bridge process builds from the turn file, which carried no ``[approvals]``: the
    bridge used the defaults. A host that set ``elicitation = false`` (its clients
    answer questions by themselves) still had the client asked, and the client's own
    accept ran the call. The turn file now carries the host's approval settings."""
    from mcp import Client, StdioServerParameters

    from sharedos.bridge.turnfile import StdioLaunch
    from sharedos.policy import compile_paths

    s = Setup(tmp_path, elicitation=False)
    rules = tmp_path / "approvals.sos"
    rules.write_text(POLICY)
    launch = StdioLaunch(
        relay=False, rules=(rules,), evidence_db=s.db, sandbox_root=s.sandbox, directory=tmp_path
    )
    registry = ToolRegistry()
    register_files_tools(registry, s.sandbox)
    s.host = RuntimeHost(
        Kernel(compile_paths([rules]), registry),
        s.store,
        approvals=ApprovalSettings(elicitation=False),
    )
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    async with open_turn(s.host, MAYA, RUN, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        params = StdioServerParameters(command=turn.command[0], args=turn.command[1:])
        async with Client(params, mode="legacy", elicitation_callback=person) as client:
            result = await client.call_tool("files.write", ARGS)
    assert person.asked == [], "the host said elicitation = false: nobody is asked"
    assert result.is_error
    payload = result.structured_content or {}
    assert payload["reason"] == "approval_required" and payload["retry"] is True
    assert "elicitation is off on this host" in payload["detail"]
    assert not s.written.exists()


async def test_a_clients_name_is_kept_short_in_the_approval(tmp_path: Path) -> None:
    """The client's ``initialize`` name goes into the approval's detail (who answered). Over
    HTTP it was kept whole: a name of a few MiB went into every event, record and refusal
    of the approval. It is cut at 200 characters, as the stdio relay already did."""
    from mcp_types import Implementation

    s = Setup(tmp_path)
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    long_name = "client-" + "x" * 100_000
    async with (
        open_turn(s.host, MAYA, RUN) as turn,
        http_client(
            turn.url,
            turn.token,
            mode="legacy",
            elicitation_callback=person,
            client_info=Implementation(name=long_name, version="1"),
        ) as client,
    ):
        result = await client.call_tool("files.write", ARGS)
    assert not result.is_error, result.content
    (approval,) = ApprovalLedger(s.store).for_turn(MAYA.turn_id)
    assert approval.detail is not None and "answered accept at the client (client-xxx" in (
        approval.detail
    )
    assert len(approval.detail) < 1_000, len(approval.detail)


async def _asked_over_raw_stdio(bridge: Any, call_id: int) -> Any:
    """Handshake (id 0, elicitation declared), then ``files.write`` as request ``call_id``;
    the bridge's ``elicitation/create`` request once it arrives."""
    import anyio

    from tests.bridge.rawwire import frame

    await bridge.send_line(
        frame(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {"form": {}}},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
        )
    )
    await bridge.wait_reply(0)
    await bridge.send_line(frame({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    await bridge.send_line(
        frame(
            {
                "jsonrpc": "2.0",
                "id": call_id,
                "method": "tools/call",
                "params": {"name": "files.write", "arguments": ARGS},
            }
        )
    )
    with anyio.fail_after(bound(10)):
        while not any(m.get("method") == "elicitation/create" for m in bridge.replies):
            assert await bridge._read_some(), bridge.stderr
    return next(m for m in bridge.replies if m.get("method") == "elicitation/create")


@pytest.mark.parametrize(
    "damaged",
    [b'"result":{"action":"acc', b'"result":{"action":"accept"}} x', b'"error":{"code":1}}}'],
    ids=["truncated", "trailing-bytes", "not-json"],
)
async def test_a_damaged_answer_to_the_question_is_not_answered_as_the_clients_own_request(
    tmp_path: Path, damaged: bytes
) -> None:
    """The bridge numbers its requests from 0 or 1, as the SDK clients number theirs: the
    elicitation of the client's ``tools/call`` 1 is often request 1 too. A damaged answer
    to it (cut short, or with bytes after it) had its id read from its edges and was
    answered with a parse error for that id — which the client took for the answer to
    its own request 1: its tools/call failed with a JSON-RPC error (the ADR's "refusals
    are results" broken), and the real result came later for an id already answered."""
    from tests.bridge.rawwire import StdioBridge

    s = Setup(tmp_path, elicitation_timeout_s=0.5)
    async with open_turn(s.host, MAYA, RUN, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            asked = await _asked_over_raw_stdio(bridge, call_id=1)
            await bridge.send_line(b'{"jsonrpc":"2.0","id":%d,' % asked["id"] + damaged)
            answer = await bridge.wait_reply(1, timeout=bound(10))
        finally:
            await bridge.kill()
    assert asked["id"] == 1  # the collision this is about
    assert "result" in answer, answer  # the call's own answer: a refusal, as a result
    assert answer["result"]["structuredContent"]["reason"] == "approval_required"
    assert not s.written.exists()
    calls = [r for r in s.store.query(MAYA.turn_id) if r.tool == "files.write"]
    assert [str(r.reason) for r in calls] == ["approval_required"]  # recorded once


#: answers to the bridge's elicitation that no JSON-RPC reader can take (``%d``: its id)
UNREADABLE_ANSWERS = {
    "result-null": b'{"jsonrpc":"2.0","id":%d,"result":null}',
    "error-code-text": b'{"jsonrpc":"2.0","id":%d,"error":{"code":"no","message":1}}',
    "non-finite": b'{"jsonrpc":"2.0","id":%d,"result":{"action":"accept","content":{"n":NaN}}}',
    "invalid-utf8": b'{"jsonrpc":"2.0","id":%d,"result":{"action":"decline","x":"\xff"}}',
}


def _refused_at_once(payload: dict[str, Any]) -> None:
    assert payload["reason"] == "approval_required", payload
    assert "could not be asked" in payload["detail"], payload["detail"]
    assert "answer to this request could not be read" in payload["detail"]


@pytest.mark.parametrize("answer", list(UNREADABLE_ANSWERS))
async def test_an_unreadable_answer_to_the_question_refuses_the_call_at_once_on_stdio(
    tmp_path: Path, answer: str
) -> None:
    """The client did answer, but with an answer the server cannot read: it was dropped
    (and answered with an error of its own), and the call waited for the whole
    elicitation timeout (two minutes by default), then was refused as "no answer from
    the client". The bridge now hands on an error for the request the answer names."""
    from tests.bridge.rawwire import StdioBridge

    s = Setup(tmp_path, elicitation_timeout_s=600)
    async with open_turn(s.host, MAYA, RUN, transport="stdio") as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            asked = await _asked_over_raw_stdio(bridge, call_id=7)
            await bridge.send_line(UNREADABLE_ANSWERS[answer] % asked["id"])
            reply = await bridge.wait_reply(7, timeout=bound(10))
            await bridge.send_line(b'{"jsonrpc":"2.0","id":8,"method":"ping"}')
            assert (await bridge.wait_reply(8))["result"] == {}  # still serving
        finally:
            await bridge.kill()
    _refused_at_once(reply["result"]["structuredContent"])
    assert not s.written.exists()
    calls = [r for r in s.store.query(MAYA.turn_id) if r.tool == "files.write"]
    assert [str(r.reason) for r in calls] == ["approval_required"]


@pytest.mark.parametrize("answer", list(UNREADABLE_ANSWERS))
async def test_an_unreadable_answer_to_the_question_refuses_the_call_at_once_over_http(
    tmp_path: Path, answer: str
) -> None:
    import json

    import anyio
    import httpx2

    from tests.bridge.rawwire import ACCEPT, INITIALIZED, LEGACY

    s = Setup(tmp_path, elicitation_timeout_s=600)
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "files.write", "arguments": ARGS},
    }
    events: list[dict[str, Any]] = []
    async with (
        open_turn(s.host, MAYA, RUN) as turn,
        httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=30) as hc,
    ):
        assert turn.url is not None
        opened = await hc.post(turn.url, json=init)
        session = {
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": LEGACY,
        }
        await hc.post(turn.url, json=INITIALIZED, headers=session)
        with anyio.fail_after(bound(10)):
            async with hc.stream("POST", turn.url, json=call, headers=session) as stream:
                async for line in stream.aiter_lines():
                    if not line.startswith("data:") or not line[5:].strip():
                        continue
                    event = json.loads(line[5:])
                    events.append(event)
                    if event.get("method") == "elicitation/create":
                        sent = UNREADABLE_ANSWERS[answer] % event["id"]
                        await hc.post(turn.url, content=sent, headers=session)
                    elif event.get("id") == 7:
                        break
    assert [e.get("method") for e in events] == ["elicitation/create", None], events
    _refused_at_once(events[-1]["result"]["structuredContent"])
    assert not s.written.exists()
    calls = [r for r in s.store.query(MAYA.turn_id) if r.tool == "files.write"]
    assert [str(r.reason) for r in calls] == ["approval_required"]


@pytest.mark.parametrize("flow", ["out_of_band", "elicitation"])
async def test_a_call_cancelled_as_its_approval_is_taken_still_runs_once(
    tmp_path: Path, flow: str
) -> None:
    """The client cancels the call (the SDK sends ``notifications/cancelled``) while its
    approval's ``consumed`` event is being written (a slow store). The event landed from
    its thread after the call went away: the approval read "used by call …", the call was
    recorded ``cancelled`` and never ran, and its retry had to be approved again. Once its
    approval is taken, the call runs to its recorded outcome (docs/approvals.md)."""
    import threading
    import time

    import anyio

    s = Setup(tmp_path)
    gate = s.host.approvals
    assert gate is not None
    ledger = gate.ledger
    original = ledger.consume
    started = threading.Event()

    def slow_consume(*args: Any, **kwargs: Any) -> Any:
        started.set()
        time.sleep(0.3)  # the store is slow: the client cancels meanwhile
        return original(*args, **kwargs)

    ledger.consume = slow_consume  # type: ignore[method-assign]
    person = Person(ElicitResult(action="accept", content={"approve": True}))
    who = MAYA if flow == "elicitation" else BOB
    async with (
        open_turn(s.host, who, RUN) as turn,
        http_client(turn.url, turn.token, mode="legacy", elicitation_callback=person) as c,
    ):
        if flow == "out_of_band":
            first = await c.call_tool("files.write", ARGS)
            approval_id = (first.structured_content or {})["approvalId"]
            answer = ["approve", approval_id, "--db", str(s.db), "--as", "maya", "--role", "m"]
            ok = CliRunner().invoke(cli_main, ["approvals", *answer])
            assert ok.exit_code == 0, ok.output
        async with anyio.create_task_group() as calls:

            async def call() -> None:
                with contextlib.suppress(Exception):
                    await c.call_tool("files.write", ARGS)

            calls.start_soon(call)
            with anyio.fail_after(bound(30)):
                while not started.is_set():
                    await anyio.sleep(0.01)
            calls.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        with anyio.fail_after(bound(30)):  # the call's record lands, after it went away
            while not any(r.outcome is not None for r in s.store.query(who.turn_id)[-1:]):
                await anyio.sleep(0.02)
            while not [a for a in ledger.for_turn(who.turn_id) if a.status == "consumed"]:
                await anyio.sleep(0.02)
    (used,) = [a for a in ApprovalLedger(s.store).for_turn(who.turn_id) if a.status == "consumed"]
    records = {r.call_id: r for r in s.store.query(who.turn_id)}
    ran = records[used.closed_call]
    assert (str(ran.outcome), ran.effect) == ("succeeded", "allow"), (ran.outcome, ran.error)
    assert s.written.read_text() == "v1\n"


SLOW_POLICY = """
namespace misc
requirement misc.slow { action write; resource path(args.path) }
permit write on "/shared/**"
@id("slow-needs-m")
require approval by role "m" for write on "/shared/**"
"""


async def test_a_turn_closing_while_a_call_holds_its_approval_is_sealed_after_its_outcome(
    tmp_path: Path,
) -> None:
    """A 2026-07-28 call that has taken its approval runs to its recorded outcome whatever
    its caller does (docs/approvals.md, "Taken means run"), and the turn's close waits for
    it before its seal. The HTTP bridge's close cancelled it after its grace and went on
    to the seal while the handler still ran: the call's outcome landed past the seal,
    where the seal vouches for nothing."""
    import sqlite3

    import anyio

    from sharedos.catalog import ToolDefinition
    from sharedos.evidence.verify import verify_store
    from sharedos.kernel.handlers import HandlerContext, HandlerResult

    started = anyio.Event()

    async def slow(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        started.set()
        await anyio.sleep(0.6)  # past the turn's close grace
        return HandlerResult.text("done")

    tool = ToolDefinition(
        name="misc.slow",
        description="A slow write.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        handler=slow,
    )
    db = tmp_path / "evidence.db"
    store = SqliteEvidenceStore(db)
    host = RuntimeHost(
        Kernel(compile_source(SLOW_POLICY, "slow.sos"), ToolRegistry([tool])),
        store,
        approvals=ApprovalSettings(),
    )
    args = {"path": "/shared/x"}
    run = ToolPolicy(name="slow", mode="open", managed=("misc.*",))
    async with (
        open_turn(host, BOB, run, grace_s=0.1) as turn,
        http_client(turn.url, turn.token, mode="auto") as c,
    ):
        first = await c.call_tool("misc.slow", args)
        approval_id = (first.structured_content or {})["approvalId"]
        answer = ["approve", approval_id, "--db", str(db), "--as", "maya", "--role", "m"]
        ok = CliRunner().invoke(cli_main, ["approvals", *answer])
        assert ok.exit_code == 0, ok.output
        async with anyio.create_task_group() as calls:

            async def call() -> None:
                with contextlib.suppress(Exception):
                    await c.call_tool("misc.slow", args)

            calls.start_soon(call)
            with anyio.fail_after(bound(30)):
                await started.wait()
            calls.cancel_scope.cancel()  # the client gives up; the turn closes meanwhile
    kinds = [
        str(kind)
        for (kind,) in sqlite3.connect(db).execute(
            "SELECT kind FROM chain WHERE turn_id = ? ORDER BY pos", (BOB.turn_id,)
        )
    ]
    assert kinds[-1] == "seal", kinds  # the call's outcome went before it
    (used,) = [a for a in ApprovalLedger(store).for_turn(BOB.turn_id) if a.status == "consumed"]
    ran = {r.call_id: r for r in store.query(BOB.turn_id)}[used.closed_call]
    assert str(ran.outcome) == "succeeded", (ran.outcome, ran.error)
    assert verify_store(store).clean

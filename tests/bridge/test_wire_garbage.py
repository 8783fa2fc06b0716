"""Wire garbage on both transports (issue 11, section 3).

Random bytes, truncated frames, huge bodies, deep nesting, invalid UTF-8,
lone surrogates, wrong types everywhere in JSON-RPC, batch arrays, duplicate
ids and notifications that look like calls, each checked against an
independent oracle (``tests/bridge/garbage.py``):

- the bridge never crashes: it answers a control call after every frame;
- every ``tools/call`` the oracle can read is recorded, and answered as a
  result (never a JSON-RPC error) when its id can be answered;
- a frame the oracle cannot read leaves a ``malformed_request`` record;
- nothing runs on an altered argument: a file exists only where a frame
  read strictly (exact bytes) asked for exactly that write.

Quick mode runs in ``make test``. The long mode (``-m stress``, ``make
stress``) sends thousands of seeded mutations with the default rate limit on,
and checks the aggregate records account for every unparseable frame.
Inputs that once broke something live in ``tests/data/bridge/garbage/``.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.limits import TransportLimits
from sharedos.bridge.turnfile import StdioLaunch
from sharedos.kernel.context import AccessContext
from sharedos.toolpolicy import ToolPolicy
from tests.bridge.conftest import DATA, Runtime, build_runtime
from tests.bridge.garbage import Expectation, Garbage, expect, fixed, mutations
from tests.bridge.rawwire import ACCEPT, StdioBridge, frame, json_rpc_messages, legacy_session
from tests.conftest import Figures, stress_selected

pytestmark = pytest.mark.anyio

FILES_POLICY = ToolPolicy(name="bridge-open", mode="open", managed=("files.*",))
#: quick mode records every malformed frame one by one (exact accounting)
EXACT = TransportLimits(malformed_burst=1_000_000, malformed_per_second=1_000_000.0)
QUICK_MUTATIONS = 120
STRESS_MUTATIONS = 3000


def _stress(request: pytest.FixtureRequest) -> bool:
    return stress_selected(request.config)


@pytest.fixture
def files_runtime(tmp_path: Path) -> Runtime:
    return build_runtime(tmp_path, with_slow=False)


def _corpus(seed: int, count: int, *, huge: bool) -> list[Garbage]:
    frames = list(fixed(10_000))
    frames.extend(mutations(random.Random(seed), 20_000, count, huge=huge))
    return frames


def _describe(g: Garbage) -> str:
    head = g.data[:200]
    return f"{g.label} ({len(g.data)} bytes) base64:{base64.b64encode(head).decode()}"


class Ledger:
    """What was sent, and what the bridge owed for it, checked at the end against the store."""

    def __init__(self) -> None:
        self.expected_writes: dict[str, set[str]] = {}
        self.strict_arguments: list[Any] = []
        self.unparseable = 0
        self.failures: list[str] = []

    def check_frame(
        self,
        g: Garbage,
        want: Expectation,
        delta: int,
        answers: list[dict[str, Any]],
        *,
        stdio: bool,
        note: str = "",
    ) -> None:
        """Per-frame obligations: records and answers (``note``: transport detail for a failure)."""
        problems = []
        if want.oversized:
            if delta < 1:
                problems.append("an oversized frame left no record")
        elif want.blank:
            if delta > (0 if stdio else 1):
                problems.append(f"a blank frame left {delta} records")
        elif want.readable == "none":
            if delta < 1:
                problems.append("an unparseable frame left no record")
        elif want.calls:
            if delta != want.calls:
                problems.append(f"{want.calls} tools/call in the frame, {delta} records")
        elif delta > (1 if want.readable == "python" else 0):
            problems.append(f"a frame without a call left {delta} records")
        by_id: dict[Any, list[dict[str, Any]]] = {}
        for a in answers:
            by_id.setdefault(json.dumps(a.get("id")), []).append(a)
        for rid in want.answer_ids:
            got = by_id.get(json.dumps(rid), [])
            if not got:
                problems.append(f"tools/call id {rid!r} was not answered")
            elif not all("result" in a for a in got):
                problems.append(f"tools/call id {rid!r} was answered with an error: {got[0]}")
        if want.readable == "none" and not want.blank:
            self.unparseable += 1
        for path, content in want.may_write:
            self.expected_writes.setdefault(path, set()).add(content)
        if problems:
            self.failures.append(f"{_describe(g)}: {'; '.join(problems)} {note}")

    def check_effects(self, rt: Runtime, turn_id: str) -> None:
        """Nothing ran on an altered argument: every file and every success matches a strict frame."""
        home = rt.sandbox / "home" / "alice"
        for path in home.rglob("*"):
            if path.name == "notes.txt" or not path.is_file():
                continue
            rel = "/" + str(path.relative_to(rt.sandbox))
            allowed = self.expected_writes.get(rel)
            if allowed is None:
                self.failures.append(
                    f"{rel!r} was written, but no strictly read frame asked for it"
                )
            elif path.read_text(errors="replace") not in allowed:
                self.failures.append(f"{rel!r} holds content no frame sent")
        for record in rt.evidence.query(turn_id=turn_id):
            if str(record.outcome) != "succeeded":
                continue
            args = record.arguments if isinstance(record.arguments, dict) else {}
            path = args.get("path")
            if record.tool == "files.write" and path not in self.expected_writes:
                self.failures.append(f"a files.write of {path!r} succeeded for no strict frame")


async def _http_run(
    rt: Runtime, alice: AccessContext, frames: Iterable[Garbage], limits: TransportLimits
) -> Ledger:
    ledger = Ledger()
    control = frame(
        {
            "jsonrpc": "2.0",
            "id": "control",
            "method": "tools/call",
            "params": {"name": "files.read", "arguments": {"path": "/public/a.txt"}},
        }
    )
    async with open_turn(rt.host, alice, FILES_POLICY, limits=limits) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=30) as hc:
            session = await legacy_session(hc, turn.url)
            for i, g in enumerate(frames):
                want = expect(g.data)
                before = rt.evidence.counts(turn_id=alice.turn_id).total
                try:
                    r = await hc.post(turn.url, content=g.data, headers=session)
                    answers = json_rpc_messages(r) if r.status_code != 413 else []
                except (httpx2.HTTPError, ValueError) as exc:
                    ledger.failures.append(f"{_describe(g)}: the request failed: {exc!r}")
                    continue
                delta = rt.evidence.counts(turn_id=alice.turn_id).total - before
                note = f"(HTTP {r.status_code}: {r.text[:300]!r})"
                ledger.check_frame(g, want, delta, answers, stdio=False, note=note)
                if i % 10 == 0:
                    ok = await hc.post(turn.url, content=control, headers=session)
                    text = json.dumps(json_rpc_messages(ok))
                    if "public text" not in text:
                        ledger.failures.append(
                            f"after {g.label} the bridge no longer serves: {text[:200]}"
                        )
    ledger.check_effects(rt, alice.turn_id)
    return ledger


async def _stdio_run(
    rt: Runtime, alice: AccessContext, frames: Iterable[Garbage], limits: TransportLimits
) -> Ledger:
    ledger = Ledger()
    launch = StdioLaunch(
        rules=(DATA / "files.sos",),
        evidence_db=rt.evidence_path,
        tool_sets=("files",),
        sandbox_root=rt.sandbox,
        run_policy="bridge-open",
        limits=limits,
    )
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            for i, g in enumerate(frames):
                want = expect(g.data)
                before = rt.evidence.counts(turn_id=alice.turn_id).total
                seen = len(bridge.replies)
                await bridge.send_line(g.data)
                # the control request is read after the frame: once it is answered, the
                # frame has been refused (refusals are written in order) or delivered
                control = f"control-{i}"
                await bridge.send_line(
                    frame(
                        {
                            "jsonrpc": "2.0",
                            "id": control,
                            "method": "tools/call",
                            "params": {
                                "name": "files.read",
                                "arguments": {"path": "/public/a.txt"},
                            },
                        }
                    )
                )
                try:
                    reply = await bridge.wait_reply(control, timeout=30, since=seen)
                    for rid in want.answer_ids:
                        await bridge.wait_reply(rid, timeout=10, since=seen)
                except (AssertionError, TimeoutError) as exc:
                    ledger.failures.append(
                        f"{_describe(g)}: {exc!r}; stderr: {bridge.stderr[-500:]!r}"
                    )
                    if bridge.process.returncode is not None:
                        break
                    continue
                if "public text" not in json.dumps(reply):
                    ledger.failures.append(f"after {g.label} the control call failed: {reply}")
                answers = [r for r in bridge.replies[seen:] if r.get("id") != control]
                delta = rt.evidence.counts(turn_id=alice.turn_id).total - before - 1
                ledger.check_frame(g, want, delta, answers, stdio=True)
            # end of input: the bridge answers what is in flight, flushes and exits 0
            assert bridge.process.stdin is not None
            await bridge.process.stdin.aclose()
            code, _ = await bridge.wait_exit(20)
            if code != 0:
                ledger.failures.append(f"the stdio bridge exited {code} at end of input")
        finally:
            await bridge.kill()
    ledger.check_effects(rt, alice.turn_id)
    return ledger


def _report(ledger: Ledger) -> str:
    return "\n".join(ledger.failures[:40]) + (
        f"\n... and {len(ledger.failures) - 40} more" if len(ledger.failures) > 40 else ""
    )


MODES = [pytest.param("quick"), pytest.param("stress", marks=pytest.mark.stress)]


def _count(mode: str, request: pytest.FixtureRequest) -> int:
    if mode == "stress" and not _stress(request):
        pytest.skip("long mode: run with -m stress (make stress)")
    return STRESS_MUTATIONS if mode == "stress" else QUICK_MUTATIONS


@pytest.mark.parametrize("mode", MODES)
async def test_http_garbage(
    files_runtime: Runtime, request: pytest.FixtureRequest, mode: str, stress_figures: Figures
) -> None:
    alice = AccessContext(principal="alice")
    frames = _corpus(11, _count(mode, request), huge=True)
    ledger = await _http_run(files_runtime, alice, frames, EXACT)
    if mode == "stress":
        stress_figures.add(
            f"wire garbage (http): {len(frames)} frames, {ledger.unparseable} unparseable, "
            f"problems {len(ledger.failures)} (crash, unanswered, unrecorded or an effect no frame asked for)"
        )
    assert not ledger.failures, _report(ledger)


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_garbage(
    files_runtime: Runtime, request: pytest.FixtureRequest, mode: str, stress_figures: Figures
) -> None:
    alice = AccessContext(principal="alice")
    frames = _corpus(12, _count(mode, request), huge=True)
    ledger = await _stdio_run(files_runtime, alice, frames, EXACT)
    if mode == "stress":
        stress_figures.add(
            f"wire garbage (stdio): {len(frames)} frames, {ledger.unparseable} unparseable, "
            f"problems {len(ledger.failures)} (crash, unanswered, unrecorded or an effect no frame asked for)"
        )
    assert not ledger.failures, _report(ledger)


async def test_stdio_duplicate_ids_in_flight_are_all_recorded_and_answered(
    files_runtime: Runtime,
) -> None:
    rt = files_runtime
    alice = AccessContext(principal="alice")
    launch = StdioLaunch(
        rules=(DATA / "files.sos",),
        evidence_db=rt.evidence_path,
        tool_sets=("files",),
        sandbox_root=rt.sandbox,
        run_policy="bridge-open",
    )
    read = frame(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "files.read", "arguments": {"path": "/public/a.txt"}},
        }
    )
    async with open_turn(rt.host, alice, FILES_POLICY, transport="stdio", stdio=launch) as turn:
        assert turn.command is not None
        bridge = await StdioBridge.start(turn.command)
        try:
            await bridge.handshake()
            await bridge.send(b"\n".join([read] * 5) + b"\n")
            with anyio.fail_after(20):
                while sum(1 for r in bridge.replies if r.get("id") == 7) < 5:
                    assert await bridge._read_some()
        finally:
            await bridge.kill()
    assert all("result" in r for r in bridge.replies if r.get("id") == 7)
    assert rt.evidence.counts(turn_id=alice.turn_id).total == 5


@pytest.mark.stress
async def test_garbage_floods_stay_bounded_and_accounted(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Default rate limit: thousands of unparseable frames, a bounded number of records,
    and the aggregate records still count every one of them."""
    if not _stress(request):
        pytest.skip("long mode: run with -m stress (make stress)")
    rng = random.Random(5)
    junk = [
        Garbage(f"junk{i}", rng.randbytes(rng.randint(1, 400)).replace(b"\n", b" ") + b"\x80")
        for i in range(5000)
    ]
    for transport in ("http", "stdio"):
        rt = build_runtime(tmp_path / transport, with_slow=False)
        alice = AccessContext(principal="alice")
        limits = TransportLimits()
        if transport == "http":
            ledger = await _http_run(rt, alice, junk, limits)
        else:
            ledger = await _stdio_run(rt, alice, junk, limits)
        records = [
            r
            for r in rt.evidence.query(turn_id=alice.turn_id)
            if str(r.reason) == "malformed_request"
        ]
        counted = sum(int((r.diagnostics or {})["malformed"].get("aggregated", 1)) for r in records)
        assert counted == len(junk), (transport, counted)
        assert len(records) < len(junk) // 4, (transport, len(records))
        print(f"{transport}: {len(junk)} unparseable frames -> {len(records)} records")
        del ledger

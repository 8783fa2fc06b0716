"""Classifying a damaged frame costs time linear in its size (an unterminated string).

Finding 5: a frame nested deeper than Python's parser reads is flattened
(``frames.flatten``) before it is read again. Its tokenizer matched strings
with a pattern that fails on an unterminated string, and ``finditer`` then
retried that failed match from every later quote: a deep frame followed by
one quote and a run of escaped quotes (``[[[…"\\"\\"\\"…``) cost time
quadratic in its size — 4.7 s for 33 KB, ~15 s for 61 KB, hours for the
4 MiB a body may have. A frame under 64 KiB is classified on the event loop,
so one such POST froze every turn of the host process; a larger one pinned
a worker thread (never cancelled) and, on stdio, stopped the bridge reading.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from types import FrameType

import anyio
import httpx2
import pytest

from sharedos.bridge import open_turn
from sharedos.bridge.frames import classify
from sharedos.bridge.limits import TransportLimits
from sharedos.kernel.context import AccessContext
from tests.bridge.conftest import OPEN_POLICY, Runtime
from tests.bridge.rawwire import ACCEPT, call, http_post_head, legacy_session
from tests.timing import bound, cpu_bound, loop_gaps

pytestmark = pytest.mark.anyio


def _deep_unterminated(escaped_quotes: int) -> bytes:
    return b"[" * 1500 + b'"' + b'\\"' * escaped_quotes


def test_classifying_a_deep_unterminated_frame_is_linear() -> None:
    started = time.process_time()
    frame = classify(_deep_unterminated(100_000))  # ~200 KB: ~0.01 s linear, minutes quadratic
    assert time.process_time() - started < cpu_bound(1.0)
    assert frame.message is None and frame.calls == ()


async def test_one_such_post_does_not_freeze_the_event_loop(
    runtime: Runtime, alice: AccessContext
) -> None:
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=60) as hc:
            session = await legacy_session(hc, turn.url)
            async with loop_gaps() as gaps:
                r = await hc.post(turn.url, content=_deep_unterminated(30_000), headers=session)
            assert r.status_code == 400  # a parse error: nothing could be made out
            ok = await hc.post(
                turn.url, json=call(2, "files.read", {"path": "/public/a.txt"}), headers=session
            )
            assert ok.status_code == 200
    stalled = max(gaps, default=0.0)
    # quadratic, that POST held the loop ~14 s; linear, a few ms
    assert stalled < bound(1.0), f"the event loop stalled for {stalled:.1f} s"


def _notification_batch(size: int) -> bytes:
    """A batch array of notifications, ``size`` bytes or so: refused whole by the bridge
    (a batch), and classified in a worker thread (over 64 KiB)."""
    one = b'{"jsonrpc":"2.0","method":"notifications/x"}'
    return b"[" + b",".join([one] * (size // (len(one) + 1))) + b"]"


class _ClassifyWatch:
    """Samples every thread's stack (1 ms) for the most threads classifying at once."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _ClassifyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.001):
            now = 0
            for top in sys._current_frames().values():
                frame: FrameType | None = top
                while frame is not None:
                    if frame.f_code is classify.__code__:
                        now += 1
                        break
                    frame = frame.f_back
            self.most = max(self.most, now)


async def test_one_turn_classifies_one_large_frame_at_a_time(
    runtime: Runtime, alice: AccessContext
) -> None:
    """Large frames were classified in anyio's default pool, up to 40 threads at once,
    each holding the GIL (``pydantic_core`` does not release it) against the event loop
    every turn of the process runs on: twenty 4 MiB POSTs to one turn held another
    turn's ``tools/call`` for 41 s. Now a turn classifies one large frame at a time."""
    body = _notification_batch(512 * 1024)
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        headers = {**turn.headers(), **ACCEPT}
        limits = httpx2.Limits(max_connections=16)
        async with httpx2.AsyncClient(headers=headers, timeout=60, limits=limits) as hc:
            with _ClassifyWatch() as watch:
                answers = await asyncio.gather(*(hc.post(turn.url, content=body) for _ in range(8)))
    assert {r.status_code for r in answers} == {400}  # a batch: refused, recorded, answered
    assert watch.most == 1, f"{watch.most} threads classified this turn's frames at once"


async def test_a_small_damaged_frame_is_read_off_the_event_loop(
    runtime: Runtime, alice: AccessContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame under 64 KiB was classified on the event loop every turn of the process runs
    on, whatever it held: the slow path too, which reads a damaged frame again (flattening
    a deep one is a Python loop per bracket): a 64 KiB body of ``{"a":`` repeated held the
    loop 0.1-0.15 s, each POST of it. Only one deliverable message is read there now; any
    other frame goes to the turn's classifying thread, and is still refused, recorded and
    answered."""
    import sharedos.bridge.frames as frames

    threads: list[int] = []
    slow_path = frames._damaged

    def watched(data: bytes, forced: frames.Problem | None = None) -> frames.Frame:
        threads.append(threading.get_ident())
        return slow_path(data, forced)

    monkeypatch.setattr(frames, "_damaged", watched)
    deep = b'{"a":' * 6_000 + b"1" + b"}" * 6_000  # 36 KB, nested 6,000 deep
    surrogate = (
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call",'
        b'"params":{"name":"files.read","arguments":{"path":"/public/\\ud800"}}}'
    )
    async with open_turn(runtime.host, alice, OPEN_POLICY) as turn:
        assert turn.url is not None
        loop_thread = threading.get_ident()
        async with httpx2.AsyncClient(headers={**turn.headers(), **ACCEPT}, timeout=60) as hc:
            session = await legacy_session(hc, turn.url)
            deep_answer = await hc.post(turn.url, content=deep, headers=session)
            call_answer = await hc.post(turn.url, content=surrogate, headers=session)
            ok = await hc.post(
                turn.url, json=call(2, "files.read", {"path": "/public/a.txt"}), headers=session
            )
    assert len(deep) < 64 * 1024
    assert deep_answer.status_code == 400
    assert call_answer.json()["result"]["isError"] is True
    assert ok.status_code == 200
    assert len(threads) == 2 and loop_thread not in threads
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [(r.tool, str(r.reason)) for r in records][-2:] == [
        ("files.read", "malformed_request"),
        ("files.read", "None"),
    ]


@pytest.mark.parametrize("cut", ["client", "deadline"])
async def test_a_cut_off_body_is_read_off_the_event_loop(
    runtime: Runtime, alice: AccessContext, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """A POST body its client stopped sending (a disconnect, or the body deadline) was read
    on the event loop every turn of the process runs on, whatever its size: a 4 MiB body of
    ``{"a":`` cut off one byte short held it 0.7 s, each POST of it (a complete one goes to
    the turn's classifying thread). Now it is read there too, and still recorded before the
    turn ends."""
    import sharedos.bridge.frames as frames

    threads: list[int] = []
    slow_path = frames._damaged

    def watched(data: bytes, forced: frames.Problem | None = None) -> frames.Frame:
        threads.append(threading.get_ident())
        return slow_path(data, forced)

    monkeypatch.setattr(frames, "_damaged", watched)
    head = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"files.read",'
    body = head + b'"arguments":' + b'{"a":' * 6_000 + b"1" + b"}" * 6_000
    limits = TransportLimits(body_timeout_s=0.5)
    async with open_turn(runtime.host, alice, OPEN_POLICY, limits=limits) as turn:
        assert turn.port is not None and turn.token is not None
        loop_thread = threading.get_ident()
        reader, writer = await asyncio.open_connection("127.0.0.1", turn.port)
        writer.write(http_post_head(turn.port, turn.token, len(body) + 100) + body)
        await writer.drain()
        if cut == "client":
            await asyncio.sleep(0.2)
        else:  # the deadline closes it
            assert await reader.read() == b""
        writer.close()
        with anyio.fail_after(30):
            while not threads:
                await asyncio.sleep(0.01)
    assert threads and loop_thread not in threads
    records = runtime.evidence.query(turn_id=alice.turn_id)
    assert [str(r.reason) for r in records] == ["malformed_request"]
    malformed = (records[0].diagnostics or {})["malformed"]
    assert malformed["problem"] == "truncated" and malformed["looksLikeCall"] is True

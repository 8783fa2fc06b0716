"""Daemon threads an event loop awaits without blocking: ``DaemonLane`` (bounded pool) and
``SerialLane`` (one thread, FIFO: the evidence writer).

Why not anyio's worker threads: a sync handler that outlives its timeout
cannot be killed, and anyio's threads are joined at interpreter exit, so one
stuck handler kept the host process alive long after its last turn. Lane
threads are daemon threads (the interpreter does not wait for them at exit),
a ``DaemonLane`` has at most ``max_threads`` of them (a flood of stuck
handlers makes later calls wait, and time out, instead of growing the process
without bound), and an idle thread exits after ``idle_s``.

A task still queued when its waiter gives up (timeout or cancellation) can be
dropped (``DaemonLane.drop``) and then never runs: an effect must not happen
after the call that asked for it was answered. A task already running is
abandoned: it runs to its end and its result is discarded.

Waking the loop costs one ``call_soon_threadsafe``; under asyncio (what the
bridge runs) the wait is an ``asyncio`` future and the timeout a
``call_later``, which is several microseconds cheaper per call than a cancel
scope. On another backend the wait falls back to ``anyio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio

_T = TypeVar("_T")

__all__ = ["DaemonLane", "LaneTask", "SerialLane", "await_task"]


class LaneTask(Generic[_T]):
    """One unit of work on a lane; ``run()`` is called on a lane thread at most once."""

    __slots__ = ("_event", "_wake", "args", "done", "dropped", "error", "fn", "result", "started")

    def __init__(self, fn: Callable[..., _T], *args: Any) -> None:
        self.fn = fn
        self.args = args
        self.result: _T | None = None
        self.error: BaseException | None = None
        self.started = False
        #: True once ``run`` has finished (set before the waiter is woken)
        self.done = False
        #: set (under the lane's lock) when the waiter gave up before the task started
        self.dropped = False
        self._wake: Callable[[], object] | None = None
        self._event: threading.Event | None = None

    def run(self) -> None:
        """Run ``fn`` and publish its result or exception; wake the waiter."""
        try:
            result, error = self.fn(*self.args), None
        except BaseException as exc:  # carried to the waiter, never raised on the lane thread
            result, error = None, exc
        self.complete(result, error)

    def complete(self, result: Any, error: BaseException | None = None) -> None:
        """Publish a result (or an exception) got some other way than ``run``; wake the waiter.

        What a lane's ``batch`` function calls for each task it ran as part of a group.
        """
        self.result, self.error = result, error
        self.done = True
        wake, event = self._wake, self._event
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # the waiting loop has closed
                wake()
        if event is not None:
            event.set()

    def outcome(self) -> _T:
        """The result, or raise the task's exception."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def await_task(
    task: LaneTask[Any], submit: Callable[[LaneTask[Any]], None], timeout_s: float | None
) -> bool:
    """Submit ``task`` and wait for it: True once it has run, False when ``timeout_s`` passed first.

    Cancellation of the caller propagates (the task is then neither dropped nor
    awaited: the caller decides).
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: wait on an anyio worker thread instead
        task._event = event = threading.Event()
        submit(task)
        if task.done:
            return True
        with anyio.move_on_after(timeout_s if timeout_s is not None else float("inf")):
            await anyio.to_thread.run_sync(event.wait, abandon_on_cancel=True)
        return task.done
    fut: asyncio.Future[None] = loop.create_future()
    task._wake = lambda: loop.call_soon_threadsafe(_resolve, fut)
    submit(task)
    timer = loop.call_later(timeout_s, _resolve, fut) if timeout_s is not None else None
    try:
        await fut
    finally:
        if timer is not None:
            timer.cancel()
    return task.done


class SerialLane:
    """One daemon thread running submitted tasks in order; it exits when idle and restarts on demand.

    With ``batch``, the thread takes every task already queued (up to
    ``max_batch``) at once and hands the list to ``batch``, which must run or
    ``complete`` each of them, in order (group commit: several queued writes,
    one transaction).
    """

    def __init__(
        self,
        name: str,
        *,
        idle_s: float = 10.0,
        batch: Callable[[list[LaneTask[Any]]], None] | None = None,
        max_batch: int = 64,
    ) -> None:
        self.name = name
        self.idle_s = idle_s
        self._queue: queue.SimpleQueue[LaneTask[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alive = False
        self._batch = batch
        self._max_batch = max_batch

    def submit(self, task: LaneTask[Any]) -> None:
        """Queue ``task`` (starting the thread if it is not running)."""
        with self._lock:
            self._queue.put(task)
            if not self._alive:
                self._alive = True
                threading.Thread(target=self._work, name=self.name, daemon=True).start()

    def _work(self) -> None:
        get = self._queue.get
        while True:
            try:
                task = get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._alive = False
                        return
                continue
            batch = self._batch
            if batch is None:
                task.started = True
                task.run()
                continue
            tasks = [task]
            while len(tasks) < self._max_batch:
                try:
                    tasks.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for each in tasks:
                each.started = True
            try:
                batch(tasks)
            except BaseException as exc:  # a broken batch function still answers every waiter
                for each in tasks:
                    if not each.done:
                        each.complete(None, exc)


class DaemonLane:
    """At most ``max_threads`` daemon threads running queued ``LaneTask``s in FIFO order."""

    def __init__(self, name: str, *, max_threads: int = 8, idle_s: float = 10.0) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self.name = name
        self.max_threads = max_threads
        self.idle_s = idle_s
        self._cv = threading.Condition(threading.Lock())
        self._queue: deque[LaneTask[Any]] = deque()
        self._threads = 0
        self._waiting = 0
        self._running = 0

    @property
    def busy(self) -> int:
        """Threads running a task right now (abandoned ones included)."""
        return self._running

    @property
    def threads(self) -> int:
        """Threads alive right now."""
        return self._threads

    def submit(self, task: LaneTask[Any]) -> None:
        """Queue ``task``; start a thread when every thread is busy and the bound allows one."""
        with self._cv:
            self._queue.append(task)
            if self._waiting < len(self._queue) and self._threads < self.max_threads:
                self._threads += 1
                threading.Thread(
                    target=self._work, name=f"{self.name}-{self._threads}", daemon=True
                ).start()
            else:
                self._cv.notify()

    def drop(self, task: LaneTask[Any]) -> bool:
        """Remove ``task`` if it has not started; True when it will never run."""
        with self._cv:
            if task.started:
                return False
            task.dropped = True
            with contextlib.suppress(ValueError):
                self._queue.remove(task)
            return True

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._waiting += 1
                    notified = self._cv.wait(self.idle_s)
                    self._waiting -= 1
                    if not notified and not self._queue:
                        self._threads -= 1
                        return
                task = self._queue.popleft()
                task.started = True
                self._running += 1
            try:
                task.run()
            finally:
                with self._cv:
                    self._running -= 1

    async def run_sync(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on a lane thread and return its result (or raise its exception).

        If the caller is cancelled (a timeout included) before the task
        started, the task is dropped and never runs; after, it is abandoned.

        ``fn`` runs in a copy of the caller's context (as ``anyio.to_thread.run_sync``
        and ``asyncio.to_thread`` run it): it sees the caller's context variables, and
        what it sets stays with this call. Run in the lane thread's own context, a
        handler saw none of its call's (a request's span, the fields a host bound for
        its logs) and whatever the previous task on that thread, another turn's
        handler, had set there.
        """
        task: LaneTask[_T] = LaneTask(contextvars.copy_context().run, fn, *args)
        try:
            await await_task(task, self.submit, None)
        except BaseException:
            self.drop(task)
            raise
        return task.outcome()

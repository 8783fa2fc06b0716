"""Pooled upstream sessions: one per (upstream, credential identity, credential values),
bounded per upstream and closed when idle.

A session is never shared between principals whose credentials differ: the key
holds the credential identity (``principal:alice``) and a keyed hash of its
values (or, for OAuth, of the principal it serves). Many principals must not
mean unbounded processes or connections, so each upstream's
``sessions = { max, idle_s }`` applies:

- at most ``max`` sessions per upstream. Opening one more closes the session
  that has been unused longest among those no open turn holds; when every one
  is held, the new one is refused (the turn reports the upstream unavailable,
  naming the limit) rather than breaking a turn that is using its session;
- a session no open turn holds, unused for ``idle_s`` seconds, is closed by a
  sweeper (a stdio upstream's process ends with it); the next turn that needs
  it opens it again.

A turn holds the sessions it listed through from the moment it lists them
until it ends (``hold`` / ``release``), so its calls never find their session
closed under them by the pool.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio

from sharedos.outcomes import ReasonCode
from sharedos.upstream.config import UpstreamConfig
from sharedos.upstream.connection import UpstreamConnection, UpstreamFailure
from sharedos.upstream.definitions import RawTool

#: (upstream id, credential identity, credential fingerprint)
SlotKey = tuple[str, str, str]


class Slot:
    """The pooled session of one key, the lock that opens it, and who holds it."""

    def __init__(self, key: SlotKey) -> None:
        self.key = key
        self.lock = anyio.Lock()
        self.connection: UpstreamConnection | None = None
        #: a listing in flight or just finished, shared by turns opening at the same time
        self.listing: tuple[float, list[RawTool]] | None = None
        #: ``listing`` and its digests by published name (``UpstreamBroker``'s drift check)
        self.digests: tuple[tuple[float, list[RawTool]], dict[str, str]] | None = None
        self.list_lock = anyio.Lock()
        #: monotonic time the upstream last announced ``tools/list_changed`` (``announce``)
        self.changed_at: float | None = None
        #: when the last attempt to open the session / to list it failed, and why: a turn
        #: that was waiting for that attempt takes its failure instead of trying again
        #: (each waiter used to run out its own timeout, one after another)
        self.open_failure: tuple[float, UpstreamFailure] | None = None
        self.list_failure: tuple[float, UpstreamFailure] | None = None
        #: turns that listed through this session and have not ended
        self.holders: set[str] = set()
        #: monotonic time of its last use (opened, listed, called, released)
        self.last_used = time.monotonic()
        #: closed by the pool: a session opened into it after that is closed at once
        self.closed = False

    @property
    def list_changed(self) -> bool:
        """True while no listing begun after the latest announced change has finished: one
        in flight has not (it is not ``listing`` yet), nor has one that failed or was
        cancelled. A flag cleared as a listing began let a call arriving during it be
        checked against the listing from before the change."""
        if self.listing is None:
            return True
        return self.changed_at is not None and self.listing[0] <= self.changed_at

    def announce(self) -> None:
        """The upstream announced ``tools/list_changed``."""
        self.changed_at = time.monotonic()

    def touch(self) -> None:
        """Note a use now (for idle eviction)."""
        self.last_used = time.monotonic()


class SessionPool:
    """Slots by key, with the per-upstream cap and idle eviction of the module docstring."""

    def __init__(self) -> None:
        self._slots: dict[SlotKey, Slot] = {}

    def __iter__(self) -> Iterator[Slot]:
        return iter(list(self._slots.values()))

    def get(self, key: SlotKey) -> Slot | None:
        """The slot of ``key``, if one exists."""
        return self._slots.get(key)

    def open_count(self, upstream: str) -> int:
        """How many sessions of ``upstream`` are open now."""
        return sum(
            1 for k, s in self._slots.items() if k[0] == upstream and s.connection is not None
        )

    async def slot(self, config: UpstreamConfig, key: SlotKey) -> Slot:
        """The slot of ``key``, made when missing; at the upstream's cap the longest-unused
        unheld session is closed first, and ``UpstreamFailure`` when every one is held."""
        found = self._slots.get(key)
        if found is not None:
            return found
        limit = config.sessions.max
        mine = [s for k, s in self._slots.items() if k[0] == config.id]
        while len(mine) >= limit:
            idle = [s for s in mine if not s.holders]
            if not idle:
                raise UpstreamFailure(
                    ReasonCode.UPSTREAM_UNAVAILABLE,
                    f"upstream {config.id!r} already has {len(mine)} sessions open, each in use "
                    f"by an open turn (sessions.max = {limit}); no session for another "
                    "credential until one is released",
                )
            victim = min(idle, key=lambda s: s.last_used)
            # ended beside the turn opening, not waited for (a hung one takes seconds)
            await self.close(victim, wait=False)
            mine.remove(victim)
        made = self._slots.setdefault(key, Slot(key))
        return made

    async def close(self, slot: Slot, *, wait: bool = True) -> None:
        """Close ``slot``'s session and forget the slot (``wait``: until the session ended;
        otherwise it ends within the broker's task group)."""
        if self._slots.get(slot.key) is slot:
            del self._slots[slot.key]
        slot.closed = True
        conn, slot.connection, slot.listing = slot.connection, None, None
        if conn is not None and not wait:
            conn.end()
        elif conn is not None:
            with anyio.CancelScope(shield=True):
                await conn.close()

    def hold(self, slot: Slot, turn_id: str) -> None:
        """``turn_id`` uses ``slot`` until ``release``."""
        slot.holders.add(turn_id)
        slot.touch()

    def release(self, turn_id: str) -> None:
        """``turn_id`` has ended: it holds no slot any more."""
        for slot in self._slots.values():
            if turn_id in slot.holders:
                slot.holders.discard(turn_id)
                slot.touch()

    async def sweep(self, idle_of: dict[str, float], now: float | None = None) -> int:
        """Close every unheld session idle longer than its upstream's ``idle_s``; how many."""
        at = time.monotonic() if now is None else now
        closed = 0
        for slot in list(self._slots.values()):
            limit = idle_of.get(slot.key[0])
            if limit is None or slot.holders or at - slot.last_used < limit:
                continue
            await self.close(slot)
            closed += 1
        return closed

    async def close_all(self) -> None:
        """Close every session (the broker is stopping)."""
        for slot in list(self._slots.values()):
            await self.close(slot)

"""``BundleManager``: the host's policy bundle in force, replaced only by a verified newer one.

``poll()`` fetches from the source (a no-op when it has not changed),
verifies, and swaps ``current()`` atomically. What a turn uses is what it
took from ``current()`` when it opened: the manager never changes a bundle
under an open turn. A failed fetch or a refused bundle leaves ``current()``
as it was and is said once on stderr (logger ``sharedos.bundles``), with the
revision kept. A manager that holds no bundle yet (a host starting: every
``sharedos run``) whose source fails puts in force the last release the host
enforced instead, from the copy its ``BundleState`` keeps (``kept``), verified
again as a fetched bundle is. ``start(interval_s)`` polls on a daemon thread.

Newer means a higher ``sequence`` (signed with the bundle: ``sharedos.policy.
signing``). A bundle whose sequence is lower than the one in force is a
rollback and is refused; one with the same sequence but another revision or
program is a relabelled release and is refused too. With a ``BundleState``
the last enforced release is written down before it is put in force and
read back at every poll, so a restarted host refuses the rollback it refused
before, and a process of a host one another process of it has overtaken. Bundles without a sequence (0) are accepted only while no
sequenced bundle has been enforced.

The fetch runs outside the manager's state lock and is bounded as a whole by
the source (``HttpSource``'s deadline), so a source that answers slowly
cannot hold ``poll()`` for long; ``current()`` never waits for a poll.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from sharedos.bundles.source import (
    BundleSource,
    Fetched,
    NotModified,
    SourceError,
    shown_location,
)
from sharedos.bundles.state import BundleState, Enforced, StateError, of_source
from sharedos.bundles.verify import BundleRejected, BundleVerifier, LoadedBundle
from sharedos.terminal import unambiguous

__all__ = ["BundleManager", "PollResult", "rollback_problem"]

logger = logging.getLogger("sharedos.bundles")

#: ``kept``: the source failed (unreachable, or a bundle refused) before this manager held
#: a bundle, and the last release this host enforced was put in force from its kept copy
Status = Literal["loaded", "unchanged", "refused", "unreachable", "kept"]


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll did, and the bundle in force after it."""

    status: Status
    current: LoadedBundle | None
    detail: str = ""


class BundleManager:
    """Polls ``source``, verifies with ``verifier``, keeps the last good bundle.

    ``state``: where the last enforced release is remembered across restarts
    (None: in memory only, for this process's life).
    """

    def __init__(
        self,
        source: BundleSource,
        verifier: BundleVerifier | None = None,
        *,
        on_change: Callable[[LoadedBundle], None] | None = None,
        state: BundleState | None = None,
    ) -> None:
        self.source = source
        self.verifier = verifier or BundleVerifier()
        self.on_change = on_change
        self.state = state
        self._current: LoadedBundle | None = None
        #: the last release enforced by this host, in any of its lives (from ``state``)
        self._enforced: Enforced | None = None
        self._refused_tag: str | None = None
        self._last_problem: str | None = None
        #: the copies beside the state verified last (SHA-256 of their bytes: the release,
        #: or why it was refused), so none is verified again under the state's lock
        self._copies: dict[str, LoadedBundle | str] = {}
        #: guards the manager's fields; never held while fetching
        self._lock = threading.Lock()
        #: one fetch at a time (each bounded by the source's own deadline)
        self._fetching = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> LoadedBundle:
        """The bundle in force (``RuntimeError`` before a first good load: fail closed)."""
        current = self._current
        if current is None:
            raise RuntimeError(
                f"no verified policy bundle from {self.source.origin} yet, so no policy: "
                "nothing runs" + (f" ({self._last_problem})" if self._last_problem else "")
            )
        return current

    @property
    def last_problem(self) -> str | None:
        """Why the last poll did not load a bundle (None after a good one)."""
        return self._last_problem

    def poll(self) -> PollResult:
        """Fetch, verify and (when new, good and not a rollback) put in force one bundle."""
        with self._fetching:
            held = self._current
            tag = held.tag if held is not None else None  # no bundle: fetch unconditionally
            try:
                fetched = self.source.fetch(tag)
            except SourceError as exc:
                return self._fall_back("unreachable", str(exc))
            if isinstance(fetched, NotModified):
                if held is None:  # a source that says "unchanged" to a host holding nothing
                    return self._fall_back(
                        "unreachable",
                        f"{self.source.origin} answered 'not modified' to a request for the "
                        "bundle itself",
                    )
                return PollResult("unchanged", held)
            # what was refused is not verified (nor reported) again until it changes
            # (new bytes: a rebuilt bundle, or one re-signed with a trusted key)
            seen = hashlib.sha256(fetched.data).hexdigest()
            if seen == self._refused_tag:
                return PollResult("refused", held, self._last_problem or "")
            try:
                loaded = self.verifier.verify(fetched)
                floor = self._floor(held)
            except BundleRejected as exc:
                self._refused_tag = seen
                return self._fall_back("refused", str(exc))
            except StateError as exc:
                return self._problem(
                    "refused", f"{exc}; refusing every bundle until it is fixed or removed"
                )
            why = rollback_problem(loaded, floor)
            if why is not None:
                self._refused_tag = seen
                return self._fall_back("refused", why)
            if held is not None and loaded.content_sha256 == held.content_sha256:
                with self._lock:
                    self._current = _retagged(held, loaded.tag)
                return PollResult("unchanged", self._current)
            try:
                self._remember(loaded, fetched.data)
            except _Overtaken as exc:
                self._refused_tag = seen
                return self._fall_back("refused", str(exc))
            except StateError as exc:
                # refused as any release is that cannot be put in force: a start holding
                # nothing runs on the release recorded, whose copy needs no write
                return self._fall_back(
                    "refused",
                    f"cannot remember {loaded.describe()} as enforced: {exc}; not putting it "
                    "in force (a restarted host could then be rolled back)",
                )
            with self._lock:
                self._current, self._refused_tag, self._last_problem = loaded, None, None
        _say(
            logging.WARNING,
            f"sharedos: policy bundle {loaded.describe()} is in force for new turns",
        )
        if self.on_change is not None:
            self.on_change(loaded)
        return PollResult("loaded", loaded)

    def _floor(self, held: LoadedBundle | None) -> Enforced | None:
        """The highest release enforced so far: the one in force, the one this manager
        remembered, or the one ``state`` records now (read at every poll: another process
        of this host may have enforced a newer release since)."""
        best = self._enforced
        if self.state is not None:
            recorded = self.state.load()  # StateError: fail closed (the caller refuses)
            if recorded is not None and (best is None or recorded.sequence >= best.sequence):
                best = recorded
        if held is not None and (best is None or held.sequence >= best.sequence):
            best = Enforced.of(held)
        return best

    def _remember(
        self,
        loaded: LoadedBundle,
        data: bytes | None = None,
        *,
        origin: str | None = None,
        lock_held: bool = False,
        copy: bytes | None = None,
    ) -> None:
        """Write ``loaded`` down as enforced (and ``data``, its bytes, kept for a restart
        the source fails), before it is put in force (sequenced bundles). ``origin``: the
        source to record it of, when ``loaded`` was read elsewhere (its kept copy).
        ``lock_held``: the caller holds the state's lock already (``locked``). ``copy``:
        the bytes ``loaded`` was read from, kept with the state when it must be written
        (the copy may lie beside a state file an earlier SharedOS named otherwise: the
        state written under the new name without it left the release with no copy)."""
        if loaded.sequence <= 0:
            return
        if self._enforced is not None and self._enforced.same_release(loaded):
            return
        enforced = Enforced.of(loaded)
        if origin is not None:
            enforced = replace(enforced, origin=origin)
        if self.state is not None:
            if not lock_held and os.path.lexists(self.state.pending_path):
                self._verify_copies()  # what settle verifies, before the lock is taken
            with contextlib.nullcontext() if lock_held else self.state.locked():
                # what another process of this host enforced since this poll read the file
                recorded = self.state.load()
                why = rollback_problem(loaded, recorded)
                if why is not None:
                    raise _Overtaken(why)
                if recorded is not None:
                    # before anything is written: a save writes its bytes where a killed
                    # writer may have left the only copy of the release the state records
                    settled = self.state.settle(
                        lambda copy: self._is_release(copy, recorded), must=data is not None
                    )
                    if settled is not None:
                        _say(logging.WARNING, settled)
                if recorded is not None and _written_down(self.state, recorded, enforced, data):
                    # already there (every start of a host whose release has not changed):
                    # nothing to write, so a full disk or a read-only state directory, which
                    # must refuse a release a restart could not find again, does not refuse
                    # this one, nor is the whole bundle written and fsynced again
                    masked = replace(recorded, origin=enforced.origin)
                    if recorded.origin != enforced.origin:
                        # recorded with the path's token in clear (before 21b9192): the
                        # record is written masked where it can be, or kept as it is
                        with contextlib.suppress(StateError):
                            self.state.save(masked, data if data is not None else copy)
                    enforced = masked
                else:
                    self.state.save(enforced, data if data is not None else copy)
        self._enforced = enforced

    def _is_release(self, data: bytes, recorded: Enforced) -> bool:
        """True when ``data``, a copy beside the state, verifies as the release ``recorded``."""
        try:
            loaded = self._verified_copy(data)
        except BundleRejected:
            return False
        return recorded.same_release(loaded)

    def _verified_copy(self, data: bytes) -> LoadedBundle:
        """``data``, a copy beside the state, verified (``BundleRejected``), once per bytes:
        a bundle of 64 MiB takes seconds to verify, and what is verified under the state's
        lock holds every other process of the host (which waits for it only so long) from
        writing its release down."""
        assert self.state is not None
        seen = hashlib.sha256(data).hexdigest()
        known = self._copies.get(seen)
        if known is None:
            try:
                known = self.verifier.verify(Fetched(data, "", str(self.state.kept_path)))
            except BundleRejected as exc:
                known = str(exc)
            while len(self._copies) >= _COPIES_REMEMBERED:
                del self._copies[next(iter(self._copies))]
            self._copies[seen] = known
        if isinstance(known, str):
            raise BundleRejected(known)
        return known

    def _verify_copies(self) -> None:
        """Verify the copies beside the state (``_verified_copy``) before its lock is taken:
        under it, only bytes written since (by a writer holding it) are verified."""
        assert self.state is not None
        for data in self.state.kept_copies():
            with contextlib.suppress(BundleRejected):
                self._verified_copy(data)

    def _fall_back(self, status: Status, detail: str) -> PollResult:
        """The source failed (``status``, ``detail``): a manager that holds no bundle yet (a
        host starting) puts in force the last release this host enforced, from the copy its
        state keeps, verified as a fetched bundle is (the trusted keys of now), when it is
        the release the state records; otherwise, or when no good copy is kept,
        ``_problem``."""
        if self._current is not None or self.state is None:
            return self._problem(status, detail)
        if not self.state.kept_copies():  # no copy: nothing to lock, nor a directory to make
            return self._problem(status, detail)
        kept_at = str(self.state.kept_path)
        loaded: LoadedBundle | None = None
        why: str | None = None
        # another process of the host may put a newer release in force between the read
        # and the write down (its own fetch succeeded): read again, that one is the copy
        for attempt in range(_KEPT_READS):
            loaded, why = None, None
            try:
                # the last read holds the lock until the copy is written down: a poller
                # writing newer releases all the while cannot leave this start on nothing
                loaded, why = self._kept_release(hold=attempt == _KEPT_READS - 1)
                break
            except _Overtaken as exc:
                why = str(exc)
            except (BundleRejected, StateError) as exc:
                why = str(exc)
                break
        if why is None and loaded is None:
            return self._problem(status, detail)
        if why is not None or loaded is None or loaded.sequence <= 0:
            note = why if why is not None else "it declares no sequence"
            return self._problem(
                status, f"{detail} (the copy kept at {kept_at} is not used: {note})"
            )
        with self._lock:
            self._current, self._refused_tag, self._last_problem = loaded, None, detail
        verb = (
            "refused a policy bundle" if status == "refused" else "cannot fetch the policy bundle"
        )
        _say(
            logging.ERROR,
            f"sharedos: {verb}: {detail}; putting in force the last release this host "
            f"enforced, {loaded.describe()}",
        )
        if self.on_change is not None:
            self.on_change(loaded)
        return PollResult("kept", loaded, detail)

    def _kept_release(self, *, hold: bool = False) -> tuple[LoadedBundle | None, str | None]:
        """The copy of the release the state records, written down as enforced, or why it
        is not used ((None, None): no copy; ``_Overtaken`` when the state records a newer
        release by the time it is written down). ``hold``: under the state's lock from
        the read to the write down, so no other process of the host can overtake it (the
        copies are verified before it is taken: under it, only bytes written since are)."""
        assert self.state is not None
        if not hold:
            return self._kept_release_locked(hold=False)
        self._verify_copies()  # under the lock, only copies written since are verified
        with self.state.locked():
            return self._kept_release_locked(hold=True)

    def _kept_release_locked(self, *, hold: bool) -> tuple[LoadedBundle | None, str | None]:
        assert self.state is not None
        # the copies and the state read as a writer leaves them (under the lock it holds
        # from its first write to its last): between them, the bytes of the release it
        # writes down wait beside the copy of the one the state still records
        with contextlib.nullcontext() if hold else self.state.locked():
            copies = self.state.kept_copies()
            recorded = self.state.load()
        if not copies:
            return None, None  # removed meanwhile
        # the copy is this source's last release only as the release the state records
        # of it: whatever else verifies there (another source's release signed by the
        # same key, with a higher sequence) is no release this host enforced
        why = _whose(recorded, self.source.origin, self.state.hidden)
        if why is not None or recorded is None:
            return None, why
        loaded, why = self._recorded_copy(copies, recorded)
        if why is None and loaded is not None and loaded.sequence > 0:
            # recorded as a release of the source, as the state's own was: the copy is
            # where it was kept, not where it came from
            origin = shown_location(recorded.origin, self.state.hidden)
            copy = next(c for c in copies if _sha256(c) == loaded.content_sha256)
            self._remember(loaded, origin=origin, lock_held=hold, copy=copy)
        return loaded, why

    def _recorded_copy(
        self, copies: list[bytes], recorded: Enforced
    ) -> tuple[LoadedBundle | None, str | None]:
        """The copy (``BundleState.kept_copies``) that verifies as the release ``recorded``
        names, or why none does (the first copy's reason: the kept one's)."""
        first_why: str | None = None
        for data in copies:
            try:
                loaded = self._verified_copy(data)
            except BundleRejected as exc:
                first_why = first_why or str(exc)
                continue
            # against the state as read with the copies (a newer one written since is
            # found when the copy is written down: read again then)
            floor = self._enforced
            if floor is None or recorded.sequence >= floor.sequence:
                floor = recorded
            why = rollback_problem(loaded, floor)
            if why is None and not recorded.same_release(loaded):
                why = (
                    f"it holds {_release_of(loaded)}, which is not the release the state "
                    f"file beside it records, {recorded.describe()}"
                )
            if why is None:
                return loaded, None
            first_why = first_why or why
        return None, first_why

    def _problem(self, status: Status, detail: str) -> PollResult:
        held = self._current
        if detail != self._last_problem:
            kept = (
                f"keeping {held.describe()}"
                if held is not None
                else "no bundle is in force yet: this host has no policy, and nothing runs"
            )
            verb = (
                "refused a policy bundle"
                if status == "refused"
                else "cannot fetch the policy bundle"
            )
            _say(logging.ERROR, f"sharedos: {verb}: {detail}; {kept}")
        self._last_problem = detail
        return PollResult(status, held, detail)

    # -- background polling ---------------------------------------------------------------

    def start(self, interval_s: float) -> None:
        """Poll every ``interval_s`` seconds on a daemon thread until ``stop()``."""
        if interval_s <= 0:
            raise ValueError("the poll interval must be positive")
        if self._thread is not None:
            return
        self._stop.clear()

        def run() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.poll()
                except Exception as exc:  # never let the poller die silently
                    _say(logging.ERROR, f"sharedos: policy bundle poll failed: {exc}")

        self._thread = threading.Thread(target=run, name="sharedos-bundle-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop background polling."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)


def _say(level: int, line: str) -> None:
    """Log ``line`` spelled out (``terminal.unambiguous``): it names paths and URLs from the
    host file, and what a state file or a bundle server said, which may hold escape
    sequences; a host's log is read on a terminal, as ``sharedos run`` prints it."""
    logger.log(level, "%s", unambiguous(line))


def _written_down(
    state: BundleState, recorded: Enforced, enforced: Enforced, data: bytes | None
) -> bool:
    """True when ``state`` already records ``enforced`` (the same release, of the same
    source: ``recorded``) and keeps ``data`` as its copy (None: the copy itself was read).
    The origins are compared as ``of_source`` compares them, the host variables of the
    URL's path masked on both sides: a state a SharedOS before 21b9192 wrote records them
    in clear, and compared so, a host on a full disk or a read-only state directory wrote
    again the release it recorded, failed, and refused it (no policy)."""
    if (recorded.sequence, recorded.revision, recorded.bundle_hash) != (
        enforced.sequence,
        enforced.revision,
        enforced.bundle_hash,
    ) or shown_location(recorded.origin, state.hidden) != shown_location(
        enforced.origin, state.hidden
    ):
        return False
    return data is None or state.kept() == data


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _release_of(loaded: LoadedBundle) -> str:
    """``loaded`` named as ``Enforced.describe`` names a release."""
    return (
        f"sequence {loaded.sequence} (revision {loaded.revision}, "
        f"bundle {loaded.bundle_hash[:16]}…)"
    )


def _whose(recorded: Enforced | None, origin: str, hidden: tuple[str, ...] = ()) -> str | None:
    """Why a kept copy beside a state that records ``recorded`` is not the source
    ``origin``'s last release (None when it may be): a state that records none (removed
    to go back on purpose; a copy planted beside it), or one of another source (a
    ``[policy] state`` two sources' hosts share: its copy is that source's policy)."""
    if recorded is None:
        return "the state file beside it records no release this host enforced"
    if not of_source(recorded.origin, origin, hidden):
        return (
            f"the state file beside it records a release of another source, "
            f"{shown_location(recorded.origin, hidden)}"
        )
    return None


#: how many times a start whose source failed reads its kept copy again, when another
#: process of the host puts a newer release in force between the read and the write down
_KEPT_READS = 3

#: how many copies' verifications a manager remembers (the kept copy and the bytes waiting,
#: and the two beside a state file an earlier SharedOS named otherwise: ``kept_copies``)
_COPIES_REMEMBERED = 4


class _Overtaken(Exception):
    """Another process of this host enforced a newer release while this one polled."""


def rollback_problem(loaded: LoadedBundle, floor: Enforced | None) -> str | None:
    """Why ``loaded`` may not replace ``floor``, the last release enforced (a rollback, a
    relabelled release); None if it may. What a host with that state would say."""
    if floor is None or floor.sequence <= 0:
        return None
    if loaded.sequence < floor.sequence:
        got = f"sequence {loaded.sequence}" if loaded.sequence else "no sequence"
        return (
            f"bundle {loaded.origin} (revision {loaded.revision}, {got}) is older than "
            f"{floor.describe()}, which this host already enforced: a rollback"
        )
    if loaded.sequence == floor.sequence and not floor.same_release(loaded):
        return (
            f"bundle {loaded.origin} claims sequence {loaded.sequence} as revision "
            f"{loaded.revision} (bundle {loaded.bundle_hash[:16]}…), but this host enforced "
            f"{floor.describe()} under that sequence: a relabelled release"
        )
    return None


def _retagged(held: LoadedBundle, tag: str) -> LoadedBundle:
    from dataclasses import replace

    return replace(held, tag=tag)

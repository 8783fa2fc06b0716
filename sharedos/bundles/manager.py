"""``BundleManager``: the host's policy bundle in force, replaced only by a verified newer one.

``poll()`` fetches from the source (a no-op when it has not changed),
verifies, and swaps ``current()`` atomically. What a turn uses is what it
took from ``current()`` when it opened: the manager never changes a bundle
under an open turn. A failed fetch or a refused bundle leaves ``current()``
as it was and is said once on stderr (logger ``sharedos.bundles``), with the
revision kept. ``start(interval_s)`` polls on a daemon thread.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sharedos.bundles.source import BundleSource, NotModified, SourceError
from sharedos.bundles.verify import BundleRejected, BundleVerifier, LoadedBundle

__all__ = ["BundleManager", "PollResult"]

logger = logging.getLogger("sharedos.bundles")

Status = Literal["loaded", "unchanged", "refused", "unreachable"]


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one poll did, and the bundle in force after it."""

    status: Status
    current: LoadedBundle | None
    detail: str = ""


class BundleManager:
    """Polls ``source``, verifies with ``verifier``, keeps the last good bundle."""

    def __init__(
        self,
        source: BundleSource,
        verifier: BundleVerifier | None = None,
        *,
        on_change: Callable[[LoadedBundle], None] | None = None,
    ) -> None:
        self.source = source
        self.verifier = verifier or BundleVerifier()
        self.on_change = on_change
        self._current: LoadedBundle | None = None
        self._refused_tag: str | None = None
        self._last_problem: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> LoadedBundle:
        """The bundle in force (``RuntimeError`` before a first good load: fail closed)."""
        current = self._current
        if current is None:
            raise RuntimeError(
                f"no verified policy bundle from {self.source.origin} yet"
                + (f": {self._last_problem}" if self._last_problem else "")
            )
        return current

    @property
    def last_problem(self) -> str | None:
        """Why the last poll did not load a bundle (None after a good one)."""
        return self._last_problem

    def poll(self) -> PollResult:
        """Fetch, verify and (when new and good) put in force one bundle."""
        with self._lock:
            held = self._current
            tag = held.tag if held is not None else None
            try:
                fetched = self.source.fetch(tag)
            except SourceError as exc:
                return self._problem("unreachable", str(exc))
            if isinstance(fetched, NotModified):
                return PollResult("unchanged", held)
            # what was refused is not verified (nor reported) again until it changes
            # (new bytes: a rebuilt bundle, or one re-signed with a trusted key)
            seen = hashlib.sha256(fetched.data).hexdigest()
            if seen == self._refused_tag:
                return PollResult("refused", held, self._last_problem or "")
            try:
                loaded = self.verifier.verify(fetched)
            except BundleRejected as exc:
                self._refused_tag = seen
                return self._problem("refused", str(exc))
            if held is not None and loaded.content_sha256 == held.content_sha256:
                self._current = _retagged(held, loaded.tag)
                return PollResult("unchanged", self._current)
            self._current, self._refused_tag, self._last_problem = loaded, None, None
        logger.warning("sharedos: policy bundle %s is in force for new turns", loaded.describe())
        if self.on_change is not None:
            self.on_change(loaded)
        return PollResult("loaded", loaded)

    def _problem(self, status: Status, detail: str) -> PollResult:
        held = self._current
        if detail != self._last_problem:
            kept = f"keeping {held.describe()}" if held is not None else "no bundle is in force yet"
            verb = (
                "refused a policy bundle"
                if status == "refused"
                else "cannot fetch the policy bundle"
            )
            logger.error("sharedos: %s: %s; %s", verb, detail, kept)
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
                    logger.error("sharedos: policy bundle poll failed: %s", exc)

        self._thread = threading.Thread(target=run, name="sharedos-bundle-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop background polling."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)


def _retagged(held: LoadedBundle, tag: str) -> LoadedBundle:
    from dataclasses import replace

    return replace(held, tag=tag)

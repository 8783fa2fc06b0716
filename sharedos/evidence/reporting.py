"""``FailureReporter``: a store's write failures said once per cause, and its recovery once.

A full disk fails every write of every turn; saying so once per turn (or per
call) buries the one line an operator needs. A store carries one reporter
(``store.failures``): the kernel's recorder, a turn's opening and seal
(``sharedos.evidence.turns``) and checkpoints report through it, so a cause
is logged the first time it is seen and not again until a write succeeds,
which is logged once with how many failures were held back meanwhile.
"""

from __future__ import annotations

import logging
import threading

__all__ = ["FailureReporter", "reporter_of"]

logger = logging.getLogger("sharedos.evidence")


class FailureReporter:
    """Once-per-cause reporting of one store's write failures (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reported: set[str] = set()
        self._held = 0
        #: True between a reported failure and the next success (an attribute: writers
        #: read it after every commit and call ``succeeded`` only when it is set)
        self.failing = False

    def failed(self, cause: str, message: str) -> bool:
        """Count a failure; log it when ``cause`` is new since the last success. True if logged."""
        with self._lock:
            self._held += 1
            first = cause not in self._reported
            self._reported.add(cause)
            self.failing = True
        if first:
            logger.error("sharedos: %s", message)
        return first

    def succeeded(self) -> None:
        """A write landed: say once that the store recovered (if it had failed)."""
        if not self._reported:  # the common case: one attribute read
            return
        with self._lock:
            if not self._reported:
                return
            causes, held = sorted(self._reported), self._held
            self._reported.clear()
            self._held = 0
            self.failing = False
        logger.warning(
            "sharedos: evidence store writable again (after %s; %d writes failed meanwhile)",
            ", ".join(causes),
            held,
        )


def reporter_of(store: object) -> FailureReporter:
    """The store's reporter (``store.failures``), or a new one for a store without."""
    found = getattr(store, "failures", None)
    return found if isinstance(found, FailureReporter) else FailureReporter()

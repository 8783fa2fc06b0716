"""A listening socket asyncio's accept loop cannot spin on when the host runs out of descriptors.

CPython 3.11's ``selector_events._accept_connection`` does not return at EMFILE:
it calls ``accept()`` again up to ``backlog`` times in the same tick, logging a
traceback and scheduling one more retry for each failure. A host out of
descriptors then wrote thousands of tracebacks a second and spent its CPU on
them. ``PacedListener`` (the socket a server accepts on) and the log filter
``quiet_accept_failures`` installs make that one failure and one line per
second. Used by every listener SharedOS serves with asyncio: the turn's HTTP
bridge (``sharedos.compat.uvicorn``) and the sandbox's loopback relays
(``sharedos.confine.ports``).
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from typing import Any

__all__ = ["PacedListener", "quiet_accept_failures"]


#: accept() errors after which asyncio pauses a listener (``ACCEPT_RETRY_DELAY``, 1 s)
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: how long ``PacedListener`` answers "no connection waiting" after one of them: less
#: than asyncio's retry delay, so its retry accepts for real
_PAUSE_S = 0.5
#: what asyncio logs (with a traceback) for each of them
_ACCEPT_FAILED = "socket.accept() out of system resource"


class PacedListener(socket.socket):
    """A listening socket that fails one ``accept()`` per pause when the host is out of
    descriptors (or memory), and reports "no connection waiting" for the rest of it.

    asyncio's accept loop (``selector_events._accept_connection``, CPython 3.11) does
    not return at EMFILE: it calls ``accept()`` again up to ``backlog`` times in the
    same tick (uvicorn: 2,048), and for each failure logs a traceback and schedules one
    more retry. A host out of descriptors then wrote about 8,000 tracebacks a second
    (40 MB of stderr in 12 s here) and spent its CPU on them. Here the first failure
    pauses the listener as asyncio means to (it stops reading the socket for 1 s);
    the calls after it in that tick see an empty queue and end the loop.
    """

    _paused_until = 0.0

    @classmethod
    def of(cls, sock: socket.socket) -> PacedListener:
        """``sock`` (a listening socket) as a ``PacedListener``; ``sock`` is detached."""
        if isinstance(sock, PacedListener):
            return sock
        paced = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        paced.setblocking(False)
        return paced

    def accept(self) -> tuple[socket.socket, Any]:
        if time.monotonic() < self._paused_until:
            raise BlockingIOError(errno.EAGAIN, "paused: the host is out of resources")
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno in _OUT_OF_RESOURCES:
                self._paused_until = time.monotonic() + _PAUSE_S
            raise


class _OneLineAcceptFailure(logging.Filter):
    """asyncio's report of a paused listener as one line: the cause, never a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith(_ACCEPT_FAILED):
            exc = record.exc_info[1]
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            record.msg = "sharedos: a listener cannot accept a connection: %s; retrying in 1 s"
            record.args = (why,)
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_accept_failures() -> None:
    """Install ``_OneLineAcceptFailure`` on asyncio's logger, once per process."""
    log = logging.getLogger("asyncio")
    if not any(isinstance(f, _OneLineAcceptFailure) for f in log.filters):
        log.addFilter(_OneLineAcceptFailure())

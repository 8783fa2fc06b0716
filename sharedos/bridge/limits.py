"""Per-turn transport limits, and the counters of what they refused.

A turn's listener is reachable by any local process (only the POST body of an
authenticated request reaches MCP), so every resource a peer can hold is
bounded: connections, the time to send headers and a body, the size of a
frame, stateful sessions, and the evidence written for garbage. The defaults
are generous for a harness on loopback (which sends a request in
microseconds) and small against a flood.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: the SDK's own default body limit (mcp 2.3.0), used for stdio lines as well
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
#: tools per tools/list page: 10,000 tools take 10 pages, well inside every measured
#: client's page cap (the TypeScript SDK's 64, the Python SDK's re-list 100, Pi's 1,000)
DEFAULT_LIST_PAGE_SIZE = 1000
#: bytes of tool JSON per page: half the Python SDK client's 1 MiB event limit
DEFAULT_LIST_PAGE_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class TransportLimits:
    """Limits of one turn's transport (HTTP and, where they apply, stdio)."""

    #: a connection must deliver a request's headers this soon after it starts waiting for one
    header_timeout_s: float = 10.0
    #: and the body this soon after the headers
    body_timeout_s: float = 30.0
    #: open connections per turn; at the cap the oldest idle or stalled one is closed for a
    #: new one (else a busy one that never carried the turn's token), and a new one is
    #: refused only when every open connection is busy with the turn's client's requests
    max_connections: int = 128
    #: an idle keep-alive connection (its last answer sent, no byte of the next request)
    #: is closed after this long (uvicorn's default: 5 s). Well past the clients' own idle
    #: timeouts (Node's fetch 4 s, httpx 5 s), so a client closes first: a server closing
    #: at 5 s raced a client whose loop was busy past its own 4 s and reused the socket
    #: ("fetch failed", a call never sent; measured with Pi + pi-mcp-adapter under load)
    keep_alive_s: float = 120.0
    #: a 2025-11-25 session with no request in flight for this long is ended (SDK default: 1800)
    session_idle_s: float = 120.0
    #: open 2025-11-25 sessions per turn; at the cap the longest-idle one is ended for a new one
    max_sessions: int = 256
    #: the largest HTTP body or stdio line read (beyond it: refused, recorded as malformed)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: unparseable frames recorded one by one before rate limiting starts
    malformed_burst: int = 20
    #: then at most this many individual records per second; the rest are counted and
    #: recorded together in one aggregate record as soon as the rate allows (and at close)
    malformed_per_second: float = 2.0
    #: ``tools/call`` s of one undeliverable frame (a batch) refused and recorded one by one;
    #: the rest of that frame are refused too, counted in one aggregate record and answered
    #: with a JSON-RPC error (a 4 MiB batch holds some 60,000 calls)
    batch_calls_recorded: int = 100
    #: tools per ``tools/list`` page; a longer catalogue is paginated with ``nextCursor``
    list_page_size: int = DEFAULT_LIST_PAGE_SIZE
    #: and at most about this many bytes of tool JSON per page (one larger tool gets a page
    #: of its own): the MCP Python SDK client refuses an event over 1 MiB
    list_page_bytes: int = DEFAULT_LIST_PAGE_BYTES

    def __post_init__(self) -> None:
        for name in (
            "header_timeout_s",
            "body_timeout_s",
            "keep_alive_s",
            "session_idle_s",
            "malformed_per_second",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"TransportLimits.{name} must be positive")
        for name in (
            "max_connections",
            "max_sessions",
            "max_frame_bytes",
            "malformed_burst",
            "batch_calls_recorded",
            "list_page_size",
            "list_page_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"TransportLimits.{name} must be at least 1")


@dataclass(slots=True)
class TransportStats:
    """What one turn's transport refused or bounded (monotonic counters, read on ``Turn.transport_stats``)."""

    #: connections closed because their request headers did not arrive in time (or nothing did)
    header_timeouts: int = 0
    #: connections closed because their request body did not arrive in time
    body_timeouts: int = 0
    #: connections closed at once: the cap was reached and every open connection was busy
    connections_refused: int = 0
    #: idle or stalled connections closed to make room at the cap
    connections_evicted: int = 0
    #: idle 2025-11-25 sessions ended to make room at the session cap
    sessions_evicted: int = 0
    #: bodies or lines refused for their size
    oversized_frames: int = 0
    #: unparseable frames recorded one by one (``malformed_request``)
    malformed_recorded: int = 0
    #: unparseable frames recorded together in aggregate records (rate limit)
    malformed_aggregated: int = 0
    #: aggregate records written for them
    malformed_aggregates: int = 0
    #: tools/call requests the transport refused and recorded (parseable, but not deliverable)
    calls_refused: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain mapping (wire spelling is not needed: this is SharedOS's own)."""
        return asdict(self)

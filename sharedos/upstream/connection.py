"""One open MCP client session with one upstream (the official SDK's ``mcp.Client``).

A connection is opened for an upstream and a credential set, lives in a task
of the broker's task group (the SDK's client must be entered and left in one
task), and serves concurrent calls from many turns: the SDK multiplexes
requests by id. It never raises transport exceptions at its callers: every
failure is an ``UpstreamFailure`` with a reason code and a sentence that
names the upstream and never a credential.

The stdio upstream's stderr is read through a pipe, scrubbed of credential
values and relayed line by line (prefixed with the upstream id); the last
lines are kept for the report of an upstream that died. The broker decides
how its process starts (``wrap``): in its own bubblewrap sandbox, or under
SharedOS's supervisor (``sharedos.upstream.sandbox``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import IO, Any, TextIO, cast

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from sharedos.compat import mcp_sdk
from sharedos.errors import UpstreamError
from sharedos.outcomes import ReasonCode
from sharedos.redaction import Redactor
from sharedos.terminal import printable
from sharedos.upstream.config import UpstreamConfig
from sharedos.upstream.definitions import RawTool, raw_tools
from sharedos.upstream.oauth import CALL_DENIALS, CredentialAuth, Denial, denial_message
from sharedos.upstream.secrets import CredentialSet
from sharedos.upstream.transport import (
    ENDLESS_BYTES,
    RESPONSE_TOO_LARGE,
    BoundedHTTPTransport,
    ListingScreen,
    ReadBounds,
    ServerRequests,
    bounded_server_requests,
    bounded_stdio_client,
)

#: JSON-RPC code the SDK uses for a closed connection
CONNECTION_CLOSED = -32000
#: JSON-RPC code the SDK uses for its own request timeout
REQUEST_TIMEOUT = -32001
#: most tools/list pages followed (a paginator that never ends cannot hang a turn)
MAX_LIST_PAGES = 50
#: after a call times out, the session must answer a ping within this (or the call's own
#: timeout, if shorter), or it is ended and opened again before the next call
PING_S = 5.0
#: of a deadline set around a forward (the host's handler timeout), the part left unused by
#: the call's wait and its ping (at most ``_DEADLINE_MARGIN_S``): time to answer and record
_DEADLINE_SHARE = 0.9
_DEADLINE_MARGIN_S = 0.5
#: a ping window shorter than this proves nothing (a busy machine may take that long to
#: answer): a call left less is not followed by a ping, and its session is kept
_MIN_PING_S = 0.2
_STDERR_TAIL = 20
#: characters of one stderr line read at once; the rest of a longer line is dropped unread
#: into memory (a line that never ends cannot grow the host)
_STDERR_LINE = 64 * 1024
#: characters cut from the end of a shortened line after scrubbing: a credential (in any of
#: its encodings) that the cut went through is never kept in part
_STDERR_MARGIN = 16 * 1024
#: listings up to this many tools are converted on the loop (~0.1 ms a tool: cheaper than
#: a thread hop); larger ones in a worker thread
_INLINE_TOOLS = 32
#: an upstream's first progress notifications of a call are relayed as they come...
PROGRESS_BURST = 100
#: ...then at most one per interval (and always one reaching its total): an upstream sending
#: thousands a second would otherwise have each one written to the harness's client
PROGRESS_INTERVAL_S = 0.05
#: characters of a relayed progress message (scrubbed first, then cut and marked "…")
PROGRESS_MESSAGE_CHARS = 1024

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


class UpstreamFailure(UpstreamError):
    """Why an upstream could not serve (``reason``: an ``upstream_*`` code; message names no secret)."""

    def __init__(self, reason: ReasonCode, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def describe_exception(exc: BaseException, scrub: Callable[[str], str] | None = None) -> str:
    """One line for an exception from the SDK or a transport (ExceptionGroups unwrapped),
    scrubbed by ``scrub`` *before* it is shortened: a credential the cut went through would
    otherwise be kept in part, where no scrubber can recognise it.

    A pydantic ``ValidationError`` (an answer that is not the result it should be) is told
    without the input values: pydantic shortens a long one to its head and tail
    (``'xxx...D-cred-7f3a9c'``), which would carry part of a credential past the scrubber.
    So is one the SDK put in another exception's text (``Failed to parse SSE message:
    <ValidationError>``, an ``MCPError``): every ``input_value=`` pydantic wrote is withheld.
    """
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        text = f"{exc.error.message} (JSON-RPC {exc.error.code})"
    elif isinstance(exc, ValidationError):
        problems = exc.errors(include_url=False, include_input=False, include_context=False)
        listed = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'result'}: {e['msg']}" for e in problems[:3]
        )
        text = f"{type(exc).__name__}: the answer is not a valid {exc.title} ({listed})"
    else:
        text = str(exc).strip() or type(exc).__name__
        if isinstance(exc, OSError) and exc.strerror:
            text = exc.strerror
        text = f"{type(exc).__name__}: {text}"
    text = without_pydantic_inputs(text)
    if scrub is not None:
        text = scrub(text)
    return text[:500]


#: the input value in a pydantic error's text (``input_value='...', input_type=str``)
_PYDANTIC_INPUT = re.compile(r"input_value=.*?(?=, input_type=)", re.DOTALL)


def without_pydantic_inputs(text: str) -> str:
    """``text`` with every input value a pydantic error wrote in it withheld: pydantic keeps
    only the head and tail of a long one, a cut in the middle no scrubber can recognise."""
    if "input_value=" not in text:
        return text
    return _PYDANTIC_INPUT.sub("input_value=[withheld]", text)


#: every connection made in this process: their scrubbers clean the SDK's own log records
_CONNECTIONS: weakref.WeakSet[UpstreamConnection] = weakref.WeakSet()


class _SdkLogScrubber(logging.Handler):
    """The ``mcp`` SDK's own log records, scrubbed before any handler shows them.

    The SDK logs what an upstream sent on its own loggers -- an SSE event's name, a
    content type, a redirect's address, a message it could not parse with the traceback
    -- where SharedOS's scrubbing never looked: a credential an upstream echoed there
    reached stderr (Python's last-resort handler) or the host's log handlers whole. On
    the ``mcp`` logger this handler sees each of its records before the handlers above
    it: the text is scrubbed of every connection's credentials (and of the host's
    secrets each was given) and of pydantic's shortened input values and spelled
    (``printable``: no escape sequence, bidi override or line break), the traceback is
    withheld (it quotes what the upstream sent; the exception's type is kept), and a
    record no other handler would show goes to ``logging.lastResort``, as it did
    without this one.
    """

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not fit its message
            text = str(record.msg)
        text = without_pydantic_inputs(text)
        if record.exc_info and record.exc_info[0] is not None:
            text += f" ({record.exc_info[0].__name__}; traceback withheld)"
        hosts: dict[int, Redactor] = {}
        for connection in list(_CONNECTIONS):
            text = connection.scrubber.scrub(text)
            if connection._host_secrets is not None:
                host = connection._host_secrets()
                hosts[id(host)] = host
        # and of the run's other secrets, as an upstream's stderr is: a model may pass one
        # into a call of an upstream that echoes it where the SDK logs
        for host in hosts.values():
            text = host.scrub(text)
        # and spelled (``printable``), one line: the upstream chose the text (an SSE event's
        # name, a content type), and a record goes to a terminal (stderr) or a log whose
        # lines it must neither rewrite (ESC[2K, OSC 52) nor reorder (U+202E) nor add to
        record.msg, record.args = printable(text), None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and not self._others(record):
            last.handle(record)

    def _others(self, record: logging.LogRecord) -> bool:
        """True when another handler on the record's way up will show it."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self and record.levelno >= h.level for h in logger.handlers):
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False


_SDK_LOGS = _SdkLogScrubber()


def _scrub_sdk_logs() -> None:
    """Put ``_SDK_LOGS`` on the SDK's ``mcp`` logger (once)."""
    sdk = logging.getLogger("mcp")
    if _SDK_LOGS not in sdk.handlers:
        sdk.addHandler(_SDK_LOGS)


class _StderrRelay:
    """Reads an upstream's stderr from a pipe, scrubs it, relays it and keeps a tail."""

    def __init__(
        self,
        upstream: str,
        scrubber: Redactor,
        sink: IO[str] | None,
        host_secrets: Callable[[], Redactor] | None = None,
    ) -> None:
        self.upstream = upstream
        self.scrubber = scrubber
        #: the host's secrets, read at each line: a value the model passed into this
        #: upstream's call (another upstream's credential, a harness's key) that the
        #: upstream writes back to its stderr is the host's secret still
        self._host_secrets = host_secrets
        self._union: tuple[Redactor, Redactor] | None = None
        self.sink = sink
        self.tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        read_fd, write_fd = os.pipe()
        self._reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        #: the write end handed to the upstream process
        self.writer: IO[str] | None = os.fdopen(write_fd, "w", encoding="utf-8")
        self._thread = threading.Thread(
            target=self._pump, name=f"sharedos-upstream-{upstream}-stderr", daemon=True
        )
        self._thread.start()

    def _scrubber(self) -> Redactor:
        """This upstream's credentials and the host's secrets (the union kept while both last)."""
        host = self._host_secrets() if self._host_secrets is not None else None
        if not host:
            return self.scrubber
        if self._union is None or self._union[0] is not host:
            self._union = (host, self.scrubber.union(host))
        return self._union[1]

    def _line(self) -> str | None:
        """The next stderr line, scrubbed and bounded (``_STDERR_LINE``), or None at EOF."""
        line = self._reader.readline(_STDERR_LINE)
        if not line:
            return None
        scrubber = self._scrubber()
        if line.endswith("\n") or len(line) < _STDERR_LINE:
            return scrubber.scrub(line.rstrip("\n"))
        dropped = 0
        while True:  # the rest of the line, read and dropped piece by piece
            more = self._reader.readline(_STDERR_LINE)
            dropped += len(more.rstrip("\n"))
            if not more or more.endswith("\n"):
                break
        head = scrubber.scrub(line)
        dropped += _STDERR_MARGIN
        return (
            head[: max(0, len(head) - _STDERR_MARGIN)] + f"... ({dropped} more characters dropped)"
        )

    def _pump(self) -> None:
        with contextlib.suppress(Exception):
            while (clean := self._line()) is not None:
                self.tail.append(clean)
                if self.sink is not None:
                    with contextlib.suppress(Exception):
                        # escaped: the line goes to the operator's terminal
                        self.sink.write(f"upstream {self.upstream}: {printable(clean)}\n")
                        self.sink.flush()
        with contextlib.suppress(Exception):
            self._reader.close()

    def spawned(self) -> None:
        """Close SharedOS's copy of the write end (the child has its own), so EOF arrives."""
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
            self.writer = None

    def last(self) -> str:
        """The last stderr line the upstream wrote (scrubbed), or ''."""
        return self.tail[-1] if self.tail else ""


class UpstreamConnection:
    """An open session with one upstream for one credential set (see the module docstring)."""

    def __init__(
        self,
        config: UpstreamConfig,
        credentials: CredentialSet,
        *,
        stderr: IO[str] | None = None,
        on_list_changed: Callable[[], None] | None = None,
        wrap: Callable[[str, list[str]], tuple[str, list[str]]] | None = None,
        host_secrets: Callable[[], Redactor] | None = None,
    ) -> None:
        self.config = config
        #: the host's secrets, also scrubbed from the upstream's stderr (``_StderrRelay``)
        self._host_secrets = host_secrets
        #: stdio: how the process is started (its sandbox, or SharedOS's supervisor)
        self._wrap = wrap
        self.credentials = credentials
        self.scrubber = Redactor(credentials.secrets())
        _CONNECTIONS.add(self)
        _scrub_sdk_logs()
        #: the last refusal of this session's credential (401 / insufficient scope), if any
        self.last_denial: Denial | None = None
        source = credentials.auth
        if source is not None:
            # an OAuth session: its tokens change (refresh, exchange); scrub the current ones
            source.on_change = self._tokens_changed
            self._tokens_changed(source.secrets())
        self._stderr_sink = stderr
        self._on_list_changed = on_list_changed
        self._client: Client | None = None
        self._closed = anyio.Event()
        self._done = anyio.Event()
        self._relay: _StderrRelay | None = None
        self.broken: str | None = None
        #: the upstream answered 404 to this session (``_session_lost``)
        self.session_lost = False
        self.server_info: dict[str, Any] = {}
        self.protocol_version: str | None = None
        self._limiter = anyio.CapacityLimiter(config.limits.max_concurrency)
        #: the upstream's requests in flight, and whether the transport's read stream ended
        self._streams = ServerRequests()
        #: tools the transport takes out of listings for a limit (reported by name)
        self._screen = ListingScreen(config.limits)
        #: the last listing's tools by their JSON text: an unchanged tool keeps its RawTool
        #: (and digest) instead of being canonicalized again (RFC 8785 in pure Python is
        #: most of a 10,000-tool listing's cost on this side)
        self._listed: dict[str, RawTool] = {}

    # -- lifecycle ----------------------------------------------------------
    async def start(self, tg: TaskGroup) -> None:
        """Open the session within the connect timeout; ``UpstreamFailure`` (unavailable, or
        unauthorized when the upstream refused the credential) otherwise."""
        denials: list[Denial] = []
        token = CALL_DENIALS.set(denials)
        try:
            with anyio.fail_after(self.config.timeouts.connect_s):
                await tg.start(self._run)
        except TimeoutError:
            self._closed.set()
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_UNAVAILABLE,
                f"upstream {self.config.id!r} did not complete the MCP handshake within "
                f"{self.config.timeouts.connect_s:g} s{self._stderr_hint()}",
            ) from None
        except UpstreamFailure:
            raise
        except Exception as exc:
            refused = self._unauthorized(denials)
            if refused is not None:
                raise refused from None
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_UNAVAILABLE,
                f"upstream {self.config.id!r} could not be reached: "
                f"{describe_exception(exc, self.scrubber.scrub)}{self._stderr_hint()}",
            ) from None
        finally:
            CALL_DENIALS.reset(token)

    def _tokens_changed(self, tokens: tuple[str, ...]) -> None:
        self.scrubber = Redactor((*self.credentials.secrets(), *tokens))

    def _denied(self, denial: Denial) -> None:
        self.last_denial = denial

    def _unauthorized(self, denials: list[Denial] | None) -> UpstreamFailure | None:
        """The failure for a request this session's credential was refused on, or None."""
        denial = denials[-1] if denials else None
        if denial is None:
            return None
        source = self.credentials.auth
        principal = source.principal if source is not None else None
        # the upstream words the refusal: scrubbed of this session's credentials and of the
        # tokens held now (a static credential, or one renewed since the scrubber was made)
        held = source.secrets() if source is not None else ()
        denial = denial.scrubbed(Redactor((*self.credentials.secrets(), *held)))
        return UpstreamFailure(
            ReasonCode.UPSTREAM_UNAUTHORIZED,
            denial_message(self.config, self.credentials.identity, denial, principal),
        )

    def _oversized_unattributed(self) -> None:
        self.broken = self.broken or (
            "it sent an oversized message that answered no request SharedOS could tell; "
            "the session was ended"
        )

    def _endless_line(self) -> None:
        self.broken = self.broken or (
            f"it sent an answer that went on past its limit without ending (past {ENDLESS_BYTES} "
            f"bytes, or {self.config.timeouts.call_s:g} s); the session was ended"
        )

    def _session_lost(self) -> None:
        # the upstream (restarted, or expiring sessions) answered 404 to this session: no
        # request on it can succeed again, so it is no longer usable and the next turn or
        # call opens a new one (MCP: the client "MUST start a new session"). Before, the
        # dead session stayed pooled and every later turn had the upstream's tools absent
        self.session_lost = True
        self.broken = self.broken or (
            "the upstream no longer knows this session (HTTP 404: it restarted or expired "
            "it); a new session is opened"
        )

    def _stderr_hint(self) -> str:
        last = self._relay.last() if self._relay is not None else ""
        return f" (its stderr: {last[:300]})" if last else ""

    def _transport(self) -> Any:
        config = self.config
        if config.transport == "stdio":
            assert config.command is not None
            self._relay = _StderrRelay(
                config.id, self.scrubber, self._stderr_sink, self._host_secrets
            )
            command, args = config.command, list(config.args)
            if self._wrap is not None:
                command, args = self._wrap(command, args)
            params = StdioServerParameters(
                command=command,
                args=args,
                env={**config.env, **self.credentials.env()},
                cwd=config.cwd,
            )
            assert self._relay.writer is not None
            # the SDK's stdio_client, with each answer bounded while it is read (transport.py)
            # and the upstream's own requests bounded in flight
            return bounded_server_requests(
                bounded_stdio_client(
                    params,
                    cast(TextIO, self._relay.writer),
                    ReadBounds.of(config.limits),
                    screen=self._screen,
                    on_unattributed=self._oversized_unattributed,
                    on_endless=self._endless_line,
                    endless_after_s=config.timeouts.call_s,
                ),
                self._streams,
            )
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert config.url is not None
        # a call given up on (timeout, the harness cancelled) ends its POST and every resume
        # of it: an upstream keeping the stream open cannot hold a connection per call
        mcp_sdk.end_abandoned_posts()
        headers = {**config.headers, **self.credentials.env()}
        http = httpx2.AsyncClient(
            headers=headers,
            # the OAuth bearer (set, renewed, refusals noted) or, for static credentials, only
            # the noting: a 401 is upstream_unauthorized, never a transport error
            auth=CredentialAuth(self.credentials.auth, self._denied),
            timeout=httpx2.Timeout(config.timeouts.call_s + 5.0, connect=config.timeouts.connect_s),
            trust_env=False,  # never pick up proxies or .netrc credentials from the host
            transport=BoundedHTTPTransport(
                ReadBounds.of(config.limits), self._screen, on_session_lost=self._session_lost
            ),
        )
        self._http = http
        return bounded_server_requests(
            streamable_http_client(config.url, http_client=http), self._streams
        )

    async def _run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            client = Client(
                self._transport(),
                client_info=types.Implementation(
                    name="sharedos-upstream-broker", version=_version()
                ),
                mode=self.config.protocol,
                cache=None,  # every listing reaches the upstream: drift is seen when it happens
                message_handler=self._on_message,
            )
            async with client:
                # results are checked against the outputSchema each turn published, off the
                # event loop (forward.py); the SDK's own check ran on the loop, against
                # whatever the upstream listed last
                mcp_sdk.skip_result_validation(client.session)
                if self._relay is not None:
                    self._relay.spawned()
                self._client = client
                self.protocol_version = client.protocol_version
                self._screen.version = client.protocol_version
                info = client.server_info
                if info is not None:
                    # shown in reports and pinned: scrubbed like everything it sends, and
                    # shortened (a name of megabytes was in every turn's report line)
                    self.server_info = {
                        "name": _shortened(self.scrubber.scrub(info.name)),
                        "version": _shortened(self.scrubber.scrub(info.version)),
                    }
                started = True
                task_status.started()
                if self.config.list_cache_s > 0 and self._on_list_changed is not None:
                    # a cached listing must hear about changes: on 2026-07-28 that takes a
                    # subscriptions/listen stream (handshake-era sessions get the notification)
                    async with anyio.create_task_group() as watch:
                        watch.start_soon(self._watch, client)
                        await self._closed.wait()
                        watch.cancel_scope.cancel()
                else:
                    await self._closed.wait()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:
            self.broken = self.broken or describe_exception(exc, self.scrubber.scrub)
            if not started:
                raise
        finally:
            self._client = None
            if self._relay is not None:
                self._relay.spawned()
            http = getattr(self, "_http", None)
            if http is not None:
                with contextlib.suppress(Exception):
                    await http.aclose()
            self._done.set()

    async def _watch(self, client: Client) -> None:
        """Relay 2026-07-28 tools list-change events (best effort; the TTL still bounds staleness)."""
        with contextlib.suppress(Exception):
            async with client.listen(tools_list_changed=True) as sub:
                async for _event in sub:
                    if self._on_list_changed is not None:
                        self._on_list_changed()

    def end(self) -> None:
        """Have the session end, without waiting for it: its own task closes the transport
        (a stdio process is closed, then its tree killed by the SDK if it lingers, which
        takes seconds for a hung one), within the broker's task group, which waits for it."""
        self._closed.set()

    async def close(self) -> None:
        """End the session (the stdio process is closed, then killed by the SDK if it lingers)."""
        self.end()
        with anyio.move_on_after(5):
            await self._done.wait()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            if self._on_list_changed is not None:
                self._on_list_changed()
        elif isinstance(message, Exception):
            # a transport fault the session surfaced; calls in flight fail on their own
            pass
        await anyio.lowlevel.checkpoint()

    @property
    def usable(self) -> bool:
        """True while the session is open and no call has seen it break, and its transport
        has not ended: a stdio upstream that exited between calls (or an HTTP session whose
        transport failed) is opened again before the next call, which used to fail
        "disconnected" though nothing of it was sent."""
        return (
            self._client is not None
            and self.broken is None
            and not self._closed.is_set()
            and not self._streams.ended
        )

    def _gone(self, exc: BaseException) -> bool:
        """True when ``exc`` (a request's failure) means the session itself is gone.

        Over streamable HTTP the SDK fails one request with "connection closed" when only
        that request's stream ended (empty, or no answer before its end, or an event it
        could not read): the session and every other call on it go on. Ending the session
        for it failed every call in flight on the pooled session -- other turns', other
        people's, answered or not -- for one request's bad stream.
        """
        if self.session_lost:
            return True
        if not _is_closed(exc):
            return False
        if self.config.transport == "stdio":
            return True
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        return self._streams.ended or not isinstance(exc, MCPError)

    def _mark_broken(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
        # the runner task leaves the client context: the process or HTTP session ends
        self._closed.set()

    # -- requests ------------------------------------------------------------
    def _require(self) -> Client:
        client = self._client
        if client is None or not self.usable:
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_UNAVAILABLE,
                f"upstream {self.config.id!r} is not connected"
                + (f" ({self.broken})" if self.broken else ""),
            )
        return client

    async def list_tools(self) -> list[RawTool]:
        """Every tool the upstream lists now (all pages), within the list timeout; the
        conversion and the limits (``raw_tools``) run in a worker thread, off the loop."""
        client = self._require()
        listed: list[types.Tool] = []
        self._screen.take()  # nothing left over from a listing the SDK made on its own
        denials: list[Denial] = []
        noted = CALL_DENIALS.set(denials)
        # fitted to the handler's deadline like a call's waits (a call lists again after a
        # change was announced), with a ping after a timeout, as for a call
        timeout, waited = fitted_waits(
            self.config.timeouts.list_s, anyio.current_effective_deadline()
        )
        try:
            with anyio.fail_after(timeout):
                cursor: str | None = None
                for _ in range(MAX_LIST_PAGES):
                    result = await client.session.list_tools(
                        params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    )
                    listed.extend(result.tools)
                    cursor = result.next_cursor
                    if not cursor:
                        break
        except TimeoutError:
            why = (
                f"upstream {self.config.id!r} did not list its tools within {round(timeout, 2):g} s"
            )
            if waited > 0 and not await self._answers_ping(client, waited):
                # hung as a whole: kept, every later call (and turn) listed it again and
                # waited out list_s once more, for the life of the pooled session
                why += (
                    f"; it did not answer a ping within {round(waited, 2):g} s either, so its "
                    "session is ended and opened again before the next call"
                )
                self._mark_broken("it answered neither tools/list nor a ping in time")
            raise UpstreamFailure(ReasonCode.UPSTREAM_TIMEOUT, why) from None
        except Exception as exc:
            refused = self._unauthorized(denials)
            if refused is not None:
                raise refused from None
            why = describe_exception(exc, self.scrubber.scrub)
            if self._gone(exc):
                self._mark_broken(why)
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_ERROR,
                f"upstream {self.config.id!r} failed to list its tools: {why}{self._stderr_hint()}",
            ) from None
        finally:
            CALL_DENIALS.reset(noted)
        dropped, unnamed = self._screen.take()
        if cursor:  # still another page after MAX_LIST_PAGES: say so, never cut in silence
            dropped.append(
                (
                    f"(after page {MAX_LIST_PAGES})",
                    f"the upstream still listed more tools after {MAX_LIST_PAGES} pages (a "
                    "cursor that never ends?); SharedOS stopped there, and tools on later "
                    "pages are not served",
                )
            )
        seen: dict[str, RawTool] = {}
        if len(listed) + len(dropped) <= _INLINE_TOOLS:
            out = raw_tools(listed, self.config.limits, self.scrubber, dropped, self._listed, seen)
        else:
            out = await anyio.to_thread.run_sync(
                raw_tools, listed, self.config.limits, self.scrubber, dropped, self._listed, seen
            )
        if unnamed:
            limit = self.config.limits.max_tools
            name = f"({unnamed} more past limits.max_tools)"
            out.append(
                RawTool(
                    name,
                    {"name": name},
                    "",
                    f"{unnamed} more tools past limits.max_tools ({limit}) were listed; "
                    f"past the first {self._screen.named} of those, tools are counted, "
                    "not named one by one",
                    count=unnamed,
                )
            )
        self._listed = seen
        return out

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, progress: ProgressFn | None = None
    ) -> types.CallToolResult:
        """Forward one call; the upstream's result as it sent it, or ``UpstreamFailure``.

        Cancellation (the harness cancelled, the turn closed) propagates and the
        SDK tells the upstream (``notifications/cancelled`` / closing the HTTP
        stream); the call timeout cancels the upstream request the same way.
        """
        client = self._require()
        timeout, waited = fitted_waits(
            self.config.timeouts.call_s, anyio.current_effective_deadline()
        )
        callback: Any = None
        if progress is not None:
            hook = progress
            relayed_at = -math.inf
            relayed = 0

            async def callback(p: float, total: float | None, message: str | None) -> None:
                nonlocal relayed_at, relayed
                # NaN and infinities parse (NaN, Infinity, 1e400) but are no JSON number: the
                # harness would get "progress": null, which no MCP client accepts
                if not math.isfinite(p):
                    return
                if total is not None and not math.isfinite(total):
                    total = None
                now = time.monotonic()
                done = total is not None and p >= total
                if (
                    not done
                    and relayed >= PROGRESS_BURST
                    and now - relayed_at < PROGRESS_INTERVAL_S
                ):
                    return  # progress is informational: a later notification supersedes it
                relayed_at, relayed = now, relayed + 1
                if message:
                    message = self.scrubber.scrub(message)
                    if len(message) > PROGRESS_MESSAGE_CHARS:
                        message = message[:PROGRESS_MESSAGE_CHARS] + "…"
                with contextlib.suppress(Exception):
                    await hook(p, total, message)

        denials: list[Denial] = []
        noted = CALL_DENIALS.set(denials)
        try:
            with anyio.fail_after(timeout):
                async with self._limiter:
                    result = await client.session.call_tool(
                        name, arguments, progress_callback=callback
                    )
        except TimeoutError:
            why = (
                f"upstream {self.config.id!r} did not answer {name} within {round(timeout, 2):g} s; "
                "the upstream request was cancelled"
            )
            if waited > 0 and not await self._answers_ping(client, waited):
                # hung as a whole (its loop blocked, a deadlock): every later call of every
                # turn would wait out its timeout too, for the life of the pooled session
                why += (
                    f"; it did not answer a ping within {round(waited, 2):g} s either, so its session "
                    "is ended and opened again before the next call"
                )
                self._mark_broken(f"it answered neither {name} nor a ping in time")
            raise UpstreamFailure(ReasonCode.UPSTREAM_TIMEOUT, why) from None
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            refused = self._unauthorized(denials)
            if refused is not None:
                raise refused from None
            why = describe_exception(exc, self.scrubber.scrub)
            if self._gone(exc):
                self._mark_broken(why)
                last = self._stderr_hint()
                raise UpstreamFailure(
                    ReasonCode.UPSTREAM_ERROR,
                    f"upstream {self.config.id!r} disconnected during {name}: {why}{last}",
                ) from None
            if isinstance(exc, MCPError) and exc.error.code == RESPONSE_TOO_LARGE:
                # refused while it was read (transport.py): the session is still in step
                limit = self.config.limits.max_result_bytes
                raise UpstreamFailure(
                    ReasonCode.UPSTREAM_ERROR,
                    f"upstream {self.config.id!r} returned a result over its limit of {limit} "
                    "bytes (limits.max_result_bytes); SharedOS stopped reading it, nothing of it "
                    "is relayed",
                ) from None
            if isinstance(exc, MCPError) and exc.error.code == REQUEST_TIMEOUT:
                raise UpstreamFailure(
                    ReasonCode.UPSTREAM_TIMEOUT,
                    f"upstream {self.config.id!r} did not answer {name} in time: {why}",
                ) from None
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_ERROR,
                f"upstream {self.config.id!r} answered {name} with an error: {why}",
            ) from None
        finally:
            CALL_DENIALS.reset(noted)
        if not isinstance(result, types.CallToolResult):
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_ERROR,
                f"upstream {self.config.id!r} answered {name} with a "
                f"{type(result).__name__}, not a tool result",
            )
        return result

    async def _answers_ping(self, client: Client, within: float) -> bool:
        """Does the session still answer (a ping, within ``within`` seconds)? An error
        answer is an answer: only silence, or a session gone, is a no."""
        try:
            with anyio.fail_after(within):
                await client.session.send_ping()
        except MCPError:
            return True
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            return False
        return True


def fitted_waits(call_s: float, deadline: float, now: float | None = None) -> tuple[float, float]:
    """How long a forward waits for its answer, then for the ping after a timeout: ``call_s``
    and ``min(PING_S, call_s)``, both shortened to end before ``deadline`` (anyio's effective
    deadline around the call: the host's handler timeout) when they would not. A ping
    window shorter than ``_MIN_PING_S`` is 0: no ping is asked, a healthy session is never
    ended for not answering in a few milliseconds.

    Past that deadline the kernel cancels the handler: a call still waiting, or its ping,
    was cancelled with it, so a session hung as a whole was never found out, and every later
    call of every turn waited on it (a host's default handler timeout, 30 s, is shorter than
    the default ``call_s``, 60 s; ``sharedos run`` gave ``call_s`` + 5 s, the ping's 5 s).
    """
    ping = min(PING_S, call_s)
    if math.isinf(deadline):
        return call_s, ping
    budget = deadline - (anyio.current_time() if now is None else now)
    usable = max(budget - min(_DEADLINE_MARGIN_S, budget * (1 - _DEADLINE_SHARE)), 0.0)
    if call_s + ping <= usable:
        return call_s, ping
    ping = min(ping, usable / 4)
    if ping < _MIN_PING_S:
        ping = 0.0
    return max(min(call_s, usable - ping), 0.0), ping


#: characters of an upstream's serverInfo name or version kept (scrubbed first, then cut)
SERVER_INFO_CHARS = 256


def _shortened(text: str) -> str:
    """``text`` cut to ``SERVER_INFO_CHARS`` and marked "…" when it was longer."""
    return text if len(text) <= SERVER_INFO_CHARS else text[:SERVER_INFO_CHARS] + "…"


def _is_closed(exc: BaseException) -> bool:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.code == CONNECTION_CLOSED
    return isinstance(
        exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sharedos")
    except PackageNotFoundError:
        return "0"


def default_stderr() -> IO[str]:
    """Where upstream stderr lines go by default."""
    return sys.stderr

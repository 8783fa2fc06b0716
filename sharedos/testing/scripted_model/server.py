"""ScriptedModelServer: a local model endpoint that plays a manifest through a harness.

It binds 127.0.0.1 on an ephemeral port (stdlib ``http.server`` in a thread: no
dependency, and the harness CLI is a separate process anyway) and answers:

- ``POST …/v1/messages`` (Anthropic Messages; SSE or plain JSON) and ``HEAD /``;
- ``POST …/v1/responses`` (OpenAI Responses; SSE);
- ``POST …/v1/chat/completions`` (OpenAI chat completions; SSE or plain JSON).

Every request is appended to a JSONL log (path, offered tool names, the step
chosen, the body); headers are never logged, because they carry the harness's
API key. Each tool call it emits is kept as an ``IssuedCall`` (row key, canonical
tool, the alias used, the call id) for diagnostics.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from sharedos.names import is_valid_tool_name
from sharedos.testing.scripted_model import apis
from sharedos.testing.scripted_model.local import find_local_tool
from sharedos.testing.scripted_model.plan import (
    SCRIPTED_MODEL_NAME,
    SERVER_NAME,
    IssuedCall,
    ScriptedAttempt,
    ToolAlias,
    _strict,
    guess_aliases,
    resolve_aliases,
)
from sharedos.testing.scripted_model.script import WAIT_TOOL, Step, decide

_MAX_BODY = 32 * 1024 * 1024

_Api = tuple[
    str,  # api name
    str,  # call-id style
    Callable[[dict[str, Any]], list[ToolAlias | str]],
    Callable[[dict[str, Any]], tuple[int, int]],
    Callable[[Step, str], Iterator[apis.Event]],
    Callable[[Step, str], dict[str, Any]],
]

_APIS: dict[str, _Api] = {
    "/messages": (
        "anthropic",
        "anthropic",
        apis.anthropic_offered,
        apis.anthropic_progress,
        apis.anthropic_events,
        apis.anthropic_json,
    ),
    "/responses": (
        "responses",
        "openai",
        apis.responses_offered,
        apis.responses_progress,
        apis.responses_events,
        apis.responses_json,
    ),
    "/chat/completions": (
        "chat",
        "openai",
        apis.chat_offered,
        apis.chat_progress,
        apis.chat_events,
        apis.chat_json,
    ),
}

logger = logging.getLogger(__name__)


class _ModelHTTPServer(ThreadingHTTPServer):
    """The endpoint's HTTP server: a request that fails never prints to the run's stderr.

    ``socketserver``'s default ``handle_error`` prints a traceback to ``sys.stderr``,
    straight between ``sharedos run``'s own lines. A client that left (a harness
    killed at the turn's end, a reset) is no error of the endpoint's; anything else
    is logged, as every other SharedOS failure is.
    """

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            logger.debug("scripted model: the client left mid-request (%s)", exc)
            return
        logger.error("scripted model: a request failed", exc_info=exc)


class ScriptedModelServer:
    """A scripted model for one harness turn. Use as a context manager.

    ``plan`` is the list of attempts to make, in order. ``log_path`` (optional)
    receives one JSON line per request. ``url`` is ``http://127.0.0.1:PORT``.
    """

    def __init__(
        self,
        plan: Sequence[ScriptedAttempt],
        *,
        log_path: Path | None = None,
        server_name: str = SERVER_NAME,
        model_name: str = SCRIPTED_MODEL_NAME,
        catalog_names: Sequence[str] = (),
        hold: threading.Event | None = None,
        hold_timeout_s: float = 60.0,
    ) -> None:
        self.plan = tuple(plan)
        self.catalog = frozenset(catalog_names)
        # the attempts through the catalogue (harness-local ones use the CLI's own tools)
        self.kernel_plan = tuple(a for a in self.plan if a.local is None)
        # Names whose aliases are recorded (the plan's tools plus the turn's catalogue),
        # so a report can show every name the harness gave the model.
        self.watch = tuple(dict.fromkeys([*catalog_names, *(a.tool for a in self.kernel_plan)]))
        self.server_name = server_name
        self.model_name = model_name
        self.log_path = log_path
        self.issued: list[IssuedCall] = []
        self.requests = 0
        self.offered_seen: dict[str, str] = {}  # canonical -> alias shown, last seen
        self.last_offered: list[str] = []  # every tool name the last request offered
        # Test hook: when set, a tool-call answer waits for ``hold`` (so a host can
        # close the turn while the harness is mid-turn); ``holding`` tells it is waiting.
        self.hold = hold
        self.hold_timeout_s = hold_timeout_s
        self.holding = threading.Event()
        self._lock = threading.Lock()
        self._httpd: _ModelHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._extra: list[tuple[_ModelHTTPServer, threading.Thread]] = []

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> ScriptedModelServer:
        """Bind 127.0.0.1:0 and serve in a daemon thread."""
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self._httpd = _ModelHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    async def serve_socket(self, sock: socket.socket) -> None:
        """Also answer on ``sock`` (a listener from a harness sandbox's own loopback)."""
        assert self._httpd is not None, "server not started"
        handler = self._httpd.RequestHandlerClass
        extra = _ModelHTTPServer(self._httpd.server_address, handler, bind_and_activate=False)
        extra.socket.close()
        sock.setblocking(True)
        extra.socket = sock
        thread = threading.Thread(
            target=extra.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        self._extra.append((extra, thread))

    def stop(self) -> None:
        """Stop serving and release the port (and any sandbox listener)."""
        for extra, thread in self._extra:
            extra.shutdown()
            extra.server_close()
            thread.join(timeout=5)
        self._extra.clear()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (only while started)."""
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL without a path (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.port}"

    # ----------------------------------------------------------------- logic
    def answer(self, path: str, body: dict[str, Any]) -> tuple[str, Step] | None:
        """Decide the answer for one request; ``None`` for an unknown path."""
        route = next((r for suffix, r in _APIS.items() if path.endswith(suffix)), None)
        if route is None:
            return None
        api, style, offered_fn, progress_fn, _, _ = route
        offered = offered_fn(body)
        seen = resolve_aliases(offered, self.watch, self.server_name)
        planned = {a.tool for a in self.kernel_plan}
        aliases = {k: v for k, v in seen.items() if k in planned}
        if not seen and api == "chat" and "mcp" in offered:
            # pi-mcp-adapter in proxy mode (directTools off, so no SharedOS tool is
            # offered directly): one `mcp` tool that takes the prefixed name of a
            # catalogue tool (the adapter resolves it client-side). A tool outside the
            # catalogue is a guess and goes by its exact name, never a sanitized one
            # that could resolve to a real tool (`files read` -> `sharedos_files_read`).
            prefix = _strict(self.server_name)
            aliases = {
                a.tool: (
                    ToolAlias(a.tool, "mcp", "proxy", target=f"{prefix}_{_strict(a.tool)}")
                    if a.tool in self.catalog and is_valid_tool_name(a.tool)
                    else ToolAlias(a.tool, "mcp", "proxy", target=a.tool, guessed=True)
                )
                for a in self.kernel_plan
            }
        if seen:
            # The catalogue is there; a planned tool it lacks is guessed at through
            # the harness's own routes, so the column measures what its client does
            # with a name it was not offered.
            wanted = (a.tool for a in self.kernel_plan)
            for tool, guess in guess_aliases(wanted, seen, offered).items():
                aliases.setdefault(tool, guess)
        schemas = apis.SCHEMAS[api](body)
        for attempt in self.plan:
            # a harness-local attempt: the CLI's own tool of that kind, if it offered one
            if attempt.local is not None and attempt.tool not in aliases:
                found = find_local_tool(attempt.local, schemas)
                if found is not None:
                    aliases[attempt.tool] = ToolAlias(attempt.tool, found[0], local=found[1])
        done, waits = progress_fn(body)
        wait_offered = WAIT_TOOL in [o for o in offered if isinstance(o, str)]
        step = decide(
            self.plan, aliases, done=done, waits=waits, wait_offered=wait_offered, style=style
        )
        replies = apis.tool_replies(api, body)
        with self._lock:
            self.requests += 1
            if replies:
                # Keep the harness's answer to each call (its client-side refusal of a
                # guessed name is only visible here, never at the bridge).
                self.issued = [
                    replace(c, reply=replies[c.call_id])
                    if c.reply is None and c.call_id in replies
                    else c
                    for c in self.issued
                ]
            for canonical, alias in seen.items():
                self.offered_seen[canonical] = alias.shown
            if offered:
                # a request with no tools at all (dsh's session-title request) says
                # nothing about what the agent was offered
                self.last_offered = [o.shown if isinstance(o, ToolAlias) else o for o in offered]
            fresh = not any(c.call_id == step.call_id for c in self.issued)
            if step.attempt is not None and step.alias is not None and step.call_id and fresh:
                self.issued.append(
                    IssuedCall(
                        key=step.attempt.key,
                        tool=step.attempt.tool,
                        alias=step.alias.shown,
                        call_id=step.call_id,
                        api=api,
                        # a local attempt: what the CLI's own tool was given
                        arguments=dict(
                            step.arguments
                            if step.attempt.local is not None and step.arguments is not None
                            else step.attempt.arguments
                        ),
                        guessed=step.alias.guessed,
                        local=step.attempt.local.kind if step.attempt.local else None,
                    )
                )
            self._log(
                {
                    "n": self.requests,
                    "path": path,
                    "api": api,
                    "stream": bool(body.get("stream")),
                    "offered": [o.shown if isinstance(o, ToolAlias) else o for o in offered],
                    "aliases": {k: v.shown for k, v in aliases.items()},
                    "done": done,
                    "waits": waits,
                    "answer": (
                        {"text": step.text}
                        if step.text is not None
                        else {"wait": True, "callId": step.call_id}
                        if step.wait
                        else {
                            "tool": step.attempt.tool if step.attempt else None,
                            "alias": step.alias.shown if step.alias else None,
                            "guessed": bool(step.alias and step.alias.guessed),
                            "callId": step.call_id,
                        }
                    ),
                    "body": body,
                }
            )
        if self.hold is not None and step.attempt is not None:
            self.holding.set()
            self.hold.wait(self.hold_timeout_s)
        return api, step

    def _log(self, entry: dict[str, Any]) -> None:
        if self.log_path is None:
            return
        # the log lies in the harness's turn directory: never append through a planted link
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        fd = os.open(self.log_path, flags, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")


class _Handler(BaseHTTPRequestHandler):
    server_owner: ScriptedModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def do_HEAD(self) -> None:
        """Claude Code probes ``HEAD /`` on its base URL before each run."""
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        """A tiny models listing, for clients that probe it."""
        if self.path.rstrip("/").endswith("/models"):
            owner = self.server_owner
            self._send_json(
                200, {"object": "list", "data": [{"id": owner.model_name, "object": "model"}]}
            )
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        """Answer a model request in the API its path names."""
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > _MAX_BODY:
            self._send_json(413, {"error": {"message": "request too large"}})
            return
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except ValueError as exc:
            self._send_json(400, {"error": {"message": f"invalid JSON body: {exc}"}})
            return
        path = self.path.split("?", 1)[0].rstrip("/")
        decided = self.server_owner.answer(path, body)
        if decided is None:
            self._send_json(404, {"error": {"message": f"no such endpoint {path}"}})
            return
        _, step = decided
        route = next(r for suffix, r in _APIS.items() if path.endswith(suffix))
        model = self.server_owner.model_name
        if body.get("stream"):
            self._send_sse(route[4](step, model))
        else:
            self._send_json(200, route[5](step, model))

    def _send_json(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_sse(self, events: Iterator[apis.Event]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, data in events:
            payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
            chunk = (f"event: {name}\n" if name else "") + f"data: {payload}\n\n"
            self.wfile.write(chunk.encode())
        self.wfile.flush()
        self.close_connection = True

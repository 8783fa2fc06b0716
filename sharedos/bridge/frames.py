"""One received frame (an HTTP body or a stdio line), classified before the SDK sees it.

Security (ADR 0014: no attempt may vanish, nothing runs on an altered value):
the SDK parses a frame with ``pydantic_core`` and drops — or, on HTTP, answers
with a bare 400 and never records — anything it cannot read: invalid UTF-8,
a lone surrogate escape, nesting deeper than its parser's limit, a truncated
body, a batch array, a ``tools/call`` without an ``id``. Its stdio reader even
decodes invalid UTF-8 with replacement characters and runs the call on the
altered text. So every frame is classified here first:

- ``Frame.message`` set: one valid JSON-RPC message, parsed exactly as the SDK
  would; it is handed on (the fast path: one ``pydantic_core`` parse and one
  validation, a few microseconds).
- otherwise ``Frame.problem`` says what is wrong, ``Frame.calls`` holds every
  ``tools/call`` that can still be made out (each is refused and recorded, and
  answered as a result when it carries a usable id), and ``Frame.requests``
  the ids of other requests that can be answered with a JSON-RPC error.

Arguments are kept on a ``CallAttempt`` only when they were read faithfully
(the frame's only fault is a lone surrogate or its depth); after replacement
of invalid bytes or flattening of a too-deep tree they are not what the
client sent, and are dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import mcp_types as types
import pydantic_core
from pydantic import ValidationError

from sharedos.jsonrpc_id import EDGE_BYTES
from sharedos.jsonrpc_id import request_id as edge_request_id
from sharedos.jsonshape import nests_deeper_than

#: the deepest JSON the SDK's parser (pydantic_core) reads; deeper frames are refused
SDK_MAX_DEPTH = 200
#: nesting beyond which the bridge itself stops building the value (a subtree is replaced by null)
FLATTEN_DEPTH = 256
#: bytes of a frame's start whose SHA-256 is recorded for an unparseable frame (never the bytes)
FINGERPRINT_BYTES = 64
#: messages written one after another in one frame (no newline between) that are made out
SEQUENCE_MAX_VALUES = 1000
#: the placeholder tool of a record for a frame from which no call could be made out
MALFORMED_TOOL = "<malformed>"

_MODERN_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
#: the only whitespace JSON allows between and around its tokens (RFC 8259 section 2)
_JSON_WHITESPACE = " \t\n\r"
_JSON_WHITESPACE_BYTES = _JSON_WHITESPACE.encode()
_JSON_SPACE_RUN = re.compile(r"[ \t\n\r]*")
_METHOD_HINT = re.compile(r'"method"\s*:\s*"tools/call"')


class Problem(StrEnum):
    """Why a frame could not be handed to the SDK as it is."""

    #: bytes that are not UTF-8 (JSON text must be)
    INVALID_UTF8 = "invalid_utf8"
    #: a ``\\ud800``-style escape without its pair: no faithful text exists for it
    LONE_SURROGATE = "lone_surrogate"
    #: nesting deeper than the transport reads
    TOO_DEEP = "too_deep"
    #: the JSON ends early (a cut line, a body the peer stopped sending)
    TRUNCATED = "truncated"
    #: not JSON at all
    NOT_JSON = "not_json"
    #: valid JSON, but not one valid JSON-RPC message (a batch, a wrong version, a bad id ...)
    NOT_JSONRPC = "not_jsonrpc"
    #: nothing but whitespace
    EMPTY = "empty"
    #: larger than the transport accepts
    OVERSIZED = "oversized"
    #: an integer longer than the parsers read (4,300 digits, CPython's int/str limit)
    NUMBER_TOO_LONG = "number_too_long"
    #: a valid message the SDK's transport turned away (headers, session, media type)
    REJECTED = "rejected_by_transport"
    #: ``NaN``, ``Infinity`` or a number too large for a float: not JSON, and no
    #: comparison can be trusted with it (``NaN > 10`` is false)
    NON_FINITE = "non_finite_number"
    #: a request whose id (as the SDK's HTTP transport keys it, ``str(id)``) is
    #: already in flight on the same session
    DUPLICATE_ID = "duplicate_request_id"
    #: a request that arrived while the turn was closing (HTTP: a kept-alive connection's
    #: next request, after the SDK's sessions were ended and before the listener was)
    TURN_CLOSED = "turn_closed"


#: what the model and the record are told, per problem
PROBLEM_TEXT: dict[Problem, str] = {
    Problem.INVALID_UTF8: "the request is not valid UTF-8",
    Problem.LONE_SURROGATE: "the request contains an unpaired UTF-16 surrogate escape",
    Problem.TOO_DEEP: f"the request is nested deeper than {SDK_MAX_DEPTH} levels",
    Problem.TRUNCATED: "the request ends before its JSON is complete",
    Problem.NOT_JSON: "the request is not JSON",
    Problem.NOT_JSONRPC: "the request is not a single valid JSON-RPC 2.0 request",
    Problem.EMPTY: "the request is empty",
    Problem.OVERSIZED: "the request is larger than the transport accepts",
    Problem.NUMBER_TOO_LONG: "the request holds an integer longer than the transport reads "
    "(4,300 digits)",
    Problem.REJECTED: "the MCP transport rejected the request (its headers, session or media type)",
    Problem.NON_FINITE: "the request holds a non-finite number (NaN, Infinity or one too large "
    "for a 64-bit float), which JSON does not have",
    Problem.DUPLICATE_ID: "the request reuses the id of a request still in flight on this session",
    Problem.TURN_CLOSED: "the turn this bridge served has closed",
}

RequestId = int | str


@dataclass(frozen=True, slots=True)
class CallAttempt:
    """A ``tools/call`` made out in a frame that cannot be delivered as it is.

    ``request_id`` is the id to answer (``None``: a notification, or an id of
    a type JSON-RPC does not allow — recorded, not answerable). ``name`` is
    the raw name (any JSON type); ``arguments`` are set only when read
    faithfully. ``protocol_version`` comes from a 2026-07-28 ``_meta``
    envelope, if the call has one.
    """

    request_id: RequestId | None
    name: object
    arguments: object
    arguments_intact: bool
    protocol_version: str | None
    #: the request had an ``id`` member (perhaps of a type that cannot be answered)
    has_id: bool = True


@dataclass(frozen=True, slots=True)
class Frame:
    """One classified frame (see the module docstring)."""

    size: int
    message: types.JSONRPCMessage | None
    problem: Problem | None = None
    calls: tuple[CallAttempt, ...] = ()
    #: ids of requests other than tools/call that cannot be delivered (answered with an
    #: error; ``None``: a request whose id JSON-RPC does not allow, answered with id null)
    requests: tuple[RequestId | None, ...] = ()
    #: the frame looks like a tools/call although nothing could be made out
    looks_like_call: bool = False
    #: the frame is a JSON array (a JSON-RPC batch: its answers go back as an array)
    batch: bool = False
    fingerprint: str = ""
    #: ``requests`` holds the id read from the edges of a frame that was not parsed whole
    #: (oversized, truncated, not JSON): answered with a parse error
    from_edges: bool = False
    #: ``message`` is not the frame: the client's answer to one of the server's requests
    #: could not be read (``problem`` says why), and this error for its id goes in its
    #: place, so the request fails at once instead of waiting out its own timeout
    substituted: bool = False


def is_blank(data: bytes) -> bool:
    """True when ``data`` holds nothing but JSON whitespace (space, tab, CR, LF).

    Not ``bytes.strip``: it also strips form feed and vertical tab, which JSON
    does not allow anywhere (such a frame is not JSON, not an empty one).
    """
    return not data.strip(_JSON_WHITESPACE_BYTES)


def fingerprint(data: bytes) -> str:
    """SHA-256 (hex, 128 bits) of the first ``FINGERPRINT_BYTES`` of a frame; never the bytes themselves."""
    return hashlib.sha256(data[:FINGERPRINT_BYTES]).hexdigest()[:32]


def classify(data: bytes) -> Frame:
    """Classify one frame; never raises."""
    try:
        value = pydantic_core.from_json(data)
    except ValueError:
        return _damaged(data)
    if has_non_finite(value):
        # The SDK would read NaN and 1e999 as floats; JSON has neither, and a
        # policy comparison cannot be trusted with them: refused and recorded,
        # the arguments not kept (no canonical JSON can record them).
        return _structured(data, value, Problem.NON_FINITE, intact=False)
    return _structured(data, value, None, intact=True)


def deliverable(data: bytes) -> Frame | None:
    """The frame of ``data`` when it is one deliverable message, read on the fast path; else
    None (``classify`` says what it is, on the slow path, at a cost that grows with what is
    wrong: run it off the event loop).

    One ``pydantic_core`` parse and one validation: a frame of a few KiB costs microseconds.
    """
    try:
        value = pydantic_core.from_json(data)
    except ValueError:
        return None
    if type(value) is not dict or has_non_finite(value):
        return None
    frame = _structured(data, value, None, intact=True)
    return frame if frame.message is not None and frame.problem is None else None


def has_non_finite(value: object) -> bool:
    """True when a number anywhere in ``value`` is NaN or infinite (iterative: any depth)."""
    stack: list[object] = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is float:
            if item - item != 0:  # type: ignore[operator]
                return True
        elif kind is dict:
            push(item.values())  # type: ignore[attr-defined]
        elif kind is list:
            push(item)  # type: ignore[arg-type]
    return False


def undeliverable(data: bytes, value: object, problem: Problem) -> Frame:
    """The frame of a readable message the bridge will not hand on (``problem`` says why)."""
    return _structured(data, value, problem, intact=True)


def oversized(size: int, head: bytes, tail: bytes = b"") -> Frame:
    """The frame of a body or line refused for its size (only its first and last bytes were kept).

    The request's id, when its edges show it (``sharedos.jsonrpc_id``), is in
    ``requests``: the refusal answers that request. On stdio the id is the only
    way a client matches an answer to its request; with ``id: null`` a client
    waited for its whole timeout (the SDK's has none by default). The id of the
    client's *answer* to one of the bridge's requests is not answered: it names
    the bridge's request, not one of the client's.
    """
    request_id = edge_request_id(head, tail)
    return Frame(
        size=size,
        message=None,
        problem=Problem.OVERSIZED,
        requests=(request_id,) if isinstance(request_id, int | str) else (),
        from_edges=True,
        looks_like_call=_looks_like_call(head) or _looks_like_call(tail),
        fingerprint=fingerprint(head),
    )


def unread_call(data: bytes, problem: Problem) -> Frame:
    """The frame of a body refused without being read (only its edges were looked at).

    A turn past its close's grace does not wait for its classifying thread to read every
    large body still queued for it (a fraction of a second to seconds each, one at a time):
    a ``tools/call`` its edges show is refused and recorded (its id, when the edges show
    it, answered) without its name or arguments."""
    head, tail = data[:EDGE_BYTES], data[-EDGE_BYTES:]
    request_id = edge_request_id(head, tail)
    answerable = request_id if isinstance(request_id, int | str) else None
    looks = _looks_like_call(head) or _looks_like_call(tail)
    calls = (
        (CallAttempt(answerable, None, None, False, None, has_id=answerable is not None),)
        if looks
        else ()
    )
    return Frame(
        size=len(data),
        message=None,
        problem=problem,
        calls=calls,
        looks_like_call=looks,
        fingerprint=fingerprint(data),
    )


def truncated(data: bytes) -> Frame:
    """The frame of a body whose sender stopped before its end (disconnect or read deadline).

    What did arrive may still name a ``tools/call`` (even be complete JSON,
    when a body announced more bytes than it sent); it is refused either way.
    """
    return _damaged(data, forced=Problem.TRUNCATED)


def _structured(data: bytes, value: object, problem: Problem | None, *, intact: bool) -> Frame:
    """A frame whose JSON was read (faithfully when ``intact``)."""
    if problem is None and isinstance(value, dict):
        try:
            message = types.jsonrpc_message_adapter.validate_python(value, by_name=False)
        except ValidationError:
            pass
        else:
            if (
                isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
                and "method" in value
            ):
                # a request with an ``error`` (or ``result``) member validates as a
                # response: the server would take it for an answer and drop the call
                pass
            elif isinstance(message, types.JSONRPCNotification) and _has_request_id(value):
                # a request whose id MCP does not allow (null, a fraction, a boolean, an
                # object ...): the notification model ignores the member, so the server
                # would take it for a notification and never answer it
                pass
            elif not (
                isinstance(message, types.JSONRPCNotification) and message.method == "tools/call"
            ):
                return Frame(size=len(data), message=message)
            # a tools/call without an id: the server would drop it as a notification
    if (
        isinstance(value, dict)
        and "method" not in value
        and ("result" in value or "error" in value)
    ):
        answered = _usable_id(value)
        if answered is not None:
            return _unreadable_answer(data, answered, problem or Problem.NOT_JSONRPC)
    items: Iterable[object] = value if isinstance(value, list) else (value,)
    calls: list[CallAttempt] = []
    requests: list[RequestId | None] = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        request_id = _usable_id(item)
        if item.get("method") == "tools/call":
            calls.append(_call_attempt(item, request_id, intact=intact, has_id="id" in item))
        elif "method" in item and _has_request_id(item):
            # a request (it has a method member, of whatever type): its error goes to its
            # id, or a stdio client waits for it forever; an id JSON-RPC does not allow
            # (null, a fraction, a boolean, an object) gets it with id null, as JSON-RPC
            # answers a request whose id it could not read
            requests.append(request_id)
    return Frame(
        size=len(data),
        message=None,
        problem=problem or Problem.NOT_JSONRPC,
        calls=tuple(calls),
        requests=tuple(requests),
        looks_like_call=bool(calls),
        batch=isinstance(value, list),
        fingerprint=fingerprint(data),
    )


def _unreadable_answer(data: bytes, answered: RequestId, problem: Problem) -> Frame:
    """A client's answer (``result`` or ``error``, no ``method``) the server cannot read.

    Its id names the server's request it answers (an elicitation, a sampling
    request): dropped, that request waited for its own timeout — an approval
    asked at the client two minutes — although the client had answered. An
    error for that id is handed on instead: the request fails at once, as for
    any error the client sends, and nothing can be approved or run on it.
    """
    error = types.ErrorData(
        code=-32600,
        message=f"the client's answer to this request could not be read ({PROBLEM_TEXT[problem]})",
    )
    message = types.JSONRPCError(jsonrpc="2.0", id=answered, error=error)
    return Frame(
        size=len(data),
        message=message,
        problem=problem,
        fingerprint=fingerprint(data),
        substituted=True,
    )


def _call_attempt(
    item: Mapping[str, object], request_id: RequestId | None, *, intact: bool, has_id: bool
) -> CallAttempt:
    params = item.get("params")
    name: object = None
    arguments: object = None
    version: str | None = None
    if isinstance(params, Mapping):
        name = params.get("name")
        arguments = params.get("arguments") if intact else None
        meta = params.get("_meta")
        if isinstance(meta, Mapping) and isinstance(meta.get(_MODERN_VERSION_KEY), str):
            version = str(meta[_MODERN_VERSION_KEY])
    return CallAttempt(
        request_id=request_id,
        name=name,
        arguments=arguments,
        arguments_intact=intact,
        protocol_version=version,
        has_id=has_id,
    )


def _has_request_id(item: Mapping[str, object]) -> bool:
    """Whether ``item`` (a message with a method) is a request by its ``id`` member.

    ``"id": null`` beside a ``notifications/`` method is read as the notification
    it names: clients that serialize an absent id as null (a struct field without
    ``omitempty``) send their ``notifications/initialized`` that way.
    """
    if "id" not in item:
        return False
    method = item.get("method")
    return not (
        item["id"] is None and isinstance(method, str) and method.startswith("notifications/")
    )


def _usable_id(item: Mapping[str, object]) -> RequestId | None:
    """The item's id when JSON-RPC allows answering it (a string or an integer, not a bool)."""
    rid = item.get("id")
    if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return rid
    return None


def _damaged(data: bytes, forced: Problem | None = None) -> Frame:
    """The slow path: the SDK's parser refused the frame; find out why and what can be said.

    ``forced``: the problem is already known (a truncated body); the frame is
    still searched for the calls it names.
    """
    if is_blank(data):
        return Frame(
            size=len(data),
            message=None,
            problem=forced or Problem.EMPTY,
            fingerprint=fingerprint(data),
        )
    problem: Problem | None = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        problem = Problem.INVALID_UTF8
        text = data.decode("utf-8", "replace")
    value: object = None
    parsed = False
    try:
        value = json.loads(text)
        parsed = True
    except RecursionError:
        problem = problem or Problem.TOO_DEEP
        try:
            value = json.loads(flatten(text, FLATTEN_DEPTH))
            parsed = True
        except (ValueError, RecursionError):
            parsed = False
    except json.JSONDecodeError as exc:
        # only JSON's own whitespace may follow the end (RFC 8259 section 2): str.rstrip()
        # also strips \f, NBSP, U+2028 ..., and took bytes after a complete message for
        # the frame ending early
        at_end = exc.pos >= len(text.rstrip(_JSON_WHITESPACE))
        unterminated = exc.msg.startswith("Unterminated")
        if problem is None:
            problem = Problem.TRUNCATED if at_end or unterminated else Problem.NOT_JSON
            if exc.msg == "Extra data":
                # messages written one after another without their newline: each
                # request in them is made out (and answered), not only the first
                sequence = _json_sequence(text)
                if sequence is not None:
                    value, parsed = sequence, True
    except ValueError:
        # valid JSON with an integer longer than CPython converts: read with such
        # integers as null (the call can be made out), refused like a non-finite number
        try:
            value = json.loads(text, parse_int=_int_or_none)
            parsed = True
            problem = problem or Problem.NUMBER_TOO_LONG
        except (ValueError, RecursionError):
            problem = problem or Problem.NOT_JSON
    if not parsed:
        # nothing can be made out, but a legible id is still answered (see ``oversized``)
        request_id = edge_request_id(data[:EDGE_BYTES], data[-EDGE_BYTES:])
        return Frame(
            size=len(data),
            message=None,
            problem=forced or problem,
            requests=(request_id,) if isinstance(request_id, int | str) else (),
            from_edges=True,
            looks_like_call=_looks_like_call(data),
            fingerprint=fingerprint(data),
        )
    if problem is None and forced is not None:
        return _structured(
            data, value, forced, intact=not nests_deeper_than(value, FLATTEN_DEPTH - 1)
        )
    if problem is None:
        # JSON that Python reads and the SDK does not: depth, or a lone surrogate
        if nests_deeper_than(value, SDK_MAX_DEPTH):
            problem = Problem.TOO_DEEP
        elif has_lone_surrogate(value):
            problem = Problem.LONE_SURROGATE
        else:
            problem = Problem.NOT_JSON
    intact = problem in (Problem.LONE_SURROGATE, Problem.TOO_DEEP) and not nests_deeper_than(
        value, FLATTEN_DEPTH - 1
    )
    return _structured(data, value, forced or problem, intact=intact)


def _json_sequence(text: str) -> list[object] | None:
    """The JSON values ``text`` holds one after another (only JSON whitespace between), or None.

    At most ``SEQUENCE_MAX_VALUES`` of them: a client that forgot a newline wrote
    a few; a frame of millions of tiny values is not made out (read one by one,
    they would cost seconds a JSON array of them does not).
    """
    decoder = json.JSONDecoder()
    values: list[object] = []
    at = 0
    try:
        while len(values) <= SEQUENCE_MAX_VALUES:
            at = _JSON_SPACE_RUN.match(text, at).end()  # type: ignore[union-attr]
            if at == len(text):
                return values
            value, at = decoder.raw_decode(text, at)
            values.append(value)
    except (ValueError, RecursionError):
        pass
    return None


def _int_or_none(digits: str) -> int | None:
    try:
        return int(digits)
    except ValueError:  # longer than sys.get_int_max_str_digits()
        return None


def _looks_like_call(data: bytes) -> bool:
    return _METHOD_HINT.search(data[: 1 << 20].decode("utf-8", "replace")) is not None


def has_lone_surrogate(value: object) -> bool:
    """True when a string (or an object key) anywhere in ``value`` holds an unpaired surrogate."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


#: a string (an unterminated one runs to the end: a failed match would be retried from
#: every later quote, quadratic in the frame's size), or a run of opening or closing brackets
_TOKENS = re.compile(r'"[^"\\]*(?:\\[\s\S][^"\\]*)*(?:"|\\?\Z)|[\[{]+|[\]}]+')


def flatten(text: str, limit: int) -> str:
    """``text`` with every array/object nested deeper than ``limit`` replaced by ``null``.

    For JSON too deep for a recursive parser: the envelope (method, id,
    params.name) survives, the deep subtree does not. Strings are skipped
    whole, so brackets inside them do not count. Runs of brackets are
    handled by their length, so ``[[[[…]]]]`` costs O(runs), not O(bytes).
    """
    out: list[str] = []
    depth = 0
    emitted = 0  # text[:emitted] is already in out (or was dropped)
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token[0] == '"':
            continue
        start = match.start()
        if token[0] in "[{":
            if depth > limit:
                depth += len(token)
                continue
            room = limit - depth
            if len(token) <= room:
                depth += len(token)
                continue
            # the run crosses the limit: keep its first `room` brackets, drop from there
            cut = start + room
            out.append(text[emitted:cut])
            out.append("null")
            emitted = cut
            depth += len(token)
        else:
            if depth <= limit:
                depth = max(0, depth - len(token))
                continue
            back_to = depth - len(token)
            if back_to >= limit:
                depth = back_to
                emitted = match.end()
                continue
            # the run climbs back above the limit: drop up to it, keep the rest
            keep_from = start + (depth - limit)
            emitted = keep_from
            depth = max(0, back_to)
    out.append(text[emitted:] if depth <= limit else "")
    return "".join(out)

"""The ``id`` of a JSON-RPC message that was too large to read whole, from its edges.

Both ends of the wire meet such messages: an upstream's answer over its
result limit (``sharedos.upstream.transport``) and a harness's request over
the bridge's frame limit (``sharedos.bridge.stdio_wire``). Neither is held
in memory; only its first and last ``EDGE_BYTES`` are kept, and the id read
from them is what lets the one request it belongs to be answered at once,
instead of waiting out a timeout (on stdio, the id is the only way a peer
matches an answer to its request).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

__all__ = ["EDGE_BYTES", "has_member", "message_id", "request_id"]

#: bytes kept of an oversized message's head and tail to find its id
EDGE_BYTES = 4096

_ID_KEY = b'"id"'
#: the only whitespace JSON has (RFC 8259 section 2); str.strip() also takes \f, NBSP ...
_WHITESPACE = " \t\n\r"
_WHITESPACE_BYTES = _WHITESPACE.encode()


def _scalar(text: str) -> Any:
    """A JSON-RPC id (string or integer) at the start of ``text``, else raise ValueError.

    The value must be followed by the next member or the object's end: a head cut
    inside a number (``"id":12`` of ``"id":1234``) would otherwise name another
    request, and so would the valid prefix of a value that is not JSON (``0`` of
    ``01``, ``12`` of ``12abc``).
    """
    text = text.lstrip(_WHITESPACE)
    value, end = json.JSONDecoder().raw_decode(text)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError("not an id")
    if not text[end:].lstrip(_WHITESPACE).startswith((",", "}")):
        raise ValueError("the id is not followed by a member or the object's end")
    return value


def _preceded_by_member_start(data: bytes, at: int) -> bool:
    before = data[:at].rstrip(_WHITESPACE_BYTES)
    return before.endswith((b"{", b","))


def has_member(head: bytes, tail: bytes, key: str) -> bool:
    """Whether the edges show ``key`` as a member of the message's top-level object.

    The same reading as ``message_id``: in the head, everything before the key
    parses as the start of the top-level object; in the tail, it and everything
    after it parse as that object's last members.
    """
    needle = json.dumps(key).encode()
    at = head.find(needle)
    while at != -1:
        if _preceded_by_member_start(head, at):
            prefix = head[:at].rstrip(_WHITESPACE_BYTES).rstrip(b",")
            rest = head[at + len(needle) :].lstrip(_WHITESPACE_BYTES)
            with contextlib.suppress(ValueError, RecursionError):
                if rest.startswith(b":") and isinstance(json.loads(prefix + b"}"), dict):
                    return True
        at = head.find(needle, at + 1)
    at = tail.rfind(needle)
    while at != -1:
        if _preceded_by_member_start(tail, at):
            with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
                members = json.loads(b"{" + tail[at:])
                if isinstance(members, dict) and key in members:
                    return True
        at = tail.rfind(needle, 0, at)
    return False


def request_id(head: bytes, tail: bytes) -> Any:
    """The id of the *request* seen by these edges (``message_id``), or None for an answer.

    A message with a ``result`` or ``error`` member and no ``method`` is an answer:
    its id names a request of the other side (the bridge's elicitation, say), and an
    error sent to that id reaches the peer as the answer to its own request of the
    same id (the SDK clients and servers both number theirs from 0).
    """
    found = message_id(head, tail)
    if found is None or has_member(head, tail, "method"):
        return found
    if has_member(head, tail, "result") or has_member(head, tail, "error"):
        return None
    return found


def message_id(head: bytes, tail: bytes) -> Any:
    """The top-level ``id`` of a JSON-RPC message seen only by its first and last bytes, or None.

    A quote is always escaped inside a JSON string, so ``{"id"`` / ``,"id"`` never
    occurs inside one; a candidate is accepted only if it is a member of the
    top-level object: in the head, everything before it parses as the start of that
    object; in the tail, it and everything after it parse as that object's last
    members.
    """
    at = head.find(_ID_KEY)
    while at != -1:
        if _preceded_by_member_start(head, at):
            prefix = head[:at].rstrip(_WHITESPACE_BYTES).rstrip(b",")
            # RecursionError: a head nested deeper than Python's parser recurses is no
            # top-level member's start (and must not end the reader that asked)
            with contextlib.suppress(ValueError, RecursionError):
                if isinstance(json.loads(prefix + b"}"), dict):
                    rest = head[at + len(_ID_KEY) :].lstrip(_WHITESPACE_BYTES)
                    if rest.startswith(b":"):
                        return _scalar(rest[1:].decode("utf-8", "ignore"))
        at = head.find(_ID_KEY, at + 1)
    at = tail.rfind(_ID_KEY)
    while at != -1:
        if _preceded_by_member_start(tail, at):
            with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
                members = json.loads(b"{" + tail[at:])
                if isinstance(members, dict) and "id" in members:
                    value = members["id"]
                    if isinstance(value, str | int) and not isinstance(value, bool):
                        return value
        at = tail.rfind(_ID_KEY, 0, at)
    return None

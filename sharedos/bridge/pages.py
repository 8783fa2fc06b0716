"""``tools/list`` pages and their cursors: opaque, bound to one turn, refused when altered.

A turn's catalogue is fixed for the turn, so its pages are cut once, when the
turn opens: at most ``list_page_size`` tools and about ``list_page_bytes`` of
JSON each (a page always holds at least one tool). The byte budget keeps every
page well under the 1 MiB a server-sent event may carry in the MCP Python SDK
client (``DEFAULT_MAX_SSE_EVENT_SIZE``); a whole 10,000-tool catalogue in one
``tools/list`` result exceeds it, and a 2025-11-25 client could then list
nothing and call nothing.

A cursor names a page of this turn and nothing else: the page number and an
HMAC-SHA256 tag under a key drawn for the turn (``secrets``), base64url. A
cursor from another turn, an earlier bridge, another server or an edited one
does not verify and is refused with JSON-RPC ``-32602`` (invalid params), as
the MCP specification asks for an invalid cursor (it is a protocol error, not
a tool refusal; the SDK client drops its cached listing on that code).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Sequence

from sharedos.errors import BridgeError

#: version byte of the cursor format
_FORMAT = 1
#: bytes of the HMAC-SHA256 tag kept in a cursor (128 bits)
_TAG = 16
#: what the tag covers besides the page: the method, so a cursor means one listing only
_CONTEXT = b"sharedos tools/list page\x00"


class InvalidCursor(BridgeError, ValueError):
    """A cursor this turn did not issue (stale, from another turn, or altered)."""


def cut_pages(sizes: Sequence[int], *, max_items: int, max_bytes: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each page over items of the given sizes, in order.

    A page ends before the item that would take it past ``max_items`` items or
    ``max_bytes`` bytes; an item larger than ``max_bytes`` gets a page of its
    own. An empty list has one empty page (a listing always answers).
    """
    if max_items < 1 or max_bytes < 1:
        raise ValueError("a page must be allowed at least one item and one byte")
    pages: list[tuple[int, int]] = []
    start, used = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= max_items or used + size > max_bytes):
            pages.append((start, i))
            start, used = i, 0
        used += size
    pages.append((start, len(sizes)))
    return pages


class PageCursors:
    """Issues and checks the cursors of one turn's pages (a fresh key per instance)."""

    __slots__ = ("_key", "pages")

    def __init__(self, pages: int, key: bytes | None = None) -> None:
        if pages < 1:
            raise ValueError("a listing has at least one page")
        self.pages = pages
        self._key = key if key is not None else secrets.token_bytes(32)

    def _tag(self, page: int) -> bytes:
        return hmac.new(self._key, _CONTEXT + page.to_bytes(4, "big"), hashlib.sha256).digest()[
            :_TAG
        ]

    def cursor(self, page: int) -> str:
        """The cursor that asks for ``page`` (1 .. pages-1; page 0 is asked for without one)."""
        if not 0 < page < self.pages:
            raise ValueError(f"no page {page} to point at (pages: {self.pages})")
        raw = bytes([_FORMAT]) + page.to_bytes(4, "big") + self._tag(page)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def page(self, cursor: object) -> int:
        """The page ``cursor`` asks for; ``InvalidCursor`` unless this instance issued it."""
        if not isinstance(cursor, str) or not cursor or len(cursor) > 64:
            raise InvalidCursor("not a cursor this turn issued")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (binascii.Error, ValueError):
            raise InvalidCursor("not a cursor this turn issued") from None
        if len(raw) != 5 + _TAG or raw[0] != _FORMAT:
            raise InvalidCursor("not a cursor this turn issued")
        page = int.from_bytes(raw[1:5], "big")
        if not hmac.compare_digest(raw[5:], self._tag(page)) or not 0 < page < self.pages:
            raise InvalidCursor("not a cursor this turn issued")
        return page

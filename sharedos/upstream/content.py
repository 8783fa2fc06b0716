"""Content blocks MCP clients refuse although the Python SDK parsed them.

The ``mcp`` SDK's types take an image's or audio's ``data``, an embedded
resource's ``blob`` and an annotation's ``lastModified`` as any string. The
TypeScript SDK, which the harnesses' MCP clients (Claude Code, the Inspector,
…) are built on, holds them to more: ``data`` and ``blob`` must be what
``atob`` decodes (WHATWG forgiving-base64), ``lastModified`` an RFC 3339
date-time with a ``Z`` or an offset. A result with one such block is refused
whole by that client: the harness gets an error and no result, while the call
would be recorded succeeded. So such a result is refused before it is relayed
(``content_problem``), checked as it would be relayed (after scrubbing: a
credential scrubbed out of a base64 blob leaves text that is no base64).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

#: ASCII whitespace, which forgiving-base64 skips
_WHITESPACE = re.compile(r"[\t\n\f\r ]")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*", re.ASCII)

_DATE = (
    r"(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29"
    r"|\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
    r"|02-(?:0[1-9]|1\d|2[0-8])))"
)
#: zod's ``z.iso.datetime({offset: true})``, which the TypeScript SDK reads lastModified with
_DATETIME = re.compile(
    _DATE + r"T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)",
    re.ASCII,
)

#: bytes of binary data in one result above which ``content_problem`` is worth a worker thread
LARGE_BINARY = 256 * 1024


def is_base64(text: str) -> bool:
    """True when ``atob(text)`` decodes (WHATWG forgiving-base64): ASCII whitespace is
    skipped, one or two ``=`` may pad a multiple of 4, and the rest is the standard
    alphabet with no length of 1 modulo 4."""
    if _WHITESPACE.search(text):
        text = _WHITESPACE.sub("", text)
    if len(text) % 4 == 0:
        text = text[:-2] if text.endswith("==") else text[:-1] if text.endswith("=") else text
    return len(text) % 4 != 1 and _BASE64.fullmatch(text) is not None


def binary_size(content: Sequence[Mapping[str, Any]]) -> int:
    """Characters of base64 data in ``content`` (what ``content_problem`` reads)."""
    total = 0
    for block in content:
        data = block.get("data")
        if isinstance(data, str):
            total += len(data)
        resource = block.get("resource")
        if isinstance(resource, Mapping) and isinstance(resource.get("blob"), str):
            total += len(resource["blob"])
    return total


def content_problem(content: Sequence[Mapping[str, Any]]) -> str | None:
    """Where ``content`` (a result's blocks, wire spelling) holds what MCP clients on the
    TypeScript SDK refuse, or None."""
    for i, block in enumerate(content):
        kind = block.get("type")
        if kind in ("image", "audio"):
            data = block.get("data")
            if isinstance(data, str) and not is_base64(data):
                return f"content[{i}] ({kind}) has data that is not base64"
        elif kind == "resource":
            resource = block.get("resource")
            blob = resource.get("blob") if isinstance(resource, Mapping) else None
            if isinstance(blob, str) and not is_base64(blob):
                return f"content[{i}] (resource) has a blob that is not base64"
        annotations = block.get("annotations")
        modified = annotations.get("lastModified") if isinstance(annotations, Mapping) else None
        if isinstance(modified, str) and _DATETIME.fullmatch(modified) is None:
            return (
                f"content[{i}] ({kind}) has an annotations.lastModified that is not an "
                "RFC 3339 date-time with a time zone"
            )
    return None

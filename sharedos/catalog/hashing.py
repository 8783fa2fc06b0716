"""``catalogHash``: SHA-256 over RFC 8785 canonical JSON of the published tools sorted by name.

The canonical JSON of an array is ``[`` + its elements' canonical JSON joined
by ``,`` + ``]`` (RFC 8785 adds no whitespace), so each published tool's
canonical bytes are computed once, when it is built, and a catalogue hash is a
join plus one SHA-256.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable

from sharedos.catalog.definition import PublishedToolDefinition, ToolDefinition


def _published(
    tools: Iterable[PublishedToolDefinition | ToolDefinition],
) -> list[PublishedToolDefinition]:
    out = [t.published if isinstance(t, ToolDefinition) else t for t in tools]
    out.sort(key=lambda t: t.name)
    for prev, cur in itertools.pairwise(out):
        if prev.name == cur.name:
            raise ValueError(f"catalogue lists tool {cur.name!r} twice")
    return out


def canonical_catalog_json(tools: Iterable[PublishedToolDefinition | ToolDefinition]) -> bytes:
    """The exact bytes that are hashed: RFC 8785 JSON of the published tools sorted by name."""
    return b"[" + b",".join(t.canonical_bytes for t in _published(tools)) + b"]"


def catalog_hash(tools: Iterable[PublishedToolDefinition | ToolDefinition]) -> str:
    """SHA-256 hex of ``canonical_catalog_json(tools)``; independent of input order."""
    return hashlib.sha256(canonical_catalog_json(tools)).hexdigest()

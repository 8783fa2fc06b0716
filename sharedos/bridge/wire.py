"""The published catalogue as MCP ``Tool`` objects, with a defensive sieve.

The registry already normalises or refuses schemas at registration. The bridge
still checks every tool against the wire models of *every* protocol revision it
may negotiate, because the SDK validates a whole ``tools/list`` result at once
(one bad ``inputSchema`` → JSON-RPC -32603 for the entire list, measured on
mcp 2.3.0). A tool that would fail is left out of the listing and reported in
the turn's diagnostics; it never takes the other tools down with it.

The check costs about 3 ms a tool (JSON Schema meta-validation, one wire
model per protocol revision) and a turn of 10,000 tools would pay it 10,000
times, at every turn. Its verdict depends only on the published tool, so
``WireSieve`` remembers it under the SHA-256 of the tool's RFC 8785 bytes
(the ones ``catalogHash`` is made of): a changed definition has another hash
and is checked anew. What a hit returns is the MCP ``Tool`` built when the
verdict was made, so the published content is always the content checked.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import mcp_types as types
from cachetools import LRUCache
from mcp_types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from sharedos.catalog import PublishedToolDefinition
from sharedos.catalog.schemacheck import schema_problem

#: ``_meta`` key under which a tool's SharedOS metadata (namespace, source) travels.
METADATA_META_KEY = "sharedos.dev/metadata"
#: ``_meta`` key on a ``tools/list`` result carrying the turn's catalogHash.
CATALOG_HASH_META_KEY = "sharedos.dev/catalogHash"

_ALL_VERSIONS: tuple[str, ...] = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)

#: distinct published tools whose wire verdict (and MCP ``Tool``) is kept
WIRE_VERDICTS_KEPT = 65_536


@dataclass(frozen=True, slots=True)
class ExcludedTool:
    """A catalogue tool the bridge could not publish, and why."""

    name: str
    reason: str


def wire_tool(published: PublishedToolDefinition | Mapping[str, Any]) -> dict[str, Any]:
    """MCP wire dict for a published tool (``PublishedToolDefinition`` or a wire mapping)."""
    if hasattr(published, "wire"):
        raw: Mapping[str, Any] = published.wire()
    elif isinstance(published, Mapping):
        raw = published
    else:
        raise TypeError(f"not a published tool: {type(published).__name__}")
    out: dict[str, Any] = {
        "name": raw.get("name"),
        "description": raw.get("description"),
        "inputSchema": raw.get("inputSchema"),
    }
    if raw.get("outputSchema") is not None:
        out["outputSchema"] = raw["outputSchema"]
    if raw.get("annotations"):
        out["annotations"] = raw["annotations"]
    if raw.get("metadata"):
        out["_meta"] = {METADATA_META_KEY: raw["metadata"]}
    return out


def _check_wire(tool: dict[str, Any]) -> str | None:
    """Why ``tool`` would break a ``tools/list`` result, or ``None`` if it is fine."""
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        return "tool has no name"
    desc = tool.get("description")
    if not isinstance(desc, str) or not desc.strip():
        return "tool has no description"
    for field in ("inputSchema", "outputSchema"):
        schema = tool.get(field)
        if schema is None and field == "outputSchema":
            continue
        if not isinstance(schema, Mapping) or schema.get("type") != "object":
            return f'{field} must be a JSON object schema with root "type": "object"'
        problem = schema_problem(schema)
        if problem is not None:
            return f"{field} is not a valid JSON Schema: {problem}"
    probe = {"tools": [tool], "ttlMs": 0, "cacheScope": "private", "resultType": "complete"}
    for version in _ALL_VERSIONS:
        try:
            serialize_server_result("tools/list", version, probe)
        except Exception as exc:  # pydantic.ValidationError and friends
            first = str(exc).splitlines()
            return f"rejected by the MCP {version} wire model: {' '.join(first[:3])}"
    return None


class Verdict(NamedTuple):
    """The MCP tool to publish (and the bytes of its JSON), or why the tool is left out."""

    tool: types.Tool | None
    reason: str | None
    size: int = 0


def check_tool(published: Any) -> Verdict:
    """The MCP ``Tool`` for ``published``, or why it would break a ``tools/list`` (never cached)."""
    try:
        tool = wire_tool(published)
    except Exception as exc:
        return Verdict(None, str(exc))
    reason = _check_wire(tool)
    if reason is None:
        try:
            model = types.Tool.model_validate(tool, by_alias=True)
            size = len(model.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8"))
            return Verdict(model, None, size)
        except Exception as exc:
            reason = f"not an MCP Tool: {exc}"
    return Verdict(None, reason)


class WireSieve:
    """``check_tool`` remembered by the SHA-256 of a published tool's canonical bytes (bounded).

    Only ``PublishedToolDefinition`` objects are remembered (their canonical
    bytes are computed once, when they are built); a plain wire mapping is
    checked every time.
    """

    def __init__(self, maxsize: int = WIRE_VERDICTS_KEPT) -> None:
        self._maxsize = maxsize
        self._verdicts: LRUCache[bytes, Verdict] = LRUCache(maxsize)
        #: the same verdicts by object: a registered or brokered definition is the same
        #: object turn after turn, and this skips even the hash. The object is kept with
        #: its verdict, so an id is never mistaken for a later object's. Cleared when full.
        self._by_object: dict[int, tuple[PublishedToolDefinition, Verdict]] = {}
        self._lock = threading.Lock()
        #: how many tools were actually checked (a miss); the tests count with it
        self.checked = 0

    def check(self, published: Any) -> Verdict:
        """``check_tool(published)``, from the memo when this exact tool was checked before."""
        seen = self._by_object.get(id(published))
        if seen is not None and seen[0] is published:
            return seen[1]
        verdict = self._check(published)
        if isinstance(published, PublishedToolDefinition):
            if len(self._by_object) >= self._maxsize:
                self._by_object.clear()
            self._by_object[id(published)] = (published, verdict)
        return verdict

    def _check(self, published: Any) -> Verdict:
        key: bytes | None = None
        if isinstance(published, PublishedToolDefinition):
            try:
                key = hashlib.sha256(published.canonical_bytes).digest()
            except Exception:  # cannot be canonicalized: check_tool reports it
                key = None
        if key is not None:
            with self._lock:
                hit = self._verdicts.get(key)
            if hit is not None:
                return hit
        verdict = check_tool(published)
        with self._lock:
            self.checked += 1
            if key is not None:
                self._verdicts[key] = verdict
        return verdict

    def sieve_sized(
        self, published_tools: Iterable[Any]
    ) -> tuple[list[types.Tool], list[int], list[ExcludedTool]]:
        """``sieve``, with the JSON size in bytes of each publishable tool (for paging)."""
        ok: list[types.Tool] = []
        sizes: list[int] = []
        excluded: list[ExcludedTool] = []
        for published in published_tools:
            tool, reason, size = self.check(published)
            if tool is not None:
                ok.append(tool)
                sizes.append(size)
                continue
            name = getattr(published, "name", None)
            if name is None and isinstance(published, Mapping):
                name = published.get("name")
            excluded.append(
                ExcludedTool(name=str(name if name is not None else "?"), reason=str(reason))
            )
        return ok, sizes, excluded

    def sieve(self, published_tools: Iterable[Any]) -> tuple[list[types.Tool], list[ExcludedTool]]:
        """Split a catalogue into publishable MCP tools and the ones that would break ``tools/list``."""
        ok, _, excluded = self.sieve_sized(published_tools)
        return ok, excluded

    def __len__(self) -> int:
        return len(self._verdicts)


#: the process's memo: verdicts of published tools by content hash, shared by every turn
#: on purpose (a pure function's answers; a turn learns nothing from a hit it could not
#: compute itself, and a hit is only ever for the identical tool)
WIRE_SIEVE = WireSieve()


def sieve_catalog(published_tools: Iterable[Any]) -> tuple[list[types.Tool], list[ExcludedTool]]:
    """Split a catalogue into publishable MCP tools and the ones that would break ``tools/list``."""
    return WIRE_SIEVE.sieve(published_tools)

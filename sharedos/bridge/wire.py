"""The published catalogue as MCP ``Tool`` objects, with a defensive sieve.

The registry already normalises or refuses schemas at registration. The bridge
still checks every tool against the wire models of *every* protocol revision it
may negotiate, because the SDK validates a whole ``tools/list`` result at once
(one bad ``inputSchema`` → JSON-RPC -32603 for the entire list, measured on
mcp 2.3.0). A tool that would fail is left out of the listing and reported in
the turn's diagnostics; it never takes the other tools down with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp_types.methods import serialize_server_result
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from sharedos.catalog import PublishedToolDefinition

#: ``_meta`` key under which a tool's SharedOS metadata (namespace, source) travels.
METADATA_META_KEY = "sharedos.dev/metadata"
#: ``_meta`` key on a ``tools/list`` result carrying the turn's catalogHash.
CATALOG_HASH_META_KEY = "sharedos.dev/catalogHash"

_ALL_VERSIONS: tuple[str, ...] = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)


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
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            return f"{field} is not a valid JSON Schema: {exc.message}"
    probe = {"tools": [tool], "ttlMs": 0, "cacheScope": "private", "resultType": "complete"}
    for version in _ALL_VERSIONS:
        try:
            serialize_server_result("tools/list", version, probe)
        except Exception as exc:  # pydantic.ValidationError and friends
            first = str(exc).splitlines()
            return f"rejected by the MCP {version} wire model: {' '.join(first[:3])}"
    return None


def sieve_catalog(published_tools: Iterable[Any]) -> tuple[list[types.Tool], list[ExcludedTool]]:
    """Split a catalogue into publishable MCP tools and the ones that would break ``tools/list``."""
    ok: list[types.Tool] = []
    excluded: list[ExcludedTool] = []
    for published in published_tools:
        try:
            tool = wire_tool(published)
        except Exception as exc:
            excluded.append(
                ExcludedTool(name=str(getattr(published, "name", "?")), reason=str(exc))
            )
            continue
        reason = _check_wire(tool)
        if reason is None:
            try:
                ok.append(types.Tool.model_validate(tool, by_alias=True))
                continue
            except Exception as exc:
                reason = f"not an MCP Tool: {exc}"
        excluded.append(ExcludedTool(name=str(tool.get("name")), reason=reason))
    return ok, excluded

"""An upstream's listed tools -> namespaced ``ToolDefinition``s (or a refusal naming both).

A tool ``git_status`` of the upstream whose namespace is ``git`` is published
as ``git.git_status`` with ``metadata`` ``{"namespace": "git", "source":
"upstream:<id>"}``, so the catalogHash says where it came from and two
upstreams with the same raw name never collide. A tool that cannot be
published (its prefixed name breaks ToolNameSchema, its schema is not an
object schema MCP accepts, ...) is refused with a message naming the
upstream and the tool; the rest of the upstream still works.

A tool whose definition holds one of the upstream's own credentials, in any
encoding and anywhere (name, description, title, input or output schema —
defaults, enums, examples, property names —, annotations, ``_meta``, icons),
is held back whole: it is neither published (the model never reads it) nor
pinned (the pin file never stores it), and the refusal names the fields, never
the value (issue 22).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rfc8785
from mcp.shared.inbound import find_invalid_x_mcp_header
from pydantic import SecretStr, ValidationError

from sharedos import canonical
from sharedos.catalog.definition import (
    ToolAnnotations,
    ToolDefinition,
    ToolDefinitionError,
    ToolMetadata,
)
from sharedos.catalog.schemaregex import regex_problem
from sharedos.names import is_valid_tool_name
from sharedos.redaction import Redactor
from sharedos.upstream.config import UpstreamConfig, UpstreamLimits

_ANNOTATION_KEYS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass(frozen=True, slots=True)
class RawTool:
    """One tool exactly as the upstream listed it (wire spelling) and its digest.

    A tool over one of the upstream's ``limits`` keeps only its name (``wire`` is
    ``{"name": ...}``, ``digest`` empty) and says why in ``problem``: it is refused
    before anything else looks at it.
    """

    name: str
    wire: Mapping[str, Any]
    #: sha256 of the RFC 8785 form of ``wire`` (every field the upstream sent)
    digest: str
    #: why the tool is refused before it is built (a limit), or ""
    problem: str = ""
    #: how many listed tools the entry stands for: 1, or for the one entry that counts
    #: the tools past ``limits.max_tools`` not named one by one, their number
    count: int = 1


@dataclass(frozen=True, slots=True)
class Refusal:
    """A tool of an upstream that is not published, and why (one sentence for an operator)."""

    upstream: str
    tool: str
    reason: str

    def describe(self) -> str:
        """``upstream 'git', tool 'x': reason``."""
        return f"upstream {self.upstream!r}, tool {self.tool!r}: {self.reason}"


def raw_tool(wire: Mapping[str, Any]) -> RawTool:
    """Wrap a listed tool's wire dict (``Tool.model_dump(by_alias=True, exclude_none=True)``)."""
    try:
        digest = canonical.tag(canonical.dumps(dict(wire)))
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        digest = canonical.tag(repr(sorted(wire.items())).encode())
    return RawTool(name=str(wire.get("name", "")), wire=wire, digest=digest)


#: the longest tool name shown in a refusal (an upstream may list a megabyte-long one)
_SHOWN_NAME = 128


def _shown_name(name: str) -> str:
    return name if len(name) <= _SHOWN_NAME else name[: _SHOWN_NAME - 3] + "..."


def _size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (UTF-8)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


def raw_tools(
    tools: Sequence[Any],
    limits: UpstreamLimits,
    scrubber: Redactor,
    dropped: Sequence[tuple[str, str]] = (),
    known: Mapping[str, RawTool] | None = None,
    seen: dict[str, RawTool] | None = None,
) -> list[RawTool]:
    """An upstream's listed ``mcp_types.Tool`` models as ``RawTool``s, limits applied.

    CPU-bound (a dump and an RFC 8785 digest per tool): the connection runs it in a
    worker thread, never on the event loop. ``dropped`` are the tools the transport
    already took out of the answer for a limit (``transport.ListingScreen``), as
    (name, why); a tool still over a limit here is refused the same way. Either way
    it is kept by name with its ``problem``; names shown are scrubbed and shortened.

    ``known`` maps a tool's JSON text (sorted keys) to its ``RawTool`` of the last
    listing: an unchanged tool keeps it, digest included, instead of being
    canonicalized again (RFC 8785 in pure Python is most of a 10,000-tool
    listing's cost here). Every tool of this listing is put in ``seen`` the same way.
    """
    out: list[RawTool] = []
    for name, problem in dropped:
        shown = _shown_name(scrubber.scrub(name))
        out.append(RawTool(shown, {"name": shown}, "", problem))
    for position, tool in enumerate(tools, start=1):
        wire = tool.model_dump(by_alias=True, exclude_none=True, mode="json")
        problem = over_limits(wire, position, limits)
        if problem:
            shown = _shown_name(scrubber.scrub(str(wire.get("name", ""))))
            out.append(RawTool(shown, {"name": shown}, "", problem))
        elif known is None and seen is None:
            out.append(raw_tool(wire))
        else:
            # equal text <=> equal JSON value: the key never joins two different tools
            text = json.dumps(wire, sort_keys=True, separators=(",", ":"))
            item = (known or {}).get(text) or (seen or {}).get(text) or raw_tool(wire)
            if seen is not None:
                seen[text] = item
            out.append(item)
    return out


def over_limits(wire: Mapping[str, Any], position: int, limits: UpstreamLimits) -> str:
    """Why a listed tool (wire spelling, the ``position``-th of its listing, from 1) is over
    the upstream's limits (``UpstreamLimits``), or ""."""
    if position > limits.max_tools:
        return (
            f"it is tool number {position} of the listing, over limits.max_tools "
            f"({limits.max_tools}); only the first {limits.max_tools} are considered"
        )
    if len(str(wire.get("name", ""))) > _SHOWN_NAME:
        return f"its name is longer than {_SHOWN_NAME} characters"
    for field in ("description", "title"):
        text = wire.get(field)
        if isinstance(text, str) and len(text.encode("utf-8", "replace")) > (
            limits.max_description_bytes
        ):
            return (
                f"its {field} is over limits.max_description_bytes "
                f"({limits.max_description_bytes} bytes)"
            )
    known = ("name", "description", "title", "inputSchema", "outputSchema")
    rest = {k: v for k, v in wire.items() if k not in known}
    for label, value in (
        ("input schema", wire.get("inputSchema")),
        ("output schema", wire.get("outputSchema")),
        ("annotations, _meta and other fields", rest or None),
    ):
        if value is not None and _size(value) > limits.max_schema_bytes:
            return f"its {label} is over limits.max_schema_bytes ({limits.max_schema_bytes} bytes)"
    return ""


def header_problem(wire: Mapping[str, Any]) -> str:
    """Why a listed tool's ``inputSchema`` has ``x-mcp-header`` annotations MCP clients
    refuse, or "". A 2026-07-28 client session (SharedOS's own, listing the upstream, as
    well as the harness's, listing the bridge) drops such a tool without a word; taken
    out here, before the session sees it, it is refused by name like any other."""
    problem = find_invalid_x_mcp_header(wire.get("inputSchema"))
    if problem is None:
        return ""
    return (
        f"its inputSchema has an x-mcp-header annotation MCP clients refuse ({problem}); "
        "a 2026-07-28 client drops the whole tool"
    )


def published_name(config: UpstreamConfig, raw_name: str) -> str:
    """``NAMESPACE.TOOL``: the canonical SharedOS id of an upstream tool."""
    return f"{config.namespace}.{raw_name}"


def build_definition(
    config: UpstreamConfig,
    raw: RawTool,
    handler: Callable[..., Any],
    credentials: Mapping[str, SecretStr],
    scrubber: Redactor | None = None,
    served_by: Mapping[str, str] | None = None,
) -> ToolDefinition | Refusal:
    """The namespaced definition of ``raw``, or a ``Refusal`` saying why it cannot be published.

    ``scrubber`` knows the upstream's credentials: a definition holding one is refused
    (see the module docstring) with the refusal naming where, never what. ``served_by``
    (the credential identity the definition's calls carry) is recorded with each call.
    """
    wire = raw.wire
    if raw.problem:
        return Refusal(config.id, raw.name, raw.problem)
    if scrubber is not None:
        found = scrubber.find(dict(wire))
        if found:
            shown = ", ".join(found[:10]) + (
                f" and {len(found) - 10} more" if len(found) > 10 else ""
            )
            return Refusal(
                config.id,
                scrubber.scrub(raw.name),
                f"its definition contains a credential of this upstream (in {shown}); held "
                "back: not published, not pinned",
            )
    if not isinstance(wire.get("name"), str) or not wire["name"]:
        return Refusal(
            config.id, str(wire.get("name")), "the upstream listed a tool without a name"
        )
    name = published_name(config, raw.name)
    if not is_valid_tool_name(name):
        return Refusal(
            config.id,
            raw.name,
            f"{name!r} is not a valid tool name after prefixing with the namespace "
            "(1-128 characters of [A-Za-z0-9_.-]); SharedOS does not rename tools",
        )
    description = wire.get("description")
    if not isinstance(description, str) or not description.strip():
        title = wire.get("title") if isinstance(wire.get("title"), str) else None
        description = (
            f"{title or raw.name} (brokered from upstream {config.id!r}, which gave no description)"
        )
    for field in ("inputSchema", "outputSchema"):
        problem = regex_problem(wire.get(field), field, ecma=field == "outputSchema")
        if problem is not None and "MCP clients cannot compile" in problem:
            return Refusal(
                config.id,
                raw.name,
                f"{problem}; JSON Schema regexes are ECMA-262's, and the TypeScript SDK's "
                "clients refuse the whole tools/list for one they cannot compile",
            )
        if problem is not None:
            return Refusal(
                config.id,
                raw.name,
                f"{problem}; SharedOS matches schema regexes with RE2 only, in linear time "
                "(rewrite it without lookaround or backreferences)",
            )
    annotations = wire.get("annotations")
    try:
        ann = (
            ToolAnnotations.model_validate(
                {k: annotations[k] for k in _ANNOTATION_KEYS if k in annotations}
            )
            if isinstance(annotations, Mapping)
            else None
        )
        return ToolDefinition(
            name=name,
            description=description,
            input_schema=wire.get("inputSchema", {"type": "object"}),
            output_schema=wire.get("outputSchema"),
            annotations=ann,
            metadata=ToolMetadata(namespace=config.namespace, source=config.source),
            handler=handler,
            credentials=dict(credentials),
            issuing_authority=config.source,
            namespace_settings={"upstream": config.id, "upstreamTool": raw.name},
            served_by=dict(served_by) if served_by else None,
        )
    except ToolDefinitionError as exc:
        return Refusal(config.id, raw.name, str(exc))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "definition"
        msg = str(first["msg"]).removeprefix("Value error, ")
        return Refusal(config.id, raw.name, f"{where}: {msg}")

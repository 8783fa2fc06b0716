"""The managed tools the official MCP conformance suite expects (test namespace).

Plus one helper of our own, ``test_wait``, which the bridge tests use to
cancel a call that is still running.

They are ordinary managed tools: ``ToolDefinition`` objects registered in a
``ToolRegistry``, listed only when a policy could permit them, and authorized
call by call through ``RuntimeHost.invoke_tool`` like any other (rules:
``tests/data/bridge/conformance.sos``). They exist so the suite's
``tools-call-*`` scenarios can run against a real bridge. Nothing registers
them unless a host asks for the ``conformance`` tool set.
"""

from __future__ import annotations

import json
from typing import Any, cast

import anyio

from sharedos.bridge.hooks import BridgePeer
from sharedos.catalog.definition import Handler, ToolDefinition, ToolMetadata
from sharedos.kernel.handlers import HandlerContext, HandlerResult

NAMESPACE = "conformance"

#: 1x1 red PNG.
RED_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
#: 44-byte header of an empty 8 kHz mono 16-bit WAV.
EMPTY_WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


async def _simple_text(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text("This is a simple text response for testing.")


async def _image(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult(
        content=[{"type": "image", "data": RED_PIXEL_PNG, "mimeType": "image/png"}]
    )


async def _audio(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult(content=[{"type": "audio", "data": EMPTY_WAV, "mimeType": "audio/wav"}])


async def _embedded(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult(
        content=[
            {
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content.",
                },
            }
        ]
    )


async def _mixed(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult(
        content=[
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": RED_PIXEL_PNG, "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": json.dumps({"test": "data", "value": 123}),
                },
            },
        ]
    )


async def _logging(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    for i, message in enumerate(
        ("Tool execution started", "Tool processing data", "Tool execution completed")
    ):
        if i:
            await anyio.sleep(0.05)
        if hctx.log is not None:
            await hctx.log("info", message)
    return HandlerResult.text("Tool with logging executed successfully")


async def _error(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    raise RuntimeError("This tool intentionally returns an error for testing")


async def _progress(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    for i, value in enumerate((0.0, 50.0, 100.0)):
        if i:
            await anyio.sleep(0.05)
        if hctx.progress is not None:
            await hctx.progress(value, 100.0, None)
    return HandlerResult.text("Tool with progress executed successfully")


def _peer(hctx: HandlerContext, capability: str) -> BridgePeer:
    peer = hctx.peer
    if peer is None or not peer.can_request:
        raise RuntimeError(f"this transport has no back channel for {capability} requests")
    if not peer.client_supports(capability):
        raise RuntimeError(f"the client does not support {capability}")
    return cast(BridgePeer, peer)


async def _sampling(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    peer = _peer(hctx, "sampling")
    result = await peer.create_message(str(args["prompt"]), max_tokens=100)
    content = result.get("content") or {}
    text = content.get("text", "") if isinstance(content, dict) else json.dumps(content)
    return HandlerResult.text(f"LLM response: {text}")


async def _elicitation(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    peer = _peer(hctx, "elicitation")
    result = await peer.elicit(
        str(args["message"]),
        {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        },
    )
    return HandlerResult.text(
        f"User response: action={result.get('action')}, content={result.get('content')}"
    )


async def _elicitation_defaults(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    peer = _peer(hctx, "elicitation")
    result = await peer.elicit(
        "Please review and update the form fields with defaults",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {
                    "type": "string",
                    "description": "User status",
                    "enum": ["active", "inactive", "pending"],
                    "default": "active",
                },
                "verified": {
                    "type": "boolean",
                    "description": "Verification status",
                    "default": True,
                },
            },
            "required": [],
        },
    )
    return HandlerResult.text(
        f"Elicitation completed: action={result.get('action')}, content={json.dumps(result.get('content'))}"
    )


async def _elicitation_enums(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    peer = _peer(hctx, "elicitation")
    result = await peer.elicit(
        "Please select options from the enum fields",
        {
            "type": "object",
            "properties": {
                "untitledSingle": {
                    "type": "string",
                    "description": "Select one option",
                    "enum": ["option1", "option2", "option3"],
                },
                "titledSingle": {
                    "type": "string",
                    "description": "Select one option with titles",
                    "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"},
                    ],
                },
                "legacyEnum": {
                    "type": "string",
                    "description": "Select one option (legacy)",
                    "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"],
                },
                "untitledMulti": {
                    "type": "array",
                    "description": "Select multiple options",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
                },
                "titledMulti": {
                    "type": "array",
                    "description": "Select multiple options with titles",
                    "minItems": 1,
                    "maxItems": 3,
                    "items": {
                        "anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"},
                        ]
                    },
                },
            },
            "required": [],
        },
    )
    return HandlerResult.text(
        f"Elicitation completed: action={result.get('action')}, content={json.dumps(result.get('content'))}"
    )


async def _wait(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    # Not a conformance-suite tool: the bridge tests use it to cancel a call in flight.
    if hctx.progress is not None:
        await hctx.progress(0.0, None, "waiting")
    await anyio.sleep(float(args.get("seconds", 1.0)))
    return HandlerResult.text("waited")


async def _json_schema(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text(f"Received: {json.dumps(args, sort_keys=True)}")


def _tool(
    name: str, description: str, handler: Handler, schema: dict[str, Any] | None = None
) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=description,
        input_schema=schema or _NO_ARGS,
        metadata=ToolMetadata(namespace=NAMESPACE, source="sharedos.testing.conformance_tools"),
        handler=handler,
    )


def conformance_tools() -> list[ToolDefinition]:
    """Fresh definitions of every tool the conformance suite's tools scenarios call."""
    return [
        _tool("test_simple_text", "Returns simple text content", _simple_text),
        _tool("test_image_content", "Returns a 1x1 PNG image", _image),
        _tool("test_audio_content", "Returns a short WAV audio clip", _audio),
        _tool("test_embedded_resource", "Returns an embedded text resource", _embedded),
        _tool("test_multiple_content_types", "Returns text, image and resource content", _mixed),
        _tool("test_tool_with_logging", "Sends three log notifications while running", _logging),
        _tool("test_error_handling", "Always fails (tests error reporting)", _error),
        _tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100", _progress),
        _tool(
            "test_sampling",
            "Asks the client's model to answer a prompt (sampling)",
            _sampling,
            {
                "type": "object",
                "properties": {"prompt": {"type": "string"}},
                "required": ["prompt"],
            },
        ),
        _tool(
            "test_elicitation",
            "Asks the user for a username and e-mail (elicitation)",
            _elicitation,
            {
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"],
            },
        ),
        _tool(
            "test_elicitation_sep1034_defaults",
            "Elicitation with default values (SEP-1034)",
            _elicitation_defaults,
        ),
        _tool(
            "test_elicitation_sep1330_enums",
            "Elicitation with every enum variant (SEP-1330)",
            _elicitation_enums,
        ),
        _tool(
            "test_wait",
            "Waits the given number of seconds (reports progress once at the start)",
            _wait,
            {
                "type": "object",
                "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 60}},
            },
        ),
        _tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            _json_schema,
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {
                    "address": {
                        "type": "object",
                        "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
                    }
                },
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
                "additionalProperties": False,
            },
        ),
    ]


CONFORMANCE_TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in conformance_tools())

"""ToolDefinition: names, descriptions, schemas, and what crosses the boundary."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from sharedos.catalog import (
    CATALOG_HASH_FIELDS,
    PublishedToolDefinition,
    ToolDefinition,
    ToolRegistry,
)


def make(name: str = "files.read", **kw: object) -> ToolDefinition:
    kw.setdefault("description", "Read a file.")
    kw.setdefault("inputSchema", {"type": "object", "properties": {"path": {"type": "string"}}})
    return ToolDefinition(name=name, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad", ["", "has space", "files/read", "ns:tool", "ü", "a" * 129, "tool\n", "files.read\x00"]
)
def test_registration_rejects_names_outside_toolnameschema(bad: str) -> None:
    with pytest.raises(ValidationError) as err:
        make(bad)
    assert "invalid tool name" in str(err.value)
    assert "[A-Za-z0-9_.-]" in str(err.value)


@pytest.mark.parametrize("good", ["files.read", "a", "A-b_c.D9", "x" * 128, "github.search"])
def test_names_in_toolnameschema_register(good: str) -> None:
    reg = ToolRegistry()
    reg.register(make(good))
    assert reg.get(good) is not None


def test_non_string_name_is_rejected_clearly() -> None:
    with pytest.raises(ValidationError, match="tool name must be a string"):
        ToolDefinition(name=42, description="d", inputSchema={"type": "object"})  # type: ignore[arg-type]


@pytest.mark.parametrize("desc", ["", "   ", "\n\t"])
def test_empty_description_is_refused(desc: str) -> None:
    with pytest.raises(ValidationError, match="non-empty description"):
        make(description=desc)


def test_schema_with_properties_but_no_type_is_normalised() -> None:
    tool = make(inputSchema={"properties": {"path": {"type": "string"}}})
    assert tool.input_schema["type"] == "object"
    assert tool.published.wire()["inputSchema"]["type"] == "object"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({}, 'no root "type"'),
        ({"type": "string"}, 'root type must be "object"'),
        ({"type": ["object", "null"]}, 'root type must be "object"'),
        ([], "must be a JSON object schema"),
        ("object", "must be a JSON object schema"),
        ({"type": "object", "properties": {"n": {"type": "nonsense"}}}, "not a valid JSON Schema"),
    ],
)
def test_schemas_the_sdk_would_reject_are_refused(schema: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        make(inputSchema=schema)


def _prop(header: object, kind: str = "string") -> dict[str, object]:
    return {"type": kind, "x-mcp-header": header}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"path": _prop("bad header")}},
        {"type": "object", "properties": {"a": _prop("P"), "b": _prop("p")}},
        {"type": "object", "properties": {"path": _prop("Path", "object")}},
        {"type": "object", "properties": {"path": _prop(7)}},
        {"type": "object", "x-mcp-header": "Root"},
        {"type": "object", "properties": {"a": {"anyOf": [_prop("Deep")]}}},
    ],
)
def test_an_input_schema_a_2026_client_drops_the_tool_for_is_refused(
    schema: dict[str, object],
) -> None:
    """MCP 2026-07-28 clients drop a listed tool whose x-mcp-header annotations are invalid,
    silently: published, it would be in the catalogue and its hash but never reach the model."""
    from mcp.shared.inbound import find_invalid_x_mcp_header

    assert find_invalid_x_mcp_header(schema) is not None
    with pytest.raises(ValidationError, match="x-mcp-header annotation MCP clients refuse"):
        make(inputSchema=schema)


def test_valid_x_mcp_headers_register() -> None:
    schema = {"type": "object", "properties": {"path": _prop("Path"), "n": _prop("N", "integer")}}
    assert make(inputSchema=schema).published.input_schema == schema
    # an outputSchema has no headers: the annotation means nothing there
    assert make(outputSchema={"type": "object", "x-mcp-header": "x y"}).output_schema


def test_output_schema_must_be_an_object_schema_too() -> None:
    with pytest.raises(ValidationError, match='outputSchema root type must be "object"'):
        make(outputSchema={"type": "array"})
    assert make(outputSchema=None).published.wire().get("outputSchema") is None


@pytest.mark.parametrize("field", ["inputSchema", "outputSchema"])
@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_property_schema_is_refused(field: str, value: bool) -> None:
    """``"properties": {"x": true}`` is valid JSON Schema, but MCP's TypeScript SDK (the
    harnesses' clients) holds each root property to an object and refused the whole
    tools/list for it: the harness saw no tool of the turn, not only this one."""
    schema = {"type": "object", "properties": {"path": {"type": "string"}, "x": value}}
    with pytest.raises(ValidationError, match=f"{field} property 'x' is not a schema object"):
        make(**{field: schema})
    nested = {"type": "object", "properties": {"o": {"type": "object", "properties": {"x": value}}}}
    assert make(**{field: nested})  # deeper down the TypeScript SDK does not look


@pytest.mark.parametrize(
    "ref",
    ["#/$defs/nope", "#nope", "http://127.0.0.1:9/schema.json", "urn:other", "other.json"],
)
def test_an_output_schema_whose_ref_does_not_resolve_is_refused(ref: str) -> None:
    """Nothing is fetched, so such a $ref fails every result; and MCP's TypeScript SDK (the
    harnesses' clients) cannot compile the schema and refused the bridge's whole tools/list
    for it: the harness saw no tool of the turn at all."""
    schema = {"type": "object", "properties": {"v": {"$ref": ref}}}
    with pytest.raises(ValidationError, match="outputSchema is not usable: its \\$ref"):
        make(outputSchema=schema)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"properties": {"v": {"enum": []}}}, "an empty enum"),
        ({"properties": {"v": {"$id": "a.json"}, "w": {"$id": "a.json"}}}, "the $id"),
        ({"$defs": {"a": {"$anchor": "x"}, "b": {"$anchor": "x"}}}, "the anchor 'x'"),
        ({"$id": "urn:x"}, "a urn: without a namespace"),
    ],
)
def test_an_output_schema_ajv_cannot_compile_is_refused(
    schema: dict[str, object], message: str
) -> None:
    """Valid JSON Schema that MCP's TypeScript SDK (Ajv) cannot compile: it refused the
    bridge's whole tools/list for it, and the harness saw no tool of the turn at all."""
    with pytest.raises(ValidationError, match="outputSchema is not usable") as err:
        make(outputSchema={"type": "object", **schema})
    assert message in str(err.value)
    assert make(inputSchema={"type": "object", **schema})  # clients do not compile those


@pytest.mark.parametrize(
    "schema",
    [
        {"$defs": {"s": {"type": "string"}}, "properties": {"v": {"$ref": "#/$defs/s"}}},
        {"$defs": {"s": {"$anchor": "str"}}, "properties": {"v": {"$ref": "#str"}}},
        {
            "definitions": {"s": {"type": "string"}},
            "properties": {"v": {"$ref": "#/definitions/s"}},
        },
        {"properties": {"v": {"$ref": "#"}}},
        {
            "$id": "urn:x:root",
            "$defs": {"s": {}},
            "properties": {"v": {"$ref": "urn:x:root#/$defs/s"}},
        },
        {"properties": {"v": {"const": {"$ref": "#/nowhere"}}}},  # data, not a reference
        {"$id": "urn:example:root", "properties": {"v": {"$id": "v.json"}}},
        {"$defs": {"a": {"$id": "a.json", "$anchor": "x"}, "b": {"$id": "b.json", "$anchor": "x"}}},
    ],
)
def test_an_output_schema_whose_refs_resolve_within_it_registers(schema: dict[str, object]) -> None:
    assert make(outputSchema={"type": "object", **schema}).output_schema


def test_schema_is_copied_at_registration() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tool = make(inputSchema=schema)
    before = tool.published.wire()
    schema["properties"]["evil"] = {"type": "string"}
    assert tool.published.wire() == before


def test_authority_side_never_crosses() -> None:
    tool = make(
        requirement={"action": "read"},
        grants=("files:read",),
        issuing_authority="acme-idp",
        namespace_settings={"endpoint": "https://internal"},
        credentials={"token": SecretStr("s3cr3t-token")},
        handler=lambda args, hctx: None,
        secret_arguments=frozenset({"path"}),
    )
    wire = tool.published.wire()
    assert set(wire) <= set(CATALOG_HASH_FIELDS)
    text = json.dumps(wire)
    for leaked in ("s3cr3t-token", "acme-idp", "files:read", "internal", "requirement", "handler"):
        assert leaked not in text


def test_metadata_namespace_defaults_to_the_name_prefix() -> None:
    assert make("github.search").published.wire()["metadata"] == {
        "namespace": "github",
        "source": "sharedos",
    }


_KEY = st.text(alphabet=string.ascii_letters + "_$", min_size=1, max_size=20)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEY, inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(
    extra=st.dictionaries(_KEY, _JSON, min_size=1, max_size=4),
    meta_extra=st.dictionaries(_KEY, _JSON, max_size=2),
)
def test_projection_cannot_emit_a_key_outside_catalog_hash_fields(
    extra: dict[str, object], meta_extra: dict[str, object]
) -> None:
    """Smuggle keys at the top level, in metadata and in annotations: none reaches the wire."""
    known = set(ToolDefinition.model_fields) | {"inputSchema", "outputSchema"}
    smuggled = {k: v for k, v in extra.items() if k not in known}
    base = {
        "name": "files.read",
        "description": "Read",
        "inputSchema": {"type": "object"},
        "metadata": {"namespace": "files", "source": "x", **meta_extra},
        "annotations": {"readOnlyHint": True, **{k: v for k, v in extra.items() if k != "title"}},
    }
    try:
        tool = ToolDefinition.model_validate({**base, **smuggled})
    except ValidationError:
        tool = None  # refused at registration: nothing can be published
    if tool is not None:
        wire = tool.published.wire()
        assert set(wire) <= set(CATALOG_HASH_FIELDS)
        assert set(wire["metadata"]) == {"namespace", "source"}
    # Even building the projection directly with extras cannot add keys.
    try:
        pub = PublishedToolDefinition.model_validate(
            {
                "name": "a",
                "description": "d",
                "inputSchema": {"type": "object"},
                "metadata": {"namespace": "a"},
                **smuggled,
            }
        )
    except ValidationError:
        return
    assert set(pub.wire()) <= set(CATALOG_HASH_FIELDS)
    constructed = PublishedToolDefinition.model_construct(
        name="a",
        description="d",
        input_schema={"type": "object"},
        metadata=pub.metadata,
        **smuggled,
    )
    assert set(constructed.wire()) <= set(CATALOG_HASH_FIELDS)


def test_extra_keys_are_refused_with_their_name() -> None:
    with pytest.raises(ValidationError, match="executionId"):
        ToolDefinition.model_validate(
            {"name": "a", "description": "d", "inputSchema": {"type": "object"}, "executionId": "x"}
        )


@pytest.mark.parametrize("value", [2**60, float("nan"), float("inf")])
def test_a_schema_rfc8785_cannot_encode_is_refused_at_registration(value: float) -> None:
    with pytest.raises(ValidationError):
        make(
            inputSchema={
                "type": "object",
                "properties": {"n": {"type": "number", "default": value}},
            }
        )


@pytest.mark.parametrize("levels", [63, 100, 5000])
@pytest.mark.parametrize("field", ["inputSchema", "outputSchema"])
def test_a_schema_nested_too_deep_is_refused_never_a_recursion_error(
    field: str, levels: int
) -> None:
    """Every reader of a schema (copy, meta-schema check, RFC 8785, validators) recurses;
    past Python's limit that was a RecursionError out of ToolDefinition, not a refusal."""
    nested: dict[str, object] = {"type": "string"}
    for _ in range(levels):
        nested = {"items": nested}
    with pytest.raises(ValidationError, match="nests deeper than 64 levels"):
        make(**{field: {"type": "object", "properties": {"deep": nested}}})


def test_a_schema_nested_64_levels_registers() -> None:
    nested: dict[str, object] = {"type": "string"}
    for _ in range(61):  # root object, "properties", "deep", then 61 levels: 64 in all
        nested = {"items": nested}
    schema = {"type": "object", "properties": {"deep": nested}}
    assert make(inputSchema=schema, outputSchema=schema).published.input_schema == schema


def test_a_copy_with_other_fields_publishes_its_own() -> None:
    """``model_copy(update=...)`` kept the original's cached ``published`` surface: a
    renamed, redescribed copy registered and listed under the old name and description
    (and a new input schema was neither normalized nor checked)."""

    tool = ToolDefinition(
        name="files.read", description="read a file", input_schema={"type": "object"}
    )
    copy = tool.model_copy(update={"name": "files.peek", "description": "peek at a file"})
    assert (copy.published.name, copy.published.description) == ("files.peek", "peek at a file")
    assert [t.published.name for t in ToolRegistry([copy]).tools()] == ["files.peek"]
    assert tool.published.name == "files.read"
    with pytest.raises(ValidationError):
        tool.model_copy(update={"description": "  "})
    kept = tool.model_copy(update={"secret_arguments": frozenset({"token"})})
    assert kept.published == tool.published and kept.secret_arguments == {"token"}

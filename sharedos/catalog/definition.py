"""Tool definitions: the authority side SharedOS keeps and the projection that crosses.

``ToolDefinition`` is what a host registers. It carries the operation surface
(name, description, schemas, annotations, metadata) *and* the authority side
(requirement, grants, issuing authority, namespace settings, credentials,
handler, secret argument names). ``PublishedToolDefinition`` is the projection
a harness receives; it is built field by field from ``CATALOG_HASH_FIELDS`` and
so cannot emit any other key (ADR 0014, "What crosses the boundary").

Schemas are normalised or refused at registration, because one tool whose
``inputSchema`` lacks ``"type": "object"`` makes the MCP SDK reject the whole
``tools/list`` response (measured on mcp 2.3.0).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

import rfc8785
from jsonschema.protocols import Validator
from mcp.shared.inbound import find_invalid_x_mcp_header
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from referencing import Registry

from sharedos.catalog.fastcheck import FastCheck, compile_fast_check
from sharedos.catalog.schemacheck import client_problem, schema_problem
from sharedos.catalog.schemaregex import (
    ValidationTooCostly,
    best_error,
    dialect_problem,
    dialect_validator,
    names_other_dialect,
    schema_validator,
)
from sharedos.copies import ValidatedCopies
from sharedos.errors import CatalogError
from sharedos.jsonshape import nests_deeper_than
from sharedos.names import ToolNameSchema, is_valid_tool_name, validate_tool_name

#: The only keys a published tool may carry, in wire spelling. They are exactly
#: the fields that take part in ``catalogHash``. Fixed: changing it changes
#: every catalogue hash, so it is an API change.
CATALOG_HASH_FIELDS: tuple[str, ...] = (
    "name",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "metadata",
)


class ToolDefinitionError(CatalogError, ValueError):
    """A tool definition that cannot be registered (bad schema, empty description...)."""


class ToolAnnotations(BaseModel):
    """MCP tool annotations (hints only; never read by an authorization decision)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    title: str | None = None
    read_only_hint: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("readOnlyHint", "read_only_hint"),
        serialization_alias="readOnlyHint",
    )
    destructive_hint: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("destructiveHint", "destructive_hint"),
        serialization_alias="destructiveHint",
    )
    idempotent_hint: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("idempotentHint", "idempotent_hint"),
        serialization_alias="idempotentHint",
    )
    open_world_hint: bool | None = Field(
        default=None,
        validation_alias=AliasChoices("openWorldHint", "open_world_hint"),
        serialization_alias="openWorldHint",
    )

    def wire(self) -> dict[str, Any]:
        """Wire spelling, unset hints omitted."""
        return self.model_dump(by_alias=True, exclude_none=True)


class ToolMetadata(BaseModel):
    """Where a tool comes from: its namespace (``github`` in ``github.search``) and source."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str = Field(min_length=1, max_length=128)
    source: str = Field(default="sharedos", min_length=1, max_length=256)

    def wire(self) -> dict[str, Any]:
        """Wire spelling."""
        return {"namespace": self.namespace, "source": self.source}


#: how deep a tool's schema may nest (JSON objects and arrays, the root is level 1). The
#: recursive readers of a schema (jsonschema's meta-schema check takes about 8 Python frames
#: a level) then stay well inside Python's recursion limit of 1,000 frames, called from
#: however deep a stack; real tool schemas nest a dozen levels or so
MAX_SCHEMA_DEPTH = 64


def normalize_object_schema(schema: Any, *, field: str, tool: str) -> dict[str, Any]:
    """Return a deep copy of ``schema`` with a root ``"type": "object"``, or raise.

    A schema without ``type`` but with ``properties`` is normalised (it can
    only have meant an object); anything else that is not a JSON object
    schema is refused, because the MCP SDK's result sieve would reject the
    whole ``tools/list`` for it. The schema must also be a valid JSON Schema
    (draft 2020-12) so that argument validation cannot fail at call time.
    """
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(
            f"tool {tool!r}: {field} must be a JSON object schema (a mapping), "
            f"got {type(schema).__name__}"
        )
    if nests_deeper_than(schema, MAX_SCHEMA_DEPTH):
        # before anything recursive reads it: the copy, the meta-schema check (about 8
        # Python frames a level), RFC 8785, the validators; past Python's recursion limit
        # they raise RecursionError, which no caller takes for a refusal
        raise ToolDefinitionError(
            f"tool {tool!r}: {field} nests deeper than {MAX_SCHEMA_DEPTH} levels of JSON "
            "objects and arrays"
        )
    out = copy.deepcopy(dict(schema))
    if "type" not in out:
        if "properties" in out:
            out["type"] = "object"
        else:
            raise ToolDefinitionError(
                f'tool {tool!r}: {field} has no root "type"; MCP requires '
                '{"type": "object", ...} (use {"type": "object"} for a tool without arguments)'
            )
    if out["type"] != "object":
        raise ToolDefinitionError(
            f'tool {tool!r}: {field} root type must be "object", got {out["type"]!r}'
        )
    properties = out.get("properties")
    if isinstance(properties, Mapping):
        # JSON Schema allows a boolean subschema ("x": true), but MCP's TypeScript SDK (the
        # harnesses' clients) holds each root property to an object and refuses the whole
        # tools/list for one that is not: the harness would see no tool of the turn at all
        boolean = next((k for k, v in properties.items() if not isinstance(v, Mapping)), None)
        if boolean is not None:
            shown = boolean if len(boolean) <= 64 else boolean[:61] + "..."
            raise ToolDefinitionError(
                f"tool {tool!r}: {field} property {shown!r} is not a schema object (a boolean "
                "schema?); MCP clients refuse the whole tools/list for it (write {} for true, "
                '{"not": {}} for false)'
            )
    try:
        problem = schema_problem(out)  # remembered by the schema's content hash
    except RecursionError:  # a caller's stack already deep: still a refusal, never a crash
        problem = "it is nested too deeply to be checked"
    if problem is not None:
        raise ToolDefinitionError(f"tool {tool!r}: {field} is not a valid JSON Schema: {problem}")
    if field == "outputSchema":
        unusable = client_problem(out)
        if unusable is not None:
            raise ToolDefinitionError(
                f"tool {tool!r}: {field} is not usable: {unusable}; MCP clients cannot "
                "compile it, and refuse the whole tools/list for it"
            )
    if field == "inputSchema":
        header = find_invalid_x_mcp_header(out)
        if header is not None:
            # MCP 2026-07-28 clients MUST drop such a tool from the listing, silently: it
            # would be in the catalogue (and its hash) but never reach the model
            raise ToolDefinitionError(
                f"tool {tool!r}: {field} has an x-mcp-header annotation MCP clients refuse "
                f"({header}); a 2026-07-28 client drops the whole tool"
            )
    return out


#: resolves only the JSON Schema specifications themselves: never a remote reference
_NO_RETRIEVAL: Registry[Any] = Registry()


class PublishedToolDefinition(BaseModel):
    """The operation surface a harness receives: exactly ``CATALOG_HASH_FIELDS``.

    Built only through ``ToolDefinition.published``; ``wire()`` constructs its
    dict key by key from ``CATALOG_HASH_FIELDS``, so no other key can appear.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: ToolNameSchema
    description: str
    input_schema: dict[str, Any] = Field(
        validation_alias=AliasChoices("inputSchema", "input_schema"),
        serialization_alias="inputSchema",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None,
        validation_alias=AliasChoices("outputSchema", "output_schema"),
        serialization_alias="outputSchema",
    )
    annotations: ToolAnnotations | None = None
    metadata: ToolMetadata

    def model_post_init(self, __context: Any) -> None:
        # Canonicalize eagerly so an unencodable schema fails at registration,
        # and once: the catalogue hash of 1,000 tools is then a join and one SHA-256.
        _ = self.canonical_bytes

    def wire(self) -> dict[str, Any]:
        """The published tool in wire spelling; unset optional fields are omitted."""
        values: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": self.annotations.wire() if self.annotations is not None else None,
            "metadata": self.metadata.wire(),
        }
        return {key: values[key] for key in CATALOG_HASH_FIELDS if values[key] is not None}

    @cached_property
    def canonical_bytes(self) -> bytes:
        """RFC 8785 canonical JSON of ``wire()`` (computed once; a plain attribute read after)."""
        try:
            return rfc8785.dumps(self.wire())
        except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
            raise ToolDefinitionError(
                f"tool {self.name!r} cannot be canonicalized (RFC 8785): {exc}"
            ) from None


#: A handler: ``(args, HandlerContext) -> HandlerResult`` (async, or sync run in a thread).
Handler = Callable[..., Any]


class ToolDefinition(ValidatedCopies):
    """A registered tool: its published surface plus the authority side that never crosses.

    Python attributes are snake_case; the wire spellings (``inputSchema``,
    ``outputSchema``) are accepted as aliases. Unknown keys are refused.
    ``model_copy(update=...)`` is validated and publishes the copy's own fields
    (``ValidatedCopies``).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, arbitrary_types_allowed=True
    )

    # -- published ------------------------------------------------------------
    name: ToolNameSchema
    description: str
    input_schema: dict[str, Any] = Field(
        validation_alias=AliasChoices("inputSchema", "input_schema"),
        serialization_alias="inputSchema",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None,
        validation_alias=AliasChoices("outputSchema", "output_schema"),
        serialization_alias="outputSchema",
    )
    annotations: ToolAnnotations | None = None
    metadata: ToolMetadata | None = None
    # -- authority side: never published, never hashed, never recorded ---------
    requirement: Any = None
    grants: tuple[str, ...] = ()
    issuing_authority: str | None = None
    namespace_settings: dict[str, Any] = Field(default_factory=dict)
    credentials: dict[str, SecretStr] = Field(default_factory=dict)
    handler: Handler | None = None
    #: top-level argument names whose values are replaced by "[redacted]" in evidence
    secret_arguments: frozenset[str] = frozenset()
    #: who serves a call of this tool, recorded with every attempt under
    #: ``diagnostics.servedBy`` (a brokered upstream's credential identity:
    #: ``{"upstream": "docs", "credential": "principal:alice", "via": "oauth"}``); names
    #: only, never a value; read by no decision
    served_by: dict[str, str] | None = None

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> Any:
        # A clearer message than the bare pattern mismatch; the schema still applies after.
        validate_tool_name(value)
        return value

    @field_validator("description")
    @classmethod
    def _description(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                "a tool needs a non-empty description (harness models choose tools by it)"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _schemas(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        name = data.get("name", "?")
        for py, wire in (("input_schema", "inputSchema"), ("output_schema", "outputSchema")):
            key = wire if wire in data else py
            if key not in data:
                continue
            if data[key] is None and py == "output_schema":
                continue
            data[key] = normalize_object_schema(data[key], field=wire, tool=str(name))
        if data.get("metadata") is None and is_valid_tool_name(name):
            data["metadata"] = ToolMetadata(namespace=default_namespace(name))
        return data

    def model_post_init(self, __context: Any) -> None:
        # Build (and canonicalize) the projection now, so a tool that could not
        # be published or hashed is refused at registration, not at tools/list.
        _ = self.published

    @cached_property
    def published(self) -> PublishedToolDefinition:
        """The projection that crosses the boundary (``CATALOG_HASH_FIELDS`` only)."""
        assert self.metadata is not None  # filled by the validator
        return PublishedToolDefinition(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=self.annotations,
            metadata=self.metadata,
        )

    @cached_property
    def input_validator(self) -> Validator:
        """A compiled validator for ``input_schema`` (built once per definition).

        Its registry retrieves nothing: without one, jsonschema fetches a remote
        ``$ref`` (``http://``, ``file://``) with urllib, synchronously and without a
        timeout, so a schema an upstream listed would make the host open any URL it
        names while a call's arguments are checked. An unresolvable ``$ref`` fails
        the validation (``invalid_arguments``) instead.
        """
        return schema_validator(self.input_schema, _NO_RETRIEVAL)

    @cached_property
    def input_fast_check(self) -> FastCheck | None:
        """An accept-only shortcut for ``input_validator`` (simple flat schemas), or None.

        True means the arguments certainly satisfy ``input_schema``; False means
        "ask ``input_validator``" (see ``sharedos.catalog.fastcheck``).
        """
        return compile_fast_check(self.input_schema)

    def output_problem(self, structured: Any) -> str | None:
        """Why ``structured`` does not satisfy ``output_schema``, or None (also when it has none).

        The accept-only shortcut (``compile_fast_check``) answers the common flat
        schema; anything else goes to a validator built once per definition, whose
        registry retrieves nothing remote. The schema is read as the harness's client
        reads it: in the dialect its ``$schema`` names (Draft 2020-12 when none); one
        that is no valid schema of that dialect satisfies nothing (the MCP SDK client
        refuses every result of such a tool).
        """
        schema = self.output_schema
        if schema is None:
            return None
        if structured is None:
            return "it returned no structuredContent"
        fast = self.output_fast_check
        if fast is not None and fast(structured):
            return None
        invalid = self.output_dialect_problem
        if invalid is not None:
            return f"its outputSchema cannot be checked: {invalid}"
        try:
            error = best_error(self.output_validator, structured)
        except ValidationTooCostly as exc:
            return f"its structuredContent could not be validated: {exc}"
        except Exception as exc:  # an unresolvable $ref, a pathological schema
            return f"its structuredContent could not be validated ({type(exc).__name__})"
        return None if error is None else f"its structuredContent does not: {error.message}"

    @cached_property
    def output_validator(self) -> Validator:
        """A compiled validator for ``output_schema`` (``{}`` when there is none), retrieving
        nothing remote (see ``input_validator``)."""
        return dialect_validator(self.output_schema or {}, _NO_RETRIEVAL)

    @cached_property
    def output_dialect_problem(self) -> str | None:
        """Why ``output_schema`` is no valid schema of the dialect its ``$schema`` names."""
        return dialect_problem(self.output_schema) if self.output_schema else None

    @cached_property
    def output_fast_check(self) -> FastCheck | None:
        """An accept-only shortcut for ``output_validator`` (simple flat Draft 2020-12
        schemas), or None (also for a schema naming another dialect)."""
        schema = self.output_schema
        if not schema or names_other_dialect(schema):
            return None
        return compile_fast_check(schema)

    @cached_property
    def handler_is_async(self) -> bool:
        """True when ``handler`` is a coroutine function or an object with an async ``__call__``."""
        handler = self.handler
        return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - async callable objects
        )

    @property
    def namespace(self) -> str:
        """The tool's namespace (``files`` for ``files.read``)."""
        assert self.metadata is not None
        return self.metadata.namespace


def default_namespace(name: str) -> str:
    """The namespace a tool name implies: the part before the first dot, or the name itself."""
    return name.split(".", 1)[0] or name

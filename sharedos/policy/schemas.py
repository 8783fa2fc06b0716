"""What policies are checked against: the context schema and the tool catalogue.

``sharedos-policy check --context-schema FILE`` and ``--catalog FILE`` are read
here into ``AttrSchema`` trees (JSON Schema or a ``name -> type`` shorthand)
and ``CatalogTool`` records; the lints (``lints``) use them. Without a context
schema the schema is the context the kernel really passes,
``AccessContext.policy_input`` (``ACCESS_CONTEXT_SCHEMA``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from sharedos.errors import PolicyLanguageError
from sharedos.policy.clock import WEEKDAYS


@dataclass(frozen=True)
class AttrSchema:
    """What is known about one attribute: its JSON types and, for objects, its members.

    ``members is None`` means the object is open (any member may exist).
    ``types`` empty means any type.
    """

    types: frozenset[str] = frozenset()
    members: Mapping[str, AttrSchema] | None = None
    #: the only values allowed (JSON Schema ``enum`` or ``const``); None: any value
    values: tuple[Any, ...] | None = None
    #: inclusive bounds of a number (JSON Schema ``minimum``/``maximum``); None: unbounded
    minimum: int | float | None = None
    maximum: int | float | None = None
    #: what every element of an array is (JSON Schema ``items``); None: anything
    items: AttrSchema | None = None
    #: a regular expression every string value matches (JSON Schema ``pattern``)
    pattern: str | None = None
    #: a string value is a real calendar date (``date``) or time (``date-time``), as the
    #: clock writes them: ``context.now.date`` is never ``2026-02-29``. Only for values
    #: SharedOS makes (a schema's ``format`` is an annotation nothing validates)
    calendar: str | None = None

    def allows(self, kind: str) -> bool:
        """True when a value of JSON type ``kind`` is allowed here."""
        if not self.types:
            return True
        if kind == "number":
            return bool(self.types & {"number", "integer"})
        return kind in self.types

    def never(self, value: Any) -> str | None:
        """Why an attribute of this schema never equals ``value``: a literal a
        condition compares it with (None when some allowed value equals it)."""
        kind = value_kind(value)
        if not self.allows(kind):
            return f"is declared {'/'.join(sorted(self.types))}"
        if self.values is not None:
            from sharedos.policy.functions import values_equal

            if not any(value_kind(v) == kind and values_equal(v, value) for v in self.values):
                shown = ", ".join(json.dumps(v, ensure_ascii=False) for v in self.values)
                return f"is one of {shown}"
        if kind == "number" and not self.within(value, value):
            return f"is {self.bounds()}"
        if kind == "string" and self.pattern is not None:
            try:
                matched = re.search(self.pattern, value) is not None
            except re.error:  # not a Python regular expression: nothing is known
                matched = True
            if not matched:
                return f"matches {self.pattern}"
        if kind == "string" and self.calendar is not None and not on_calendar(self.calendar, value):
            return f"is a {'day' if self.calendar == 'date' else 'time'} of the calendar"
        return None

    def within(self, low: int | float, high: int | float) -> bool:
        """True when some number in ``[low, high]`` is inside this schema's bounds."""
        return (self.minimum is None or high >= self.minimum) and (
            self.maximum is None or low <= self.maximum
        )

    def bounds(self) -> str:
        """The bounds in words: ``between 0 and 23``, ``at least 1``, ``at most 9``."""
        if self.minimum is not None and self.maximum is not None:
            return f"between {self.minimum} and {self.maximum}"
        if self.minimum is not None:
            return f"at least {self.minimum}"
        return f"at most {self.maximum}"


def value_kind(value: Any) -> str:
    """The JSON type of a value: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


def on_calendar(kind: str, value: str) -> bool:
    """True when ``value`` is a day (``date``) or a time (``date-time``) that exists:
    ``2024-02-29`` is one, ``2026-02-29`` and ``2026-04-31`` are not."""
    try:
        if kind == "date":
            date.fromisoformat(value)
        else:
            datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


_OPEN = AttrSchema()

#: ``AccessContext.policy_input``: the context the kernel really passes.
ACCESS_CONTEXT_SCHEMA = AttrSchema(
    frozenset({"object"}),
    {
        "principal": AttrSchema(frozenset({"string"})),
        "tenant": AttrSchema(frozenset({"string"})),
        "roles": AttrSchema(frozenset({"array"}), items=AttrSchema(frozenset({"string"}))),
        "attributes": AttrSchema(frozenset({"object"}), None),
        "turn_id": AttrSchema(frozenset({"string"})),
        # the time of the call, supplied by the host (sharedos.policy.clock)
        "now": AttrSchema(
            frozenset({"object"}),
            {
                "timestamp": AttrSchema(frozenset({"integer", "number"})),
                "iso": AttrSchema(
                    frozenset({"string"}),
                    pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[+-][0-9]{2}:[0-9]{2}(:[0-9]{2})?$",
                    calendar="date-time",
                ),
                "zone": AttrSchema(frozenset({"string"})),
                "date": AttrSchema(
                    frozenset({"string"}), pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", calendar="date"
                ),
                "year": AttrSchema(frozenset({"integer", "number"}), minimum=1, maximum=9999),
                "month": AttrSchema(frozenset({"integer", "number"}), minimum=1, maximum=12),
                "day": AttrSchema(frozenset({"integer", "number"}), minimum=1, maximum=31),
                "hour": AttrSchema(frozenset({"integer", "number"}), minimum=0, maximum=23),
                "minute": AttrSchema(frozenset({"integer", "number"}), minimum=0, maximum=59),
                "weekday": AttrSchema(frozenset({"string"}), values=WEEKDAYS),
            },
        ),
    },
)

_SHORTHAND_TYPES = {
    "string": "string",
    "str": "string",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "object": "object",
    "null": "null",
    "any": "",
}


def lookup(schema: AttrSchema, path: Sequence[str]) -> tuple[str, AttrSchema | None, int]:
    """Walk ``path``: ("ok", schema, n), ("unknown", parent, i) or ("not-object", parent, i)."""
    node = schema
    for i, name in enumerate(path):
        if node.types and "object" not in node.types:
            return "not-object", node, i
        if node.members is None:
            return "ok", None, i  # open object: nothing more is known
        child = node.members.get(name)
        if child is None:
            return "unknown", node, i
        node = child
    return "ok", node, len(path)


class SchemaError(PolicyLanguageError, ValueError):
    """A context schema or catalogue file that cannot be used."""


def schema_from_json(data: Any, where: str = "schema") -> AttrSchema:
    """Read a context schema: a JSON Schema object, or the shorthand ``{"name": "type" | {...}}``.

    In JSON Schema form, an object's listed ``properties`` are the known
    attributes; it is open only when ``additionalProperties`` is ``true`` or a
    schema, or when it lists no properties at all.
    """
    if isinstance(data, Mapping) and ("properties" in data or "type" in data or "$schema" in data):
        return _with_now(_from_json_schema(data, where))
    if isinstance(data, Mapping):
        return _with_now(
            AttrSchema(
                frozenset({"object"}),
                {str(k): _from_shorthand(v, f"{where}.{k}") for k, v in data.items()},
            )
        )
    raise SchemaError(f"{where}: expected a JSON object (a JSON Schema or a name -> type mapping)")


def _with_now(schema: AttrSchema) -> AttrSchema:
    """``schema`` knowing ``context.now``, which the kernel adds to every context of a
    policy that reads it (``clock``), whatever the host's own attributes are: a schema
    that lists its attributes without it still has its fixed members checked
    (``context.now.weekday == "Mon"`` never holds), not an unknown ``now``."""
    if schema.members is None or "now" in schema.members:
        return schema
    assert ACCESS_CONTEXT_SCHEMA.members is not None
    members = {**schema.members, "now": ACCESS_CONTEXT_SCHEMA.members["now"]}
    return dataclasses.replace(schema, members=members)


def _from_shorthand(value: Any, where: str) -> AttrSchema:
    if isinstance(value, str):
        kind = _SHORTHAND_TYPES.get(value.lower())
        if kind is None:
            raise SchemaError(
                f"{where}: unknown type {value!r} (use one of {', '.join(sorted(_SHORTHAND_TYPES))})"
            )
        return AttrSchema(frozenset({kind}) if kind else frozenset())
    if isinstance(value, Mapping):
        return AttrSchema(
            frozenset({"object"}),
            {str(k): _from_shorthand(v, f"{where}.{k}") for k, v in value.items()},
        )
    raise SchemaError(f"{where}: expected a type name or an object, got {type(value).__name__}")


def _from_json_schema(node: Any, where: str) -> AttrSchema:
    if node is True or node is None:
        return _OPEN
    if not isinstance(node, Mapping):
        raise SchemaError(f"{where}: expected a JSON Schema object")
    raw_type = node.get("type")
    if isinstance(raw_type, str):
        types = frozenset({raw_type})
    elif isinstance(raw_type, list) and all(isinstance(t, str) for t in raw_type):
        types = frozenset(raw_type)
    else:
        types = frozenset()
    props = node.get("properties")
    members: dict[str, AttrSchema] | None = None
    if isinstance(props, Mapping) and props:
        extra = node.get("additionalProperties", False)
        if extra is False:
            members = {str(k): _from_json_schema(v, f"{where}.{k}") for k, v in props.items()}
    values: tuple[Any, ...] | None = None
    if "const" in node:
        values = (node["const"],)
    elif isinstance(node.get("enum"), list):
        values = tuple(node["enum"])
    raw_items = node.get("items")
    items = _from_json_schema(raw_items, f"{where}[]") if isinstance(raw_items, Mapping) else None
    pattern = node.get("pattern")
    return AttrSchema(
        types,
        members,
        values,
        _json_number(node.get("minimum")),
        _json_number(node.get("maximum")),
        None if items is _OPEN else items,
        pattern if isinstance(pattern, str) else None,
    )


def _json_number(value: Any) -> int | float | None:
    """A JSON Schema bound: a number (never a boolean), else no bound."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class CatalogTool:
    """A catalogued tool: its name and what its inputSchema says about arguments."""

    name: str
    args: AttrSchema


class CatalogEntry(BaseModel):
    """One tool of a ``--catalog`` file, in MCP spelling (other MCP fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    # MCP spelling on the wire
    inputSchema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


_CATALOG_ADAPTER: TypeAdapter[list[CatalogEntry]] = TypeAdapter(list[CatalogEntry])


def catalog_from_json(data: Any) -> dict[str, CatalogTool]:
    """Read a catalogue: a JSON list of ``{name, inputSchema}`` (or ``{"tools": [...]}``, as MCP lists them)."""
    if isinstance(data, Mapping) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list):
        raise SchemaError('expected a JSON list of {"name", "inputSchema"} objects')
    try:
        entries = _CATALOG_ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise SchemaError(f"tool #{where}: {err['msg']}") from None
    # For arguments the usual JSON Schema default holds only when nothing is
    # listed: a tool that lists properties is taken to declare all it reads.
    return {
        e.name: CatalogTool(e.name, _from_json_schema(e.inputSchema, f"{e.name}.inputSchema"))
        for e in entries
    }

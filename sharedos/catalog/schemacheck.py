"""Is a tool schema a valid JSON Schema (draft 2020-12)? Answered once per distinct schema.

``Draft202012Validator.check_schema`` walks the whole 2020-12 meta-schema
(``$dynamicRef`` through every vocabulary) and costs milliseconds per
schema: with an upstream of 10,000 tools, checked again at every turn, it
was most of a turn's opening. The answer depends only on the schema's
content, so it is remembered under the SHA-256 of the schema's RFC 8785
canonical JSON: a changed schema has another hash and is checked anew, and
a schema that cannot be canonicalized is checked every time. The memo is a
pure function's (it holds verdicts, never anything a turn or a user owns),
bounded, and shared by every catalogue of the process on purpose.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urljoin

import rfc8785
from cachetools import LRUCache
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

#: distinct schemas whose verdict is kept (a verdict is None or one short message)
SCHEMA_CHECKS_KEPT = 65_536


def check_schema(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (draft 2020-12), or ``None`` (never cached)."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return str(exc.message)
    return None


#: keywords whose values are data, never schemas (a "$ref" in them is no reference)
_DATA = frozenset({"default", "examples", "const", "enum"})
#: keywords whose values map names (not keywords) to schemas
_NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def client_problem(schema: Mapping[str, Any]) -> str | None:
    """Why MCP clients cannot compile ``schema`` as an outputSchema although it is valid
    JSON Schema, or None.

    MCP's TypeScript SDK, which the harnesses' clients are built on, compiles every listed
    outputSchema (Ajv) when it lists the tools, and refuses the whole tools/list for one it
    cannot compile: the harness would see no tool of the turn at all. Ajv refuses a
    ``$ref`` that does not resolve within the schema (nothing is fetched here either, so
    it would fail every result), two subschemas with one ``$id`` or one base URI and
    ``$anchor``, an empty ``enum``, and a ``urn:`` ``$id`` without a namespace.
    """
    root = DRAFT202012.create_resource(schema)
    base = root.id() or ""
    ids: set[str] = {base} if base else set()
    anchors: set[tuple[str, str]] = set()
    stack: list[tuple[Any, Any, str]] = [  # (subschema, the resolver of its base URI, base)
        (schema, Registry().with_resource(base, root).crawl().resolver(base_uri=base), base)
    ]
    while stack:
        node, resolver, here = stack.pop()
        if isinstance(node, list):
            stack.extend((item, resolver, here) for item in node)
            continue
        if not isinstance(node, Mapping):
            continue
        own = node.get("$id")
        if isinstance(own, str):
            if own.lower().startswith("urn:") and _URN.fullmatch(own) is None:
                return f"its $id {_shown(own)} is a urn: without a namespace"
            if node is not schema:
                resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
                here = urljoin(here, own).split("#", 1)[0]
                if here in ids:
                    return f"two of its subschemas have the $id {_shown(here)}"
                ids.add(here)
        for keyword in ("$anchor", "$dynamicAnchor"):
            anchor = node.get(keyword)
            if isinstance(anchor, str):
                if (here, anchor) in anchors:
                    return f"two of its subschemas have the anchor {_shown(anchor)}"
                anchors.add((here, anchor))
        if node.get("enum") == []:
            return "it has an empty enum"
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                return (
                    f"its $ref {_shown(ref)} does not resolve within the schema (no schema "
                    "is fetched)"
                )
        for key, value in node.items():
            if key in _DATA:
                continue
            if key in _NAMED and isinstance(value, Mapping):
                stack.extend((sub, resolver, here) for sub in value.values())
            elif isinstance(value, Mapping | list):
                stack.append((value, resolver, here))
    return None


#: RFC 8141: ``urn:`` NID ``:`` NSS
_URN = re.compile(r"urn:[A-Za-z0-9][A-Za-z0-9-]{0,31}:\S+", re.IGNORECASE)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


class SchemaChecks:
    """``check_schema`` remembered by content hash, for at most ``maxsize`` distinct schemas."""

    def __init__(self, maxsize: int = SCHEMA_CHECKS_KEPT) -> None:
        self._verdicts: LRUCache[bytes, str | None] = LRUCache(maxsize)
        self._lock = threading.Lock()
        #: how many schemas were actually checked (a miss); the tests count with it
        self.checked = 0

    def problem(self, schema: Mapping[str, Any]) -> str | None:
        """Why ``schema`` is not a valid JSON Schema, or ``None``; the same answer as ``check_schema``."""
        try:
            key = hashlib.sha256(rfc8785.dumps(schema)).digest()
        except Exception:  # not canonical JSON (NaN, a huge integer, a non-JSON value): no key
            with self._lock:
                self.checked += 1
            return check_schema(schema)
        with self._lock:
            if key in self._verdicts:
                return self._verdicts[key]
        verdict = check_schema(schema)
        with self._lock:
            self.checked += 1
            self._verdicts[key] = verdict
        return verdict

    def clear(self) -> None:
        """Forget every verdict."""
        with self._lock:
            self._verdicts.clear()

    def __len__(self) -> int:
        return len(self._verdicts)


#: the process's memo (see the module docstring for why one is shared)
SCHEMA_CHECKS = SchemaChecks()


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (draft 2020-12), or ``None``; remembered by hash."""
    return SCHEMA_CHECKS.problem(schema)

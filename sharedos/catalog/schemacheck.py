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
import threading
from collections.abc import Mapping
from typing import Any

import rfc8785
from cachetools import LRUCache
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

#: distinct schemas whose verdict is kept (a verdict is None or one short message)
SCHEMA_CHECKS_KEPT = 65_536


def check_schema(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (draft 2020-12), or ``None`` (never cached)."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return str(exc.message)
    return None


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

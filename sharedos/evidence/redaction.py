"""Secrets in evidence and in model-visible text: structural redaction, then scrubbing.

Two tools, applied in this order on every record and every message:

1. **Structural redaction** (``redact_arguments``, ``non_object_marker``): a
   field a tool marks secret is replaced by ``"[redacted]"`` whatever its value
   (no length floor, no substring search), and arguments that are not a JSON
   object are never stored at all (a marker with their JSON type and size is).
   Messages are built from these redacted values or from the schema, never
   from a ``repr`` of the arguments.
2. **Scrubbing** (``Secrets``): every secret *value* known for the call
   (tool credentials, the values of its secret arguments, the host's own
   credentials) is replaced by ``"[redacted]"`` wherever it still appears in
   text: raw, JSON-escaped (ASCII and UTF-8), ``repr``-escaped (every quote
   style), ``ascii()``-escaped, and JSON-escaped twice (JSON text inside a JSON
   string). A value shorter than ``MIN_SCRUB_CHARS`` is not searched for as a
   substring: replacing one or two characters everywhere would mangle every
   message and reveal the value by the pattern of replacements. Such a value
   is still redacted structurally wherever it is a field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from sharedos.evidence.record import REDACTED

#: secret values shorter than this are redacted as fields but not scrubbed as substrings
MIN_SCRUB_CHARS = 6
_JSON_ASCII = json.JSONEncoder(ensure_ascii=True).encode
_JSON_UTF8 = json.JSONEncoder(ensure_ascii=False).encode
_MAX_DEPTH = 64


def _encodings(value: str) -> Iterator[str]:
    """Every text form ``value`` can take inside a message or a JSON document."""
    yield value
    for encode in (_JSON_ASCII, _JSON_UTF8):
        once = encode(value)[1:-1]
        yield once
        yield encode(once)[1:-1]  # JSON text that was itself put in a JSON string
    body = repr(value)[1:-1]
    yield body
    plain_quote = body.replace("\\'", "'")  # the body as a double-quoted repr writes it
    yield plain_quote
    yield plain_quote.replace("'", "\\'")  # ... and as a single-quoted one (quotes escaped)
    yield ascii(value)[1:-1]
    yield value.encode("unicode_escape").decode("ascii")


class Secrets:
    """A set of secret values and all their encodings; scrubs them out of text and JSON values.

    Immutable once built; ``union`` makes a new one. Building costs a few
    microseconds per value, so hosts build one for their own credentials once
    and tools one for their credentials once.
    """

    __slots__ = ("_needles", "values")

    def __init__(self, values: Iterable[object] = ()) -> None:
        kept = {
            v for v in (_as_text(x) for x in values) if v is not None and len(v) >= MIN_SCRUB_CHARS
        }
        self.values: frozenset[str] = frozenset(kept)
        needles = {form for v in kept for form in _encodings(v) if form}
        # longest first: an encoded form is replaced before the raw value inside it
        self._needles: tuple[str, ...] = tuple(sorted(needles, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._needles)

    def union(self, other: Secrets | Iterable[object]) -> Secrets:
        """A ``Secrets`` holding both sets of values."""
        more = other.values if isinstance(other, Secrets) else frozenset(_as_text(v) for v in other)
        if not more or more <= self.values:
            return self
        if not self.values and isinstance(other, Secrets):
            return other
        return Secrets([*self.values, *(v for v in more if v is not None)])

    def found_in(self, text: str) -> bool:
        """True when some secret, in some encoding, occurs in ``text``."""
        return any(n in text for n in self._needles)

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of every encoding of every secret replaced."""
        for needle in self._needles:
            if needle in text:
                text = text.replace(needle, REDACTED)
        return text

    def scrub_json(self, value: Any, depth: int = 0) -> Any:
        """A copy of a JSON-like value with every string (keys too) scrubbed; others unchanged."""
        if not self._needles:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if depth > _MAX_DEPTH:
            return value
        if isinstance(value, Mapping):
            return {
                (self.scrub(k) if isinstance(k, str) else k): self.scrub_json(v, depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.scrub_json(v, depth + 1) for v in value]
        return value


NO_SECRETS = Secrets()


def _as_text(value: object) -> str | None:
    """The text form of a secret value (``SecretStr`` unwrapped), or None."""
    reveal = getattr(value, "get_secret_value", None)
    if callable(reveal):
        value = reveal()
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    return None


def secret_values(value: Any, depth: int = 0) -> Iterator[str]:
    """The scrubbable text of an argument value: itself, or every scalar leaf inside it."""
    if isinstance(value, Mapping):
        if depth < _MAX_DEPTH:
            for k, v in value.items():
                if isinstance(k, str):
                    yield k
                yield from secret_values(v, depth + 1)
        return
    if isinstance(value, list | tuple):
        if depth < _MAX_DEPTH:
            for v in value:
                yield from secret_values(v, depth + 1)
        return
    text = _as_text(value)
    if text is not None:
        yield text


def non_object_marker(arguments: Any) -> dict[str, Any]:
    """What is stored for arguments that are not a JSON object: their type and size, never them.

    Such a call is refused before any decision (``invalid_arguments``), its
    tool may take a secret, and a bare string or number cannot say which part
    is one; so the content is not kept at all.
    """
    if isinstance(arguments, str):
        kind, size = "string", len(arguments)
    elif isinstance(arguments, bool):
        kind, size = "boolean", 1
    elif isinstance(arguments, int | float):
        kind, size = "number", len(repr(arguments))
    elif isinstance(arguments, list | tuple):
        kind, size = "array", len(arguments)
    else:
        kind, size = type(arguments).__name__, 0
    return {"$nonobject": kind, "$size": size}

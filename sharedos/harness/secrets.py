"""Scrubbing the secrets the host knows (host-configuration env values, turn tokens) from text.

A secret can reach a report or a log line in more than one spelling: raw, as
it sits inside a JSON string (``\\"``, ``\\n``, ``\\uXXXX``), inside a Python
``repr`` (``\\'``, ``\\n``, ``\\x..``) or HTML-escaped. ``Secrets`` holds every
spelling of every value and replaces them all, longest first, so no spelling
survives because a shorter one was replaced inside it first.

Values shorter than ``MIN_SECRET_LEN`` are not scrubbed as substrings: a
one-character "secret" would mangle every message and betray itself by the
pattern of replacements; nothing that short is a credential. Callers that know
a *field* is secret still redact the whole field.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: What a scrubbed secret is replaced with (safe inside JSON, text and HTML).
SCRUBBED = "[redacted]"
#: Below this length a value is not scrubbed as a substring.
MIN_SECRET_LEN = 4


def spellings(value: str) -> set[str]:
    """Every way ``value`` can be written out: raw, JSON-escaped (both ASCII modes),
    repr-escaped and HTML-escaped (and HTML of the JSON form)."""
    forms = {value}
    for ascii_only in (False, True):
        forms.add(json.dumps(value, ensure_ascii=ascii_only)[1:-1])
    forms.add(repr(value)[1:-1])
    forms.add(repr(value.encode("utf-8", "surrogatepass"))[2:-1])
    forms |= {html.escape(f) for f in list(forms)}
    forms |= {html.escape(f, quote=False) for f in list(forms)}
    return {f for f in forms if f}


@dataclass(frozen=True)
class Secrets:
    """A set of secret values, ready to scrub from text or from JSON-shaped data."""

    forms: tuple[str, ...] = ()
    #: the values themselves (for a component that takes raw secrets, e.g. the kernel)
    values: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: Iterable[str]) -> Secrets:
        """Every spelling of every value long enough to scrub (see ``MIN_SECRET_LEN``)."""
        forms: set[str] = set()
        kept = tuple(dict.fromkeys(v for v in values if isinstance(v, str) and v))
        for value in kept:
            if len(value) >= MIN_SECRET_LEN:
                forms |= spellings(value)
        return cls(tuple(sorted(forms, key=lambda f: (-len(f), f))), kept)

    def __bool__(self) -> bool:
        return bool(self.forms)

    def __repr__(self) -> str:
        return f"Secrets({len(self.values)} values, {len(self.forms)} spellings)"

    def scrub(self, text: str) -> str:
        """``text`` with every spelling of every secret replaced by ``SCRUBBED``."""
        for form in self.forms:
            if form in text:
                text = text.replace(form, SCRUBBED)
        return text

    def scrub_data(self, value: Any) -> Any:
        """A copy of JSON-shaped ``value`` with every string (keys too) scrubbed."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {self.scrub_data(k): self.scrub_data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_data(v) for v in value]
        return value

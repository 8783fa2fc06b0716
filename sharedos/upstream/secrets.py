"""Upstream credentials: resolved from the host environment, scrubbed from everything.

A credential is read from the host environment only when a session is opened,
and only into that session (the upstream process's environment, or an HTTP
header). Its value must never come back out: everything an upstream returns
(results, error messages, its stderr, its server name) is scrubbed of every
encoding the value can take before SharedOS keeps or relays it, and a tool
whose *definition* holds one is held back whole (``Scrubber.find``).

The encodings (``encodings``): raw, JSON-escaped (ASCII and not), repr-escaped,
hex (lower and upper case), percent-encoded (``quote``, ``quote_plus``, lower-case
escapes), and base64 in the standard and URL-safe alphabets, padded or not,
including the characters that depend only on the value at each of the three
byte alignments, so the value is found (and cut) inside a longer encoded blob.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus

from pydantic import SecretStr

from sharedos.errors import SharedOSError
from sharedos.upstream.config import UpstreamConfig

REDACTED = "[redacted]"
#: shorter values cannot be scrubbed as substrings without mangling ordinary text
MIN_CREDENTIAL_LENGTH = 8

# A per-process key: credential-set fingerprints (pool keys) are never comparable
# across processes, and cannot be used to test guesses offline.
_FINGERPRINT_KEY = os.urandom(32)


class CredentialError(SharedOSError, ValueError):
    """A credential that cannot be resolved (unset, empty, too short); names only, never values."""


@dataclass(frozen=True, slots=True)
class CredentialSet:
    """The resolved credentials of one upstream: target name -> value (kept in memory only)."""

    values: Mapping[str, SecretStr] = field(default_factory=dict)
    #: the bare values behind prefixed ones ("Bearer " + value): secrets too
    bare: tuple[SecretStr, ...] = ()
    #: a keyed hash of the values: the pool key, never shown or recorded
    fingerprint: str = ""
    #: which credential this is, by name (``shared``, ``principal:alice``, ``group:ops``,
    #: ``oauth:alice``): recorded with every call it serves, never a value
    identity: str = "shared"
    #: where its values come from (``env``, ``file``, ``store``, ``oauth``, ``none``)
    via: str = "env"
    #: the ``oauth.TokenSource`` that sets and renews the credential per request (OAuth), or None
    auth: Any = None

    def env(self) -> dict[str, str]:
        """The values as environment entries (stdio upstreams)."""
        return {k: v.get_secret_value() for k, v in self.values.items()}

    def secrets(self) -> tuple[str, ...]:
        """Every value, longest first (what scrubbing removes)."""
        raw = {v.get_secret_value() for v in (*self.values.values(), *self.bare)}
        if self.auth is not None:  # the OAuth tokens held now
            raw.update(self.auth.secrets())
        return tuple(sorted(raw, key=len, reverse=True))


def resolve_credentials(config: UpstreamConfig, environ: Mapping[str, str]) -> CredentialSet:
    """Read ``config``'s credential references from ``environ``; ``CredentialError`` names what is missing."""
    values: dict[str, SecretStr] = {}
    bare: list[SecretStr] = []
    for target, ref in sorted(config.credentials.items()):
        if ref.env is None:  # a file or store reference: sharedos.upstream.credentials reads it
            raise CredentialError(
                f"upstream {config.id!r}: credential {target} is read from {ref.describe()}, "
                "which needs the upstream broker"
            )
        raw = environ.get(ref.env)
        if raw is None or raw == "":
            raise CredentialError(
                f"upstream {config.id!r}: credential {target} needs the host environment "
                f"variable {ref.env}, which is not set"
            )
        if len(raw) < MIN_CREDENTIAL_LENGTH:
            raise CredentialError(
                f"upstream {config.id!r}: the value of {ref.env} is shorter than "
                f"{MIN_CREDENTIAL_LENGTH} characters; SharedOS cannot keep so short a value out "
                "of results, so it refuses to use it"
            )
        values[target] = SecretStr(ref.prefix + raw)
        # the bare value is a secret too (a prefix such as "Bearer " is not)
        if ref.prefix:
            bare.append(SecretStr(raw))
    return CredentialSet(values=values, bare=tuple(bare), fingerprint=fingerprint_of(values))


def fingerprint_of(values: Mapping[str, SecretStr], *extra: str) -> str:
    """The per-process keyed hash of a credential set (and of ``extra`` labels): a pool key."""
    mac = hmac.new(_FINGERPRINT_KEY, digestmod=hashlib.sha256)
    for key in sorted(values):
        mac.update(key.encode() + b"\x00" + values[key].get_secret_value().encode() + b"\x01")
    for label in extra:
        mac.update(b"\x02" + label.encode())
    return mac.hexdigest()


#: the shortest base64 piece scrubbed on its own (the aligned middle of an encoding)
_MIN_BASE64_CORE = 10
_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _base64_forms(raw: bytes) -> set[str]:
    """The value's base64 (both alphabets, padded and not) and its aligned cores: the
    characters that depend only on ``raw`` when it sits at byte offset 0, 1 or 2 of a
    longer encoded blob."""
    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode("ascii")
        forms.update((whole, whole.rstrip("=")))
        for k in range(3):
            text = encode(b"\0" * k + raw).decode("ascii")
            start = -(-k * 8 // 6)  # the first character with no bit of the prefix
            end = ((k + len(raw)) * 8) // 6  # the last with no bit of what follows
            core = text[start:end]
            if len(core) >= _MIN_BASE64_CORE:
                forms.add(core)
    return forms


def encodings(value: str) -> list[str]:
    """Every form ``value`` can take in text SharedOS relays (see the module docstring),
    longest first."""
    raw = value.encode("utf-8")
    forms = {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    forms.add(repr(value)[1:-1])
    forms.update((raw.hex(), raw.hex().upper()))
    for percent in (quote(value, safe=""), quote(value), quote_plus(value, safe="")):
        forms.add(percent)
        forms.add(_PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), percent))
    forms.update(_base64_forms(raw))
    return sorted((f for f in forms if f), key=len, reverse=True)


class Scrubber:
    """Replaces credential values (in all their encodings) in text and JSON values."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for value in secrets:
            if len(value) >= MIN_CREDENTIAL_LENGTH:
                forms.update(encodings(value))
        self._forms = tuple(sorted(forms, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._forms)

    def text(self, value: str) -> str:
        """``value`` with every credential form replaced by ``[redacted]``."""
        for form in self._forms:
            if form in value:
                value = value.replace(form, REDACTED)
        return value

    def json(self, value: Any) -> Any:
        """A copy of a JSON value with every string (keys included) scrubbed."""
        if not self._forms:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        return value

    def contains(self, value: str) -> bool:
        """True when ``value`` holds any credential form."""
        return any(form in value for form in self._forms)

    def find(self, value: Any, where: str = "") -> list[str]:
        """Where in a JSON value a credential form occurs: dotted paths (``inputSchema.
        properties.token.default``; a key holding one is named by its scrubbed form),
        never the value itself. Empty when there is none."""
        if not self._forms:
            return []
        if isinstance(value, str):
            return [where or "(value)"] if self.contains(value) else []
        found: list[str] = []
        if isinstance(value, dict):
            for key, item in value.items():
                name = str(key)
                path = f"{where}.{self.text(name)}" if where else self.text(name)
                if self.contains(name):
                    found.append(f"{path} (its name)")
                found.extend(self.find(item, path))
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                found.extend(self.find(item, f"{where}[{i}]"))
        return found

"""Upstream credentials: resolved from the host environment, scrubbed from everything.

A credential is read from the host environment only when a session is opened,
and only into that session (the upstream process's environment, or an HTTP
header). Its value must never come back out: everything an upstream returns
(results, error messages, its stderr, its server name) is scrubbed of every
encoding the value can take before SharedOS keeps or relays it, by the one
redactor (``sharedos.redaction.Redactor``, built per connection from
``CredentialSet.secrets()``), and a tool whose *definition* holds one is held
back whole (``Redactor.find``). A credential shorter than the redactor's one
minimum length (``MIN_SECRET_CHARS``) is refused here: it could not be scrubbed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from sharedos.errors import UpstreamError
from sharedos.redaction import MIN_SECRET_CHARS, credential_parts
from sharedos.upstream.config import UpstreamConfig

#: shorter values cannot be scrubbed as substrings (the redactor's one minimum length)
MIN_CREDENTIAL_LENGTH = MIN_SECRET_CHARS

# A per-process key: credential-set fingerprints (pool keys) are never comparable
# across processes, and cannot be used to test guesses offline.
_FINGERPRINT_KEY = os.urandom(32)


class CredentialError(UpstreamError, ValueError):
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
        # a token inside a JSON value ({"Authorization": "Bearer T"}) is said on its own too
        bare.extend(SecretStr(part) for part in credential_parts(raw))
    return CredentialSet(values=values, bare=tuple(bare), fingerprint=fingerprint_of(values))


def fingerprint_of(values: Mapping[str, SecretStr], *extra: str) -> str:
    """The per-process keyed hash of a credential set (and of ``extra`` labels): a pool key."""
    mac = hmac.new(_FINGERPRINT_KEY, digestmod=hashlib.sha256)
    for key in sorted(values):
        mac.update(key.encode() + b"\x00" + values[key].get_secret_value().encode() + b"\x01")
    for label in extra:
        mac.update(b"\x02" + label.encode())
    return mac.hexdigest()

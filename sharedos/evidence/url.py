"""Which evidence store a ``--db`` value or a host's ``[evidence] url`` names, and opening it.

* a bare path, or ``sqlite:PATH`` / ``sqlite://PATH`` (``sqlite:///var/x.db``
  is the absolute path ``/var/x.db``): the SQLite store (the default);
* ``postgresql://…`` or ``postgres://…``: the PostgreSQL store (a libpq URL;
  a Unix socket is ``postgresql://user@/db?host=/run/postgresql``).

Anything else with a ``scheme://`` is refused with a clear message, so a
mistyped URL never becomes a SQLite file named after it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sharedos.evidence.store import EvidenceStoreError

__all__ = ["StoreTarget", "open_configured_store", "open_store", "parse_store_url"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """A parsed store location: ``kind`` and the path (SQLite) or URL (PostgreSQL)."""

    kind: Literal["sqlite", "postgresql"]
    location: str

    @property
    def shown(self) -> str:
        """The location as messages print it (no password)."""
        if self.kind == "postgresql":
            from sharedos.evidence.postgres import redacted_url

            return redacted_url(self.location)
        return self.location


def parse_store_url(value: str | os.PathLike[str]) -> StoreTarget:
    """Parse ``value``; ``ValueError`` with a one-line reason when it names no store."""
    text = os.fspath(value)
    if not text.strip():
        raise ValueError("an empty evidence store location")
    m = _SCHEME.match(text)
    scheme = m.group(1).lower() if m else None
    if scheme in ("postgresql", "postgres"):
        return StoreTarget("postgresql", text)
    if scheme == "sqlite":
        path = text[len("sqlite:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise ValueError(f"{text}: a sqlite URL needs a path (sqlite:///var/evidence.db)")
        return StoreTarget("sqlite", path)
    if scheme is not None and len(scheme) > 1 and text[m.end() :].startswith("//"):  # type: ignore[union-attr]
        raise ValueError(
            f"{text}: unknown evidence store scheme {scheme!r} "
            "(a path or sqlite:///path for SQLite, postgresql://... for PostgreSQL)"
        )
    return StoreTarget("sqlite", text)


def open_store(
    value: str | os.PathLike[str],
    *,
    read_only: bool = False,
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    signer: Any = None,
    must_exist: bool = False,
) -> Any:
    """Open the store ``value`` names (``EvidenceStoreError`` with one clear line otherwise).

    ``must_exist`` (the CLI's readers): a SQLite path with no file is refused
    rather than created. ``signer`` (a ``chain.Signer``) signs turn seals.
    """
    try:
        target = parse_store_url(value)
    except ValueError as exc:
        raise EvidenceStoreError(str(exc), "io") from None
    if target.kind == "postgresql":
        from sharedos.evidence.postgres import PostgresEvidenceStore

        return PostgresEvidenceStore(target.location, read_only=read_only, signer=signer)
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    missing = target.location != ":memory:" and not Path(target.location).is_file()
    if (must_exist or read_only) and missing:
        raise EvidenceStoreError(f"no evidence database at {target.location}", "io")
    kwargs: dict[str, Any] = {"read_only": read_only}
    if not read_only:
        kwargs["synchronous"] = synchronous
    if signer is not None:
        kwargs["signer"] = signer
    return SqliteEvidenceStore(target.location, **kwargs)


def open_configured_store(
    url: str | os.PathLike[str],
    *,
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    sign_key: str | os.PathLike[str] | None = None,
    otlp_endpoint: str | None = None,
) -> Any:
    """The store a host configuration's ``[evidence]`` table describes, ready to write.

    ``sign_key``: an ed25519 private key (PKCS#8 PEM file) that signs each
    turn's seal. ``otlp_endpoint``: an OTLP/HTTP base URL; the store is then
    wrapped so each attempt is also a log record and a span
    (``sharedos.evidence.otel``).
    """
    signer = None
    if sign_key is not None:
        from sharedos.evidence.chain import Signer

        try:
            signer = Signer.from_pem(Path(sign_key).read_bytes())
        except (OSError, ValueError) as exc:
            raise EvidenceStoreError(
                f"cannot use the signing key {sign_key}: {exc}", "io"
            ) from None
    store = open_store(url, synchronous=synchronous, signer=signer)
    if otlp_endpoint:
        from sharedos.evidence.otel import TelemetryStore, otlp_providers

        try:
            tracer_provider, logger_provider = otlp_providers(otlp_endpoint)
        except RuntimeError as exc:
            store.close()
            raise EvidenceStoreError(str(exc), "io") from None
        store = TelemetryStore(store, tracer_provider, logger_provider)
    return store

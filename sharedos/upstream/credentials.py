"""Whose credentials serve a turn at an upstream, and reading them (never printing them).

``select(config, context)`` picks, for the trusted ``AccessContext`` of a turn,
the credential its calls to an upstream carry (docs/upstreams.md, "Per-person
identity"):

- ``identity = "shared"``: ``credentials``, the operator's, for everyone;
- ``per-person``: the principal's own entry (``principals.NAME``), else the
  first group (``groups.ROLE``, in file order) the principal holds a role of,
  else its OAuth tokens (``oauth``: ``sharedos upstream login``); else none —
  and the upstream's tools are absent from that turn, the report saying why;
- ``per-person-or-shared``: the same, then the shared ``credentials``.

A per-person entry names a principal of the upstream's ``tenant`` only.

``resolve`` reads the chosen references — a host environment variable, a file
only its owner may read, a named secret of the encrypted token store — into a
``CredentialSet`` whose ``identity`` (``principal:alice``, ``group:ops``,
``oauth:alice``, ``shared``) is what the evidence records; for OAuth it holds
the ``httpx2.Auth`` that sets and renews the principal's token per request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from sharedos import textfile
from sharedos.context import AccessContext
from sharedos.redaction import credential_parts
from sharedos.upstream.config import CredentialRef, UpstreamConfig, secret_file_problem
from sharedos.upstream.secrets import (
    MIN_CREDENTIAL_LENGTH,
    CredentialError,
    CredentialSet,
    fingerprint_of,
)

#: opens the token store when a reference needs it (``TokenStoreError`` when it cannot)
StoreOpener = Callable[[], Any]


@dataclass(frozen=True)
class Binding:
    """The credential a context's calls to one upstream use (by reference, no value)."""

    #: ``shared``, ``principal:NAME``, ``group:ROLE`` or ``oauth:NAME``
    identity: str
    #: target (env variable / header) -> reference, for static credentials
    refs: Mapping[str, CredentialRef] = field(default_factory=dict)
    #: (tenant, principal) whose OAuth tokens serve the calls, for ``oauth:`` bindings
    oauth: tuple[str, str] | None = None

    @property
    def via(self) -> str:
        """Where the values come from: ``oauth``, ``env``, ``file``, ``store``, a mix, or ``none``."""
        if self.oauth is not None:
            return "oauth"
        kinds = sorted({r.describe().split(" ", 1)[0] for r in self.refs.values()})
        return "+".join(kinds) or "none"


@dataclass(frozen=True)
class NoCredential:
    """Why a context has no credential for an upstream that requires one (operator-readable)."""

    message: str


def select(config: UpstreamConfig, context: AccessContext) -> Binding | NoCredential:
    """The credential ``context``'s calls to ``config``'s upstream use, or why there is none."""
    if not config.per_person:
        return Binding("shared", config.credentials)
    if context.tenant == config.tenant:
        own = config.principals.get(context.principal)
        if own is not None:
            return Binding(f"principal:{context.principal}", own)
        roles = set(context.roles)
        for group, refs in config.groups.items():
            if group in roles:
                return Binding(f"group:{group}", refs)
        if config.oauth is not None:
            return Binding(f"oauth:{context.principal}", oauth=(context.tenant, context.principal))
    if config.identity == "per-person-or-shared":
        return Binding("shared", config.credentials)
    return NoCredential(no_credential_message(config, context))


def no_credential_message(config: UpstreamConfig, context: AccessContext) -> str:
    """What the operator reads when ``context`` has no credential for ``config``'s upstream."""
    who = context.principal
    if context.tenant != config.tenant:
        return (
            f"principal {who!r} of tenant {context.tenant!r} has no credential for upstream "
            f"{config.id!r}, whose per-person credentials are for tenant {config.tenant!r}"
        )
    ways = [f"[upstream.{config.id}.principals.{_toml_key(who)}]"]
    if config.oauth is not None:
        from sharedos.upstream.oauth import login_command

        ways.append(f"`{login_command(config, who)}`")
    return (
        f"principal {who!r} has no credential for upstream {config.id!r} (identity "
        f"{config.identity}); the operator gives one: " + " or ".join(ways)
    )


def read_reference(
    ref: CredentialRef,
    environ: Mapping[str, str],
    *,
    upstream: str,
    label: str,
    store: StoreOpener | None = None,
) -> str:
    """The value behind ``ref`` (``CredentialError`` naming what is missing, never a value)."""
    where = f"upstream {upstream!r}: {label}"
    if ref.env is not None:
        raw = environ.get(ref.env)
        if not raw:
            raise CredentialError(
                f"{where} needs the host environment variable {ref.env}, which is not set"
            )
        return raw
    if ref.file is not None:
        path = Path(ref.file)
        problem = secret_file_problem(path, must_exist=True)
        if problem is not None:
            raise CredentialError(f"{where} is read from {path}, which {problem}")
        try:
            # the checks again, on the file actually opened (no link followed): a file
            # swapped in since the look above is refused, not read
            raw = textfile.decode_text(textfile.read_secret(path)).removesuffix("\n")
        except UnicodeDecodeError:
            raise CredentialError(f"{where}: {path} is not UTF-8 text") from None
        except OSError as exc:  # the reason in words: never the file's bytes
            raise CredentialError(
                f"{where}: {path} cannot be read ({exc.strerror or type(exc).__name__})"
            ) from None
        if not raw:
            raise CredentialError(f"{where} is read from {path}, which is empty")
        return raw
    assert ref.store is not None
    if store is None:
        raise CredentialError(f"{where} is read from the token store, which is not configured")
    from sharedos.upstream.tokenstore import TokenStoreError

    try:
        value: str | None = store().secret(upstream, ref.store)
    except TokenStoreError as exc:
        raise CredentialError(f"{where}: {exc}") from None
    if not value:
        raise CredentialError(
            f"{where} is the stored secret {ref.store!r}, which is not in the token store "
            f"(`sharedos upstream secret set {upstream} {ref.store}` keeps one)"
        )
    return value


def resolve_static(
    config: UpstreamConfig,
    binding: Binding,
    environ: Mapping[str, str],
    *,
    store: StoreOpener | None = None,
) -> CredentialSet:
    """Read a binding's static references into a ``CredentialSet`` (``CredentialError`` names
    what is missing or unusable)."""
    values: dict[str, SecretStr] = {}
    bare: list[SecretStr] = []
    for target, ref in sorted(binding.refs.items()):
        raw = read_reference(
            ref,
            environ,
            upstream=config.id,
            label=f"credential {target} of {binding.identity}",
            store=store,
        )
        if len(raw) < MIN_CREDENTIAL_LENGTH:
            raise CredentialError(
                f"upstream {config.id!r}: the value of {ref.describe()} ({binding.identity}) is "
                f"shorter than {MIN_CREDENTIAL_LENGTH} characters; SharedOS cannot keep so short "
                "a value out of results, so it refuses to use it"
            )
        values[target] = SecretStr(ref.prefix + raw)
        if ref.prefix:
            bare.append(SecretStr(raw))
        # a token inside a JSON value ({"Authorization": "Bearer T"}) is said on its own too
        bare.extend(SecretStr(part) for part in credential_parts(raw))
    return CredentialSet(
        values=values,
        bare=tuple(bare),
        fingerprint=fingerprint_of(values, binding.identity),
        identity=binding.identity,
        via=binding.via,
    )


def _toml_key(name: str) -> str:
    import re

    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else '"' + name.replace('"', '\\"') + '"'


def _shell(name: str) -> str:
    import shlex

    return shlex.quote(name)

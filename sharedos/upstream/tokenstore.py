"""The token store: each principal's upstream tokens and the operator's stored secrets,
encrypted at rest with a key the host holds elsewhere.

Layout: one directory per upstream under the store's root (0700), one file per
principal's OAuth tokens (``p-<base32 of tenant and principal>.json``; ``q-<sha256>``
for a pair too long for a file name) and per
named secret (``s-<name>.json``), each 0600, written atomically. A file holds
``{"v": 1, "alg": "A256GCM", "nonce": …, "data": …}``: AES-256-GCM (the
``cryptography`` package) under the store key, with the upstream, the kind and
the principal (or secret name) as associated data — so a file copied under
another principal's name, or to another upstream, does not decrypt either.

The key is 32 random bytes, base64url-encoded, read from a host environment
variable or a 0600 file (``[tokens] key``) that must not lie inside the store:
a copy of the store alone (a stolen token file) is useless without it
(``sharedos upstream keygen`` writes one). Nothing here ever prints a token or
the key: errors name files and principals only.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sharedos import textfile
from sharedos.atomicfile import write_atomically
from sharedos.errors import UpstreamError
from sharedos.upstream.config import CredentialRef, secret_file_problem

#: the store key's size (AES-256)
KEY_BYTES = 32
_FORMAT = 1
_AAD = b"sharedos-token-store/v1"


class TokenStoreError(UpstreamError, ValueError):
    """The store cannot be used (no key, a wrong key, a file that does not decrypt); names only."""


class TokenRecord(BaseModel):
    """One principal's tokens for one upstream, and what is needed to renew them."""

    model_config = ConfigDict(extra="forbid")

    access_token: str
    token_type: str = "Bearer"
    refresh_token: str | None = None
    #: epoch seconds the access token expires at (None: the server gave no lifetime)
    expires_at: float | None = None
    scope: str | None = None
    #: how the current access token was obtained
    obtained_via: Literal["authorization_code", "refresh_token", "token_exchange"]
    obtained_at: float
    #: the OAuth client the tokens were issued to (RFC 7591 client information: a refresh
    #: needs the same client)
    client: dict[str, Any] | None = None
    issuer: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    registration_endpoint: str | None = None
    grant_types_supported: list[str] | None = None
    #: the RFC 8707 resource indicator the tokens were requested for
    resource: str | None = None

    def expired(self, skew_s: float = 30.0, now: float | None = None) -> bool:
        """True when the access token is past (or within ``skew_s`` of) its expiry."""
        if self.expires_at is None:
            return False
        return (now if now is not None else time.time()) >= self.expires_at - skew_s


def generate_key() -> str:
    """A fresh store key (base64url text of 32 random bytes)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def decode_key(text: str, where: str) -> bytes:
    """The 32 key bytes of ``text`` (base64url, padded or not); ``TokenStoreError`` otherwise."""
    raw = text.strip()
    try:
        key = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    except (ValueError, TypeError):
        key = b""
    if len(key) != KEY_BYTES:
        raise TokenStoreError(
            f"the token store key in {where} is not {KEY_BYTES} base64url-encoded bytes "
            "(generate one with `sharedos upstream keygen`)"
        )
    return key


def read_key(ref: CredentialRef, environ: Mapping[str, str]) -> bytes:
    """The store key from its reference (an environment variable or a 0600 file)."""
    if ref.env is not None:
        text = environ.get(ref.env)
        if not text:
            raise TokenStoreError(
                f"the token store key is not set: the host environment variable {ref.env} is "
                "empty (generate a key with `sharedos upstream keygen`)"
            )
        return decode_key(text, f"the environment variable {ref.env}")
    if ref.file is not None:
        path = Path(ref.file)
        problem = secret_file_problem(path, must_exist=True)
        if problem is not None:
            raise TokenStoreError(f"the token store key file {path} {problem}")
        try:
            text = textfile.read_text(path, limit=4096)
        except OSError as exc:
            raise TokenStoreError(
                f"the token store key file {path} cannot be read: {exc.strerror or exc}"
            ) from None
        return decode_key(text, f"the file {path}")
    raise TokenStoreError("the token store key is read from env or file, not from the store")


#: the longest base32 slot name: with ``p-``, ``.json`` and the temporary file's affixes
#: it stays well inside a file name's 255 bytes
_SLOT_CHARS = 150


def _slot(tenant: str, principal: str) -> str:
    """The file name (no suffix) of a principal's tokens: the base32 of tenant and principal,
    or for a pair too long for a file name (a principal is up to 256 characters, a tenant
    too), ``q-`` and their SHA-256; the associated data still binds the file to the names."""
    raw = f"{tenant}\0{principal}".encode()
    body = base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if len(body) > _SLOT_CHARS:
        return "q-" + hashlib.sha256(raw).hexdigest()
    return "p-" + body


def _earlier_slot(tenant: str, principal: str) -> str | None:
    """The file name an earlier SharedOS gave a pair ``_slot`` now hashes: the base32 name,
    which fit a file name for most such pairs (to some 230 characters); None for a pair
    whose name has not changed."""
    raw = f"{tenant}\0{principal}".encode()
    body = base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    return "p-" + body if len(body) > _SLOT_CHARS else None


def _unslot(name: str) -> tuple[str, str] | None:
    if not name.startswith("p-"):
        return None  # a hashed slot: its names are not recoverable from the file name
    body = name.removeprefix("p-").upper()
    try:
        tenant, principal = base64.b32decode(body + "=" * (-len(body) % 8)).decode().split("\0", 1)
    except (ValueError, UnicodeDecodeError):
        return None
    return tenant, principal


def _private_dir(folder: Path, *, follow: bool) -> None:
    """Make ``folder`` (the store's root, or an upstream's directory in it) what the store
    keeps files in: a directory of its own (no symbolic link, owned by this user), 0700.
    One that existed before the store made it (``mkdir -p``, a package's 0755) kept its
    mode: anyone could list which principals hold tokens for which upstream (the file
    names are the base32 of tenant and principal). ``TokenStoreError`` for one that is
    not this user's directory: files written there are not the store's to keep."""
    import stat

    try:
        st = folder.stat() if follow else folder.lstat()
    except OSError as exc:
        raise TokenStoreError(f"{folder} cannot be used ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise TokenStoreError(
            f"{folder} is not a directory (a symbolic link?): the token store keeps its "
            "files in directories of its own"
        )
    if st.st_uid != os.geteuid():
        raise TokenStoreError(
            f"{folder} is owned by another user (uid {st.st_uid}): the token store keeps its "
            "files in directories of its own"
        )
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)


class TokenStore:
    """Encrypted tokens per (upstream, tenant, principal) and named secrets per upstream."""

    def __init__(self, root: str | Path, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise TokenStoreError(f"the token store key must be {KEY_BYTES} bytes")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.root = Path(root)
        self._aead = AESGCM(key)

    # -- files -------------------------------------------------------------------
    def _dir(self, upstream: str, *, create: bool) -> Path:
        path = self.root / upstream
        if create:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.mkdir(mode=0o700, exist_ok=True)
            _private_dir(self.root, follow=True)  # the operator's to place (a link too)
            _private_dir(path, follow=False)
        return path

    def token_path(self, upstream: str, tenant: str, principal: str) -> Path:
        """Where ``principal``'s tokens for ``upstream`` are kept (whether or not they exist)."""
        return self._dir(upstream, create=False) / f"{_slot(tenant, principal)}.json"

    def _earlier_path(self, upstream: str, tenant: str, principal: str) -> Path | None:
        """Where an earlier SharedOS kept these tokens, when that was another file name
        (``_earlier_slot``): its tokens are this principal's still (the associated data
        binds them to the names, not to the file), so they are read, replaced and removed
        as the tokens at ``token_path`` are. Unread, the principal had to sign in again
        after an upgrade, and ``logout`` removed (and revoked) nothing, leaving the old
        refresh token in the store."""
        earlier = _earlier_slot(tenant, principal)
        if earlier is None:
            return None
        with contextlib.suppress(OSError):  # too long a name on this file system
            path = self._dir(upstream, create=False) / f"{earlier}.json"
            if os.path.lexists(path):
                return path
        return None

    def _token_file(self, upstream: str, tenant: str, principal: str) -> Path:
        """``token_path``, or the file an earlier SharedOS named otherwise when only it is
        there."""
        path = self.token_path(upstream, tenant, principal)
        if not os.path.lexists(path):
            earlier = self._earlier_path(upstream, tenant, principal)
            if earlier is not None:
                return earlier
        return path

    def _seal(self, path: Path, aad: bytes, payload: bytes) -> None:
        nonce = secrets.token_bytes(12)
        sealed = self._aead.encrypt(nonce, payload, aad)
        doc = {
            "v": _FORMAT,
            "alg": "A256GCM",
            "nonce": base64.b64encode(nonce).decode("ascii"),
            "data": base64.b64encode(sealed).decode("ascii"),
        }
        write_atomically(path, json.dumps(doc), mode=0o600, exact_mode=True, durable=True)

    def _open(self, path: Path, aad: bytes) -> bytes | None:
        from cryptography.exceptions import InvalidTag

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TokenStoreError(f"{path} cannot be read ({exc.strerror})") from None
        with os.fdopen(fd, "r", encoding="utf-8") as fh:
            try:
                doc = json.load(fh)
                nonce = base64.b64decode(doc["nonce"])
                data = base64.b64decode(doc["data"])
                if doc.get("v") != _FORMAT or doc.get("alg") != "A256GCM":
                    raise ValueError("format")
            except (ValueError, KeyError, TypeError):
                raise TokenStoreError(f"{path} is not a token store file") from None
        try:
            return bytes(self._aead.decrypt(nonce, data, aad))
        except InvalidTag:
            raise TokenStoreError(
                f"{path} does not decrypt with the configured key (another key, or a file "
                "copied from another principal or upstream): it is not used; `sharedos "
                "upstream logout` removes it"
            ) from None

    @staticmethod
    def _aad(upstream: str, kind: str, *names: str) -> bytes:
        return b"\0".join([_AAD, upstream.encode(), kind.encode(), *(n.encode() for n in names)])

    # -- tokens ------------------------------------------------------------------
    def load(self, upstream: str, tenant: str, principal: str) -> TokenRecord | None:
        """``principal``'s tokens for ``upstream`` (None: none stored); ``TokenStoreError`` for
        a file that does not decrypt with this key."""
        path = self._token_file(upstream, tenant, principal)
        raw = self._open(path, self._aad(upstream, "oauth", tenant, principal))
        if raw is None:
            return None
        try:
            return TokenRecord.model_validate_json(raw)
        except ValidationError:
            raise TokenStoreError(f"{path} holds no usable token record") from None

    def save(self, upstream: str, tenant: str, principal: str, record: TokenRecord) -> Path:
        """Keep ``record`` for ``principal`` and ``upstream`` (encrypted; replaces any other)."""
        self._dir(upstream, create=True)
        path = self.token_path(upstream, tenant, principal)
        self._seal(
            path,
            self._aad(upstream, "oauth", tenant, principal),
            record.model_dump_json().encode("utf-8"),
        )
        earlier = self._earlier_path(upstream, tenant, principal)
        if earlier is not None:  # replaced: the old tokens are not kept beside the new
            with contextlib.suppress(FileNotFoundError):
                earlier.unlink()
        return path

    def delete(self, upstream: str, tenant: str, principal: str) -> bool:
        """Remove ``principal``'s tokens for ``upstream``; False when there were none."""
        removed = False
        for path in (
            self.token_path(upstream, tenant, principal),
            self._earlier_path(upstream, tenant, principal),
        ):
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed = True
        return removed

    def principals(self, upstream: str) -> list[tuple[str, str]]:
        """(tenant, principal) of every token file kept for ``upstream`` whose names its file
        name holds (names only; a pair too long for a file name is kept under a hash)."""
        folder = self._dir(upstream, create=False)
        if not folder.is_dir():
            return []
        out = [_unslot(p.stem) for p in folder.glob("p-*.json")]
        return sorted(x for x in out if x is not None)

    # -- named secrets -----------------------------------------------------------
    def secret_path(self, upstream: str, name: str) -> Path:
        """Where the secret ``name`` of ``upstream`` is kept."""
        return self._dir(upstream, create=False) / f"s-{name}.json"

    def put_secret(self, upstream: str, name: str, value: str) -> Path:
        """Keep ``value`` as the secret ``name`` of ``upstream`` (encrypted)."""
        self._dir(upstream, create=True)
        path = self.secret_path(upstream, name)
        self._seal(path, self._aad(upstream, "secret", name), value.encode("utf-8"))
        return path

    def secret(self, upstream: str, name: str) -> str | None:
        """The secret ``name`` of ``upstream`` (None: not stored)."""
        raw = self._open(self.secret_path(upstream, name), self._aad(upstream, "secret", name))
        return raw.decode("utf-8") if raw is not None else None

    def delete_secret(self, upstream: str, name: str) -> bool:
        """Remove a stored secret; False when there was none."""
        try:
            self.secret_path(upstream, name).unlink()
        except FileNotFoundError:
            return False
        return True


def open_store(config: Any, environ: Mapping[str, str], base_dir: Path | None = None) -> TokenStore:
    """The token store a host file's ``[tokens]`` names (``TokenStoreError`` when its key
    cannot be read)."""
    key = config.key
    if key.file is not None and base_dir is not None and not Path(key.file).is_absolute():
        key = key.model_copy(update={"file": str(base_dir / key.file)})
    return TokenStore(config.location(environ, base_dir), read_key(key, environ))


def store_opener(config: Any, environ: Mapping[str, str], base_dir: Path | None = None) -> Any:
    """A zero-argument callable opening the store on first use (what the broker takes)."""

    def opener() -> TokenStore:
        return open_store(config, environ, base_dir)

    return opener

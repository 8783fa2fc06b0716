"""Ed25519 signatures on policy bundles (``sharedos-policy keygen/sign/verify``).

A signature covers everything a host acts on or records about a bundle: the
envelope's ``format``, ``compiler_version`` and ``grammar_sha256`` (compiler
and grammar identity), its ``bundle_hash`` (which covers the compiled program
and is checked against it on every load, so a valid signature vouches for
every rule), its release — ``revision`` (the name hosts stamp on evidence)
and ``sequence`` (a number that only grows from one published bundle to the
next: hosts refuse a lower one, which is what makes a rollback visible) — and
the signature's own ``signed_at``. The signed message is the canonical JSON of
those seven fields after a domain-separation prefix, so a signature over
anything else can never be replayed as a bundle signature, and changing any
of them after signing (relabelling a bundle ``r99``, or giving an old bundle a
new sequence) voids it.

Signatures of the first format (``sharedos-policy-bundle-signature/1``: the
four envelope fields only, no revision or sequence) verify nothing any more:
``legacy_signed`` names them so a host can say to re-sign.

Keys are PEM files: PKCS#8 for the private key (written owner-only), the
standard SubjectPublicKeyInfo for the public key. A key is named by its id:
the SHA-256 of its raw 32 public bytes, in hex.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sharedos import textfile
from sharedos.atomicfile import create_whole
from sharedos.errors import PolicyLanguageError
from sharedos.pemkeys import load_ed25519_public

_DOMAIN = b"sharedos-policy-bundle-signature/2\n"
_LEGACY_DOMAIN = b"sharedos-policy-bundle-signature/1\n"
_ENVELOPE_FIELDS = ("format", "compiler_version", "grammar_sha256", "bundle_hash")
#: the release fields of the envelope a signature covers beside the four above
RELEASE_FIELDS = ("revision", "sequence")
ALGORITHM = "ed25519"


class SigningKeyError(PolicyLanguageError, ValueError):
    """A key file that cannot be used (unreadable, not PEM, not an Ed25519 key)."""


def generate_keypair() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as (private PKCS#8 PEM, public PEM)."""
    private = Ed25519PrivateKey.generate()
    return (
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def write_keypair(path: str | Path) -> tuple[Path, Path]:
    """Write a new key pair: the private key at ``path`` (mode 0600) and the public key at
    ``path.pub``, neither ever overwritten (``FileExistsError`` naming the one that exists,
    and nothing written); return both paths.

    Each key appears at its name only whole (``create_whole``), and a failure to write the
    public key removes the private one: a full disk never leaves a private key beside an
    empty ``.pub``, which every later keygen refused as existing."""
    private_path = Path(path)
    public_path = private_path.with_name(private_path.name + ".pub")
    private_pem, public_pem = generate_keypair()
    # never replace an existing key, private or public (hosts trust the .pub file by name:
    # a new one written over it would silently change what they trust), nor write through
    # a link planted at either name; 0600: the private key is a secret.
    if os.path.lexists(public_path):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(public_path))
    create_whole(private_path, private_pem, mode=0o600)
    try:
        create_whole(public_path, public_pem, mode=0o644)
    except BaseException:
        private_path.unlink(missing_ok=True)  # never half a pair
        raise
    return private_path, public_path


def _read(path: str | Path, what: str) -> bytes:
    try:
        if what == "private key":
            return textfile.read_private(path)
        return textfile.read_trusted(path)
    except OSError as exc:
        raise SigningKeyError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in a PEM file; raise ``SigningKeyError`` otherwise."""
    data = _read(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningKeyError(f"{path} is not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """The Ed25519 public key in a PEM file; raise ``SigningKeyError`` otherwise."""
    data = _read(path, "public key")
    try:
        return load_ed25519_public(data)
    except ValueError as exc:
        raise SigningKeyError(f"{path} {exc}") from None


def load_public_keys(paths: Iterable[str | Path]) -> list[Ed25519PublicKey]:
    """Every public key of ``paths`` (the keys a host trusts to sign its bundles)."""
    return [load_public_key(p) for p in paths]


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The id of a key: SHA-256 (hex) of its raw public bytes."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def signed_message(doc: Mapping[str, Any], signed_at: str | None) -> bytes:
    """The bytes a bundle signature made at ``signed_at`` signs (see the module docstring)."""
    fields = {name: doc.get(name) for name in (*_ENVELOPE_FIELDS, *RELEASE_FIELDS)}
    fields["signed_at"] = signed_at
    return _DOMAIN + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _legacy_message(doc: Mapping[str, Any]) -> bytes:
    fields = {name: doc.get(name) for name in _ENVELOPE_FIELDS}
    return _LEGACY_DOMAIN + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def signature_entry(
    doc: Mapping[str, Any], key: Ed25519PrivateKey, signed_at: str
) -> dict[str, str]:
    """A signature entry for a bundle document: ``{"alg", "key_id", "signed_at", "signature"}``."""
    return {
        "alg": ALGORITHM,
        "key_id": key_id(key),
        "signed_at": signed_at,
        "signature": base64.b64encode(key.sign(signed_message(doc, signed_at))).decode("ascii"),
    }


def verified_entry(
    doc: Mapping[str, Any], keys: Sequence[Ed25519PublicKey]
) -> dict[str, Any] | None:
    """The first signature entry of ``doc`` that one of ``keys`` validly made; None if none.

    Malformed entries are ignored (they verify nothing); only a signature by
    one of ``keys`` over exactly this envelope, release and signing time counts.
    """
    entries = doc.get("signatures")
    if not isinstance(entries, list) or not keys:
        return None
    by_id = {key_id(k): k for k in keys}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("alg") != ALGORITHM:
            continue
        key = by_id.get(str(entry.get("key_id")))
        sig, signed_at = entry.get("signature"), entry.get("signed_at")
        if key is None or not isinstance(sig, str) or not isinstance(signed_at, str):
            continue
        try:
            key.verify(base64.b64decode(sig, validate=True), signed_message(doc, signed_at))
        except (InvalidSignature, binascii.Error, ValueError):
            continue
        return {**entry, "key_id": key_id(key)}
    return None


def verified_by(doc: Mapping[str, Any], keys: Sequence[Ed25519PublicKey]) -> str | None:
    """The id of the first of ``keys`` that validly signed ``doc``; None if none did."""
    entry = verified_entry(doc, keys)
    return str(entry["key_id"]) if entry is not None else None


def legacy_signed(doc: Mapping[str, Any], keys: Sequence[Ed25519PublicKey]) -> bool:
    """True when one of ``keys`` signed ``doc`` in the first format (no revision, no sequence)."""
    entries = doc.get("signatures")
    if not isinstance(entries, list) or not keys:
        return False
    by_id = {key_id(k): k for k in keys}
    message = _legacy_message(doc)
    for entry in entries:
        if not isinstance(entry, dict) or "signed_at" in entry:
            continue
        key = by_id.get(str(entry.get("key_id")))
        sig = entry.get("signature")
        if key is None or not isinstance(sig, str):
            continue
        try:
            key.verify(base64.b64decode(sig, validate=True), message)
        except (InvalidSignature, binascii.Error, ValueError):
            continue
        return True
    return False

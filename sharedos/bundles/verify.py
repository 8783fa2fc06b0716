"""Verify a fetched bundle before anything uses it: signature, content hash, then load.

``BundleVerifier.verify(fetched)`` returns a ``LoadedBundle`` or raises
``BundleRejected`` saying why:

1. **Signature** — with public keys configured, the bundle must carry a
   detached signature (``<bundle>.sig``, base64 ed25519 over the exact bundle
   bytes) by one of them; an unsigned or wrongly signed bundle is refused
   before it is parsed. Without keys a signature is not required (and one
   that is present is not trusted: there is nothing to check it against).
2. **Content hash** — the bundle's declared ``bundle_hash`` must be the hash
   of the program it carries (recomputed), so a program edited after
   compilation, or a hash copied from another bundle, is refused.
3. **Load** — ``sharedos.policy.load_bundle`` (format, compiler version,
   grammar), whose refusal is passed on.

This is the one seam to the policy package's own bundle checks: when
``sharedos.policy`` verifies content hashes and signatures itself, point
``_load`` and ``_check_signature`` at its functions.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sharedos.bundles.source import Fetched

__all__ = ["BundleRejected", "BundleVerifier", "BundledPolicy", "LoadedBundle", "sign_bundle"]


class BundleRejected(Exception):
    """The bundle failed verification; the message says which check and why."""


@dataclass(frozen=True)
class LoadedBundle:
    """A verified bundle in force: the policy, its hash and revision, and where it came from."""

    policy: Any  # sharedos.policy.PolicySet
    bundle_hash: str
    revision: str
    content_sha256: str
    origin: str
    tag: str
    signed_by: str | None = None
    loaded_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def kernel_policy(self) -> Any:
        """The policy to give a ``Kernel``: the bundle's, carrying its revision (``bundle_revision``)."""
        return BundledPolicy(self.policy, self.revision)

    def describe(self) -> str:
        """One line: revision, hash, signer."""
        signer = f", signed by {self.signed_by}" if self.signed_by else ", unsigned"
        return (
            f"revision {self.revision} (bundle {self.bundle_hash[:16]}…{signer}) from {self.origin}"
        )


class BundledPolicy:
    """A compiled policy from a distributed bundle, with the bundle's revision.

    Everything else is the ``PolicySet``'s (attribute access is forwarded), so
    a ``Kernel`` decides with it as with the policy itself; whoever builds a
    turn's SystemIdentity reads ``bundle_revision`` from the kernel's policy.
    """

    __slots__ = ("_policy", "bundle_revision")

    def __init__(self, policy: Any, revision: str) -> None:
        self._policy = policy
        self.bundle_revision = revision

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def _key_id(public_key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def _load_public(pem: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an ed25519 public key")
    return key


def sign_bundle(data: bytes, private_key_pem: bytes) -> bytes:
    """The detached signature (base64 text) of ``data`` by an ed25519 private key in PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(private_key_pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an ed25519 private key")
    return base64.b64encode(key.sign(data)) + b"\n"


class BundleVerifier:
    """Checks bundles against configured public keys (PEM bytes or paths)."""

    def __init__(self, public_keys: Iterable[bytes | str | Path] = ()) -> None:
        self.keys: dict[str, Any] = {}
        for item in public_keys:
            pem = item if isinstance(item, bytes) else Path(item).read_bytes()
            key = _load_public(pem)
            self.keys[_key_id(key)] = key

    @property
    def requires_signature(self) -> bool:
        """True when keys are configured (then every bundle must be signed by one)."""
        return bool(self.keys)

    def _check_signature(self, fetched: Fetched) -> str | None:
        if not self.keys:
            return None
        if fetched.signature is None:
            raise BundleRejected(
                f"{fetched.origin} has no signature ({fetched.origin}.sig), "
                "and this host accepts only signed bundles"
            )
        try:
            signature = base64.b64decode(fetched.signature.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise BundleRejected(f"{fetched.origin}: the signature is not base64") from None
        from cryptography.exceptions import InvalidSignature

        for key_id, key in self.keys.items():
            try:
                key.verify(signature, fetched.data)
            except InvalidSignature:
                continue
            return key_id
        raise BundleRejected(
            f"{fetched.origin}: the signature does not verify with any configured key "
            f"({', '.join(self.keys)})"
        )

    @staticmethod
    def _load(data: bytes, origin: str) -> Any:
        from sharedos.policy.bundle import BundleError, load_bundle

        fd, tmp = tempfile.mkstemp(prefix=".sharedos-bundle-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            return load_bundle(tmp)
        except BundleError as exc:
            raise BundleRejected(str(exc).replace(tmp, origin)) from None
        finally:
            Path(tmp).unlink(missing_ok=True)

    def verify(self, fetched: Fetched) -> LoadedBundle:
        """Signature (when keys are set), content hash, load; ``BundleRejected`` otherwise."""
        signed_by = self._check_signature(fetched)
        try:
            doc = json.loads(fetched.data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleRejected(f"{fetched.origin} is not a policy bundle ({exc})") from None
        declared = doc.get("bundle_hash") if isinstance(doc, dict) else None
        if not isinstance(declared, str) or not declared:
            raise BundleRejected(f"{fetched.origin} declares no bundle_hash")
        policy = self._load(fetched.data, fetched.origin)
        actual = str(policy.bundle_hash)
        if actual != declared:
            raise BundleRejected(
                f"{fetched.origin}: content hash mismatch (declares {declared[:16]}…, "
                f"its program hashes to {actual[:16]}…)"
            )
        content = hashlib.sha256(fetched.data).hexdigest()
        revision = doc.get("revision")
        return LoadedBundle(
            policy=policy,
            bundle_hash=actual,
            revision=str(revision) if isinstance(revision, str | int) else content[:12],
            content_sha256=content,
            origin=fetched.origin,
            tag=fetched.tag,
            signed_by=signed_by,
        )

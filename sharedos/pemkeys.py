"""What a trusted public key file may hold: one PEM public key, and no private key.

``cryptography``'s ``load_pem_public_key`` takes the first ``PUBLIC KEY``
block of a file and ignores the rest. So a ``.pub`` file that also holds the
private key (``cat key key.pub > key.pub`` by mistake) was trusted as if it
were only public, while it put the signing key on every host that reads it;
and a file of several public keys (one file for a key rotation) trusted only
the first, silently. Both are refused before the key is loaded.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["load_ed25519_public", "public_pem_problem"]

_BEGIN = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


def public_pem_problem(data: bytes) -> str | None:
    """Why ``data`` is not a file of exactly one PEM public key (None when it is one, or
    when it holds no PEM block at all: the loader then says it is not PEM)."""
    labels = [m.group(1).decode("ascii") for m in _BEGIN.finditer(data)]
    if any("PRIVATE" in label for label in labels):
        return (
            "holds a private key: a verifier needs only the public key (the .pub file), "
            "and anyone who can read this file can sign"
        )
    if len(labels) > 1:
        return (
            f"holds {len(labels)} PEM blocks, and only the first would be trusted: "
            "give one public key per file (repeat the option, or list each file)"
        )
    return None


def load_ed25519_public(data: bytes) -> Ed25519PublicKey:
    """The one Ed25519 public key a trusted key file holds. ``ValueError`` otherwise, its
    message written to follow the file's name: "holds a private key ...", "is not a PEM
    public key (...)", "is not an Ed25519 public key". Every reader of a key that verifies
    (bundle signatures, evidence seals and checkpoints) loads it here."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    problem = public_pem_problem(data)
    if problem is not None:
        raise ValueError(problem)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"is not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("is not an Ed25519 public key")
    return key

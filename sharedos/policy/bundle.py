"""Bundles: a compiled policy on disk, loadable without parsing, verified on every load.

A bundle is one JSON document (never pickle: a bundle is data, and loading it
runs no code from it)::

    {"format": "sharedos-policy-bundle", "compiler_version": ..., "grammar_sha256": ...,
     "bundle_hash": ..., "program": {...}, "signatures": [...]?}

``load_bundle`` refuses a bundle written by another compiler version or
against another grammar, and one whose program does not match its
``bundle_hash`` (edited after it was compiled), each with a message saying
what to do. With ``trusted_keys`` it also refuses any bundle that no trusted
key signed (``sharedos.policy.signing``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharedos.errors import SharedOSError
from sharedos.policy.grammar import GRAMMAR_VERSION, grammar_sha256
from sharedos.policy.policyset import PolicySet, program_hash

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

BUNDLE_FORMAT = "sharedos-policy-bundle"
#: Version of the compiled program's layout and semantics; bump on any change.
COMPILER_VERSION = f"sharedos-policy-compiler/4 grammar/{GRAMMAR_VERSION}"


class BundleError(SharedOSError, ValueError):
    """A bundle that cannot be loaded (unreadable, malformed, tampered, unsigned, or from another compiler)."""


def bundle_document(policy: PolicySet) -> dict[str, Any]:
    """The JSON document of a bundle of ``policy`` (unsigned)."""
    return {
        "format": BUNDLE_FORMAT,
        "compiler_version": COMPILER_VERSION,
        "grammar_sha256": grammar_sha256(),
        "bundle_hash": policy.bundle_hash,
        "program": policy.program,
    }


def write_document(doc: dict[str, Any], path: str | Path) -> None:
    """Write a bundle document atomically (a reader never sees half a bundle)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".bundle-", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, separators=(",", ":"), ensure_ascii=False)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def save_bundle(policy: PolicySet, path: str | Path) -> None:
    """Write ``policy`` atomically to ``path`` as a JSON bundle."""
    write_document(bundle_document(policy), path)


def read_document(path: str | Path) -> dict[str, Any]:
    """Read and verify a bundle document: format, compiler, grammar and hash.

    Raise ``BundleError`` with what to do when any check fails.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise BundleError(f"cannot read bundle {path}: {exc.strerror or exc}") from None
    # json.loads allocates many containers and no cycles; with the collector
    # on, a large host heap turns that into repeated full collections
    # (measured: 0.8 s instead of 30 ms for a 10,000-rule bundle).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        doc: Any = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BundleError(f"{path} is not a policy bundle (not JSON: {exc})") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    if not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path} is not a policy bundle (missing format {BUNDLE_FORMAT!r})")
    version = doc.get("compiler_version")
    if version != COMPILER_VERSION:
        raise BundleError(
            f"bundle {path} was compiled by {version!r}, but this is {COMPILER_VERSION!r}; "
            "recompile it from source with `sharedos-policy compile`"
        )
    if doc.get("grammar_sha256") != grammar_sha256():
        raise BundleError(
            f"bundle {path} was compiled against a different grammar file; "
            "recompile it from source with `sharedos-policy compile`"
        )
    program = doc.get("program")
    if not isinstance(program, dict):
        raise BundleError(f"bundle {path} is malformed: no program")
    stored = doc.get("bundle_hash")
    try:
        actual = program_hash(program)
    except (TypeError, ValueError, RecursionError) as exc:
        raise BundleError(f"bundle {path} is malformed: {exc}") from None
    if stored != actual:
        raise BundleError(
            f"bundle {path} does not match its bundle_hash: its program was changed after it "
            "was compiled; refusing to load it (recompile it from source with "
            "`sharedos-policy compile`)"
        )
    return doc


def load_bundle(
    path: str | Path, *, trusted_keys: Sequence[Ed25519PublicKey] | None = None
) -> PolicySet:
    """Load a bundle written by this compiler version; raise ``BundleError`` otherwise.

    The program must match its ``bundle_hash``. With ``trusted_keys`` (a
    host's configured keys) the bundle must also carry a valid Ed25519
    signature by one of them; an empty sequence trusts nothing.
    """
    doc = read_document(path)
    if trusted_keys is not None:
        from sharedos.policy.signing import verified_by

        if verified_by(doc, trusted_keys) is None:
            signed = bool(doc.get("signatures"))
            raise BundleError(
                f"bundle {path} is "
                + ("not signed by any trusted key" if signed else "not signed")
                + "; this host loads only bundles signed by its configured keys "
                "(sign it with `sharedos-policy sign`)"
            )
    try:
        return PolicySet(doc["program"], bundle_hash=doc["bundle_hash"])
    except Exception as exc:  # malformed program: refuse, do not half-load
        raise BundleError(f"bundle {path} is malformed: {type(exc).__name__}: {exc}") from None


def sign_bundle(path: str | Path, key: Ed25519PrivateKey) -> str:
    """Add a signature by ``key`` to the bundle at ``path`` (verified first); return the key id.

    A signature by the same key replaces the previous one; others are kept.
    """
    from sharedos.policy.signing import key_id, signature_entry

    doc = read_document(path)
    mine = key_id(key)
    kept = [
        s for s in doc.get("signatures") or [] if isinstance(s, dict) and s.get("key_id") != mine
    ]
    doc["signatures"] = [*kept, signature_entry(doc, key)]
    write_document(doc, path)
    return mine


def verify_bundle(path: str | Path, keys: Sequence[Ed25519PublicKey]) -> str:
    """The id of the key in ``keys`` that signed the (verified) bundle; raise ``BundleError`` if none."""
    from sharedos.policy.signing import verified_by

    doc = read_document(path)
    found = verified_by(doc, keys)
    if found is None:
        raise BundleError(
            f"bundle {path} carries no valid signature by "
            + ("that key" if len(keys) == 1 else "any of those keys")
        )
    return found

"""Verify a fetched bundle before anything uses it, with the policy package's own checks.

``BundleVerifier.verify(fetched)`` returns a ``LoadedBundle`` or raises
``BundleRejected`` saying why. The checks are ``sharedos.policy.bundle``'s
(``load_bundle``), the same a host runs on a bundle file:

1. format, compiler version and grammar (a bundle from another compiler is
   refused with how to rebuild it);
2. the content hash — the program must match its ``bundle_hash``, so a
   program edited after compilation is refused;
3. with public keys configured, a valid Ed25519 signature by one of them in
   the bundle's ``signatures`` (``sharedos-policy sign``), which covers the
   envelope, the release (``revision``, ``sequence``) and the signing time;
   without keys no signature is required (and the release is only a claim);
4. the release fields are well formed: ``sequence`` a positive integer,
   ``revision`` a non-empty string (both optional in an unsigned bundle).

Whether a verified bundle may replace the one in force (its sequence is not
lower: no rollback) is the manager's decision, not the verifier's.

The bytes are checked exactly as fetched (written to a private temporary
file for ``load_bundle``); nothing from an unverified bundle is used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sharedos.bundles.source import Fetched
from sharedos.errors import BundleDistributionError

__all__ = ["BundleRejected", "BundleVerifier", "BundledPolicy", "LoadedBundle"]


class BundleRejected(BundleDistributionError):
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
    #: the release's place in the publisher's order (0: the bundle declares none)
    sequence: int = 0
    #: when the signature this host trusted was made (None: unsigned, or no keys configured)
    signed_at: str | None = None
    loaded_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def revision_declared(self) -> bool:
        """True when the bundle names its revision (else it is its bytes' SHA-256 prefix,
        which changes whenever the file does: another signature, a re-signing)."""
        return self.revision != self.content_sha256[:12]

    @property
    def kernel_policy(self) -> Any:
        """The policy to give a ``Kernel``: the bundle's, carrying its revision (``bundle_revision``)."""
        return BundledPolicy(self.policy, self.revision)

    def describe(self) -> str:
        """One line: revision, hash, signer."""
        signer = (
            f", signed by key {self.signed_by[:16]}… at {self.signed_at}"
            if self.signed_by
            else ", unsigned"
        )
        sequence = f", sequence {self.sequence}" if self.sequence else ""
        return (
            f"revision {self.revision} (bundle {self.bundle_hash[:16]}…{sequence}{signer}) "
            f"from {self.origin}"
        )


class BundledPolicy:
    """A compiled policy from a distributed bundle, with the bundle's revision.

    Everything else is the ``PolicySet``'s (attribute access is forwarded), so
    a ``Kernel`` decides with it as with the policy itself; whoever builds a
    turn's SystemIdentity reads ``bundle_revision`` from the kernel's policy.
    """

    __slots__ = ("_policy", "bundle_kept", "bundle_revision")

    def __init__(self, policy: Any, revision: str, *, kept: bool = False) -> None:
        self._policy = policy
        self.bundle_revision = revision
        #: put in force from the host's kept copy (its source failed): on every record
        self.bundle_kept = kept

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


class BundleVerifier:
    """Checks bundles against configured public keys (PEM bytes, or paths of PEM files)."""

    def __init__(self, public_keys: Iterable[bytes | str | Path] = ()) -> None:
        from sharedos.pemkeys import load_ed25519_public
        from sharedos.policy.signing import load_public_key

        self.keys: list[Any] = []
        for item in public_keys:
            if isinstance(item, bytes):
                try:
                    key = load_ed25519_public(item)
                except ValueError as exc:
                    raise ValueError(f"a trusted key {exc}") from None
            else:
                key = load_public_key(item)  # SigningKeyError is a ValueError
            self.keys.append(key)

    @property
    def requires_signature(self) -> bool:
        """True when keys are configured (then every bundle must be signed by one)."""
        return bool(self.keys)

    def verify(self, fetched: Fetched) -> LoadedBundle:
        """Every check of ``load_bundle`` on the fetched bytes; ``BundleRejected`` otherwise."""
        from sharedos.policy.bundle import BundleError, load_bundle_data
        from sharedos.policy.signing import verified_entry

        # in memory: the bytes verified are the bytes loaded (no file an upstream running
        # as this uid could rewrite between the two), and a temporary directory that is
        # full or read-only cannot stop a host from verifying its policy (the write there
        # raised out of every poll: a traceback from ``sharedos run``)
        try:
            policy, doc = load_bundle_data(
                fetched.data, fetched.origin, trusted_keys=self.keys or None
            )
        except BundleError as exc:
            raise BundleRejected(str(exc)) from None
        entry = verified_entry(doc, self.keys) if self.keys else None
        content = hashlib.sha256(fetched.data).hexdigest()
        revision, sequence = _release(doc, fetched.origin)
        return LoadedBundle(
            policy=policy,
            bundle_hash=str(policy.bundle_hash),
            revision=revision if revision is not None else content[:12],
            content_sha256=content,
            origin=fetched.origin,
            tag=fetched.tag,
            signed_by=str(entry["key_id"]) if entry is not None else None,
            sequence=sequence,
            signed_at=str(entry["signed_at"]) if entry is not None else None,
        )


def _release(doc: dict[str, Any], origin: str) -> tuple[str | None, int]:
    """(revision, sequence) of a bundle document; ``BundleRejected`` when malformed."""
    from sharedos.policy.bundle import BundleError, release_of

    try:
        return release_of(doc, origin)
    except BundleError as exc:
        raise BundleRejected(str(exc)) from None

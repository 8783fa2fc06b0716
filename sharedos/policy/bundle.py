"""Bundles: a compiled policy on disk, loadable without parsing, verified on every load.

A bundle is one JSON document (never pickle: a bundle is data, and loading it
runs no code from it)::

    {"format": "sharedos-policy-bundle", "compiler_version": ..., "grammar_sha256": ...,
     "bundle_hash": ..., "signatures": [...]?, "program": {...}}

The program is written last, in its canonical JSON form (sorted keys, no
spaces: exactly the bytes ``bundle_hash`` is the SHA-256 of), so a load
hashes those bytes as they are and parses them once; a bundle written any
other way (reformatted by a tool, keys reordered) still loads, through a
slower path that parses the whole document and re-serializes the program
to check its hash. Either way the program that runs is exactly the one
whose hash was checked.

``load_bundle`` refuses a bundle written by another compiler version or
against another grammar, one whose program does not match its
``bundle_hash`` (edited after it was compiled), and one whose program is not
what the compiler writes, each with a message saying what to do. With
``trusted_keys`` it also refuses any bundle that no trusted key signed
(``sharedos.policy.signing``).
"""

from __future__ import annotations

import gc
import hashlib
import json
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharedos import textfile
from sharedos.atomicfile import write_atomically
from sharedos.errors import PolicyLanguageError
from sharedos.policy.grammar_id import GRAMMAR_VERSION, grammar_sha256
from sharedos.policy.jsonvalues import loads
from sharedos.policy.policyset import PolicySet, canonical_program

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

BUNDLE_FORMAT = "sharedos-policy-bundle"
#: Version of the compiled program's layout and semantics; bump on any change. It names
#: the Unicode database of the Python that compiled it too: ``lower()`` and the NFC checks
#: read the running Python's ``unicodedata``, so one program decides differently under
#: another database (a letter added since folds to another one), and a host with another
#: one refuses the bundle (the version is signed, as the compiler's identity).
COMPILER_VERSION = (
    f"sharedos-policy-compiler/8 grammar/{GRAMMAR_VERSION} unicode/{unicodedata.unidata_version}"
)

_PROGRAM_MARK = b',"program":'


class BundleError(PolicyLanguageError, ValueError):
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


def write_document(doc: dict[str, Any], path: str | Path, *, body: bytes | None = None) -> None:
    """Write a bundle document atomically (a reader never sees half a bundle).

    The program goes last, as its canonical JSON (``body`` when the caller
    has it already), so that a load can hash it without re-serializing it.
    """
    envelope = {k: v for k, v in doc.items() if k != "program"}
    if body is None:
        body = canonical_program(doc["program"])
    head = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    data = (
        head[:-1].encode("utf-8", "surrogatepass")
        + (_PROGRAM_MARK if envelope else _PROGRAM_MARK[1:])
        + body
        + b"}"
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(target, data, mode=0o600, exact_mode=True)


def save_bundle(policy: PolicySet, path: str | Path) -> None:
    """Write ``policy`` atomically to ``path`` as a JSON bundle."""
    body = canonical_program(policy.program)
    doc = bundle_document(policy)
    write_document(doc, path, body=body)


def _fast_read(raw: bytes) -> tuple[dict[str, Any], bytes] | None:
    """The envelope and the program bytes of a bundle this module wrote, when the
    program's bytes hash to the envelope's ``bundle_hash``; else None (slow path)."""
    # The writer puts the program after the envelope, whose fields never hold the
    # mark (a '"' inside a JSON string is escaped), so the first mark is the one.
    at = raw.find(_PROGRAM_MARK)
    if at <= 0 or not raw.endswith(b"}"):
        return None
    body = raw[at + len(_PROGRAM_MARK) : -1]
    try:
        envelope = loads(raw[:at] + b"}")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(envelope, dict):
        return None
    stored = envelope.get("bundle_hash")
    if type(stored) is not str or hashlib.sha256(body).hexdigest() != stored:
        return None
    return envelope, body


def _read(path: str | Path) -> tuple[dict[str, Any], bytes | None]:
    """Read and verify a bundle: its document and, when read fast, the program's bytes."""
    try:
        raw = textfile.read_bytes(path)
    except OSError as exc:
        raise BundleError(f"cannot read bundle {path}: {exc.strerror or exc}") from None
    return _parse(raw, path)


def _parse(raw: bytes, path: str | Path) -> tuple[dict[str, Any], bytes | None]:
    """``_read`` of a bundle's bytes (``path``: where they were read, for messages)."""
    # json.loads allocates many containers and no cycles; with the collector
    # on, a large host heap turns that into repeated full collections.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        fast = _fast_read(raw)
        body: bytes | None = None
        if fast is not None:
            doc, body = fast
            source: bytes = body
        else:
            source = raw
        try:
            parsed: Any = loads(source)  # no NaN or infinity: not JSON, refused
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise BundleError(f"{path} is not a policy bundle (not JSON: {exc})") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    if fast is not None:
        doc = dict(doc)
        doc["program"] = parsed
    else:
        doc = parsed
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
    if fast is None:
        try:
            actual = hashlib.sha256(canonical_program(program)).hexdigest()
        except (TypeError, ValueError, RecursionError) as exc:
            raise BundleError(f"bundle {path} is malformed: {exc}") from None
        if doc.get("bundle_hash") != actual:
            raise BundleError(
                f"bundle {path} does not match its bundle_hash: its program was changed after "
                "it was compiled; refusing to load it (recompile it from source with "
                "`sharedos-policy compile`)"
            )
    return doc, body


def read_document(path: str | Path) -> dict[str, Any]:
    """Read and verify a bundle document: format, compiler, grammar and hash.

    Raise ``BundleError`` with what to do when any check fails.
    """
    return _read(path)[0]


def load_bundle(
    path: str | Path, *, trusted_keys: Sequence[Ed25519PublicKey] | None = None
) -> PolicySet:
    """Load a bundle written by this compiler version; raise ``BundleError`` otherwise.

    The program must match its ``bundle_hash``. With ``trusted_keys`` (a
    host's configured keys) the bundle must also carry a valid Ed25519
    signature by one of them; an empty sequence trusts nothing.
    """
    return _policy_of(_trusted(read_document(path), path, trusted_keys), path)


def load_bundle_data(
    data: bytes, origin: str, *, trusted_keys: Sequence[Ed25519PublicKey] | None = None
) -> tuple[PolicySet, dict[str, Any]]:
    """``load_bundle`` of a bundle's bytes (fetched from ``origin``, which messages name),
    in memory, and its document: no file is written, so a full or read-only temporary
    directory cannot stop a host verifying its policy."""
    doc = _parse(data, origin)[0]
    return _policy_of(_trusted(doc, origin, trusted_keys), origin), doc


def _trusted(
    doc: dict[str, Any], path: str | Path, trusted_keys: Sequence[Ed25519PublicKey] | None
) -> dict[str, Any]:
    """``doc``, when ``trusted_keys`` is None or one of them signed it; ``BundleError``."""
    if trusted_keys is not None:
        from sharedos.policy.signing import legacy_signed, verified_by

        if verified_by(doc, trusted_keys) is None:
            signed = bool(doc.get("signatures"))
            if legacy_signed(doc, trusted_keys):
                raise BundleError(
                    f"bundle {path} is signed in the first signature format, which does not "
                    "cover its revision or sequence; re-sign it with `sharedos-policy sign`"
                )
            raise BundleError(
                f"bundle {path} is "
                + ("not signed by any trusted key" if signed else "not signed")
                + "; this host loads only bundles signed by its configured keys "
                "(sign it with `sharedos-policy sign`)"
            )
    return doc


def _policy_of(doc: dict[str, Any], path: str | Path) -> PolicySet:
    """The policy of a verified bundle document; ``BundleError`` when its program, though it
    matches its hash, is not one a host can run (what ``sign_bundle`` signs and
    ``verify_bundle`` passes must be what ``load_bundle`` loads)."""
    try:
        return PolicySet(doc["program"], bundle_hash=doc["bundle_hash"])
    except Exception as exc:  # malformed program: refuse, do not half-load
        raise BundleError(f"bundle {path} is malformed: {type(exc).__name__}: {exc}") from None


def release_of(doc: dict[str, Any], where: str | Path) -> tuple[str | None, int]:
    """(revision, sequence) of a bundle document, as a host reads them (sequence 0: none
    declared); ``BundleError`` when either is malformed: ``sequence`` must be a positive
    integer and ``revision`` a non-empty string (or integer). What ``sign_bundle`` signs
    and ``verify_bundle`` passes is what a host would take."""
    from sharedos.terminal import unambiguous

    revision, sequence = doc.get("revision"), doc.get("sequence")
    # a revision is a label people read (``bundle verify``, a host's log, ``sharedos run``,
    # rollback refusals, each turn's identity): one holding a character not shown as itself
    # (an escape sequence, a carriage return, a bidi override) would rewrite those lines
    if revision is not None and (
        type(revision) not in (str, int)
        or not str(revision).strip()
        or unambiguous(str(revision)) != str(revision)
    ):
        raise BundleError(
            f"bundle {where} has a malformed revision {unambiguous(repr(revision))} (a "
            "non-empty string without control, bidi or invisible characters)"
        )
    if sequence is not None and (type(sequence) is not int or sequence < 1):
        raise BundleError(
            f"bundle {where} has a malformed sequence {sequence!r} (a positive integer)"
        )
    return (str(revision) if revision is not None else None), (sequence or 0)


def default_sequence() -> int:
    """The sequence a bundle is signed with when none is given: the signing time in
    microseconds since 1970, so a later signing orders after an earlier one."""
    import time

    return time.time_ns() // 1000


def sign_bundle(
    path: str | Path,
    key: Ed25519PrivateKey,
    *,
    revision: str | None = None,
    sequence: int | None = None,
    signed_at: str | None = None,
) -> str:
    """Add a signature by ``key`` to the bundle at ``path`` (verified first); return the key id.

    The signature covers the envelope, the release (``revision``, ``sequence``)
    and its own signing time (``sharedos.policy.signing``). ``revision`` and
    ``sequence`` replace the bundle's own when given; a bundle with no sequence
    gets ``default_sequence()``. A signature by the same key replaces the
    previous one; others are kept while the release they signed is unchanged.
    """
    from datetime import UTC, datetime

    from sharedos.policy.signing import key_id, signature_entry

    if sequence is not None and (type(sequence) is not int or sequence < 1):
        raise BundleError(f"a bundle sequence must be a positive integer, not {sequence!r}")
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise BundleError("a bundle revision must be a non-empty string")
    doc, body = _read(path)
    _policy_of(doc, path)  # never sign a program every host refuses to run
    before = (doc.get("revision"), doc.get("sequence"))
    if revision is not None:
        doc["revision"] = revision
    if sequence is not None:
        doc["sequence"] = sequence
    elif doc.get("sequence") is None:
        doc["sequence"] = default_sequence()
    release_of(doc, path)  # never sign a release a host would refuse as malformed
    mine = key_id(key)
    kept = [
        s for s in doc.get("signatures") or [] if isinstance(s, dict) and s.get("key_id") != mine
    ]
    if (doc.get("revision"), doc.get("sequence")) != before:
        kept = []  # they signed another release: they would verify nothing
    when = signed_at or datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    doc["signatures"] = [*kept, signature_entry(doc, key, when)]
    write_document(doc, path, body=body)
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
    release_of(doc, path)  # a host refuses a malformed release, signed or not
    _policy_of(doc, path)  # and a program it cannot run, however well signed
    return found

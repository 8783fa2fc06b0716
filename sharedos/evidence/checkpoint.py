"""Store-wide checkpoints: signed heads over every turn, chained like a transparency log's.

A turn's own chain catches an edited, inserted, reordered or deleted row
inside the turn, and a signed seal anchors a closed turn. Neither can tell
that a *whole turn* was deleted, or that the last rows of a turn that was
never sealed (a host that died, a turn still running) were cut off: what is
left is a valid chain. A checkpoint closes that gap:

* each host remembers the heads it committed since its last checkpoint
  (``turn_id -> (pos, hash)``: a dict update per commit), and every
  ``checkpoint_interval_s`` (and when its store closes) writes a
  **checkpoint**: those heads (``checkpoint_heads``) and one row
  (``checkpoints``) numbered after the store's last one and chained to it by
  ``prev``, hashed, and signed with the host's key (``[evidence] sign_key``);
* checkpoints of all hosts writing one store form one chain (two hosts that
  take the same number collide on the primary key; the loser re-reads the
  last checkpoint and numbers after it);
* ``sharedos evidence checkpoint`` exports a checkpoint (a few hundred
  bytes of JSON) to keep elsewhere; ``sharedos evidence verify --since FILE``
  later checks that the store still holds that checkpoint with the same hash,
  that the checkpoint chain up to it recomputes from the heads it lists, and
  that every turn still holds, with the same hash, every head the
  checkpoints recorded for it (each one: a later checkpoint never vouches
  for what an earlier one covered).

So anything committed before a checkpoint — a whole turn, the tail of an
unsealed turn — cannot be removed without the verifier noticing: removing
the heads too changes the checkpoint hashes, which no longer reach the
exported one (and no longer carry the host's signature). What it cannot see:
rows committed after the last checkpoint an auditor holds (or, without an
exported one, after the last checkpoint whose removal a signature would
show), and rows a host never wrote.

The hash of a checkpoint is ``sha256:`` + SHA-256 of the RFC 8785 encoding of
``{"kind": "checkpoint", "number", "store_id", "taken_at", "prev", "heads",
"heads_hash", "key_id"}``; ``heads_hash`` is SHA-256 over one line per head,
``["turn_id",pos,"hash"]`` in RFC 8785, ``\\n``-terminated, in code-point
order of the turn ids; checkpoint 1's ``prev`` is SHA-256 of
``sharedos-evidence-checkpoints/1\\n<store_id>``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sharedos import canonical
from sharedos.errors import EvidenceError
from sharedos.evidence.chain import Problem, Signer, verify_seal_signature

__all__ = [
    "FORMAT",
    "Checkpoint",
    "CheckpointTaken",
    "check_chain",
    "checkpoint_genesis",
    "heads_hash",
    "make_checkpoint",
]

FORMAT = "sharedos-evidence-checkpoint/1"

Head = tuple[str, int, str]  # (turn_id, pos, hash)


class CheckpointTaken(EvidenceError):
    """Another writer took the checkpoint number first: re-read the last one and number after it."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One signed head over the store (see the module docstring)."""

    number: int
    store_id: str
    taken_at: str
    prev: str
    heads: int
    heads_hash: str
    key_id: str | None
    signature: str | None
    hash: str

    def to_dict(self) -> dict[str, Any]:
        """The exported form (``sharedos evidence checkpoint``)."""
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Checkpoint:
        """The checkpoint an exported JSON object describes; ``ValueError`` when it is not one."""
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"not an evidence checkpoint (no format {FORMAT!r})")
        try:
            made = cls(**{k: v for k, v in data.items() if k != "format"})
        except TypeError as exc:
            raise ValueError(f"not an evidence checkpoint ({exc})") from None
        if type(made.number) is not int or made.number < 1 or not isinstance(made.hash, str):
            raise ValueError("not an evidence checkpoint (malformed number or hash)")
        texts = (made.store_id, made.taken_at, made.prev, made.heads_hash)
        if type(made.heads) is not int or not all(isinstance(t, str) for t in texts):
            raise ValueError("not an evidence checkpoint (a field of the wrong type)")
        if not all(v is None or isinstance(v, str) for v in (made.key_id, made.signature)):
            raise ValueError("not an evidence checkpoint (a key id or signature that is no string)")
        return made

    @classmethod
    def load(cls, text: str) -> Checkpoint:
        """From exported JSON text; ``ValueError`` when it is not a checkpoint."""
        try:
            data = json.loads(text)
        except RecursionError:  # nested past the decoder's depth
            raise ValueError("not an evidence checkpoint (JSON nested too deeply)") from None
        except ValueError as exc:
            raise ValueError(f"not an evidence checkpoint (not JSON: {exc})") from None
        return cls.from_dict(data)

    def expected_hash(self) -> str:
        """The hash this checkpoint's fields give; a text that is no hash (so it matches
        no stored or exported one) when they have none: a number or count past what
        RFC 8785 encodes (2**53 - 1; no host numbers or counts that far), put in the
        store or an exported file by whoever could write it -- a finding, not a crash."""
        try:
            return checkpoint_hash(
                self.number,
                self.store_id,
                self.taken_at,
                self.prev,
                self.heads,
                self.heads_hash,
                self.key_id,
            )
        except (TypeError, ValueError) as exc:  # rfc8785's IntegerDomainError is a ValueError
            return f"unhashable: {exc}"

    def line(self, *, signature_checked: bool = False) -> str:
        """One human line. It says "signed by" a key only when ``signature_checked`` (the
        caller verified the signature, or made it): a checkpoint's ``key_id`` and
        ``signature`` are what the store holds, and anyone who can write the store can
        name a host's key on a checkpoint that key never signed."""
        if not self.key_id:
            signed = ", unsigned"
        elif self.signature is None:
            signed = f", naming key {self.key_id[:16]}… but carrying no signature"
        elif signature_checked:
            signed = f", signed by key {self.key_id[:16]}…"
        else:
            signed = (
                f", with a signature by key {self.key_id[:16]}… not checked here "
                "(`sharedos evidence verify --key` checks it)"
            )
        return (
            f"checkpoint {self.number} of store {self.store_id} taken {self.taken_at}: "
            f"{self.heads} turn head(s){signed}, hash {self.hash}"
        )


def checkpoint_genesis(store_id: str) -> str:
    """The ``prev`` of a store's first checkpoint."""
    seed = f"sharedos-evidence-checkpoints/1\n{store_id}".encode("utf-8", "backslashreplace")
    return canonical.tag(seed)


def heads_hash(heads: Iterable[Head]) -> str:
    """The hash of a checkpoint's heads (sorted here by turn id)."""
    digest = hashlib.sha256()
    for turn_id, pos, hash_ in sorted(heads):
        line = f"[{canonical.scalar(turn_id)},{int(pos)},{canonical.scalar(hash_)}]\n"
        digest.update(line.encode("utf-8", "backslashreplace"))
    return canonical.PREFIX + digest.hexdigest()


def checkpoint_hash(
    number: int,
    store_id: str,
    taken_at: str,
    prev: str,
    heads: int,
    heads_hash_: str,
    key_id: str | None,
) -> str:
    """``sha256:`` + SHA-256 of the checkpoint's canonical encoding."""
    body = canonical.dumps(
        {
            "kind": "checkpoint",
            "number": number,
            "store_id": store_id,
            "taken_at": taken_at,
            "prev": prev,
            "heads": heads,
            "heads_hash": heads_hash_,
            "key_id": key_id,
        }
    )
    return canonical.tag(body)


def make_checkpoint(
    number: int,
    store_id: str,
    prev: str,
    heads: Sequence[Head],
    signer: Signer | None,
    taken_at: str,
) -> Checkpoint:
    """Checkpoint ``number`` over ``heads``, after ``prev``, signed when there is a signer."""
    hh = heads_hash(heads)
    key_id = signer.key_id if signer is not None else None
    h = checkpoint_hash(number, store_id, taken_at, prev, len(heads), hh, key_id)
    return Checkpoint(
        number=number,
        store_id=store_id,
        taken_at=taken_at,
        prev=prev,
        heads=len(heads),
        heads_hash=hh,
        key_id=key_id,
        signature=signer.sign(h) if signer is not None else None,
        hash=h,
    )


def _problem(kind: str, number: int | None, detail: str) -> Problem:
    return Problem(kind, "", number, None, detail, checkpoint=number)


def check_chain(
    checkpoints: Iterable[tuple[Checkpoint, list[Head]]],
    *,
    store_id: str | None,
    public_keys: Mapping[str, Any] | None = None,
    since: Checkpoint | None = None,
) -> tuple[list[Problem], int]:
    """Walk a store's checkpoints (in number order, each with its heads); (problems, how many).

    Each must hash to what it says, list the heads its ``heads_hash`` covers,
    follow the one before it (numbers from 1, ``prev`` its hash) and, with
    ``public_keys``, carry a valid signature by one of them. With ``since``
    (an exported checkpoint) the store must still hold that checkpoint,
    unchanged. ``store_id``: the store's own (``meta.store_id``); "" when the store
    names none (every checkpoint names its store: the store's was removed), None when
    it is not known (nothing compared).
    """
    problems: list[Problem] = []
    expected, prev, seen = 1, None, 0
    matched = since is None
    if since is not None and store_id and since.store_id != store_id:
        problems.append(
            _problem(
                "edited",
                since.number,
                f"the checkpoint given is of store {since.store_id}, not of this store ({store_id})",
            )
        )
        matched = True
    elif since is not None and since.expected_hash() != since.hash:
        # an exported file edited after export (a number, a time, a count changed and its
        # hash kept): what it says is not what it anchors, so it anchors nothing, and the
        # store is not blamed for what the file says
        problems.append(
            _problem(
                "edited",
                since.number,
                "the checkpoint given does not match its hash: the file was edited after it "
                "was exported, so it cannot anchor this verification (export it again)",
            )
        )
        since, matched = None, True
    if since is not None and public_keys is not None:
        _check_signature(since, public_keys, problems, "the checkpoint given")
    for cp, heads in checkpoints:
        seen += 1
        if prev is None:
            prev = checkpoint_genesis(cp.store_id)
        if cp.number != expected:
            gone = f"{expected}" if cp.number == expected + 1 else f"{expected} to {cp.number - 1}"
            problems.append(_problem("deleted", expected, f"checkpoint(s) {gone} are gone"))
        if store_id == "":
            problems.append(
                _problem(
                    "edited",
                    cp.number,
                    f"names store {cp.store_id}, but the store names none (its store_id "
                    "was removed from its meta table)",
                )
            )
        elif store_id is not None and cp.store_id != store_id:
            problems.append(_problem("edited", cp.number, f"names another store ({cp.store_id})"))
        if heads_hash(heads) != cp.heads_hash or len(heads) != cp.heads:
            problems.append(
                _problem("edited", cp.number, "the turn heads it lists are not the ones it hashed")
            )
        if cp.expected_hash() != cp.hash:
            problems.append(_problem("edited", cp.number, "the checkpoint does not match its hash"))
        elif cp.prev != prev:
            problems.append(
                _problem(
                    "deleted",
                    cp.number,
                    "the checkpoint does not follow the one before it "
                    "(one was removed, or the chain rewritten)",
                )
            )
        if public_keys is not None:
            _check_signature(cp, public_keys, problems, f"checkpoint {cp.number}")
        if since is not None and cp.number == since.number:
            matched = True
            if cp.hash != since.hash:
                problems.append(
                    _problem(
                        "edited",
                        cp.number,
                        f"the store's checkpoint {cp.number} is not the one given "
                        f"(taken {since.taken_at}, hash {since.hash}): the store was rewritten",
                    )
                )
        expected, prev = cp.number + 1, cp.hash
    if not matched and since is not None:
        problems.append(
            _problem(
                "deleted",
                since.number,
                f"checkpoint {since.number} (taken {since.taken_at}) is gone: the store holds "
                + (f"checkpoints up to {expected - 1}" if seen else "no checkpoint")
                + ", so what was committed before it may have been removed",
            )
        )
    return problems, seen


def _check_signature(
    cp: Checkpoint, public_keys: Mapping[str, Any], problems: list[Problem], what: str
) -> None:
    key = public_keys.get(str(cp.key_id)) if cp.key_id else None
    if key is None or cp.signature is None:
        problems.append(
            _problem("signature", cp.number, f"{what} is not signed by a trusted key ({cp.key_id})")
        )
    elif not verify_seal_signature(key, cp.hash, cp.signature):
        problems.append(_problem("signature", cp.number, f"{what}'s signature does not verify"))

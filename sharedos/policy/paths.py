"""Canonical filesystem-like paths: the one place ``..`` and ``//`` are resolved.

Policy decisions are made on the canonical form only, and the files tools act
on the canonical form the decision names, so the two can never disagree about
which file a call touches. There is deliberately no percent-decoding:
``%2e%2e`` is a literal segment name, never ``..``.
"""

from __future__ import annotations

import re
import unicodedata

from sharedos.errors import PolicyLanguageError

#: Longest path accepted, in characters (longer is unresolvable, not truncated).
MAX_PATH_CHARS = 4096

# C0 controls, DEL and C1 controls. NUL is the one that matters most (it
# truncates paths in C APIs); the rest have no business in a resource name.
# Lone surrogates (JSON can carry "\udc80") are not text: the OS would map them
# to raw bytes (surrogateescape) and no evidence store can record them.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_is_normalized = unicodedata.is_normalized


class UnresolvablePath(PolicyLanguageError, ValueError):
    """A value that has no canonical absolute path (the call is denied ``unresolvable_resource``)."""


def canonical_path(value: object) -> str:
    """Return the canonical absolute form of ``value`` or raise ``UnresolvablePath``.

    Promises: the result starts with ``/``; has no empty, ``.`` or ``..``
    segment; no trailing slash (except ``/`` itself); no control character;
    it is in Unicode NFC. Non-strings, relative paths, NUL/control characters,
    text not in NFC, over-long values and a ``..`` that would climb above
    ``/`` are refused.
    """
    if type(value) is not str:
        raise UnresolvablePath(f"a path must be a string, got {type(value).__name__}")
    if len(value) > MAX_PATH_CHARS:
        raise UnresolvablePath(f"path is longer than {MAX_PATH_CHARS} characters")
    if not value.startswith("/"):
        raise UnresolvablePath(f"path {_show(value)} is not absolute")
    # The common case (already canonical, nothing suspicious) is answered with
    # C-level string scans; anything else takes the careful path below.
    # (isprintable() is False for every control character, and for a few
    # other code points, which merely take the careful path.)
    if (
        value.isprintable()
        and "//" not in value
        and "/." not in value
        and (value[-1] != "/" or len(value) == 1)
        and (value.isascii() or _is_normalized("NFC", value))
    ):
        return value
    if _CONTROL_RE.search(value) is not None:
        raise UnresolvablePath(
            f"path {_show(value)} contains a NUL or control character or a lone surrogate"
        )
    if not (value.isascii() or _is_normalized("NFC", value)):
        # one spelling per name: an NFD 'café' must not pass a forbid written in NFC
        raise UnresolvablePath(
            f"path {_show(value)} is not in Unicode normalization form C (NFC); send it normalized"
        )
    if "//" not in value and "/." not in value and (value[-1] != "/" or len(value) == 1):
        return value  # printable-or-not aside, already canonical
    parts: list[str] = []
    for seg in value.split("/"):
        if seg == "" or seg == ".":
            continue
        if seg == "..":
            if not parts:
                raise UnresolvablePath(f"path {_show(value)} climbs above '/'")
            parts.pop()
            continue
        parts.append(seg)
    return "/" + "/".join(parts)


def path_segments(canonical: str) -> tuple[str, ...]:
    """Segments of a canonical path: ``/a/b`` -> ``("a", "b")``, ``/`` -> ``()``."""
    return tuple(canonical[1:].split("/")) if len(canonical) > 1 else ()


def _show(value: str) -> str:
    # whole, never cut: the message is scrubbed of secrets after it is made (and capped
    # only then), and a value cut here would keep the part of a secret before the cut
    return repr(value)

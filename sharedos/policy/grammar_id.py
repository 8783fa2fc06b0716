"""Which grammar a compiled program was built against (no parser needed to know it).

Bundles record the grammar's version and the SHA-256 of its text, and a
bundle built against another grammar is refused; loading a bundle and
deciding must not pay for importing the parser, so these live here rather
than in ``grammar``.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from sharedos.resources import grammar_path

#: Bumped whenever the meaning of the grammar changes (part of the compiler version).
GRAMMAR_VERSION = "4"


@lru_cache(maxsize=1)
def grammar_text() -> str:
    """The grammar file's text (located with ``sharedos.resources.grammar_path``)."""
    return grammar_path().read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def grammar_sha256() -> str:
    """SHA-256 of the grammar text."""
    return hashlib.sha256(grammar_text().encode("utf-8")).hexdigest()

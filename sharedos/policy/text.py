"""The language's one Unicode rule: resources are NFC, and ``lower`` is a caseless key.

A forbid written in NFC (``/café/**``, ``é`` one code point) must also catch
the NFD spelling of the same name (``e`` + a combining accent), and a Kelvin
sign (U+212A, which NFC turns into ``K``) must not stand in for a ``K``. So:

* a **resource** (a ``path(args.x)`` or a template's hole) that is not in
  Unicode Normalization Form C is unresolvable: the call is denied
  ``unresolvable_resource``, recorded like any other refusal. No
  normalization form can reach a rule under another spelling;
* a **pattern literal** that is not NFC is a check-time error (``SOS207``),
  and a **context value** that is not NFC is unsafe to interpolate (a permit
  matches nothing, a forbid's segment matches any one segment);
* ``lower(s)`` is a caseless matching key (``fold``), not ``str.lower``:
  NFKC (fullwidth letters, ligatures and the Kelvin sign become their plain
  forms), the Turkic capital and small dotted/dotless ``I`` folded to ``i``,
  Unicode full case folding (``ß`` is ``ss``), then NFKC again. Two strings a
  case-insensitive system could take for one (``PRİVATE``, ``ＰＲＩＶＡＴＥ``,
  ``Private``) have the same ``lower``.
"""

from __future__ import annotations

import unicodedata

_is_normalized = unicodedata.is_normalized
_normalize = unicodedata.normalize
#: dotted capital I and dotless small i: folded to plain "i" (Unicode's "T" folding)
_TURKIC = str.maketrans({"\u0130": "i", "\u0131": "i"})


def is_nfc(text: str) -> bool:
    """True when ``text`` is in Unicode Normalization Form C (ASCII always is)."""
    return text.isascii() or _is_normalized("NFC", text)


def fold(text: str) -> str:
    """The caseless key of ``text`` (what ``lower`` returns; see the module docstring).

    Idempotent: ``fold(fold(s)) == fold(s)``."""
    if text.isascii():
        return text.lower()  # ASCII: case folding is lower-casing, NFKC changes nothing
    folded = _normalize("NFKC", text).translate(_TURKIC).casefold()
    return _normalize("NFKC", folded)

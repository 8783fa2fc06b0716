"""Canonical JSON (RFC 8785, JCS): the one place SharedOS turns a value into the bytes it hashes.

Two encoders, one answer:

* ``fast(value)``: the standard library's C encoder, used only when its
  output is byte-for-byte RFC 8785 (``jcs_equivalent``): exact dicts with
  string keys, lists, strings, booleans, ``None``, integers within
  +-(2**53 - 1), and floats whose shortest round-trip text Python and
  ECMAScript print alike (not integral, 1e-4 <= |x| < 1e16). Else ``None``.
* ``dumps(value)``: ``fast`` when it can, else the ``rfc8785`` package (pure
  Python, ECMAScript number formatting, UTF-16 key order); it raises what
  ``rfc8785.dumps`` raises for a value JCS cannot encode.

``scalar(value)`` is the JCS text of one string, number, boolean or null, for
encoders that lay out a fixed object themselves (the evidence chain's links).

Digests: every content hash SharedOS writes is ``sha256:`` + the hex SHA-256
of some bytes, made here and only here: ``tag(data)`` for bytes,
``digest(value)`` for the RFC 8785 encoding of a value (``total``: never
raises; a value JCS cannot encode — NaN, an integer beyond 2**53, a non-JSON
object, nesting too deep — is still given deterministic bytes), ``text_digest``
for a string's UTF-8, and ``is_digest`` to recognise one.

Why the conditions: JCS sorts keys by UTF-16 code units and ``json`` by code
points, and the two orders differ only for characters at or above U+D800;
string escaping is the same in both (the two-character escapes, ``\\u00xx``
for other control characters, everything else literal); Python prints
``3.0`` and ``1e-05`` where ECMAScript prints ``3`` and ``0.00001``.
``tests/test_canonical.py`` holds ``fast`` and ``scalar`` to ``rfc8785`` on
random values.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import rfc8785

__all__ = [
    "PREFIX",
    "digest",
    "dumps",
    "encode_string",
    "fast",
    "fast_tagged",
    "is_digest",
    "jcs_equivalent",
    "scalar",
    "tag",
    "text_digest",
    "total",
]

#: what every SharedOS content hash starts with
PREFIX = "sha256:"

#: the C string encoder (JCS escaping, UTF-8 left as is)
encode_string = json.encoder.encode_basestring

# built once: ``json.dumps`` with keyword arguments builds a new encoder per call
_SORTED_UTF8 = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode
# RFC 8785 represents numbers as IEEE doubles: integers outside this range are
# refused by the rfc8785 package, so the fast path leaves them to it.
_INT_MIN, _INT_MAX = -(2**53) + 1, 2**53 - 1


def _float_alike(x: float) -> bool:
    """True when ``repr(x)`` is ECMAScript's ``Number.prototype.toString(x)``."""
    return 1e-4 <= abs(x) < 1e16 and not x.is_integer()


def jcs_equivalent(value: Any) -> bool:
    """True when sorted compact ``json`` output of ``value`` is byte-for-byte RFC 8785.

    Iterative: hostile nesting cannot exhaust the stack here.
    """
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is dict:
            for key, child in item.items():
                if type(key) is not str or not (key.isascii() or max(key) < "\ud800"):
                    return False
                push(child)
        elif kind is list:
            extend(item)
        elif kind is int:
            if not _INT_MIN <= item <= _INT_MAX:
                return False
        elif kind is float:
            if not _float_alike(item):
                return False
        else:
            return False
    return True


def fast_tagged(value: Any) -> tuple[bytes, str] | None:
    """``fast(value)`` and its ``tag``, or None: a value encoded once, for a record that
    stores the bytes and hashes them (the kernel's arguments)."""
    made = fast(value)
    if made is None:
        return None
    return made, PREFIX + hashlib.sha256(made).hexdigest()


def fast(value: Any) -> bytes | None:
    """RFC 8785 bytes of ``value`` from the C encoder, or None when only ``dumps`` can say.

    None for integral or very large/small floats, huge integers, lone
    surrogates, keys JCS orders differently and nesting too deep.
    """
    if jcs_equivalent(value):
        try:
            return _SORTED_UTF8(value).encode("utf-8")
        except Exception:  # lone surrogates, nesting too deep: the general path decides
            pass
    return None


def dumps(value: Any) -> bytes:
    """RFC 8785 bytes of ``value`` (``rfc8785.dumps``'s errors for what JCS cannot encode)."""
    made = fast(value)
    return made if made is not None else rfc8785.dumps(value)


def scalar(value: Any) -> str:
    """The RFC 8785 text of one string, integer, float, boolean or null.

    A non-finite float (never stored by SharedOS) is given its ``repr`` as a
    string, so the text stays deterministic; anything else is a ``TypeError``.
    """
    if value is None:
        return "null"
    kind = type(value)
    if kind is str:
        return encode_string(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if kind is float:
        if not math.isfinite(value):
            return encode_string(repr(value))
        if _float_alike(value):
            return repr(value)
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))  # what ECMAScript prints for 3.0 is "3"
        return rfc8785.dumps(value).decode("ascii")
    raise TypeError(
        f"a canonical scalar must be a string, number, boolean or null, not {kind.__name__}"
    )


def _repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def total(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``, or deterministic bytes for a value JCS cannot encode.

    The fallback (NaN, integers beyond 2**53, non-JSON objects: sorted
    ``json`` with ``repr`` for the rest; a marker when even that fails, e.g.
    nesting too deep) only ever serves values SharedOS records but never
    relays; it never raises.
    """
    made = fast(value)
    if made is not None:
        return made
    try:
        return rfc8785.dumps(value)
    except Exception:
        pass
    try:
        return json.dumps(value, sort_keys=True, default=_repr, ensure_ascii=True).encode()
    except Exception:  # too deep, or a mapping that fails while being walked
        return f"<unencodable {type(value).__name__}>".encode()


def tag(data: bytes) -> str:
    """``sha256:`` + the hex SHA-256 of ``data``: the form of every SharedOS content hash."""
    return PREFIX + hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """``tag`` of the RFC 8785 encoding of ``value`` (``total``: never raises)."""
    return PREFIX + hashlib.sha256(total(value)).hexdigest()


def text_digest(text: str) -> str:
    """``tag`` of a string's UTF-8 (lone surrogates backslash-escaped)."""
    return PREFIX + hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


def is_digest(value: object) -> bool:
    """True for a string that is a ``sha256:`` tag (64 lower-case hex digits after it)."""
    return (
        isinstance(value, str)
        and len(value) == len(PREFIX) + 64
        and value.startswith(PREFIX)
        and all(c in "0123456789abcdef" for c in value[len(PREFIX) :])
    )

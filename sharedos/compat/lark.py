"""Everything SharedOS reads from Lark beyond its documented API, behind a version check.

Two things reach into Lark's internals:

* the policy lexer (``sharedos.policy.lexer``) asks the LALR parser which
  terminals its current state accepts (``state_accepts``: the parse table);
* the parser is shipped pre-built (``serialize_parser`` / ``load_parser``):
  Lark's ``memo_serialize`` data, made JSON-safe, so a fresh process does not
  spend ~40 ms building the LALR tables. Loading it is ``json.loads`` plus
  Lark's own ``Serialize`` deserializer (no pickle: the data runs no code).

Both were written against the Lark versions in ``SUPPORTED_VERSIONS`` (the
pin in ``pyproject.toml``). Unlike the bridge's compat modules, this one does
not refuse to import on another version: nothing here guards security, and
the parser has a documented-API fallback. On any other version
``supported()`` is False and callers use Lark's own contextual lexer and
build the tables from the grammar; ``tests/policy/test_compat_lark.py`` fails
loudly so the fallback is never silent in CI.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lark
from lark import Lark

from sharedos.compat import VendorVersionError

#: Lark versions this module was written and tested against.
SUPPORTED_VERSIONS = ("1.3.1",)

_TUPLE = "__tuple__"
_INT_KEYS = "__int_keys__"
_CLASS = "__lexer_class__"


class LarkVersionError(VendorVersionError):
    """The installed Lark is not one this module was written for."""


def supported() -> bool:
    """True when the installed Lark is one of ``SUPPORTED_VERSIONS``."""
    return lark.__version__ in SUPPORTED_VERSIONS


def require_supported() -> None:
    """Raise ``LarkVersionError`` unless the installed Lark is supported."""
    if not supported():
        raise LarkVersionError(
            f"sharedos.compat.lark was written for Lark {', '.join(SUPPORTED_VERSIONS)}, "
            f"but Lark {lark.__version__} is installed: check the parse-table and "
            "serialization internals it reads, then add the version to SUPPORTED_VERSIONS"
        )


def state_accepts(parser_state: Any) -> Mapping[str, Any]:
    """The terminals (and rules) the LALR parser's current state accepts, with their actions."""
    states: Mapping[int, Mapping[str, Any]] = parser_state.parse_conf.parse_table.states
    return states[parser_state.position]


# ------------------------------------------------------- pre-built parser


def _encode(value: Any) -> Any:
    if isinstance(value, dict):
        if any(type(k) is not str for k in value):
            return {_INT_KEYS: [[k, _encode(v)] for k, v in value.items()]}
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, type):
        return {_CLASS: value.__name__}
    return value


def _decode_hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1:
        if _TUPLE in obj:
            return tuple(obj[_TUPLE])
        if _INT_KEYS in obj:
            return {int(k): v for k, v in obj[_INT_KEYS]}
        if _CLASS in obj:
            return _LexerPlaceholder(obj[_CLASS])
    return obj


class _LexerPlaceholder:
    """Where the serialized data named a lexer class (replaced on load)."""

    def __init__(self, name: str) -> None:
        self.name = name


def serialize_parser(parser: Lark) -> dict[str, Any]:
    """A JSON-ready form of a built LALR parser (``load_parser`` rebuilds it)."""
    require_supported()
    from lark.grammar import Rule
    from lark.lexer import TerminalDef

    data, memo = parser.memo_serialize([TerminalDef, Rule])
    return {"lark": lark.__version__, "data": _encode(data), "memo": _encode(memo)}


def json_object_hook() -> Any:
    """The ``object_hook`` to pass to ``json.loads`` when reading ``serialize_parser`` output."""
    return _decode_hook


def load_parser(doc: Mapping[str, Any], lexer: type) -> Lark:
    """Rebuild a parser from ``serialize_parser`` output read with ``json_object_hook``.

    ``lexer`` replaces the custom lexer class the data names. Raise
    ``LarkVersionError`` for data written by (or for) another Lark version,
    ``ValueError`` for data that is not a serialized parser.
    """
    require_supported()
    if doc.get("lark") != lark.__version__:
        raise LarkVersionError(f"the pre-built parser was made with Lark {doc.get('lark')!r}")
    data, memo = doc.get("data"), doc.get("memo")
    if not isinstance(data, dict) or not isinstance(memo, dict):
        raise ValueError("not a serialized Lark parser")
    options = data.get("options")
    lexer_conf = data.get("parser", {}).get("lexer_conf")
    if not isinstance(options, dict) or not isinstance(lexer_conf, dict):
        raise ValueError("not a serialized Lark parser")
    options["lexer"] = lexer
    lexer_conf["lexer_type"] = lexer
    try:
        loaded: Lark = Lark._load_from_dict(data, memo)  # type: ignore[no-untyped-call]
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"not a serialized Lark parser ({type(exc).__name__}: {exc})") from None
    return loaded

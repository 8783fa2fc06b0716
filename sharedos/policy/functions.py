"""The functions a condition may call: one table for the checker's types and the runtime.

Every function is total in the policy's sense: for any argument values it
returns a value or raises ``EvalError`` (a wrong type, an out-of-range
segment), and an error makes the rule indeterminate (a permit does not
apply, a forbid does). None of them reads anything but its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sharedos.errors import PolicyLanguageError
from sharedos.policy.paths import UnresolvablePath, canonical_path
from sharedos.policy.text import fold

#: Static kinds the checker reasons with.
STRING, NUMBER, BOOLEAN, LIST, ANY = "string", "number", "boolean", "list", "any"
#: A parameter kind only: a number written without a fraction or exponent (``1``, never ``1.0``).
INTEGER = "integer"


class EvalError(PolicyLanguageError):
    """A condition could not be evaluated (missing attribute, wrong type...)."""


@dataclass(frozen=True, slots=True)
class Function:
    """A function's signature (argument kinds, result kind), its implementation and its doc line."""

    name: str
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Any]
    doc: str

    @property
    def signature(self) -> str:
        """``name(a, b)`` as the docs and diagnostics write it."""
        names = {STRING: "s", NUMBER: "n", INTEGER: "n", LIST: "list", BOOLEAN: "b", ANY: "x"}
        return f"{self.name}(" + ", ".join(names[p] for p in self.params) + ")"


def _kind(value: Any) -> str:
    t = type(value)
    if t is str:
        return STRING
    if t is bool:
        return BOOLEAN
    if t is int or t is float:
        return NUMBER
    if t is list or t is tuple:
        return LIST
    return "object" if value is not None else "null"


def _need(fn: str, value: Any, kind: str) -> None:
    if _kind(value) != kind:
        raise EvalError(f"{fn}() needs a {kind}, got a {_kind(value)}")


def finite(value: Any) -> Any:
    """``value`` itself when it is not a non-finite float; raise ``EvalError`` otherwise.

    NaN and the infinities are not values of the language: every entry
    refuses them as invalid input, and a comparison that meets one anyway (a
    host passing it from Python) is an error, so it fails closed rather than
    comparing false (``NaN > 1048576`` is false, which let a forbid pass).
    """
    if type(value) is float and value - value != 0:  # NaN, inf and -inf only
        raise EvalError(f"{value!r} is not a number the policy language compares")
    return value


_SEQUENCES = (list, tuple)


def values_equal(a: Any, b: Any) -> bool:
    """Policy equality: booleans never equal numbers, at any depth; lists compare
    element-wise (left to right, the first difference decides) and objects key by
    key (in ``a``'s order); ``null`` equals only ``null``. Comparing two numbers of
    which one is NaN or infinite is an error."""
    ta, tb = type(a), type(b)
    if ta is str or tb is str:
        return ta is tb and a == b
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta is float or tb is float:
        if ta in (int, float) and tb in (int, float):  # two numbers: both must be finite
            finite(a)
            finite(b)
            return bool(a == b)
        return False
    if ta is int and tb is int:
        return bool(a == b)
    if ta in _SEQUENCES or tb in _SEQUENCES:
        return (
            ta in _SEQUENCES
            and tb in _SEQUENCES
            and len(a) == len(b)
            and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        # key by key, with this equality: {"a": true} is not {"a": 1}
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)) or len(a) != len(b):
            return False
        for key, value in a.items():
            if key not in b or not values_equal(value, b[key]):
                return False
        return True
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # a foreign object with a hostile __eq__
        return False


def member(item: Any, container: Any) -> bool:
    """``item in container``: membership in a list (anything else on the right is an error).

    A string on the right is *not* a substring test (``"a" in "acme"`` would
    be true): use ``contains(haystack, needle)`` for that.
    """
    tc = type(container)
    if tc is not list and tc is not tuple:
        raise EvalError(
            f"'in' needs a list on the right, got a {_kind(container)}"
            + ("; for a substring use contains(haystack, needle)" if tc is str else "")
        )
    if type(item) is str:
        return item in container
    return any(values_equal(item, x) for x in container)


def _startswith(s: Any, prefix: Any) -> bool:
    _need("startswith", s, STRING)
    _need("startswith", prefix, STRING)
    return bool(s.startswith(prefix))


def _endswith(s: Any, suffix: Any) -> bool:
    _need("endswith", s, STRING)
    _need("endswith", suffix, STRING)
    return bool(s.endswith(suffix))


def _contains(haystack: Any, needle: Any) -> bool:
    _need("contains", haystack, STRING)
    _need("contains", needle, STRING)
    return needle in haystack


def _lower(s: Any) -> str:
    _need("lower", s, STRING)
    return fold(s)


def _path(s: Any) -> str:
    try:
        return canonical_path(s)
    except UnresolvablePath as exc:
        raise EvalError(str(exc)) from None


def _segment(s: Any, i: Any) -> str:
    _need("segment", s, STRING)
    if type(i) is not int:
        raise EvalError(f"segment() needs an integer position, got a {_kind(i)}")
    parts = [p for p in s.split("/") if p] if s != "/" else []
    if i == 0 or not -len(parts) <= i <= len(parts):
        raise EvalError(f"segment({i}) is out of range: {s[:60]!r} has {len(parts)} segments")
    return str(parts[i - 1] if i > 0 else parts[i])


#: the types ``_member_test`` reads: what JSON and a context hold (anything else, a
#: ``str`` subclass or a foreign object with an ``__eq__`` of its own, is compared as
#: ``member`` compares it)
_PLAIN = frozenset({str, int, float, bool, type(None), list, tuple, dict})
_STR = frozenset({str})


def _member_test(container: list[Any] | tuple[Any, ...]) -> Callable[[Any], bool]:
    """``member(x, container)`` for many ``x``: the container's strings as a set (read
    once), the rest compared in order as ``member`` does. A string equals only a string,
    and no other value equals a string nor errs against one, so the answers and the
    errors are ``member``'s, in O(1) per string instead of O(len(container))."""
    if len(container) < 8:
        return lambda x: member(x, container)
    kinds = set(map(type, container))
    if kinds == _STR:  # strings only (the common case): the set built at C speed
        only = set(container)
        return lambda x: type(x) is str and x in only
    if not kinds <= _PLAIN:
        return lambda x: member(x, container)
    strings = {y for y in container if type(y) is str}
    others = [y for y in container if type(y) is not str]

    def test(x: Any) -> bool:
        if type(x) is str:
            return x in strings
        return any(values_equal(x, y) for y in others)

    return test


def _any_in(items: Any, container: Any) -> bool:
    _need("any_in", items, LIST)
    _need("any_in", container, LIST)
    if len(items) < 4:
        return any(member(x, container) for x in items)
    # an argument's list against a context's: O(len + len), never their product
    return any(map(_member_test(container), items))


def _all_in(items: Any, container: Any) -> bool:
    _need("all_in", items, LIST)
    _need("all_in", container, LIST)
    if len(items) < 4:
        return all(member(x, container) for x in items)
    return all(map(_member_test(container), items))


def with_constant_list(name: str, container: list[Any]) -> Callable[[Any], bool] | None:
    """``any_in(items, container)`` / ``all_in(items, container)`` as a function of
    ``items`` alone, for a ``container`` written in the policy (a list of literals): its
    strings are read into a set once, at compile time, instead of at every call. The
    answers and errors are the general functions'. None for any other function."""
    if name != "any_in" and name != "all_in":
        return None
    test = _member_test(container)
    if name == "any_in":

        def any_in_constant(items: Any) -> bool:
            _need("any_in", items, LIST)
            return any(map(test, items))

        return any_in_constant

    def all_in_constant(items: Any) -> bool:
        _need("all_in", items, LIST)
        return all(map(test, items))

    return all_in_constant


#: a written first list of at most this many distinct strings is looked up by scanning
#: the second list once per string (C speed, stops at the answer), not by building a set
#: of the second list at every call
SCAN_MAX = 16


def with_constant_items(name: str, items: list[Any]) -> Callable[[Any], bool] | None:
    """``any_in(items, container)`` / ``all_in(items, container)`` as a function of
    ``container`` alone, for ``items`` written in the policy: when they are at most
    ``SCAN_MAX`` distinct strings, each is looked for in ``container`` by Python's own
    ``in`` (what ``member`` does for a string, so the answers and errors are the general
    functions'), and no set of ``container`` is built at every call (a long list in the
    call's arguments tested by hundreds of rules cost a set each). None for any other
    function or list."""
    if name != "any_in" and name != "all_in":
        return None
    if not all(type(x) is str for x in items):
        return None
    strings = tuple(dict.fromkeys(items))  # once each, in the written order
    if len(strings) > SCAN_MAX:
        return None
    if name == "any_in":

        def any_in_written(container: Any) -> bool:
            _need("any_in", container, LIST)
            return any(s in container for s in strings)

        return any_in_written

    def all_in_written(container: Any) -> bool:
        _need("all_in", container, LIST)
        return all(s in container for s in strings)

    return all_in_written


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function(
            "startswith", (STRING, STRING), BOOLEAN, _startswith, "s begins with the other string"
        ),
        Function("endswith", (STRING, STRING), BOOLEAN, _endswith, "s ends with the other string"),
        Function(
            "contains", (STRING, STRING), BOOLEAN, _contains, "the second string occurs in the first"
        ),
        Function("lower", (STRING,), STRING, _lower, "the caseless key of s (NFKC, full case folding)"),
        Function("path", (STRING,), STRING, _path, "the canonical path of s (an error if none)"),
        Function(
            "segment",
            (STRING, INTEGER),
            STRING,
            _segment,
            "segment n of a resource, 1 the first, -1 the last (an error if there is none)",
        ),
        Function("any_in", (LIST, LIST), BOOLEAN, _any_in, "some element of the first list is in the second"),
        Function("all_in", (LIST, LIST), BOOLEAN, _all_in, "every element of the first list is in the second"),
    )
}  # fmt: skip

"""``columns.hole_value``: what ``{context.PATH}`` inserts, read directly from plain dicts.

A decision reads each interpolated value through ``hole_value``, which walks
plain dicts itself instead of through ``patterns.lookup_context`` (an ABC
check per step) and accepts printable ASCII text by two ``in`` tests instead
of ``safe_value``'s regular expression. Both shortcuts must answer exactly
what the definition answers: ``safe_value`` of the value ``lookup_context``
finds, None when it finds none.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.policy import compile_source
from sharedos.policy.columns import hole_value
from sharedos.policy.patterns import lookup_context, safe_value

#: characters that decide safety: separators, wildcards, dots, controls (C0, DEL, C1),
#: a combining accent (NFD text is not NFC), a fullwidth solidus, plain letters
_ALPHABET = "ab./*\x00\x1f\x7f\x85\u0301\uff0fé "
_KEYS = st.sampled_from(["principal", "tenant", "org", "x"])
_LEAVES = st.one_of(
    st.text(alphabet=_ALPHABET, max_size=4),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=True),
    st.lists(st.text(alphabet="ab", max_size=2), max_size=2),
)


def _contexts() -> st.SearchStrategy[Any]:
    def nest(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        plain = st.dictionaries(_KEYS, children, max_size=3)
        # a mapping that is not a dict is read as written (``lookup_context``)
        return st.one_of(plain, plain.map(MappingProxyType))

    return st.recursive(_LEAVES, nest, max_leaves=8)


@st.composite
def _context_on_path(draw: st.DrawFn) -> tuple[Any, tuple[str, ...]]:
    """A context built along a path (so the walk mostly reaches a value), each level a
    dict or another mapping, with siblings, sometimes missing the next key."""
    path = draw(st.lists(_KEYS, min_size=1, max_size=3).map(tuple))
    context: Any = draw(_LEAVES)
    for name in reversed(path):
        level = dict(draw(st.dictionaries(_KEYS, _LEAVES, max_size=2)))
        if draw(st.integers(0, 9)):  # mostly present
            level[name] = context
        else:
            level.pop(name, None)
        context = MappingProxyType(level) if draw(st.integers(0, 4)) == 0 else level
    return context, path


def _defined(context: Any, path: tuple[str, ...]) -> str | None:
    found, value = lookup_context(context, path)
    return safe_value(value) if found else None


@settings(max_examples=500, deadline=None)
@given(_contexts(), st.lists(_KEYS, min_size=1, max_size=3).map(tuple))
def test_hole_value_is_the_definition(context: Any, path: tuple[str, ...]) -> None:
    assert hole_value(context, path) == _defined(context, path)


@settings(max_examples=500, deadline=None)
@given(_context_on_path())
def test_hole_value_along_a_path_is_the_definition(case: tuple[Any, tuple[str, ...]]) -> None:
    context, path = case
    assert hole_value(context, path) == _defined(context, path)


def test_unsafe_principals_never_widen_a_home() -> None:
    """A principal that is not one safe segment matches no home, keyed or not."""
    policy = compile_source(
        "namespace fs\n"
        "requirement fs.read { action read; resource path(args.path) }\n"
        'permit read on "/users/{context.principal}/**"\n',
        "homes.sos",
    )
    for principal in ("", ".", "..", "a/b", "*", "a*", "a\x85", "e\u0301", 7, None):
        context = {"principal": principal, "roles": []}
        for path in ("/users/a/b/f", "/users/*/f", "/users/../f", "/users/7/f"):
            for key in (None, f"ctx:{principal!r}"):
                decision = policy.decide("fs.read", {"path": path}, context, context_key=key)
                expected = principal == 7 and path == "/users/7/f"
                assert decision.allowed is expected, (principal, path, key)


def test_an_integer_too_long_to_spell_is_unsafe_and_never_raises() -> None:
    """An integer with more digits than ``str()`` converts (Python's 4,300-digit
    limit) fills no segment: a permit matches nothing there, a forbid's segment
    matches any one, and deciding, listing and explaining never raise."""
    huge = 10**5000
    assert safe_value(huge) is None and safe_value(-huge) is None
    policy = compile_source(
        "namespace fs\n"
        "requirement fs.read { action read; resource path(args.path) }\n"
        'permit read on "/users/{context.principal}/**"\n'
        'permit read on "/srv/**"\n'
        'forbid read on "/srv/{context.attributes.team}/secret/**"\n'
        "namespace gh\n"
        'requirement gh.get { action read; resource "{args.owner}/{args.repo}" }\n'
        'permit read on "*/*"\n',
        "homes.sos",
    )
    context = {"principal": huge, "attributes": {"team": huge}}
    for key in (None, "huge"):
        home = policy.decide("fs.read", {"path": "/users/1/f"}, context, context_key=key)
        assert home.reason.value == "no_matching_permit"
        secret = policy.decide("fs.read", {"path": "/srv/a/secret/f"}, context, context_key=key)
        assert secret.reason.value == "forbidden"
        assert policy.decide("fs.read", {"path": "/srv/a/f"}, context, context_key=key).allowed
        assert policy.could_permit("fs.read", context, context_key=key)
    policy.explain("fs.read", {"path": "/srv/a/secret/f"}, context)
    repo = policy.decide("gh.get", {"owner": huge, "repo": "r"}, {})
    assert repo.reason.value == "unresolvable_resource"
    assert "too long" in repo.detail

"""path(x) canonicalization: the one place '..' and '//' are resolved."""

from __future__ import annotations

import pytest

from sharedos.policy.paths import MAX_PATH_CHARS, UnresolvablePath, canonical_path, path_segments


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("/", "/"),
        ("/a", "/a"),
        ("/a/b.txt", "/a/b.txt"),
        ("//a///b", "/a/b"),
        ("/a/b/", "/a/b"),
        ("/a/b//", "/a/b"),
        ("/./a/./b/.", "/a/b"),
        ("/public/../private/a.txt", "/private/a.txt"),
        ("/a/b/../../c", "/c"),
        ("/a/..", "/"),
        ("/..a/b..", "/..a/b.."),
        ("/a/.../b", "/a/.../b"),
        ("/a/.hidden", "/a/.hidden"),
        # no percent-decoding: %2e%2e is a literal name, never '..'
        ("/public/%2e%2e/private", "/public/%2e%2e/private"),
        ("/public/%2E%2E%2Fprivate", "/public/%2E%2E%2Fprivate"),
        ("/a/%00/b", "/a/%00/b"),
        ("/caf\u00e9/\u65e5\u672c", "/caf\u00e9/\u65e5\u672c"),
        ("/a\\b", "/a\\b"),
    ],
)
def test_canonical_forms(raw: str, canonical: str) -> None:
    assert canonical_path(raw) == canonical


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("/..", "climbs above"),
        ("/../etc/passwd", "climbs above"),
        ("/public/../../etc/passwd", "climbs above"),
        ("/a/./../..", "climbs above"),
        ("relative/path", "not absolute"),
        ("", "not absolute"),
        ("./a", "not absolute"),
        ("/a\x00b", "NUL or control"),
        ("/a\nb", "NUL or control"),
        ("/a\tb", "NUL or control"),
        ("/a\x7fb", "NUL or control"),
        ("/a\x85b", "NUL or control"),
    ],
)
def test_unresolvable(raw: str, why: str) -> None:
    with pytest.raises(UnresolvablePath, match=why):
        canonical_path(raw)


@pytest.mark.parametrize("value", [None, 1, 1.5, True, b"/a", ["/a"], {"p": "/a"}])
def test_non_strings_are_unresolvable(value: object) -> None:
    with pytest.raises(UnresolvablePath, match="must be a string"):
        canonical_path(value)


def test_overlong_path_is_refused_not_truncated() -> None:
    with pytest.raises(UnresolvablePath, match="longer than"):
        canonical_path("/" + "a" * MAX_PATH_CHARS)


def test_canonical_form_is_a_fixed_point() -> None:
    for raw in ["//a/./b/../c/", "/x/%2e%2e/y", "/", "/a/b"]:
        once = canonical_path(raw)
        assert canonical_path(once) == once


def test_segments() -> None:
    assert path_segments("/") == ()
    assert path_segments("/a/b") == ("a", "b")

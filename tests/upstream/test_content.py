"""``sharedos.upstream.content``: what the TypeScript SDK's clients refuse in a result's content."""

from __future__ import annotations

import pytest

from sharedos.upstream.content import content_problem, is_base64


#: what atob (Node 22) accepts and refuses (checked against it)
@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("", True),
        ("Zm9v", True),
        ("Zg", True),
        ("Zg==", True),
        ("abc=", True),
        (" YW Jj\r\nZGVm ", True),
        ("a", False),
        ("abcde", False),
        ("Zg=", False),
        ("a===", False),
        ("ab=c", False),
        ("a-b_", False),
        ("ab\u00a0cd", False),
        ("\u0663\u0663\u0663\u0663", False),
        ("not base64!", False),
    ],
)
def test_base64_is_what_atob_decodes(text: str, ok: bool) -> None:
    assert is_base64(text) is ok


def test_a_last_modified_needs_a_time_zone_and_seconds() -> None:
    def block(when: str) -> list[dict[str, object]]:
        return [{"type": "text", "text": "t", "annotations": {"lastModified": when}}]

    assert content_problem(block("2024-02-29T00:00:00.5+01:00")) is None
    for bad in ("2024-01-01T00:00Z", "2024-01-01T00:00:00", "2023-02-29T00:00:00Z", "2024"):
        assert content_problem(block(bad)) is not None, bad

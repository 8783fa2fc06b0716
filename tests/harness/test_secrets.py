"""Scrubbing host secrets: every spelling a value can take in a report or a log line."""

from __future__ import annotations

import html
import json

import pytest

from sharedos.harness.secrets import MIN_SECRET_LEN, SCRUBBED, Secrets

SECRET = 'sk-host"cred\\ent\nial-é-0123'


@pytest.mark.parametrize(
    "spelled",
    [
        SECRET,
        json.dumps(SECRET),
        json.dumps(SECRET, ensure_ascii=False),
        repr(SECRET),
        repr({"content": SECRET}),
        html.escape(json.dumps(SECRET)),
        html.escape(repr(SECRET)),
        html.escape(SECRET),
    ],
)
def test_every_spelling_is_scrubbed(spelled: str) -> None:
    secrets = Secrets.of([SECRET])
    out = secrets.scrub(f"before {spelled} after")
    assert SCRUBBED in out
    for part in ("cred", "ial-", "0123"):
        assert part not in out, out


def test_structured_data_is_scrubbed_keys_and_values() -> None:
    data = {"args": {"content": SECRET, SECRET: [1, f"x{SECRET}y"]}, "n": 3}
    out = Secrets.of([SECRET]).scrub_data(data)
    assert SECRET not in json.dumps(out) and json.dumps(SECRET)[1:-1] not in json.dumps(out)
    assert out["n"] == 3


def test_short_values_are_not_scrubbed_as_substrings() -> None:
    """A one-character 'secret' would mangle text and betray itself by the pattern."""
    short = "x" * (MIN_SECRET_LEN - 1)
    secrets = Secrets.of([short, ""])
    assert not secrets
    assert secrets.scrub("xxx marks the spot") == "xxx marks the spot"
    assert short in secrets.values  # still known (a field known to be secret is redacted whole)


def test_repr_never_shows_a_value() -> None:
    assert SECRET not in repr(Secrets.of([SECRET])) and "cred" not in repr(Secrets.of([SECRET]))

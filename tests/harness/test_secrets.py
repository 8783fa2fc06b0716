"""Scrubbing host secrets (the one redactor, ``sharedos.redaction``): every spelling a value
can take in a report, a log line or a harness's streamed output."""

from __future__ import annotations

import html
import json

import pytest

from sharedos.harness.process import redact
from sharedos.redaction import MIN_SECRET_CHARS, REDACTED, Redactor

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
    secrets = Redactor([SECRET])
    out = secrets.scrub(f"before {spelled} after")
    assert REDACTED in out
    for part in ("cred", "ial-", "0123"):
        assert part not in out, out


def test_structured_data_is_scrubbed_keys_and_values() -> None:
    data = {"args": {"content": SECRET, SECRET: [1, f"x{SECRET}y"]}, "n": 3}
    out = Redactor([SECRET]).scrub_json(data)
    assert SECRET not in json.dumps(out) and json.dumps(SECRET)[1:-1] not in json.dumps(out)
    assert out["n"] == 3


def test_short_values_are_not_scrubbed_as_substrings() -> None:
    """A one-character 'secret' would mangle text and betray itself by the pattern."""
    short = "x" * (MIN_SECRET_CHARS - 1)
    secrets = Redactor([short, ""])
    assert not secrets
    assert secrets.scrub("xxx marks the spot") == "xxx marks the spot"
    assert short in secrets.values  # still known (a field known to be secret is redacted whole)


def test_one_minimum_length_for_every_secret() -> None:
    """Harness output, upstream text and evidence share the floor: 8 characters."""
    assert MIN_SECRET_CHARS == 8
    assert redact("abcdefg and abcdefgh", ("abcdefg", "abcdefgh")) == f"abcdefg and {REDACTED}"


def test_nesting_past_the_walk_limit_is_not_relayed_unscrubbed() -> None:
    """A secret deeper than the walk goes is not passed through: the subtree holding it
    is replaced whole (a subtree without one is kept)."""
    deep: object = [SECRET]
    clean: object = ["nothing here"]
    for _ in range(100):
        deep, clean = [deep], [clean]
    out = Redactor([SECRET]).scrub_json({"a": deep, "b": clean})
    assert "cred" not in json.dumps(out) and "0123" not in json.dumps(out)
    assert out["b"] == clean


def test_repr_never_shows_a_value() -> None:
    assert SECRET not in repr(Redactor([SECRET])) and "cred" not in repr(Redactor([SECRET]))

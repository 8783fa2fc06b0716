"""What the SDK's HTTP client says about an answer it cannot read carries no credential.

A streamable-HTTP upstream's answer is read by the official SDK client before
SharedOS sees anything, and the SDK speaks of a bad one in two places SharedOS's
scrubbing did not cover:

- its own log records (``Unknown SSE event: <name>``, ``Error parsing SSE
  message`` with the pydantic traceback), which went to stderr -- or the host's
  log handlers -- as the SDK wrote them, a credential the upstream echoed whole;
- the error it answers the request with, ``Failed to parse SSE message:
  <ValidationError>``: pydantic shortens a long input to its head and tail
  (``...ANARY-uptoken-91b2c3d4'``), a cut in the middle of the text the
  scrubber cannot recognise, so most of the credential reached the model, the
  turn report and the evidence store.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.upstream.conftest import (
    DATA,
    PY,
    brokered,
    free_port,
    http_process,
    text_of,
)
from tests.upstream.test_hostile_secret_fragments import fragments

SERVER = DATA / "hostile_http_server.py"
SHAREDOS = str(Path(PY).parent / "sharedos")

RULES = """
namespace fx
requirement fx.bad { action read; resource "x" }  # sos:ignore SOS208: one resource
permit read on "x"
toolpolicy run { mode open
 managed fx.* }
"""


def _upstream(port: int) -> str:
    return (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        'protocol = "legacy"\ntimeouts = { connect_s = 10, list_s = 10, call_s = 10 }\n'
        "[upstream.fx.credentials]\n"
        'Authorization = { env = "SHAREDOS_TEST_TOKEN", prefix = "Bearer " }\n'
    )


@pytest.mark.parametrize("mode", ["event", "parse-init"])
def test_the_sdks_own_words_about_a_bad_answer_carry_no_credential(
    tmp_path: Path, planted: str, mode: str
) -> None:
    port = free_port()
    host = tmp_path / "host.toml"
    host.write_text("version = 1\n" + _upstream(port), encoding="utf-8")
    with http_process([PY, str(SERVER), str(port), "--mode", mode], port):
        proc = subprocess.run(
            [SHAREDOS, "upstream", "status", "--host-config", str(host)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={"PATH": "/usr/bin:/bin", "SHAREDOS_TEST_TOKEN": planted},
        )
    said = proc.stdout + proc.stderr
    assert "upstream fx (fx.*): unavailable" in said, said
    assert fragments(said, planted) == [], said
    assert "Traceback" not in said, said


@pytest.mark.anyio
async def test_a_call_the_sdk_cannot_read_leaves_no_part_of_the_credential(
    tmp_path: Path, planted: str
) -> None:
    port = free_port()
    with http_process([PY, str(SERVER), str(port), "--mode", "parse-call"], port):
        async with brokered(
            tmp_path, _upstream(port), RULES, environ={"SHAREDOS_TEST_TOKEN": planted}
        ) as env:
            async with env.turn() as t:
                result = await t.call("fx.bad", {})
            records = env.records(t.context.turn_id)
    assert result.is_error
    assert [str(r.reason) for r in records] == ["upstream_error"]
    assert "Failed to parse SSE message" in text_of(result)
    assert fragments(text_of(result), planted) == []
    evidence = b"".join(p.read_bytes() for p in tmp_path.glob("evidence.sqlite*"))
    assert fragments(evidence.decode("utf-8", "replace"), planted) == []


@pytest.mark.anyio
async def test_an_http_answer_nested_too_deep_to_parse_fails_its_call_and_no_more(
    tmp_path: Path, planted: str
) -> None:
    """A tools/call answer nested 100,000 arrays deep (valid JSON, application/json): the
    listing screen's ``json.loads`` raised RecursionError out of the response stream."""
    port = free_port()
    with http_process([PY, str(SERVER), str(port), "--mode", "deep-call"], port):
        async with brokered(
            tmp_path, _upstream(port), RULES, environ={"SHAREDOS_TEST_TOKEN": planted}
        ) as env:
            async with env.turn() as t:
                first = await t.call("fx.bad", {})
                second = await t.call("fx.bad", {})
            records = env.records(t.context.turn_id)
    assert first.is_error and second.is_error
    assert [str(r.reason) for r in records] == ["upstream_error", "upstream_error"]
    assert "disconnected" not in text_of(first), text_of(first)


def test_the_sdks_own_words_cannot_drive_the_terminal(tmp_path: Path, planted: str) -> None:
    """The SDK logs what an upstream sent (an SSE event's name, a content type) and its
    records went to stderr scrubbed of credentials but not spelled: an event named
    ``ESC]52;…BEL ESC[1A ESC[2K`` wrote the operator's clipboard and erased a line of
    ``upstream status``; a U+202E reordered the rest of the log line."""
    event = "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[1A\x1b[2K\u009b2J\u202e\u200bok"
    port = free_port()
    host = tmp_path / "host.toml"
    host.write_text("version = 1\n" + _upstream(port), encoding="utf-8")
    with http_process([PY, str(SERVER), str(port), "--mode", "event", "--event", event], port):
        proc = subprocess.run(
            [SHAREDOS, "upstream", "status", "--host-config", str(host)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={"PATH": "/usr/bin:/bin", "SHAREDOS_TEST_TOKEN": planted},
        )
    said = proc.stdout + proc.stderr
    assert "upstream fx (fx.*): unavailable" in said, said
    assert not {"\x1b", "\x07", "\u009b", "\u202e", "\u200b"} & set(said), ascii(said)
    assert "Unknown SSE event: \\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[1A\\x1b[2K\\x9b2J" in said

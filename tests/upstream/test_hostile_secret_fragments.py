"""No part of a credential survives in a failure message about an upstream's bad answer.

The scrubber recognises a credential whole (in every encoding it knows), so a
message must be scrubbed before anything shortens it. Two places shortened
first: pydantic's ValidationError shows a long input as its head and tail
(``input_value='xxxx...D-cred-7f3a9c1e5b2d4860'``), and ``describe_exception``
cut every message at 500 characters before the connection scrubbed it. An
upstream that puts its own credential (from its environment) at the right
offset of an invalid answer got 23-26 of its 29 characters to the harness
and into the evidence store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio

RULES = hostile_rules("bad")

TOOLS = [
    {
        "name": "bad",
        "description": "Answers badly.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "how": {"type": "string"}},
        },
        "outputSchema": {
            "type": "object",
            "properties": {"v": {"type": "integer"}},
            "required": ["v"],
        },
    }
]


def fragments(text: str, secret: str, shortest: int = 10) -> list[str]:
    """Every piece of ``secret`` at least ``shortest`` characters long found in ``text``."""
    return sorted(
        {
            secret[i:j]
            for i in range(len(secret))
            for j in range(i + shortest, len(secret) + 1)
            if secret[i:j] in text
        },
        key=len,
    )


async def test_an_invalid_answer_never_carries_part_of_the_credential(
    tmp_path: Path, planted: str
) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    toml = (
        hostile_upstream("--mode", "leak-invalid", "--tools", str(tools_file))
        + '[upstream.fx.credentials]\nFIXTURE_TOKEN = { env = "SHAREDOS_TEST_TOKEN" }\n'
    )
    # content that is not a list, the credential at the end / start of a long string;
    # structuredContent its outputSchema refuses, the credential around offset 500
    hows = ["end", "start", *(f"structured-{k}" for k in range(400, 430, 5))]
    async with brokered(tmp_path, toml, RULES, environ={"SHAREDOS_TEST_TOKEN": planted}) as env:
        async with env.turn() as t:
            results = {
                how: await t.call("fx.bad", {"path": "/public/x", "how": how}) for how in hows
            }
        records = env.records(t.context.turn_id)
    assert all(r.is_error for r in results.values())
    assert [str(r.reason) for r in records] == ["upstream_error"] * len(hows)
    leaked = {how: fragments(text_of(r), planted) for how, r in results.items()}
    assert {how: found[-1] for how, found in leaked.items() if found} == {}
    evidence = b"".join(p.read_bytes() for p in tmp_path.glob("evidence.sqlite*"))
    assert fragments(evidence.decode("utf-8", "replace"), planted) == []


def test_the_sdks_own_log_records_are_scrubbed_of_the_hosts_other_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run's other secrets (a harness env value, another upstream's credential) were
    scrubbed from an upstream's stderr but not from the SDK's log records about what it
    sent: a model may pass one into a call of an upstream that echoes it in an SSE event
    name, which the SDK logs as it read it."""
    import logging

    from sharedos.harness.hostconfig import parse_host_config
    from sharedos.redaction import Redactor
    from sharedos.upstream.connection import UpstreamConnection
    from sharedos.upstream.secrets import resolve_credentials

    host_secret = "PLANTED-host-secret-7c41d2e9"
    config = next(
        iter(
            parse_host_config(
                '[upstream.fx]\nurl = "http://127.0.0.1:9/mcp"\n', "host.toml"
            ).upstream.values()
        )
    )
    conn = UpstreamConnection(
        config, resolve_credentials(config, {}), host_secrets=lambda: Redactor((host_secret,))
    )
    caplog.set_level(logging.DEBUG, logger="mcp")
    logging.getLogger("mcp.client.streamable_http").warning(
        "Unknown SSE event: %s", f"x-{host_secret}-y"
    )
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "Unknown SSE event" in said
    assert host_secret not in said, said
    del conn

"""A streamable-HTTP answer that is not the answer to its request fails that call at once.

A request POSTed over streamable HTTP is answered by that POST's body and
nowhere else. An upstream that answered ``tools/call`` at once with a JSON
body for another id (or an error with ``"id": null``, or a notification) had
its body dropped by the SDK client, which routes by the id the body holds:
the call waited out its whole ``call_s`` for an answer that could no longer
come, and was recorded ``upstream_timeout`` ("did not answer within N s")
though the upstream had answered -- wrongly -- at once. It now fails at once,
``upstream_error``, relaying nothing of the body; the session stays usable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import DATA, PY, brokered, free_port, http_process, text_of

pytestmark = pytest.mark.anyio

SERVER = DATA / "hostile_http_server.py"
TOOLS = ("bad", "bad-null", "bad-note", "echo")
RULES = (
    "\nnamespace fx\n"
    + "".join(
        f'requirement fx.{t} {{ action read; resource "x" }}  # sos:ignore SOS208: one resource\n'
        for t in TOOLS
    )
    + 'permit read on "x"\ntoolpolicy run { mode open\n managed fx.* }\n'
)


async def test_an_http_answer_for_another_id_fails_its_call_at_once(tmp_path: Path) -> None:
    port = free_port()
    toml = (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        'protocol = "legacy"\ntimeouts = { connect_s = 10, list_s = 10, call_s = 20 }\n'
    )
    with http_process([PY, str(SERVER), str(port), "--mode", "other-id"], port):
        async with brokered(tmp_path, toml, RULES) as env:
            async with env.turn(http_timeout=60) as t:
                wrong = [await t.call(f"fx.{name}", {}) for name in TOOLS[:3]]
                echo = await t.call("fx.echo", {})
            records = env.records(t.context.turn_id)
    assert [str(r.reason) for r in records] == ["upstream_error"] * 3 + ["None"]
    for result in wrong:
        assert result.is_error is True
        assert "not its answer" in text_of(result), text_of(result)
        assert "not yours" not in text_of(result)
    assert echo.is_error is False and text_of(echo) == "not yours"

"""A compressed streamable-HTTP answer is bounded by what it decodes to, not by its wire size.

The read bounds (``transport.py``) counted the bytes of an answer as they came
off the connection; httpx2 decoded ``Content-Encoding: gzip`` / ``deflate``
only after that, in the SDK's reader. A few KiB of gzip that decode to
gigabytes passed every bound and were decoded whole into the host's memory
(a 4 MiB answer -- the default ``max_result_bytes`` -- of gzip is 4 GiB of
text), and every screen that reads the body (the listing's limits, "not its
answer", too many blocks) saw compressed bytes it could not parse and let the
answer through. The transport now decodes the answer itself, a bounded piece
at a time, and every bound and screen applies to the decoded bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.upstream.conftest import DATA, PY, brokered, free_port, http_process, text_of

pytestmark = pytest.mark.anyio

SERVER = DATA / "hostile_http_server.py"
RULES = (
    "\nnamespace fx\n"
    'requirement fx.bomb { action read; resource "x" }  # sos:ignore SOS208: one resource\n'
    'requirement fx.echo { action read; resource "x" }  # sos:ignore SOS208: one resource\n'
    'permit read on "x"\ntoolpolicy run { mode open\n managed fx.* }\n'
)


def _toml(port: int) -> str:
    return (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        'protocol = "legacy"\ntimeouts = { connect_s = 10, list_s = 10, call_s = 20 }\n'
        "limits = { max_result_bytes = 65536 }\n"
    )


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_a_compressed_answer_is_refused_by_its_decoded_size_while_it_is_read(
    tmp_path: Path, sse: bool
) -> None:
    port = free_port()
    with http_process([PY, str(SERVER), str(port), "--mode", "encoded"], port):
        async with brokered(tmp_path, _toml(port), RULES) as env:
            async with env.turn(http_timeout=60) as t:
                # 8 MiB of text, 8 KiB of gzip on the wire: far over max_result_bytes
                bomb = await t.call("fx.bomb", {"mib": 8, "sse": sse})
                echo = await t.call("fx.echo", {})
            records = env.records(t.context.turn_id)
    assert bomb.is_error is True
    # refused while it was read (the transport), not decoded whole and measured after
    assert "SharedOS stopped reading it" in text_of(bomb), text_of(bomb)
    assert [str(r.reason) for r in records] == ["upstream_error", "None"]
    # a compressed answer within its bounds is read as it should be; the session stays usable
    assert echo.is_error is False and text_of(echo) == "echo ok"

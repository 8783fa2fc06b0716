"""An upstream that ends its own stream at once, asking to be called back at once, is paced.

A 2025-11-25 session opens a GET stream for what the upstream sends on its
own, and the SDK's client reopens it each time it ends, after the ``retry:``
the upstream names (``retry: 0``: at once), for as long as the session lives.
An upstream answering each GET with an empty stream and ``retry: 0`` had the
host send ~150 GETs a second (a fifth of a core, more against a faster
server) for the session's whole life, turns or not. The host now sends at most
``GET_BURST`` GETs at once on a session, then ``GET_RATE`` a second.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from sharedos.upstream import transport
from tests.upstream.conftest import DATA, PY, brokered, free_port, http_process

pytestmark = pytest.mark.anyio

SERVER = DATA / "hostile_http_server.py"
RULES = (
    '\nnamespace fx\nrequirement fx.bad { action read; resource "x" }\n'
    'permit read on "x"\ntoolpolicy run { mode open\n managed fx.* }\n'
)


async def test_an_upstream_stream_ending_at_once_is_reopened_at_a_bounded_rate(
    tmp_path: Path,
) -> None:
    log = tmp_path / "gets.log"
    port = free_port()
    toml = (
        f'[upstream.fx]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
        'protocol = "legacy"\ntimeouts = { connect_s = 10, list_s = 10, call_s = 10 }\n'
    )
    argv = [PY, str(SERVER), str(port), "--mode", "get-loop", "--log", str(log)]
    with http_process(argv, port):
        async with brokered(tmp_path, toml, RULES) as env, env.turn():
            await anyio.sleep(1.5)
            gets = log.read_text(encoding="utf-8").count("get") if log.exists() else 0
    # without pacing: hundreds in 1.5 s, at whatever speed the upstream answers
    assert 0 < gets <= getattr(transport, "GET_BURST", 40) + 5, gets

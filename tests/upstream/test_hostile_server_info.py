"""An upstream's serverInfo of megabytes is shortened before it is shown or pinned.

The handshake answer is bounded only by ``limits.max_listing_bytes`` (16 MiB):
an upstream naming itself (and its version) with a MiB of text each had both,
whole, in every turn's report line (``sharedos run`` prints it at each turn,
``sharedos upstream status`` too), in ``--json`` and in the pin file. Its
``instructions`` are not relayed at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedos.upstream.connection import SERVER_INFO_CHARS
from tests.upstream.conftest import brokered, hostile_rules, hostile_upstream, text_of

pytestmark = pytest.mark.anyio


async def test_a_huge_server_name_and_version_are_shortened(tmp_path: Path) -> None:
    toml = hostile_upstream("--mode", "huge-info", call_s=10)
    async with brokered(tmp_path, toml, hostile_rules("echo")) as env, env.turn() as t:
        report = t.upstreams.report()
        server = t.upstreams.as_dict()["upstreams"][0]["server"]
        echo = await t.call("fx.echo", {"path": "/public/x"})
    assert echo.is_error is False and text_of(echo) == "echo ok"
    assert len(server["name"]) == len(server["version"]) == SERVER_INFO_CHARS + 1
    assert server["name"].endswith("…")
    assert len(report) == 1 and len(report[0]) < 4 * SERVER_INFO_CHARS
    assert "hhhh" in report[0]
    assert len(json.dumps(server)) < 4 * SERVER_INFO_CHARS

"""The brokered step of ``sharedos demo``: one allowed and one denied brokered git call."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.cli.demo_upstream import brokered_git_demo, git_server_command

pytestmark = pytest.mark.anyio


async def test_the_demo_shows_an_allowed_and_a_denied_brokered_call(tmp_path: Path) -> None:
    if git_server_command() is None:
        pytest.skip("mcp-server-git is not installed (make venv)")
    lines: list[str] = []
    assert await brokered_git_demo(tmp_path, lines.append) is True
    text = "\n".join(lines)
    assert "upstream git (git.*): 12 of 12 tools published [mcp-git" in text
    assert "files.read(/public/a.txt) -> succeeded" in text
    assert "/repos/team) -> succeeded" in text
    assert "/repos/other) -> denied [no_matching_permit]" in text
    assert "evidence: 3 attempts recorded" in text

"""A path the upstream expands is not the path checked (issue 22's links, by another spelling).

GitPython, under mcp-server-git, expands ``$VAR`` and ``${VAR}`` in a
repository path before opening it (``git.Repo`` -> ``expand_path``). The
kernel decided, and the link check walked, the literal path
``<team>$HOME`` (missing: forwarded); git opened ``<team>/<home>``, a
symbolic link planted to the security repository, and showed its log.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharedos.conformance.tap import read_tool_calls
from tests.upstream.conftest import brokered, text_of
from tests.upstream.test_links import git_rules, make_repos, refused_as_linked, tapped_git

pytestmark = pytest.mark.anyio


async def test_an_environment_variable_in_a_repository_path_is_refused(tmp_path: Path) -> None:
    repos = make_repos(tmp_path)
    home = os.environ.get("HOME") or "/root"  # the SDK hands the upstream this HOME
    planted = repos.team / home.strip("/")
    planted.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(repos.security, planted)
    log = tmp_path / "git-tap.jsonl"
    async with (
        brokered(tmp_path, tapped_git(log), git_rules(repos)) as env,
        env.turn(env.context("bob")) as t,
    ):
        results = [
            await t.call("git.git_log", {"repo_path": f"{repos.team}/$HOME"}),
            await t.call("git.git_log", {"repo_path": f"{repos.team}/${{HOME}}"}),
            await t.call(
                "git.git_show", {"repo_path": f"{repos.team}/$HOME", "revision": repos.secret_sha}
            ),
        ]
    leaked = [text_of(r)[:120] for r in results if not refused_as_linked(r)]
    assert not leaked, leaked
    assert read_tool_calls(log) == []
    assert all(repos.secret not in text_of(r) for r in results)

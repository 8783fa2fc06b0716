"""A FIFO inside a repository's git directory stalls the git upstream for everyone.

git (and GitPython) open ``.git/config``, ``HEAD``, refs and objects by name:
a FIFO planted there (by anything that writes the tree, the threat of
test_links.py) blocks the open forever. mcp-server-git runs one git call at a
time (a process-wide lock), so the stuck call holds the pooled session's
upstream for every turn and principal: each later call, on any repository,
times out. The check refuses a git directory holding anything but
directories and regular files; nothing is forwarded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharedos.conformance.tap import read_tool_calls
from tests.upstream.conftest import brokered, make_repo, text_of
from tests.upstream.test_links import git_rules, make_repos, refused_as_linked, tapped_git

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("where", ["config", "HEAD", "index", "refs/heads/main"])
async def test_a_fifo_in_a_git_directory_is_refused_and_git_keeps_serving(
    tmp_path: Path, where: str
) -> None:
    repos = make_repos(tmp_path)
    stuck = make_repo(repos.team / "stuck")
    target = stuck / ".git" / where
    if target.exists():
        target.unlink()
    os.mkfifo(target)
    log = tmp_path / "git-tap.jsonl"
    upstream = tapped_git(log) + "timeouts = { call_s = 3 }\n"
    async with (
        brokered(tmp_path, upstream, git_rules(repos), handler_timeout_s=10) as env,
        env.turn(env.context("bob")) as t,
    ):
        blocked = await t.call("git.git_status", {"repo_path": str(stuck)})
        after = await t.call("git.git_log", {"repo_path": str(repos.team)})
    assert refused_as_linked(blocked), text_of(blocked)
    assert "(not_a_regular_file)" in text_of(blocked)
    assert after.is_error is False and "first" in text_of(after), text_of(after)
    assert [c.arguments["repo_path"] for c in read_tool_calls(log)] == [str(repos.team)]

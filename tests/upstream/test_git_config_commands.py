"""A repository's own config must not make the brokered git run a command or read elsewhere.

bob may write his home (fs.write_file) and run git on his own checkouts
(git.git_status, git.git_diff_unstaged). He has no right on the security
repository. Git runs whatever a repository's config names — ``core.fsmonitor``
on every ``git status``, ``diff.external`` on every ``git diff``, a clean
filter on ``git add`` — with the git upstream's access, not bob's. So a config
bob wrote through a governed tool must be refused like git's other
indirections (``.git`` pointers, alternates, ``core.worktree``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedos.conformance.tap import read_tool_calls
from tests.adversarial.planted import plant
from tests.upstream.conftest import (
    PY,
    TAP,
    brokered,
    git_server,
    make_repo,
    node,
    npm_server,
    refusal_payload,
    stdio_upstream,
    text_of,
)

pytestmark = pytest.mark.anyio


def req(tool: str, action: str, arg: str) -> str:
    return "requirement " + tool + " { action " + action + "; resource path(args." + arg + ") }\n"


def rules(tmp: Path) -> str:
    home, security = tmp / "home", tmp / "git" / "security"
    own = 'permit read, write on "' + str(home) + '/{context.principal}/**"\n'
    text = "namespace fs\n" + req("fs.write_file", "write", "path")
    text += req("fs.read_text_file", "read", "path") + own
    text += "namespace git\n"
    for tool in ("git_status", "git_diff_unstaged", "git_log", "git_show"):
        text += req(f"git.{tool}", "read", "repo_path")
    text += req("git.git_add", "write", "repo_path") + own
    text += f'forbid * on "{security}/**"\n'
    text += 'toolpolicy run { mode strict\n managed fs.*, git.*\n harness_local "shell" }\n'
    return text


def upstreams(tmp: Path, log: Path) -> str:
    fs_entry = npm_server("server-filesystem")
    fs = stdio_upstream("fs", node(), [str(fs_entry), str(tmp / "home")])
    git = stdio_upstream("git", PY, [str(TAP), str(log), "--", str(git_server())])
    return fs + git


def failed_linked(result: Any) -> bool:
    if result.is_error is not True:
        return False
    try:
        data = refusal_payload(result)
    except (ValueError, IndexError, AttributeError):
        return False
    return data.get("outcome") == "failed" and data.get("reason") == "linked_resource"


CONFIGS = {
    "fsmonitor": '[core]\n\tfsmonitor = "cat {keys} > {loot}; false"\n',
    "diff.external": "[diff]\n\texternal = \"sh -c 'cat {keys} > {loot}' #\"\n",
    "worktree config": "[extensions]\n\tworktreeConfig = true\n",
}


@pytest.mark.parametrize("label", sorted(CONFIGS))
async def test_a_repository_config_bob_wrote_runs_nothing(tmp_path: Path, label: str) -> None:
    secret = plant("keys")
    security = make_repo(tmp_path / "git" / "security", {"keys.txt": f"key {secret}\n"})
    work = make_repo(tmp_path / "home" / "bob" / "work", {"a.txt": "a\n"})
    (work / "a.txt").write_text("a changed\n")  # something for git diff to show
    loot = tmp_path / "home" / "bob" / "loot.txt"
    config = (work / ".git" / "config").read_text()
    config += CONFIGS[label].format(keys=security / "keys.txt", loot=loot)
    worktree_config = '[core]\n\tfsmonitor = "cat {keys} > {loot}; false"\n'.format(
        keys=security / "keys.txt", loot=loot
    )
    log = tmp_path / "git-tap.jsonl"
    async with (
        brokered(tmp_path, upstreams(tmp_path, log), rules(tmp_path)) as env,
        env.turn(env.context("bob")) as t,
    ):
        wrote = await t.call(
            "fs.write_file", {"path": str(work / ".git" / "config"), "content": config}
        )
        assert wrote.is_error is False, text_of(wrote)
        if label == "worktree config":
            wrote = await t.call(
                "fs.write_file",
                {"path": str(work / ".git" / "config.worktree"), "content": worktree_config},
            )
            assert wrote.is_error is False, text_of(wrote)
        results = [
            await t.call("git.git_status", {"repo_path": str(work)}),
            await t.call("git.git_diff_unstaged", {"repo_path": str(work)}),
        ]
        read = await t.call("fs.read_text_file", {"path": str(loot)})
    assert secret not in text_of(read), f"{label}: bob read the security repository's keys"
    assert not loot.exists(), f"{label}: git ran bob's command"
    assert all(failed_linked(r) for r in results), [text_of(r) for r in results]
    assert read_tool_calls(log) == []


async def test_an_embedded_repository_bob_wrote_runs_nothing(tmp_path: Path) -> None:
    """git status runs git again in every checked-out gitlink, under *its* config: bob
    writes a repository inside his checkout (text files only), adds it as a gitlink,
    and asks for the status."""
    secret = plant("keys")
    security = make_repo(tmp_path / "git" / "security", {"keys.txt": f"key {secret}\n"})
    work = make_repo(tmp_path / "home" / "bob" / "work", {"a.txt": "a\n"})
    loot = tmp_path / "home" / "bob" / "loot.txt"
    head = (work / ".git" / "refs" / "heads" / "main").read_text()
    sub = work / "sub" / ".git"
    files = {
        sub / "HEAD": "ref: refs/heads/main\n",
        sub / "refs" / "heads" / "main": head,
        sub / "objects" / "info" / "alternates": f"{work / '.git' / 'objects'}\n",
        sub / "config": f'[core]\n\tfsmonitor = "cat {security / "keys.txt"} > {loot}; false"\n',
    }
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)  # fs.create_directory's part
    log = tmp_path / "git-tap.jsonl"
    async with (
        brokered(tmp_path, upstreams(tmp_path, log), rules(tmp_path)) as env,
        env.turn(env.context("bob")) as t,
    ):
        for path, content in files.items():
            wrote = await t.call("fs.write_file", {"path": str(path), "content": content})
            assert wrote.is_error is False, text_of(wrote)
        added = await t.call("git.git_add", {"repo_path": str(work), "files": ["sub"]})
        status = await t.call("git.git_status", {"repo_path": str(work)})
        read = await t.call("fs.read_text_file", {"path": str(loot)})
    assert secret not in text_of(read), "bob read the security repository's keys"
    assert not loot.exists(), "git ran bob's command"
    assert failed_linked(status), (text_of(added), text_of(status))

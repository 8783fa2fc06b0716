"""The resource decided is the resource touched: links attacks on real brokered upstreams (issue 22).

bob has no right on the private share nor on the security repository. He
plants links in places he may use (his home, the public share, the team
repository) and asks the real upstreams — server-filesystem (npm) and
mcp-server-git (PyPI), each behind a stdio tap — to follow them. Every attack
is proven three ways: the evidence (failed / ``linked_resource``), the
upstream's own input (the tap: it received no such call), and the disk (the
private file byte for byte unchanged, nothing created in the private share,
the security repository's history unchanged). The upstreams are deliberately
given the private share and the security repository among their roots (as
shipped ``rules/fs.sos`` needs), so their own fence cannot help.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
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
    """One requirement line (kept out of f-strings: its braces are the language's)."""
    return "requirement " + tool + " { action " + action + "; resource path(args." + arg + ") }\n"


def digest_tree(root: Path) -> dict[str, str]:
    """Every entry below ``root``: a link's target, a file's sha256, 'dir' (links not followed)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def not_refused(results: list[tuple[str, Any]], secret: str) -> list[str]:
    """The attacks that were not refused as linked_resource, each saying what it got."""
    out = []
    for label, result in results:
        if not refused_as_linked(result):
            blob = json.dumps(result.model_dump(mode="json"))
            got = "THE SECRET" if secret in blob else f"isError={result.is_error}"
            out.append(f"{label}: {got}")
    return out


def refused_as_linked(result: Any) -> bool:
    """A failed / linked_resource result (the kernel's refusal payload)."""
    if result.is_error is not True:
        return False
    try:  # structuredContent, or the JSON text block of a tool with an outputSchema
        data = refusal_payload(result)
    except (ValueError, IndexError, AttributeError):
        return False
    return data.get("outcome") == "failed" and data.get("reason") == "linked_resource"


# -- server-filesystem --------------------------------------------------------------


@dataclass
class Share:
    """A share with public and private halves, bob's home, and links bob planted."""

    root: Path
    secret: str

    @property
    def private(self) -> Path:
        return self.root / "share" / "private"

    @property
    def salaries(self) -> Path:
        return self.private / "salaries.csv"

    @property
    def bob(self) -> Path:
        return self.root / "home" / "bob"

    @property
    def public(self) -> Path:
        return self.root / "share" / "public"


def make_share(tmp: Path) -> Share:
    share = Share(tmp / "srv", plant("salary"))
    share.public.mkdir(parents=True)
    share.private.mkdir(parents=True)
    share.bob.mkdir(parents=True)
    (share.public / "readme.txt").write_text("public words\n", encoding="utf-8")
    share.salaries.write_text(f"alice,{share.secret}\n", encoding="utf-8")
    (share.bob / "notes.txt").write_text("bob's own notes\n", encoding="utf-8")
    # what bob (or anything writing his home or the public share) planted
    os.symlink(share.salaries, share.public / "sl_salaries")
    os.symlink(share.salaries, share.bob / "sl_salaries")
    os.symlink(os.path.relpath(share.salaries, share.bob), share.bob / "sl_relative")
    os.link(share.salaries, share.bob / "hl_salaries")
    os.symlink(share.private, share.bob / "sl_private")
    os.symlink(share.private / "created.csv", share.bob / "sl_dangling")
    return share


FS_TOOLS = (
    ("fs.read_text_file", "read"),
    ("fs.read_file", "read"),
    ("fs.get_file_info", "read"),
    ("fs.list_directory", "list"),
    ("fs.list_directory_with_sizes", "list"),
    ("fs.directory_tree", "list"),
    ("fs.search_files", "search"),
    ("fs.write_file", "write"),
    ("fs.edit_file", "write"),
    ("fs.create_directory", "write"),
)


def fs_rules(share: Share) -> str:
    home = str(share.root / "home")
    text = "namespace fs\n" + "".join(req(t, a, "path") for t, a in FS_TOOLS)
    text += f'permit read, list, search on "{share.public}/**"\n'
    text += 'permit read, list, search, write on "' + home + '/{context.principal}/**"\n'
    text += f'forbid * on "{share.private}/**" unless "admin" in context.roles\n'
    text += f'permit read, list on "{share.private}/**" when "admin" in context.roles\n'
    text += 'toolpolicy run { mode strict\n managed fs.*\n harness_local "shell" }\n'
    return text


def tapped_fs(share: Share, log: Path) -> str:
    # the upstream's allowed directories hold the private share too (as rules/fs.sos needs)
    entry = npm_server("server-filesystem")
    dirs = [str(share.root / "share"), str(share.root / "home")]
    return stdio_upstream("fs", PY, [str(TAP), str(log), "--", node(), str(entry), *dirs])


FS_ATTACKS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("a symlink in public, read", "fs.read_text_file", {"path": "{public}/sl_salaries"}),
    ("a symlink in public, raw read", "fs.read_file", {"path": "{public}/sl_salaries"}),
    ("a symlink in bob's home, read", "fs.read_text_file", {"path": "{bob}/sl_salaries"}),
    ("a relative symlink, read", "fs.read_text_file", {"path": "{bob}/sl_relative"}),
    ("a hard link, read", "fs.read_text_file", {"path": "{bob}/hl_salaries"}),
    ("a hard link, file info", "fs.get_file_info", {"path": "{bob}/hl_salaries"}),
    (
        "a symlinked directory, read",
        "fs.read_text_file",
        {"path": "{bob}/sl_private/salaries.csv"},
    ),
    ("a symlinked directory, list", "fs.list_directory", {"path": "{bob}/sl_private"}),
    ("a symlinked directory, sizes", "fs.list_directory_with_sizes", {"path": "{bob}/sl_private"}),
    ("a symlinked directory, tree", "fs.directory_tree", {"path": "{bob}/sl_private"}),
    (
        "a symlinked directory, search",
        "fs.search_files",
        {"path": "{bob}/sl_private", "pattern": "*.csv"},
    ),
    (
        "an edit_file dry run through a symlink",
        "fs.edit_file",
        {
            "path": "{bob}/sl_salaries",
            "edits": [{"oldText": "alice", "newText": "bob"}],
            "dryRun": True,
        },
    ),
    (
        "an edit_file dry run through a hard link",
        "fs.edit_file",
        {
            "path": "{bob}/hl_salaries",
            "edits": [{"oldText": "alice", "newText": "bob"}],
            "dryRun": True,
        },
    ),
    (
        "a write through a symlink",
        "fs.write_file",
        {"path": "{bob}/sl_salaries", "content": "OVERWRITTEN-BY-BOB\n"},
    ),
    (
        "a write through a hard link",
        "fs.write_file",
        {"path": "{bob}/hl_salaries", "content": "OVERWRITTEN-BY-BOB\n"},
    ),
    (
        "a new file through a symlinked parent",
        "fs.write_file",
        {"path": "{bob}/sl_private/planted.csv", "content": "PLANTED-BY-BOB\n"},
    ),
    (
        "a write through a dangling symlink",
        "fs.write_file",
        {"path": "{bob}/sl_dangling", "content": "PLANTED-BY-BOB\n"},
    ),
    (
        "a directory through a symlinked parent",
        "fs.create_directory",
        {"path": "{bob}/sl_private/newdir"},
    ),
    (
        "an edit_file through a symlink",
        "fs.edit_file",
        {"path": "{bob}/sl_salaries", "edits": [{"oldText": "alice", "newText": "bob"}]},
    ),
)


def bind(value: Any, share: Share) -> Any:
    if isinstance(value, str):
        return value.format(public=share.public, bob=share.bob)
    if isinstance(value, dict):
        return {k: bind(v, share) for k, v in value.items()}
    if isinstance(value, list):
        return [bind(v, share) for v in value]
    return value


async def test_server_filesystem_never_follows_a_link_bob_planted(tmp_path: Path) -> None:
    share = make_share(tmp_path)
    log = tmp_path / "fs-tap.jsonl"
    before = digest_tree(share.private)
    results: list[tuple[str, Any]] = []
    async with (
        brokered(tmp_path, tapped_fs(share, log), fs_rules(share)) as env,
        env.turn(env.context("bob")) as t,
    ):
        own = await t.call("fs.read_text_file", {"path": str(share.bob / "notes.txt")})
        wrote = await t.call(
            "fs.write_file", {"path": str(share.bob / "new.txt"), "content": "mine\n"}
        )
        for label, tool, args in FS_ATTACKS:
            results.append((label, await t.call(tool, bind(args, share))))
    # the baseline works: the check does not stand in the way of ordinary calls
    assert own.is_error is False and "bob's own notes" in text_of(own)
    assert wrote.is_error is False and (share.bob / "new.txt").read_text() == "mine\n"
    leaked = not_refused(results, share.secret)
    assert not leaked, "\n".join(leaked)
    # the upstream's side: only the two ordinary calls reached it
    received = read_tool_calls(log)
    assert [(c.name, c.arguments["path"]) for c in received] == [
        ("read_text_file", str(share.bob / "notes.txt")),
        ("write_file", str(share.bob / "new.txt")),
    ]
    # the disk's side: the private share is byte for byte what it was
    assert digest_tree(share.private) == before
    assert share.salaries.read_text() == f"alice,{share.secret}\n"
    # the evidence's side: each attack recorded failed / linked_resource, naming the code
    records = env.records()
    refused = [r for r in records if str(r.outcome) == "failed"]
    assert len(records) == len(FS_ATTACKS) + 2 and len(refused) == len(FS_ATTACKS)
    assert {str(r.reason) for r in refused} == {"linked_resource"}
    codes = " ".join(str(r.error) for r in refused)
    assert "(symlink)" in codes and "(hard_link)" in codes


async def test_admin_reads_the_private_file_itself(tmp_path: Path) -> None:
    """The check refuses links, not paths: the real file is served to whom the rules allow."""
    share = make_share(tmp_path)
    log = tmp_path / "fs-tap.jsonl"
    (share.bob / "hl_salaries").unlink()  # a second name would make the file itself refused
    async with (
        brokered(tmp_path, tapped_fs(share, log), fs_rules(share)) as env,
        env.turn(env.context("dana", ("admin",))) as t,
    ):
        real = await t.call("fs.read_text_file", {"path": str(share.salaries)})
        listed = await t.call("fs.list_directory", {"path": str(share.private)})
    assert real.is_error is False and share.secret in text_of(real)
    assert listed.is_error is False and "salaries.csv" in text_of(listed)


# -- mcp-server-git ---------------------------------------------------------------------


def git(*args: str, cwd: Path | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


@dataclass
class Repos:
    """A team repository anyone reads (maintainers write), a security one nobody here may touch."""

    root: Path
    secret: str
    secret_sha: str

    @property
    def team(self) -> Path:
        return self.root / "team"

    @property
    def security(self) -> Path:
        return self.root / "security"

    def security_state(self) -> tuple[str, str, dict[str, str]]:
        """The security repository's HEAD, every ref and object, and its working tree."""
        refs = git("-C", str(self.security), "for-each-ref", "--format=%(refname) %(objectname)")
        head = git("-C", str(self.security), "rev-parse", "HEAD")
        return head, refs, digest_tree(self.security)


def make_repos(tmp: Path) -> Repos:
    root = tmp / "git"
    secret = plant("keys")
    make_repo(root / "team", {"README.md": "team repository\n"})
    make_repo(root / "security", {"keys.txt": f"key {secret}\n"})
    sha = git("-C", str(root / "security"), "rev-parse", "HEAD")
    repos = Repos(root, secret, sha)
    team = repos.team
    # a symlinked repository, and a symlinked directory on the way to one
    os.symlink(repos.security, team / "linked")
    os.symlink(root, team / "up")
    # a .git that is a symbolic link to another repository's git directory
    (team / "dotlink").mkdir()
    os.symlink(repos.security / ".git", team / "dotlink" / ".git")
    # a .git that is a 'gitdir:' pointer (what a submodule checkout has)
    (team / "pointer").mkdir()
    (team / "pointer" / ".git").write_text(f"gitdir: {repos.security / '.git'}\n")
    # a real worktree of the security repository, checked out inside team
    git("-C", str(repos.security), "worktree", "add", "-q", str(team / "wt"), "-b", "wt")
    # a repository that borrows the security repository's objects
    make_repo(team / "alt", {"a.txt": "alt\n"})
    alternates = team / "alt" / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{repos.security / '.git' / 'objects'}\n")
    # a repository whose working tree is the security repository's
    make_repo(team / "elsewhere", {"e.txt": "e\n"})
    git("-C", str(team / "elsewhere"), "config", "core.worktree", str(repos.security))
    # a repository whose object store is a symbolic link to the security one's
    make_repo(team / "objlink", {"o.txt": "o\n"})
    objects = team / "objlink" / ".git" / "objects"
    subprocess.run(["rm", "-rf", str(objects)], check=True)
    os.symlink(repos.security / ".git" / "objects", objects)
    return repos


def git_rules(repos: Repos) -> str:
    reads = ("git_status", "git_log", "git_show", "git_diff_unstaged", "git_branch")
    writes = ("git_add", "git_commit", "git_create_branch", "git_checkout", "git_reset")
    text = "namespace git\n"
    text += "".join(req(f"git.{t}", "read", "repo_path") for t in reads)
    text += "".join(req(f"git.{t}", "write", "repo_path") for t in writes)
    text += f'permit read on "{repos.team}/**"\n'
    text += f'permit write on "{repos.team}/**" when "maintainer" in context.roles\n'
    text += f'forbid * on "{repos.security}/**"\n'
    text += 'toolpolicy run { mode strict\n managed git.*\n harness_local "shell" }\n'
    return text


def tapped_git(log: Path) -> str:
    # not fenced to one repository (--repository): only SharedOS stands in the way
    return stdio_upstream("git", PY, [str(TAP), str(log), "--", str(git_server())])


def git_attacks(repos: Repos) -> Iterator[tuple[str, str, dict[str, Any]]]:
    team, sha = repos.team, repos.secret_sha
    for where, label in (
        (team / "linked", "a symlinked repository"),
        (team / "up" / "security", "a symlinked directory on the way"),
        (team / "dotlink", "a .git that is a symlink"),
        (team / "pointer", "a gitdir: pointer"),
        (team / "wt", "a worktree of another repository"),
        (team / "objlink", "an object store that is a symlink"),
    ):
        yield f"{label}: log", "git.git_log", {"repo_path": str(where)}
        yield f"{label}: show", "git.git_show", {"repo_path": str(where), "revision": sha}
    yield (
        "borrowed objects: show",
        "git.git_show",
        {
            "repo_path": str(team / "alt"),
            "revision": sha,
        },
    )
    yield (
        "a relocated working tree: status",
        "git.git_status",
        {"repo_path": str(team / "elsewhere")},
    )
    yield (
        "a relocated working tree: diff",
        "git.git_diff_unstaged",
        {"repo_path": str(team / "elsewhere")},
    )
    # writes a maintainer of team may make, aimed through the links at security
    yield (
        "a commit through a symlinked repository",
        "git.git_commit",
        {
            "repo_path": str(team / "linked"),
            "message": "written through a link",
        },
    )
    yield (
        "a branch through a gitdir: pointer",
        "git.git_create_branch",
        {
            "repo_path": str(team / "pointer"),
            "branch_name": "planted",
        },
    )
    yield "a reset through a worktree", "git.git_reset", {"repo_path": str(team / "wt")}
    yield (
        "a checkout through a symlinked .git",
        "git.git_checkout",
        {
            "repo_path": str(team / "dotlink"),
            "branch_name": "wt",
        },
    )


async def test_mcp_server_git_never_reaches_another_repository_through_a_link(
    tmp_path: Path,
) -> None:
    repos = make_repos(tmp_path)
    # an ordinary change to commit, and a planted change in security to commit through a link
    (repos.security / "keys.txt").write_text(f"key {repos.secret}\nchanged\n")
    git("-C", str(repos.security), "add", "keys.txt")
    before = repos.security_state()
    attacks = list(git_attacks(repos))
    log = tmp_path / "git-tap.jsonl"
    results: list[tuple[str, Any]] = []
    async with (
        brokered(tmp_path, tapped_git(log), git_rules(repos)) as env,
        env.turn(env.context("alice", ("maintainer",))) as t,
    ):
        own = await t.call("git.git_log", {"repo_path": str(repos.team)})
        for label, tool, args in attacks:
            results.append((label, await t.call(tool, args)))
    assert own.is_error is False and "first" in text_of(own)
    leaked = not_refused(results, repos.secret)
    assert not leaked, "\n".join(leaked)
    received = read_tool_calls(log)
    assert [(c.name, c.arguments["repo_path"]) for c in received] == [("git_log", str(repos.team))]
    assert repos.security_state() == before
    records = [r for r in env.records() if str(r.outcome) == "failed"]
    assert len(records) == len(attacks)
    assert {str(r.reason) for r in records} == {"linked_resource"}
    errors = " ".join(str(r.error) for r in records)
    for code in ("(symlink)", "(git_pointer)", "(git_alternates)", "(git_worktree)"):
        assert code in errors, code

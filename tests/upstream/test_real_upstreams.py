"""Real upstream servers nobody here wrote, brokered through the turn bridge.

mcp-server-git (PyPI) over stdio against a repository the test creates;
server-filesystem, server-memory and server-everything (npm, pinned) over
stdio; server-everything over streamable HTTP. A stdio tap in front of the
git server records what reached it, so denials are proven from its side.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sharedos.policy import compile_paths
from tests.upstream.conftest import (
    PY,
    REPO,
    RUN_POLICY,
    TAP,
    brokered,
    free_port,
    git_server,
    http_process,
    make_repo,
    node,
    npm_server,
    refusal_payload,
    stdio_upstream,
    structured,
    text_of,
)

pytestmark = pytest.mark.anyio


def req(tool: str, action: str, resource: str) -> str:
    """One requirement line (kept out of f-strings: its braces are the language's)."""
    return "requirement " + tool + " { action " + action + "; resource " + resource + " }\n"


def git_rules(repo: Path) -> str:
    reads = ("git_status", "git_log", "git_show")
    text = "namespace git\n"
    text += "".join(req(f"git.{t}", "read", "path(args.repo_path)") for t in reads)
    text += "".join(
        req(f"git.{t}", "write", "path(args.repo_path)") for t in ("git_add", "git_commit")
    )
    text += f'permit read on "{repo}/**"\n'
    text += f'permit write on "{repo}/**" when "maintainer" in context.roles\n'
    return text


def tapped_git(uid: str, repository: Path | None, log: Path, **kw: Any) -> str:
    """mcp-server-git behind the stdio tap; ``repository`` confines it to one repository."""
    confine = ["--repository", str(repository)] if repository is not None else []
    return stdio_upstream(uid, PY, [str(TAP), str(log), "--", str(git_server()), *confine], **kw)


def tapped_requests(log: Path) -> list[dict[str, object]]:
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        msg = json.loads(line)
        if msg.get("method") == "tools/call":
            out.append(msg["params"])
    return out


async def test_git_upstream_allowed_and_denied_with_the_upstream_tap(tmp_path: Path) -> None:
    allowed_repo = make_repo(tmp_path / "repos" / "open", {"a.txt": "a\n"})
    secret_repo = make_repo(tmp_path / "repos" / "secret", {"s.txt": "s\n"})
    log = tmp_path / "git-tap.jsonl"
    # unconfined upstream: SharedOS is the only fence here
    toml = tapped_git("git", None, log)
    rules = git_rules(allowed_repo) + RUN_POLICY
    async with brokered(tmp_path, toml, rules) as env, env.turn(env.context("bob")) as t:
        names = await t.names()
        status = await t.call("git.git_status", {"repo_path": str(allowed_repo)})
        log_result = await t.call("git.git_log", {"repo_path": str(allowed_repo)})
        denied_read = await t.call("git.git_log", {"repo_path": str(secret_repo)})
        traversal = await t.call("git.git_log", {"repo_path": f"{allowed_repo}/../secret"})
        denied_write = await t.call(
            "git.git_commit", {"repo_path": str(allowed_repo), "message": "x"}
        )
    # only governed tools are listed (git_branch has no requirement here), and only
    # those some permit could allow bob (git_commit needs a maintainer)
    assert {"git.git_status", "git.git_log"} <= set(names)
    assert "git.git_branch" not in names and "git.git_commit" not in names
    assert status.is_error is False and "On branch main" in text_of(status)
    assert log_result.is_error is False and "first" in text_of(log_result)
    for refused in (denied_read, traversal, denied_write):
        assert refused.is_error is True and structured(refused)["outcome"] == "denied"
    assert structured(traversal)["resource"] == str(secret_repo)
    # the git server received exactly the two allowed calls
    received = tapped_requests(log)
    assert [r["name"] for r in received] == ["git_status", "git_log"]
    assert all(r["arguments"]["repo_path"] == str(allowed_repo) for r in received)  # type: ignore[index]


async def test_git_upstream_write_by_a_maintainer_changes_the_repository(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repos" / "work")
    (repo / "new.txt").write_text("new\n", encoding="utf-8")
    log = tmp_path / "tap.jsonl"
    async with (
        brokered(tmp_path, tapped_git("git", repo, log), git_rules(repo) + RUN_POLICY) as env,
        env.turn(env.context("alice", ("maintainer",))) as t,
    ):
        added = await t.call("git.git_add", {"repo_path": str(repo), "files": ["new.txt"]})
        committed = await t.call(
            "git.git_commit", {"repo_path": str(repo), "message": "via sharedos"}
        )
        shown = await t.call("git.git_log", {"repo_path": str(repo)})
    assert added.is_error is False and committed.is_error is False
    assert "via sharedos" in text_of(shown)


async def test_filesystem_memory_and_everything_over_stdio(tmp_path: Path) -> None:
    share = tmp_path / "share"
    (share / "public").mkdir(parents=True)
    (share / "private").mkdir()
    (share / "public" / "readme.txt").write_text("public words\n", encoding="utf-8")
    (share / "private" / "salaries.csv").write_text("alice,1\n", encoding="utf-8")
    toml = (
        stdio_upstream("fs", node(), [str(npm_server("server-filesystem")), str(share)])
        + stdio_upstream(
            "memory",
            node(),
            [str(npm_server("server-memory"))],
            extra=f'[upstream.memory.env]\nMEMORY_FILE_PATH = "{tmp_path / "memory.jsonl"}"\n',
        )
        + stdio_upstream("everything", node(), [str(npm_server("server-everything")), "stdio"])
    )
    rules = (
        "namespace fs\n"
        + req("fs.read_text_file", "read", "path(args.path)")
        + req("fs.write_file", "write", "path(args.path)")
        + f'permit read on "{share}/public/**"\n'
        + f'forbid * on "{share}/private/**"\n'
        + "namespace memory\n"
        + req("memory.create_entities", "write", '"graph"')
        + req("memory.read_graph", "read", '"graph"')
        + 'permit read on "graph"\n'
        + 'permit write on "graph" when "editor" in context.roles\n'
        + "namespace everything\n"
        + req("everything.echo", "read", '"echo"')
        + req("everything.get-sum", "read", '"sum"')
        + req("everything.get-structured-content", "read", '"weather/{args.location}"')
        + 'permit read on "echo"\npermit read on "sum"\npermit read on "weather/*"\n'
    )
    async with brokered(tmp_path, toml, rules + RUN_POLICY) as env:
        async with env.turn(env.context("carol", ("editor",))) as t:
            names = await t.names()
            read = await t.call("fs.read_text_file", {"path": str(share / "public" / "readme.txt")})
            private = await t.call(
                "fs.read_text_file",
                {"path": str(share / "public" / ".." / "private" / "salaries.csv")},
            )
            write = await t.call(
                "fs.write_file", {"path": str(share / "public" / "x"), "content": "x"}
            )
            entity = {"name": "SharedOS", "entityType": "project", "observations": ["brokered"]}
            created = await t.call("memory.create_entities", {"entities": [entity]})
            graph = await t.call("memory.read_graph", {})
            echo = await t.call("everything.echo", {"message": "hi there"})
            total = await t.call("everything.get-sum", {"a": 2, "b": 3})
            weather = await t.call("everything.get-structured-content", {"location": "New York"})
        statuses = {s.upstream: s for s in t.upstreams.statuses}
    assert {
        "fs.read_text_file",
        "memory.read_graph",
        "everything.echo",
        "everything.get-sum",
    } <= set(names)
    assert all(s.state == "ok" for s in statuses.values()), [s.lines() for s in statuses.values()]
    assert read.is_error is False and "public words" in text_of(read)
    # fs.read_text_file and fs.write_file declare an outputSchema: their refusals carry
    # no structuredContent (a schema-validating client would reject it), the payload is text
    assert private.is_error is True and private.structured_content is None
    assert refusal_payload(private)["reason"] == "forbidden"
    assert "alice,1" not in text_of(private)
    assert write.is_error is True and refusal_payload(write)["outcome"] == "denied"
    assert not (share / "public" / "x").exists()
    assert created.is_error is False and graph.is_error is False
    assert "SharedOS" in json.dumps(structured(graph)) + text_of(graph)
    assert echo.is_error is False and "hi there" in text_of(echo)
    assert total.is_error is False and "5" in text_of(total)
    # structuredContent passes through unchanged (the server's own outputSchema validates it)
    assert weather.is_error is False and structured(weather) == json.loads(text_of(weather))


async def test_catalogue_metadata_names_namespace_and_source(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    toml = stdio_upstream("gitA", str(git_server()), ["--repository", str(repo)], namespace="git")
    async with brokered(tmp_path, toml, git_rules(repo) + RUN_POLICY) as env, env.turn() as t:
        listed = (await t.client.list_tools()).tools
        catalog = t.turn.catalog
    wire = {tool["name"]: tool for tool in catalog.wire()}
    assert wire["git.git_status"]["metadata"] == {"namespace": "git", "source": "upstream:gitA"}
    assert wire["git.git_status"]["annotations"]["readOnlyHint"] is True
    assert {t.name for t in listed} == set(wire)


async def test_two_upstreams_with_the_same_raw_tool_names_never_collide(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", {"a.txt": "from a\n"})
    b = make_repo(tmp_path / "b", {"b.txt": "from b\n"})
    toml = stdio_upstream(
        "one", str(git_server()), ["--repository", str(a)], namespace="gita"
    ) + stdio_upstream("two", str(git_server()), ["--repository", str(b)], namespace="gitb")
    rules = (
        "namespace gita\n"
        + req("gita.git_log", "read", "path(args.repo_path)")
        + f'permit read on "{a}/**"\n'
        + "namespace gitb\n"
        + req("gitb.git_log", "read", "path(args.repo_path)")
        + f'permit read on "{b}/**"\n'
        + 'toolpolicy run { mode strict\n managed gita.*, gitb.*\n harness_local "shell" }\n'
    )
    async with brokered(tmp_path, toml, rules) as env, env.turn() as t:
        names = await t.names()
        log_a = await t.call("gita.git_log", {"repo_path": str(a)})
        cross = await t.call("gita.git_log", {"repo_path": str(b)})
        log_b = await t.call("gitb.git_log", {"repo_path": str(b)})
    assert names == ["gita.git_log", "gitb.git_log"]
    assert log_a.is_error is False and log_b.is_error is False
    # the namespace decides which rules apply: gita's rules do not open b
    assert cross.is_error is True and structured(cross)["outcome"] == "denied"


async def test_everything_over_streamable_http(tmp_path: Path) -> None:
    port = free_port()
    entry = npm_server("server-everything")
    toml = f'[upstream.evhttp]\nurl = "http://127.0.0.1:{port}/mcp"\npinning = "off"\n'
    rules = """
namespace evhttp
requirement evhttp.echo    { action read; resource "echo" }
requirement evhttp.get-sum { action read; resource "sum" }
requirement evhttp.trigger-long-running-operation { action read; resource "long" }
permit read on "echo"
permit read on "long"
"""
    seen: list[float] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        seen.append(p)

    with http_process([node(), str(entry), "streamableHttp"], port, env={"PORT": str(port)}):
        async with brokered(tmp_path, toml, rules + RUN_POLICY) as env:
            async with env.turn() as t:
                names = await t.names()
                echo = await t.call("evhttp.echo", {"message": "over http"})
                long = await t.call(
                    "evhttp.trigger-long-running-operation",
                    {"duration": 1, "steps": 3},
                    progress_callback=on_progress,
                )
            status = t.upstreams.statuses[0]
    assert status.state == "ok", status.lines()
    assert "evhttp.echo" in names and "evhttp.get-sum" not in names  # no permit: not listed
    assert echo.is_error is False and "over http" in text_of(echo)
    assert long.is_error is False
    assert len(seen) == 3


def _requirements(name: str) -> set[str]:
    policy = compile_paths([REPO / "rules" / name])
    return set(policy.requirements)


async def _listed(tmp_path: Path, toml: str) -> set[str]:
    async with brokered(tmp_path, toml, "toolpolicy run { mode open\n managed x.* }\n") as env:
        listings = await env.broker.list_all()
    [listing] = listings.values()
    assert listing.failure is None, listing.failure
    return {tool.name for tool, _ in listing.tools}


async def test_every_shipped_git_fs_memory_and_github_rule_names_a_real_tool(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo")
    listed = {
        "git.sos": await _listed(
            tmp_path, stdio_upstream("git", str(git_server()), ["--repository", str(repo)])
        ),
        "fs.sos": await _listed(
            tmp_path,
            stdio_upstream("fs", node(), [str(npm_server("server-filesystem")), str(repo)]),
        ),
        "memory.sos": await _listed(
            tmp_path,
            stdio_upstream(
                "memory",
                node(),
                [str(npm_server("server-memory"))],
                extra=f'[upstream.memory.env]\nMEMORY_FILE_PATH = "{tmp_path / "m.jsonl"}"\n',
            ),
        ),
        # listing needs no network; calling the GitHub API would
        "github.sos": await _listed(
            tmp_path, stdio_upstream("github", node(), [str(npm_server("server-github"))])
        ),
    }
    for rules, tools in listed.items():
        governed = _requirements(rules)
        assert governed, rules
        assert governed <= tools, (rules, sorted(governed - tools))

"""A stdio upstream in its own sandbox: a link that points outside its roots dangles.

The calls go straight to the upstream's session (``UpstreamConnection``, as the
broker forwards them), so what is shown is the sandbox's own effect: whatever
the kernel or a pre-forward check decided, the upstream cannot reach a file
outside the roots the operator declared. The same calls to the same upstream
without its sandbox return the secret — the tests can fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from sharedos.harness.hostconfig import parse_host_config
from sharedos.upstream.connection import UpstreamConnection
from sharedos.upstream.sandbox import UpstreamConfinementPolicy, decide
from sharedos.upstream.secrets import resolve_credentials
from tests.upstream.conftest import git_server, make_repo, node, npm_server

pytestmark = pytest.mark.anyio
SECRET = "PLANTED-outside-the-roots-91b2"


def _config(toml: str) -> Any:
    return next(iter(parse_host_config(toml, "host.toml").upstream.values()))


async def _calls(
    config: Any, policy: UpstreamConfinementPolicy, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[str, list[str]]:
    """(how it was placed, the text of each call's result or error)."""
    placement = decide(config, policy)
    assert placement.refusal is None, placement.refusal
    out: list[str] = []
    async with anyio.create_task_group() as tg:
        conn = UpstreamConnection(
            config, resolve_credentials(config, {}), stderr=None, wrap=placement.wrap
        )
        await conn.start(tg)
        try:
            for name, args in calls:
                try:
                    result = await conn.call_tool(name, args)
                    out.append(json.dumps(result.model_dump(mode="json")))
                except Exception as exc:  # an upstream error is a result here
                    out.append(f"error: {exc}")
        finally:
            await conn.close()
    return placement.record, out


def _tree(tmp: Path) -> tuple[Path, Path]:
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    share = tmp / "share"
    (share / "public").mkdir(parents=True)
    (share / "public" / "readme.txt").write_text("public words\n", encoding="utf-8")
    (share / "public" / "link.txt").symlink_to(outside / "secret.txt")
    (share / "public" / "dirlink").symlink_to(outside)
    return share, outside


async def test_server_filesystem_cannot_follow_a_link_out_of_its_roots(tmp_path: Path) -> None:
    share, outside = _tree(tmp_path)
    public = share / "public"
    # server-filesystem's own fence (its allowed directories) is set wide on purpose, as
    # when the rules need more than one share: the sandbox is what holds the line here
    base = (
        f"[upstream.fs]\ncommand = {json.dumps(node())}\n"
        f"args = {json.dumps([str(npm_server('server-filesystem')), str(tmp_path)])}\n"
    )
    calls = [
        ("read_text_file", {"path": str(public / "readme.txt")}),
        ("read_text_file", {"path": str(public / "link.txt")}),
        ("list_directory", {"path": str(public / "dirlink")}),
        ("write_file", {"path": str(public / "link.txt"), "content": "overwritten"}),
    ]
    confined = _config(base + f'roots = [{{ path = "{share}", mode = "rw" }}]\n')
    record, got = await _calls(confined, UpstreamConfinementPolicy(required=True), calls)
    assert record.startswith("confined by bubblewrap") and "network none" in record
    assert "public words" in got[0]
    assert SECRET not in "".join(got)
    assert "secret.txt" not in got[2]  # the linked directory shows nothing
    assert (outside / "secret.txt").read_text() == SECRET + "\n"  # byte for byte
    assert not list((tmp_path / "outside").glob("*overwritten*"))
    # the same upstream, not confined: the link leads to the secret
    plain = _config(base)
    record, got = await _calls(plain, UpstreamConfinementPolicy(required=False), calls[:3])
    assert record.startswith("not confined")
    assert SECRET in got[1] and "secret.txt" in got[2]


async def test_mcp_server_git_cannot_follow_a_linked_repository(tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    make_repo(repos / "open", {"a.txt": "a\n"})
    secret = make_repo(tmp_path / "secret-repo", {"s.txt": SECRET + "\n"})
    (repos / "linked").symlink_to(secret)
    base = f"[upstream.git]\ncommand = {json.dumps(str(git_server()))}\n"
    calls = [
        ("git_log", {"repo_path": str(repos / "open")}),
        ("git_show", {"repo_path": str(repos / "linked"), "revision": "HEAD"}),
    ]
    confined = _config(base + f'roots = [{{ path = "{repos}", mode = "ro" }}]\n')
    record, got = await _calls(confined, UpstreamConfinementPolicy(required=True), calls)
    assert record.startswith("confined by bubblewrap")
    assert "first" in got[0]  # the commit message of the permitted repository
    assert SECRET not in got[1]
    plain = _config(base)
    _, got = await _calls(plain, UpstreamConfinementPolicy(), calls)
    assert SECRET in got[1]


async def test_a_strict_run_leaves_out_an_upstream_it_cannot_confine(tmp_path: Path) -> None:
    config = _config(f"[upstream.git]\ncommand = {json.dumps(str(git_server()))}\n")
    placement = decide(config, UpstreamConfinementPolicy(required=True))
    assert placement.wrap is None and placement.refusal is not None
    assert "declares no roots" in placement.refusal and "--unconfined" in placement.refusal
    # an upstream whose roots would show SharedOS's own state is refused whatever the run
    state = tmp_path / "evidence.sqlite"
    state.write_text("")
    exposed = _config(
        f"[upstream.git]\ncommand = {json.dumps(str(git_server()))}\n"
        f'roots = [{{ path = "{tmp_path}", mode = "ro" }}]\n'
    )
    refused = decide(exposed, UpstreamConfinementPolicy(managed=(str(tmp_path),)))
    assert refused.refusal is not None and "would be visible" in refused.refusal


async def test_a_link_whose_target_is_a_double_dash_does_not_end_bwraps_options(
    tmp_path: Path,
) -> None:
    """The upstream's own ``--setenv``s were spliced in at the first ``--`` of the command
    line; a link of the view recreated inside (``--symlink TARGET PATH``) whose target is
    ``--`` came first: bwrap took ``/tmp`` for the program (``execvp /tmp: Permission
    denied``) and the upstream never started."""
    from sharedos.confine import find_bubblewrap
    from sharedos.confine.upstream import plan_upstream

    (tmp_path / "--").mkdir()
    (tmp_path / "--" / "tool.txt").write_text("the tool\n", encoding="utf-8")
    (tmp_path / "tools").symlink_to("--")
    sandbox = plan_upstream(
        find_bubblewrap(), command="/bin/cat", roots=[], readonly=[str(tmp_path / "tools")]
    )
    command, args = sandbox.wrap("/bin/sh", ["-c", f'cat "{tmp_path}/tools/tool.txt"; echo $HOME'])
    done = await anyio.run_process([command, *args], check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["the", "tool", "/tmp"]

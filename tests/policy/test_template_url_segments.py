"""A template hole is one segment to a URL as well as to the policy.

Upstreams paste holes into URLs: server-github fetches
``https://api.github.com/repos/${owner}/${repo}/issues``, and Node's ``fetch``
(the WHATWG URL parser) reads ``\\`` as ``/``, ``%2e%2e`` (any case, or
``.%2e``) as ``..``, and ``?``/``#`` as the end of the path. So
``repo = "sharedos\\..\\security"`` was decided as ``sharedos/sharedos\\..\\security``
(permitted by ``sharedos/*``, not forbidden as ``sharedos/security``) and sent to
``/repos/sharedos/security/...``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sharedos.policy import compile_paths, compile_source

ALICE = {"principal": "alice", "tenant": "acme", "roles": ["maintainer"]}

ESCAPES = [
    "sharedos\\..\\security",
    "..\\security",
    "%2e%2e",
    "%2E%2e",
    ".%2e",
    "%2e.",
    "%2e",
    "security#",
    "security?x=1",
    "a%2fb",
    "a%5Cb",
    "a%00b",
]


@pytest.mark.parametrize("repo", ESCAPES)
def test_a_hole_a_url_reads_as_another_path_is_unresolvable(repo: str, repo_root: Path) -> None:
    policy = compile_paths([repo_root / "rules"])
    for tool, args in (
        ("github.get_issue", {"owner": "sharedos", "repo": repo, "issue_number": 7}),
        ("github.create_issue", {"owner": "sharedos", "repo": repo, "title": "x"}),
    ):
        d = policy.decide(tool, args, ALICE)
        assert d.reason == "unresolvable_resource", (tool, repo, d.reason, d.resource)


def test_holes_that_together_spell_a_dot_segment_are_unresolvable() -> None:
    policy = compile_source(
        'namespace t\nrequirement t.x { action read; resource "r/{args.a}{args.b}" }\n'
        'permit read on "r/*"\n',
        "p.sos",
    )
    assert policy.decide("t.x", {"a": "%2", "b": "e%2e"}, {}).reason == "unresolvable_resource"
    assert policy.decide("t.x", {"a": "%2", "b": "0"}, {}).reason == "allowed"


@pytest.mark.parametrize("repo", ["sharedos", "sharedos.github.io", "a-b_c", "100%", "v1.2"])
def test_ordinary_names_still_resolve(repo: str, repo_root: Path) -> None:
    policy = compile_paths([repo_root / "rules"])
    d = policy.decide(
        "github.get_issue", {"owner": "sharedos", "repo": repo, "issue_number": 1}, ALICE
    )
    assert d.reason == "allowed" and d.resource == f"sharedos/{repo}"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node (server-github's runtime)")
def test_the_escapes_are_what_nodes_fetch_resolves(tmp_path: Path) -> None:
    """Why: the real URL parser of server-github's runtime sends each escape elsewhere."""
    script = (
        "for (const r of JSON.parse(process.argv[1])) "
        "console.log(new URL(`https://api.github.com/repos/sharedos/${r}/issues`).pathname);"
    )
    import json

    out = subprocess.run(
        ["node", "-e", script, json.dumps(ESCAPES[:8])],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert all(p != "/repos/sharedos/" + r + "/issues" for p, r in zip(out, ESCAPES, strict=False))
    assert out[0] == "/repos/sharedos/security/issues"


@pytest.mark.parametrize(
    "path",
    ["../../security/contents/keys.txt", "%2e%2E/.%2e/security/contents/k", "..\\..\\security"],
)
def test_a_file_path_that_climbs_out_of_the_repository_is_forbidden(
    path: str, repo_root: Path
) -> None:
    """server-github's get_file_contents pastes ``path`` after ``/contents/``: the
    decision names ``sharedos/sharedos``, the URL fetched ``sharedos/security``."""
    policy = compile_paths([repo_root / "rules"])
    args = {"owner": "sharedos", "repo": "sharedos", "path": path}
    d = policy.decide("github.get_file_contents", args, ALICE)
    assert d.reason == "forbidden", (path, d.reason)
    ok = policy.decide("github.get_file_contents", {**args, "path": "docs/a.md"}, ALICE)
    assert ok.reason == "allowed"

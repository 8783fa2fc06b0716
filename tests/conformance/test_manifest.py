"""The manifest: the shipped one covers the required rows; a malformed one gets positioned errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.conformance.manifest import (
    MANIFEST_PATH,
    ManifestError,
    load_manifest,
    parse_manifest,
)
from sharedos.outcomes import Outcome, ReasonCode


def test_shipped_manifest_covers_the_required_kernel_rows() -> None:
    m = load_manifest()
    expect = {r.id: (r.expect.outcome, r.expect.reason) for r in m.rows if r.expect is not None}
    assert expect["public-read-allowed"][0] is Outcome.SUCCEEDED
    assert expect["private-read-denied"] == (Outcome.DENIED, ReasonCode.FORBIDDEN)
    assert expect["private-read-admin-allowed"][0] is Outcome.SUCCEEDED
    assert expect["traversal-denied"] == (Outcome.DENIED, ReasonCode.FORBIDDEN)
    assert expect["write-outside-home-denied"][0] is Outcome.DENIED
    assert expect["not-in-run-policy"] == (Outcome.DENIED, ReasonCode.NOT_IN_RUN_POLICY)
    assert expect["unpublished-tool"] == (Outcome.DENIED, ReasonCode.TOOL_UNAVAILABLE)
    assert expect["invalid-arguments"] == (Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS)
    assert expect["handler-failure"] == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    names = {r.id: r.tool_name for r in m.rows}
    assert " " in names["malformed-name-space"]
    assert len(names["malformed-name-long"]) == 200
    assert not names["malformed-name-unicode"].isascii()
    assert m.rows[0].arguments == {"path": "/public/a.txt"}
    assert m.row("traversal-denied").arguments == {"path": "/public/../private/a.txt"}
    assert m.contexts[m.context_of(m.row("private-read-admin-allowed"))].roles == ("admin",)


def test_shipped_manifest_is_inside_the_package() -> None:
    # so that it ships in the wheel (hatch packages = ["sharedos"])
    assert MANIFEST_PATH.parent.name == "conformance"
    assert MANIFEST_PATH.parent.parent.name == "sharedos"


def test_reason_that_contradicts_the_outcome_is_positioned(conformance_data: Path) -> None:
    path = conformance_data / "bad-reason.toml"
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    msg = str(err.value)
    assert f"{path}:29:1:" in msg  # the line of `expect = ...` in the second row
    assert "rows[1] (id 'bad-row').expect" in msg
    assert "'handler_error' means failed, not denied" in msg
    assert "Traceback" not in msg


def test_unknown_context_is_named(conformance_data: Path) -> None:
    with pytest.raises(ManifestError, match="context 'mallory' is not defined"):
        load_manifest(conformance_data / "unknown-context.toml")


def test_strict_policy_without_local_tools_is_refused(conformance_data: Path) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifest(conformance_data / "strict-without-local.toml")
    assert "policies.p" in str(err.value)
    assert "names no harness_local tools" in str(err.value)
    assert "strict-without-local.toml:9:1:" in str(err.value)  # the [policies.p] table


def test_invalid_toml_has_line_and_column(conformance_data: Path) -> None:
    with pytest.raises(ManifestError, match=r"invalid TOML: .*line 2"):
        load_manifest(conformance_data / "not-toml.toml")


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_manifest(tmp_path / "nope.toml")


def test_duplicate_row_ids_are_refused() -> None:
    text = (
        Path(MANIFEST_PATH).read_text(encoding="utf-8")
        + '\n[[rows]]\nid = "public-read-allowed"\ntitle = "again"\ntool = "files.read"\n'
        'expect = { outcome = "succeeded" }\n'
    )
    with pytest.raises(ManifestError, match="row id 'public-read-allowed' is used twice"):
        parse_manifest(text, "dup.toml")


def test_shipped_manifest_has_brokered_rows_on_a_git_fixture() -> None:
    m = load_manifest()
    fixture = m.upstreams["git"]
    assert fixture.server == "mcp-server-git" and set(fixture.repositories) == {"team", "other"}
    assert "{git.root}/team/**" in fixture.rules
    brokered = {r.id: r for r in m.brokered_rows()}
    assert set(brokered) == {
        "brokered-read-allowed",
        "brokered-other-repo-denied",
        "brokered-traversal-denied",
        "brokered-traversal-canonical",
        "brokered-not-in-run-policy",
        "brokered-link-symlinked-repository",
        "brokered-link-symlinked-directory",
        "brokered-link-gitdir-pointer",
    }
    assert fixture.symlinks == {"team/linked": "other", "team/up": "."}
    assert fixture.gitdir_pointers == {"team/pointer": "other"}
    assert brokered["brokered-not-in-run-policy"].expect.reason is ReasonCode.NOT_IN_RUN_POLICY
    assert all(r.tool_name.startswith("git.") and r.upstream == "git" for r in brokered.values())
    bound = brokered["brokered-traversal-denied"].bind({"git.root": "/w/git"})
    assert bound.arguments == {"repo_path": "/w/git/team/../other"}
    assert bound.resource == "/w/git/other"
    # binding other fixtures' keys, or none, leaves a row as written
    assert brokered["brokered-read-allowed"].bind({"x.root": "/y"}).resource == "{git.root}/team"


_FIXTURE = (
    '[upstreams.git]\nserver = "mcp-server-git"\nrepositories = ["team", "other"]\n'
    'files = { "other/salaries.csv" = "bob,98765 (private to the other repository)" }\n'
)


def _with_row(row: str, fixture: str = _FIXTURE) -> str:
    text = Path(MANIFEST_PATH).read_text(encoding="utf-8")
    head, rows = text.split("[upstreams.git]", 1)
    rows = rows[rows.index("[[rows]]") :]
    return head + fixture + "\n" + rows + "\n[[rows]]\n" + row


@pytest.mark.parametrize(
    ("row", "fixture", "message"),
    [
        (
            'id = "x"\ntitle = "t"\ntool = "git.git_log"\narguments = { repo_path = "{git.root}/a" }\n'
            'expect = { outcome = "succeeded" }\n',
            _FIXTURE,
            "uses {git.root} but names no upstream",
        ),
        (
            'id = "x"\ntitle = "t"\ntool = "git.git_log"\nupstream = "svn"\n'
            'expect = { outcome = "succeeded" }\n',
            _FIXTURE,
            "upstream 'svn' is not defined in [upstreams]",
        ),
        (
            'id = "x"\ntitle = "t"\ntool = "files.read"\nupstream = "git"\n'
            'expect = { outcome = "succeeded" }\n',
            _FIXTURE,
            "a row of upstream 'git' calls a git.* tool",
        ),
        (
            'id = "x"\ntitle = "t"\ntool = "git.git_log"\nupstream = "git"\n'
            'expect = { outcome = "succeeded" }\n',
            _FIXTURE + 'rules = "permit read on \\"{hg.root}/**\\""\n',
            "its rules may use only {git.root}, not {hg.root}",
        ),
        (
            'id = "x"\ntitle = "t"\ntool = "git.git_log"\nupstream = "git"\n'
            'expect = { outcome = "succeeded" }\n',
            '[upstreams.git]\nserver = "/bin/sh"\nrepositories = ["team"]\n',
            "upstreams.git.server",
        ),
    ],
)
def test_brokered_rows_that_cannot_be_served_are_refused_with_a_reason(
    row: str, fixture: str, message: str
) -> None:
    with pytest.raises(ManifestError) as err:
        parse_manifest(_with_row(row, fixture), "brokered.toml")
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)


_SANDBOX_ROW = """
version = 1
title = "t"
default_context = "alice"
default_policy = "p"
[contexts.alice]
principal = "alice"
[policies.p]
name = "p"
mode = "strict"
managed = ["files.read"]
harness_local = ["shell.bounded"]
[[rows]]
id = "r"
title = "r"
tool = "files.read"
arguments = { path = "/public/a.txt" }
expect = { outcome = "succeeded" }
"""


@pytest.mark.parametrize(
    ("sandbox", "why"),
    [
        # a dirs entry climbing out of the tree (it was made outside it)
        ('dirs = ["/../../../../../../../tmp/escaped"]\n[sandbox.files]\n', "'..'"),
        ('dirs = ["escaped"]\n[sandbox.files]\n', "must be absolute"),
        ('[sandbox.files]\n"/" = "x"\n', "must be absolute, below '/'"),
        ('[sandbox.files]\n"/public//a.txt" = "x"\n', "no empty"),
        ('[sandbox.files]\n"/public/a\\u0000.txt" = "x"\n', "control character"),
        ('[sandbox.files]\n"/public/a\\n.txt" = "x"\n', "control character"),
        ('[sandbox.files]\n"/public/' + "a" * 256 + '" = "x"\n', "longer than 255 bytes"),
        # a file that is also a directory of the tree
        ('[sandbox.files]\n"/public" = "x"\n', "also a directory"),
        ('[sandbox.files]\n"/a" = "x"\n"/a/b" = "y"\n', "also a directory"),
        ('dirs = ["/a"]\n[sandbox.files]\n"/a" = "x"\n', "also a directory"),
    ],
)
def test_a_sandbox_path_that_would_not_stay_one_entry_in_the_tree_is_refused(
    sandbox: str, why: str
) -> None:
    # each of these once escaped the tree or ended the run in a traceback when the
    # tree was made (IsADirectoryError, FileExistsError, embedded null byte, name too long)
    with pytest.raises(ManifestError) as err:
        parse_manifest(_SANDBOX_ROW + "[sandbox]\n" + sandbox, "tree.toml")
    assert "tree.toml:" in str(err.value) and why in str(err.value)
    assert "Traceback" not in str(err.value)


@pytest.mark.parametrize(
    "tool",
    ['{ repeat = "f", times = 1025 }', '{ repeat = "ab", times = 5000 }', '"' + "f" * 1025 + '"'],
)
def test_a_tool_string_longer_than_a_record_keeps_is_refused(tool: str) -> None:
    # the evidence keeps 1024 characters of a tool string: such a row failed in every
    # scripted shape ("expected denied/tool_unavailable, got denied/tool_unavailable")
    text = _SANDBOX_ROW.replace('tool = "files.read"', f"tool = {tool}") + "[sandbox]\nfiles = {}\n"
    with pytest.raises(ManifestError, match="an evidence record keeps at most 1024"):
        parse_manifest(text, "long.toml")


def test_a_tool_string_a_record_keeps_whole_is_accepted() -> None:
    text = _SANDBOX_ROW.replace('tool = "files.read"', 'tool = { repeat = "f", times = 1024 }')
    manifest = parse_manifest(text + "[sandbox]\nfiles = {}\n", "long.toml")
    assert len(manifest.rows[0].tool_name) == 1024


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        # a scripted shape failed it ("the kernel received arguments {'$truncated': ...}")
        ('{ path = "/public/a.txt", pad = "' + "x" * 70_000 + '" }', "cannot be kept whole"),
        ("{ at = 1979-05-27T07:32:00Z }", "cannot be kept whole"),  # no JSON form
        ("{ n = nan }", "cannot be kept whole"),
        # ended the run in "dictionary update sequence element #0 has length 13"
        ('["/public/a.txt"]', "valid dictionary"),
        ('"/public/a.txt"', "valid dictionary"),
    ],
)
def test_arguments_a_record_cannot_keep_as_written_are_refused(arguments: str, why: str) -> None:
    text = _SANDBOX_ROW.replace('{ path = "/public/a.txt" }', arguments)
    with pytest.raises(ManifestError) as err:
        parse_manifest(text + "[sandbox]\nfiles = {}\n", "args.toml")
    assert "rows[0] (id 'r').arguments" in str(err.value) and why in str(err.value)


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        # each ended conformance run in a bare "1 validation error for AccessContext"
        ('principal = "alice"', 'principal = ""', "contexts.alice.principal"),
        ('principal = "alice"', 'principal = "al\\u0007ice"', "contexts.alice.principal"),
        ('principal = "alice"', 'principal = "alice"\ntenant = "a\\nb"', "contexts.alice.tenant"),
        # a name that would put a control character, or too many, into a turn id
        ("[contexts.alice]", '[contexts."alice\\u001b"]', "[contexts] name 'alice\\x1b'"),
        ('default_policy = "p"', 'default_policy = "' + "p" * 65 + '"', "[policies] name"),
    ],
)
def test_a_context_or_policy_a_turn_cannot_carry_is_refused(old: str, new: str, why: str) -> None:
    text = (_SANDBOX_ROW + "[sandbox]\nfiles = {}\n").replace(old, new)
    if "p" * 65 in new:
        text = text.replace("[policies.p]", f"[policies.{'p' * 65}]")
    if "alice\\u001b" in new:
        text = text.replace('default_context = "alice"', 'default_context = "alice\\u001b"')
    with pytest.raises(ManifestError) as err:
        parse_manifest(text, "ctx.toml")
    assert why in str(err.value) and "ctx.toml:" in str(err.value)

"""files.* handlers act only on the authorized canonical resource, inside the sandbox root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Effect, ReasonCode
from sharedos.pathwalk import SandboxError, segments_of
from sharedos.policy.decision import Decision
from sharedos.tools import FILES_TOOL_NAMES, files_tools


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public" / "sub").mkdir(parents=True)
    (r / "private").mkdir()
    (r / "public" / "a.txt").write_text("public A")
    (r / "public" / "sub" / "b.txt").write_text("public B needle")
    (r / "private" / "secret.txt").write_text("TOP SECRET")
    (tmp_path / "outside.txt").write_text("OUTSIDE THE ROOT")
    # links planted inside /public
    os.symlink(r / "private" / "secret.txt", r / "public" / "to_private.txt")
    os.symlink(tmp_path / "outside.txt", r / "public" / "to_outside.txt")
    os.symlink(r / "private", r / "public" / "privdir")
    os.symlink(tmp_path, r / "public" / "outdir")
    return r


def tools(root: Path) -> dict[str, ToolDefinition]:
    return {t.name: t for t in files_tools(root)}


def run(tool: ToolDefinition, resource: str, **args: Any) -> HandlerResult:
    """Call a handler the way RuntimeHost does, with an allow decision for ``resource``."""
    decision = Decision(
        effect=Effect.ALLOW,
        reason=ReasonCode.ALLOWED,
        tool=tool.name,
        namespace="files",
        action="x",
        resource=resource,
        rule_ids=(),
        detail="allowed",
    )
    hctx = HandlerContext(
        call=ToolCall(tool=tool.name, arguments=args),
        context=AccessContext(principal="alice"),
        decision=decision,
    )
    assert tool.handler is not None
    result = tool.handler(args, hctx)
    assert isinstance(result, HandlerResult)
    return result


def text(result: HandlerResult) -> str:
    return " ".join(b["text"] for b in result.content)


def test_the_five_tools_exist_with_object_schemas(root: Path) -> None:
    ts = tools(root)
    assert sorted(ts) == list(FILES_TOOL_NAMES)
    for t in ts.values():
        assert t.input_schema["type"] == "object"
        assert t.namespace == "files"
    assert ts["files.search"].input_schema["required"] == ["root", "pattern"]
    assert ts["files.write"].input_schema["required"] == ["path", "content"]


def test_read_uses_the_authorized_resource_not_the_raw_argument(root: Path) -> None:
    # The raw argument says /private, the decision authorized /public/a.txt.
    result = run(tools(root)["files.read"], "/public/a.txt", path="/private/secret.txt")
    assert not result.is_error
    assert text(result) == "public A"


def test_write_list_delete_round_trip(root: Path) -> None:
    ts = tools(root)
    assert not run(ts["files.write"], "/public/new/dir/c.txt", path="x", content="hello").is_error
    assert (root / "public" / "new" / "dir" / "c.txt").read_text() == "hello"
    listing = run(ts["files.list"], "/public", path="/public")
    entries = {e["name"]: e["type"] for e in listing.structured["entries"]}  # type: ignore[index]
    assert entries["a.txt"] == "file" and entries["new"] == "dir"
    assert entries["to_private.txt"] == "symlink" and entries["privdir"] == "symlink"
    assert not run(ts["files.delete"], "/public/new/dir/c.txt", path="x").is_error
    assert not (root / "public" / "new" / "dir" / "c.txt").exists()


@pytest.mark.parametrize("resource", ["/public/to_private.txt", "/public/to_outside.txt"])
def test_read_through_a_symlink_is_refused(root: Path, resource: str) -> None:
    result = run(tools(root)["files.read"], resource, path=resource)
    assert result.is_error
    assert "symbolic link" in text(result)
    assert "SECRET" not in text(result) and "OUTSIDE" not in text(result)


@pytest.mark.parametrize("resource", ["/public/privdir/secret.txt", "/public/outdir/outside.txt"])
def test_read_through_a_symlinked_directory_is_refused(root: Path, resource: str) -> None:
    result = run(tools(root)["files.read"], resource, path=resource)
    assert result.is_error
    assert "SECRET" not in text(result) and "OUTSIDE" not in text(result)


@pytest.mark.parametrize(
    "resource", ["/public/to_private.txt", "/public/privdir/evil.txt", "/public/outdir/evil.txt"]
)
def test_write_through_a_symlink_is_refused_and_nothing_changes(root: Path, resource: str) -> None:
    result = run(tools(root)["files.write"], resource, path=resource, content="pwned")
    assert result.is_error
    assert (root / "private" / "secret.txt").read_text() == "TOP SECRET"
    assert not (root / "private" / "evil.txt").exists()
    assert not (root.parent / "evil.txt").exists()


def test_delete_of_a_symlink_or_through_one_is_refused(root: Path) -> None:
    ts = tools(root)
    assert run(ts["files.delete"], "/public/to_private.txt", path="x").is_error
    assert run(ts["files.delete"], "/public/privdir/secret.txt", path="x").is_error
    assert (root / "private" / "secret.txt").exists()
    assert (root / "public" / "to_private.txt").is_symlink()


def test_list_and_search_never_follow_links_out(root: Path) -> None:
    ts = tools(root)
    assert run(ts["files.list"], "/public/privdir", path="x").is_error
    assert run(ts["files.list"], "/public/outdir", path="x").is_error
    found = run(ts["files.search"], "/public", root="/public", pattern="*.txt")
    assert found.structured["matches"] == ["/public/a.txt", "/public/sub/b.txt"]  # type: ignore[index]
    needle = run(ts["files.search"], "/public", root="/public", pattern="*", text="needle")
    assert needle.structured["matches"] == ["/public/sub/b.txt"]  # type: ignore[index]
    everything = run(ts["files.search"], "/", root="/", pattern="*")
    assert "/private/secret.txt" in everything.structured["matches"]  # type: ignore[index]
    assert not any("outside" in m for m in everything.structured["matches"])  # type: ignore[index]
    assert not any(m.startswith("/public/privdir") for m in everything.structured["matches"])  # type: ignore[index]


def test_missing_files_and_wrong_kinds_are_handler_errors(root: Path) -> None:
    ts = tools(root)
    missing = run(ts["files.read"], "/public/nope.txt", path="x")
    assert missing.is_error and "/public/nope.txt does not exist" in text(missing)
    assert str(root) not in text(missing)  # host paths never leak
    assert run(ts["files.read"], "/public", path="x").is_error
    assert run(ts["files.delete"], "/public/sub", path="x").is_error
    assert run(ts["files.list"], "/public/a.txt", path="x").is_error
    assert run(ts["files.read"], "/nodir/x.txt", path="x").is_error


@pytest.mark.parametrize(
    "bad", ["/public/../private/secret.txt", "public/a.txt", "/a//b", "/./a", "/a\x00b"]
)
def test_sandbox_refuses_non_canonical_resources(root: Path, bad: str) -> None:
    with pytest.raises(SandboxError, match=r"\(not_canonical\)$"):
        segments_of(bad)
    assert run(tools(root)["files.read"], bad, path=bad).is_error


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        files_tools(tmp_path / "missing")


@pytest.mark.parametrize(
    ("tool", "resource"),
    [
        ("files.read", "/public/to_private.txt"),
        ("files.read", "/public/privdir/secret.txt"),
        ("files.write", "/public/outdir/evil.txt"),
        ("files.list", "/public/privdir"),
    ],
)
def test_the_no_follow_walk_refuses_links_on_the_way_and_at_the_end(
    root: Path, tool: str, resource: str
) -> None:
    """The one guard: every component opened from its parent's fd with ``O_NOFOLLOW``."""
    result = run(tools(root)[tool], resource, path=resource, content="pwned")
    assert result.is_error
    assert "SECRET" not in text(result)
    assert not (root.parent / "evil.txt").exists()


@pytest.mark.parametrize(
    ("pattern", "found"),
    [
        ("sub/*.txt", ["/public/sub/b.txt"]),  # the path below the search's root
        ("/public/sub/*.txt", ["/public/sub/b.txt"]),  # the absolute path
        ("*/b.txt", ["/public/sub/b.txt"]),
        ("**/*.txt", ["/public/a.txt", "/public/sub/b.txt"]),
        ("b.txt", ["/public/sub/b.txt"]),  # no "/": the name
        ("public/sub/*.txt", []),  # neither below /public nor absolute
    ],
)
def test_a_pattern_with_a_slash_matches_the_path_below_the_root(
    root: Path, pattern: str, found: list[str]
) -> None:
    # "src/*.py" in a search of /repo answered "no match": it was matched against the
    # absolute path only
    result = run(tools(root)["files.search"], "/public", root="/public", pattern=pattern)
    assert result.structured is not None and result.structured["matches"] == found

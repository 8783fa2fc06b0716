"""Adversarial review of the files tools and their sandbox (regression guards).

These pin down what is refused. Hard links (a second name of a forbidden file
planted in an allowed area) are refused by link count: see
test_files_hardlinks.py; host failures and races: test_files_host_errors.py
and test_files_concurrency.py.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy.decision import Decision
from sharedos.tools import files_tools

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public").mkdir(parents=True)
    (r / "private").mkdir()
    (r / "public" / "a.txt").write_text("public A")
    (r / "private" / "secret.txt").write_text("TOP SECRET")
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", r / "public" / "outdir")
    os.symlink(r / "private", r / "public" / "privdir")
    os.symlink(r / "public", r / "public" / "loop")  # a cycle for search
    return r


def tools(root: Path) -> dict[str, ToolDefinition]:
    return {t.name: t for t in files_tools(root)}


def run(
    tool: ToolDefinition, resource: str, *, within_s: float = 5.0, **args: Any
) -> HandlerResult:
    """Call the handler as RuntimeHost does (allow decision for ``resource``); fail if it hangs."""
    decision = Decision(
        Effect.ALLOW, ReasonCode.ALLOWED, tool.name, "files", "x", resource, (), "ok"
    )
    hctx = HandlerContext(
        call=ToolCall(tool=tool.name, arguments=args),
        context=AccessContext(principal="alice"),
        decision=decision,
    )
    assert tool.handler is not None
    box: list[Any] = []
    worker = threading.Thread(target=lambda: box.append(tool.handler(args, hctx)), daemon=True)  # type: ignore[misc]
    worker.start()
    worker.join(within_s)
    assert not worker.is_alive(), f"{tool.name} on {resource} hung"
    (result,) = box
    assert isinstance(result, HandlerResult)
    return result


def text(result: HandlerResult) -> str:
    return " ".join(b["text"] for b in result.content)


def test_reading_a_fifo_returns_at_once_with_an_error(root: Path) -> None:
    os.mkfifo(root / "public" / "pipe")
    result = run(tools(root)["files.read"], "/public/pipe", path="/public/pipe")
    assert result.is_error and "not a regular file" in text(result)


def test_writing_a_fifo_returns_at_once_with_or_without_a_reader(root: Path) -> None:
    fifo = root / "public" / "pipe"
    os.mkfifo(fifo)
    no_reader = run(tools(root)["files.write"], "/public/pipe", path="x", content="data")
    assert no_reader.is_error
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with_reader = run(tools(root)["files.write"], "/public/pipe", path="x", content="data")
        assert with_reader.is_error and "not a regular file" in text(with_reader)
        assert os.read(reader, 100) == b""  # nothing was written into the pipe
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_search_with_text_skips_fifos_and_never_blocks(root: Path) -> None:
    os.mkfifo(root / "public" / "pipe.txt")
    result = run(
        tools(root)["files.search"], "/public", root="/public", pattern="*.txt", text="public"
    )
    assert result.structured is not None
    assert result.structured["matches"] == ["/public/a.txt"]


@pytest.mark.skipif(not IS_ROOT, reason="creating a device node needs root")
@pytest.mark.parametrize("tool", ["files.read", "files.write", "files.delete"])
def test_device_nodes_are_never_read_written_or_deleted(root: Path, tool: str) -> None:
    dev = root / "public" / "zero"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # like /dev/zero
    result = run(tools(root)[tool], "/public/zero", path="x", content="data")
    assert result.is_error
    assert stat.S_ISCHR(os.lstat(dev).st_mode)
    listed = run(tools(root)["files.list"], "/public", path="/public")
    assert {"name": "zero", "type": "other", "size": None} in listed.structured["entries"]  # type: ignore[index]


_TTY_CHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
from sharedos.pathwalk import Sandbox, SandboxError
try:  # what files.read does, over a root that holds the terminal (/)
    Sandbox("/").read(sys.argv[2], 1)
    print("read")
except SandboxError as exc:
    print(exc)
try:
    os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    print("controlling terminal: yes")
except OSError:
    print("controlling terminal: no")
"""


def test_a_refused_read_of_a_terminal_does_not_make_it_the_host_s_terminal() -> None:
    """A host without a controlling terminal (a service: a session leader, started
    detached) that opened a terminal device to refuse it made that terminal its own:
    the terminal's hangup then killed the host with SIGHUP, and a Ctrl-C typed on it
    interrupted the host."""
    try:
        master, slave = os.openpty()
    except OSError:
        pytest.skip("no pseudo-terminals on this host")
    try:
        name = os.ttyname(slave)
        parts = name.split("/")[1:]
        if any(os.path.islink("/" + "/".join(parts[: i + 1])) for i in range(len(parts))):
            pytest.skip(f"{name} is reached through a link here")
        done = subprocess.run(
            [sys.executable, "-c", _TTY_CHILD, str(Path(__file__).resolve().parents[2]), name],
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,  # a session leader without a terminal, as a service is
            check=False,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert done.returncode == 0, done.stderr
    assert "(not_a_regular_file)" in done.stdout
    assert "controlling terminal: no" in done.stdout


@pytest.mark.parametrize(
    "resource",
    [
        "/public/outdir/new/deeper/evil.txt",
        "/public/privdir/new/evil.txt",
        "/public/outdir/evil.txt",
    ],
)
def test_writes_never_create_parents_through_a_link(root: Path, resource: str) -> None:
    result = run(tools(root)["files.write"], resource, path=resource, content="pwned")
    assert result.is_error
    assert list((root.parent / "outside").iterdir()) == []
    assert sorted(p.name for p in (root / "private").iterdir()) == ["secret.txt"]


def test_write_creates_missing_parents_inside_the_root_only(root: Path) -> None:
    result = run(tools(root)["files.write"], "/public/n1/n2/f.txt", path="x", content="ok")
    assert not result.is_error
    assert (root / "public" / "n1" / "n2" / "f.txt").read_text() == "ok"
    assert not (root / "public" / "n1").is_symlink()


@pytest.mark.parametrize("resource", ["/public", "/public/privdir", "/public/loop", "/"])
def test_directories_and_links_to_them_are_never_deleted(root: Path, resource: str) -> None:
    result = run(tools(root)["files.delete"], resource, path="x")
    assert result.is_error
    assert (root / "public" / "a.txt").exists() and (root / "private" / "secret.txt").exists()
    assert (root / "public" / "privdir").is_symlink()


def test_a_dangling_link_as_the_final_name_is_not_written_through(root: Path) -> None:
    target = root.parent / "outside" / "created.txt"
    os.symlink(target, root / "public" / "dangling.txt")
    result = run(tools(root)["files.write"], "/public/dangling.txt", path="x", content="pwned")
    assert result.is_error
    assert not target.exists()


def test_search_and_list_terminate_on_link_cycles_and_never_enter_links(root: Path) -> None:
    ts = tools(root)
    found = run(ts["files.search"], "/", root="/", pattern="*")
    assert found.structured is not None
    assert found.structured["matches"] == ["/private/secret.txt", "/public/a.txt"]
    listed = run(ts["files.list"], "/public", path="/public")
    kinds = {e["name"]: e["type"] for e in listed.structured["entries"]}  # type: ignore[index]
    assert kinds == {"a.txt": "file", "outdir": "symlink", "privdir": "symlink", "loop": "symlink"}
    assert run(ts["files.list"], "/public/loop", path="x").is_error


def test_search_pattern_is_a_name_glob_not_a_path_or_a_regex(root: Path) -> None:
    ts = tools(root)
    for pattern in ("../private/*", "/private/*", ".*", "(.*)+$", "[", "**/secret.txt"):
        found = run(ts["files.search"], "/public", root="/public", pattern=pattern)
        assert not found.is_error
        assert not any("secret" in m for m in found.structured["matches"])  # type: ignore[index]


def test_host_paths_never_appear_in_any_error(root: Path) -> None:
    ts = tools(root)
    cases = [
        ("files.read", "/public/outdir/x"),
        ("files.read", "/nope/x"),
        ("files.write", "/public/a.txt/x"),
        ("files.list", "/public/a.txt"),
        ("files.delete", "/public/privdir"),
        ("files.search", "/public/missing"),
    ]
    for tool, resource in cases:
        result = run(ts[tool], resource, path="x", root="x", pattern="*", content="c")
        assert result.is_error
        assert str(root) not in text(result) and str(root.parent) not in text(result)


def test_non_utf8_file_names_are_listed_and_found_as_escaped_text(root: Path) -> None:
    # such a name comes back from the OS with a lone surrogate, which no JSON can carry;
    # a listing that held one made the harness wait forever for its answer
    raw = os.fsencode(str(root / "public")) + b"/bad\xff.txt"
    os.close(os.open(raw, os.O_CREAT | os.O_WRONLY, 0o644))
    ts = tools(root)
    listed = run(ts["files.list"], "/public", path="/public")
    found = run(ts["files.search"], "/public", root="/public", pattern="bad*")
    names = [e["name"] for e in listed.structured["entries"]]  # type: ignore[index]
    assert "bad\\xff.txt" in names
    assert found.structured["matches"] == ["/public/bad\\xff.txt"]  # type: ignore[index]
    for result in (listed, found):
        text(result).encode("utf-8")  # wire-safe
        assert "\udcff" not in repr(result.structured)


def test_control_characters_in_names_cannot_forge_listing_or_search_lines(root: Path) -> None:
    # a name holding a newline and a tab made the listing's text show a "dir passwords"
    # entry that does not exist (and an ANSI escape reached whoever prints the text)
    forged = "a.txt\ndir\tpasswords"
    (root / "public" / forged).write_text("x")
    (root / "public" / "b\x1b[2J\x85.txt").write_text("x")
    ts = tools(root)
    listed = run(ts["files.list"], "/public", path="/public")
    found = run(ts["files.search"], "/public", root="/public", pattern="*")
    lines = text(listed).split("\n")
    assert "dir\tpasswords" not in lines
    assert "file\ta.txt\\x0adir\\x09passwords" in lines
    names = [e["name"] for e in listed.structured["entries"]]  # type: ignore[index]
    assert "b\\x1b[2J\\x85.txt" in names
    assert found.structured["matches"] == [  # type: ignore[index]
        "/public/a.txt",
        "/public/a.txt\\x0adir\\x09passwords",
        "/public/b\\x1b[2J\\x85.txt",
    ]
    for result in (listed, found):
        assert not any(c < " " and c not in "\t\n" for c in text(result))
        assert "\x85" not in text(result)

"""Host failures never escape the files tools, and never name a host path.

Every ``OSError`` the host raises while a files tool runs (a link swapped
mid-call, a full disk, a vanished directory) must become a handler-reported
error that names the canonical path only. These tests inject a failure into
each host call a tool makes in turn, and race a real link swapper against the
tools, and look for the sandbox's host path in everything that comes back.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sharedos.kernel.handlers import HandlerResult
from sharedos.tools.files import TEMP_PREFIX
from tests.tools.calls import call, text, tools


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "public" / "sub").mkdir(parents=True)
    (r / "private").mkdir()
    (r / "public" / "a.txt").write_text("public A needle")
    (r / "public" / "sub" / "b.txt").write_text("public B needle")
    (r / "private" / "secret.txt").write_text("TOP SECRET")
    return r


def leaks(result: HandlerResult, root: Path) -> list[str]:
    """Host path fragments found anywhere in the result."""
    blob = text(result) + repr(result.structured)
    return [frag for frag in (str(root), str(root.parent), "/tmp/") if frag in blob]


CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("files.read", "/public/a.txt", {"path": "x"}),
    ("files.write", "/public/new/dir/c.txt", {"path": "x", "content": "hello"}),
    ("files.write", "/public/a.txt", {"path": "x", "content": "hello"}),
    ("files.list", "/public", {"path": "x"}),
    ("files.search", "/public", {"root": "x", "pattern": "*.txt", "text": "needle"}),
    ("files.delete", "/public/sub/b.txt", {"path": "x"}),
]

#: the host calls a files tool may make; each is made to fail in turn
HOST_CALLS = (
    "open",
    "fstat",
    "stat",
    "lstat",
    "scandir",
    "mkdir",
    "unlink",
    "read",
    "write",
    "ftruncate",
    "readlink",
    "fdopen",
    "replace",
    "rename",
    "fchmod",
    "close",
)


class Injector:
    """Make the ``n``-th host call (counting over ``HOST_CALLS``) raise an ``OSError``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, host_path: str, err: int) -> None:
        self.count = 0
        self.fail_at = -1
        self.fired = False
        for name in HOST_CALLS:
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(real, host_path, err))

    def _wrap(self, real: Callable[..., Any], host_path: str, err: int) -> Callable[..., Any]:
        def fake(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is threading.main_thread():
                return real(*args, **kwargs)  # only the handler's worker thread is faulted
            self.count += 1
            if self.count == self.fail_at:
                self.fired = True
                raise OSError(err, os.strerror(err), host_path)
            return real(*args, **kwargs)

        return fake

    def arm(self, n: int) -> None:
        self.count, self.fail_at, self.fired = 0, n, False


def _fresh(root: Path) -> None:
    (root / "public" / "sub").mkdir(parents=True, exist_ok=True)
    (root / "public" / "a.txt").write_text("public A needle")
    (root / "public" / "sub" / "b.txt").write_text("public B needle")


def assert_done(root: Path, tool: str, resource: str, result: HandlerResult) -> None:
    """A success after a fault is a true success: the effect it reports happened."""
    host = root / resource.lstrip("/")
    if tool == "files.read":
        assert text(result) == host.read_text()
    elif tool == "files.write":
        assert host.read_text() == "hello"
    elif tool == "files.delete":
        assert not host.exists()


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC, errno.ENOENT, errno.EACCES, errno.ELOOP])
@pytest.mark.parametrize(("tool", "resource", "args"), CALLS, ids=[f"{c[0]}:{c[1]}" for c in CALLS])
def test_every_host_failure_is_a_handler_error_naming_the_canonical_path_only(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    tool: str,
    resource: str,
    args: dict[str, Any],
    err: int,
) -> None:
    ts = tools(root)
    injector = Injector(monkeypatch, str(root / resource.lstrip("/")), err)
    n = 0
    while True:
        n += 1
        _fresh(root)
        injector.arm(n)
        result = call(ts[tool], resource, **args)
        if not injector.fired:
            break  # the tool made fewer than n host calls: every one has been faulted
        assert not leaks(result, root), (n, text(result))
        if result.is_error:
            assert text(result).startswith("/"), text(result)  # names the canonical path
            if tool == "files.write" and resource == "/public/a.txt":
                assert (root / "public" / "a.txt").read_text() == "public A needle"  # kept
        else:  # a fault the tool absorbed must not have produced a wrong success
            assert_done(root, tool, resource, result)
        assert not [p for p in root.rglob(f"{TEMP_PREFIX}*")]  # no temporary file left
    assert n > 2  # the tool did make host calls


class Swapper:
    """A thread that keeps replacing ``<root>/public/x`` with something else."""

    def __init__(self, root: Path, makers: list[Callable[[Path], None]]) -> None:
        self.root, self.makers = root, makers
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        public = self.root / "public"
        x, tmp, old = public / "x", public / ".swap", public / ".old"
        while not self.stop.is_set():
            for make in self.makers:
                try:
                    make(tmp)
                    if x.is_dir() and not x.is_symlink():
                        os.rename(x, old)  # a directory cannot be replaced in one step
                    os.replace(tmp, x) if not tmp.is_dir() or tmp.is_symlink() else os.rename(
                        tmp, x
                    )
                except OSError:
                    pass
                for leftover in (tmp, old):
                    try:
                        if leftover.is_dir() and not leftover.is_symlink():
                            for child in leftover.iterdir():
                                child.unlink()
                            leftover.rmdir()
                        else:
                            leftover.unlink()
                    except OSError:
                        pass

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_a_directory_link_swapped_mid_call_never_leaks_the_host_path(root: Path) -> None:
    """The race that made ``realpath`` raise ``EINVAL`` with the host path in its message."""
    makers: list[Callable[[Path], None]] = [
        lambda t: t.symlink_to(root / "private"),
        lambda t: t.write_text("plain file"),
    ]
    read = tools(root)["files.read"]
    with Swapper(root, makers):
        for _ in range(3000):
            got = call(read, "/public/x/secret.txt", path="x")
            assert not leaks(got, root), text(got)
            assert "TOP SECRET" not in text(got)


def test_links_swapped_while_calls_run_never_leak_the_host_path_or_the_secret(
    root: Path,
) -> None:
    """/public/x flips between a file, a link to /private, a loop, a file link and a directory."""
    makers: list[Callable[[Path], None]] = [
        lambda t: t.symlink_to(root / "private"),
        lambda t: t.write_text("plain file"),
        lambda t: t.symlink_to(t),
        lambda t: t.symlink_to(root / "private" / "secret.txt"),
        lambda t: (t.mkdir(), (t / "secret.txt").write_text("decoy")),  # type: ignore[func-returns-value]
    ]
    ts = tools(root)
    seen_errors: set[str] = set()
    with Swapper(root, makers):
        for _ in range(150):
            for tool, resource in (
                ("files.read", "/public/x"),
                ("files.read", "/public/x/secret.txt"),
                ("files.write", "/public/x/new.txt"),
                ("files.list", "/public/x"),
                ("files.search", "/public"),
                ("files.delete", "/public/x/secret.txt"),
            ):
                got = call(ts[tool], resource, path="x", root="x", pattern="*", content="w")
                assert not leaks(got, root), text(got)
                assert "TOP SECRET" not in text(got)
                if got.is_error:
                    seen_errors.add(text(got))
    assert (root / "private" / "secret.txt").read_text() == "TOP SECRET"
    assert sorted(p.name for p in (root / "private").iterdir()) == ["secret.txt"]
    assert seen_errors  # the race did produce refusals

"""Small real filesystems (tmpfs) that can fill up or go read-only: the ``tmpfs`` fixture
(registered for the whole suite in tests/conftest.py) and its helpers."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

MountFn = Callable[[str], Path]


def _can_mount() -> str | None:
    """None when tmpfs mounts are possible here, else why not (the skip reason)."""
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs (disk-full / read-only filesystem faults)"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount are not installed"
    return None


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[MountFn]:
    """``tmpfs("256k")`` mounts a fresh tmpfs of that size and returns its directory.

    Skipped (with the reason) where mounting is not possible: not root, or a
    container without CAP_SYS_ADMIN. Every mount is lazily unmounted at teardown.
    """
    why = _can_mount()
    if why is not None:
        pytest.skip(why)
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        target = tmp_path / f"mnt{len(mounted)}"
        target.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(target)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def remount_read_only(target: Path) -> None:
    """Make a tmpfs from the ``tmpfs`` fixture read-only (as a failing disk or an operator would)."""
    subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True, capture_output=True)


def fill(target: Path) -> Path:
    """Fill the filesystem at ``target`` to the last byte; returns the filler file."""
    filler = target / "filler"
    with filler.open("wb", buffering=0) as fh:
        chunk = b"\0" * 4096
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
        try:  # the last partial block
            while True:
                fh.write(b"\0")
        except OSError:
            pass
    return filler

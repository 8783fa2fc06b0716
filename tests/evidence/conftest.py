"""Fixtures for store-fault tests: the suite's small filesystems (tests/mounts.py)."""

from __future__ import annotations

from tests.mounts import MountFn, fill, remount_read_only

__all__ = ["MountFn", "fill", "remount_read_only"]

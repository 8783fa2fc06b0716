"""Shared fixtures for the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def anyio_backend() -> str:
    """The SDK's transports run on asyncio here (uvicorn is asyncio-only)."""
    return "asyncio"


@pytest.fixture
def repo_root() -> Path:
    """The checkout root (rules/, policy/, grammar/ live here)."""
    return REPO_ROOT


@pytest.fixture
def test_data() -> Path:
    """``tests/data``."""
    return TEST_DATA

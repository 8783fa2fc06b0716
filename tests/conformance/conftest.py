"""Fixtures for the conformance tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.conformance.manifest import Manifest, load_manifest


@pytest.fixture(scope="session")
def manifest() -> Manifest:
    """The shipped manifest."""
    return load_manifest()


@pytest.fixture
def conformance_data(test_data: Path) -> Path:
    """``tests/data/conformance``."""
    return test_data / "conformance"

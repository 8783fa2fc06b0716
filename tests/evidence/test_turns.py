"""``evidence_turn``: a turn's opening and seal, on SQLite and PostgreSQL."""

# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)

from __future__ import annotations

from typing import Any

import pytest

from sharedos.evidence.turns import evidence_turn
from tests.evidence.stores import Opener, backend, opener, store  # noqa: F401  (fixtures)

pytestmark = pytest.mark.anyio


async def test_a_sealed_turn_id_is_not_opened_again(store: Any) -> None:
    """Opening a turn whose chain already held a seal wrote nothing and said nothing: the
    new turn's records went on past the old seal (vouched for by none: its own seal was
    refused as a second one). The open is refused, and the chain is left as it was."""
    async with evidence_turn(store, turn_id="t-closed", catalog_hash="c1"):
        pass
    kinds = [link.kind for link in store.iter_links("t-closed")]
    assert kinds == ["open", "seal"]
    with pytest.raises(ValueError, match="has closed"):
        async with evidence_turn(store, turn_id="t-closed", catalog_hash="c2"):
            pytest.fail("a sealed turn was opened again")
    assert [link.kind for link in store.iter_links("t-closed")] == kinds


async def test_a_turn_id_open_on_another_host_is_not_opened_again(opener: Opener) -> None:
    """Two hosts sharing a store: the id hold covers only a host's own open turns, so a
    second host opening a turn with the id of one still open on the first went on: its
    records were appended to the first's chain under its opening, its seal sealed it, the
    first's own seal was refused as a second one and its later records landed past the
    seal, and verify said clean. The open is refused, and the chain is left as it was."""
    first, second = opener(), opener()  # two hosts' stores on one database
    async with evidence_turn(first, turn_id="t-shared", catalog_hash="c1"):
        with pytest.raises(ValueError, match="has an evidence chain already"):
            async with evidence_turn(second, turn_id="t-shared", catalog_hash="c2"):
                pytest.fail("a turn open on another host was opened again")
        assert [link.kind for link in first.iter_links("t-shared")] == ["open"]
    assert [link.kind for link in first.iter_links("t-shared")] == ["open", "seal"]

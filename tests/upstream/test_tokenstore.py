"""The token store's files on disk: who may list, read or replace them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sharedos.upstream.tokenstore import (
    TokenRecord,
    TokenStore,
    TokenStoreError,
    decode_key,
    generate_key,
)


def _record() -> TokenRecord:
    return TokenRecord(
        access_token="PLANTED-access-0f3c9a", obtained_via="authorization_code", obtained_at=0
    )


def test_directories_that_existed_before_the_store_are_made_private(tmp_path: Path) -> None:
    """ "0600 in 0700 directories" (docs/upstreams.md): a store root made beforehand with
    ``mkdir -p`` (0755), and an upstream's directory in it, kept their modes, so any user
    could list which principals hold tokens for which upstream (the file names are the
    base32 of tenant and principal)."""
    root = tmp_path / "tokens"
    root.mkdir(mode=0o755)
    (root / "docs").mkdir(mode=0o755)
    os.chmod(root, 0o755)
    os.chmod(root / "docs", 0o755)
    store = TokenStore(root, decode_key(generate_key(), "test"))
    saved = store.save("docs", "default", "alice", _record())
    assert root.stat().st_mode & 0o777 == 0o700
    assert (root / "docs").stat().st_mode & 0o777 == 0o700
    assert saved.stat().st_mode & 0o777 == 0o600
    store.put_secret("wiki", "ops", "a-stored-secret-value")
    assert (root / "wiki").stat().st_mode & 0o777 == 0o700


def test_an_upstream_directory_that_is_a_link_elsewhere_is_not_written_through(
    tmp_path: Path,
) -> None:
    """An upstream's directory replaced by a symbolic link (to a directory another user
    reads) took the principal's tokens there; it is refused, and nothing is written."""
    root = tmp_path / "tokens"
    root.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (root / "docs").symlink_to(elsewhere)
    store = TokenStore(root, decode_key(generate_key(), "test"))
    with pytest.raises(TokenStoreError, match="not a directory"):
        store.save("docs", "default", "alice", _record())
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("then", ["load", "delete", "save"])
def test_tokens_an_earlier_sharedos_kept_under_the_base32_name_are_still_the_principals(
    tmp_path: Path, then: str
) -> None:
    """Before e7f8f2d a pair whose base32 name is past 150 characters (an IdP subject URL of
    some 60-100 characters) was kept as ``p-<base32>.json``; now such a pair is
    ``q-<sha256>.json``. After an upgrade its tokens were not found (sign in again),
    ``logout`` removed nothing and the old refresh token stayed in the store."""
    import base64

    store = TokenStore(tmp_path / "tokens", os.urandom(32))
    principal = "https://idp.example.com/subjects/" + "a" * 80
    new = store.save("up", "default", principal, _record())
    assert new.name.startswith("q-")
    # the file as the earlier SharedOS named it (the same sealed document)
    body = base64.b32encode(f"default\0{principal}".encode()).decode().rstrip("=").lower()
    earlier = new.with_name(f"p-{body}.json")
    new.rename(earlier)
    if then == "load":
        back = store.load("up", "default", principal)
        assert back is not None and back.access_token == "PLANTED-access-0f3c9a"
    elif then == "delete":
        assert store.delete("up", "default", principal) is True
        assert not earlier.exists() and store.load("up", "default", principal) is None
    else:  # tokens renewed: kept under the new name, the old ones not beside them
        store.save("up", "default", principal, _record().model_copy(update={"access_token": "n"}))
        assert sorted(p.name for p in new.parent.iterdir()) == [new.name]
        back = store.load("up", "default", principal)
        assert back is not None and back.access_token == "n"

"""A link spelled in another Unicode normalization form is still a link (issue 22).

SharedOS decides and checks the canonical path, which is NFC. server-filesystem
opens a missing name's Unicode-equivalent entry instead (``café`` finds
``cafe\\u0301``), following symbolic links as it goes. So a link planted under
an NFD name — by anything that writes bob's home or the public share, as in
test_links.py — was not a link to the check (the NFC name does not exist:
"missing", forwarded) but was the object the upstream opened.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from sharedos.conformance.tap import read_tool_calls
from tests.upstream.conftest import brokered, text_of
from tests.upstream.test_links import (
    fs_rules,
    make_share,
    refused_as_linked,
    tapped_fs,
)

pytestmark = pytest.mark.anyio

NFC = "caf\u00e9"
NFD = unicodedata.normalize("NFD", NFC)


async def test_a_link_under_an_equivalent_unicode_name_is_refused(tmp_path: Path) -> None:
    assert NFC != NFD
    share = make_share(tmp_path)
    os.symlink(share.private, share.public / NFD)  # a linked directory, NFD-named
    os.symlink(share.salaries, share.bob / f"{NFD}.csv")  # a linked file
    (share.bob / "hl_salaries").rename(share.bob / f"hl_{NFD}.csv")  # a hard link
    (share.bob / "dir").mkdir()
    os.symlink(share.private, share.bob / "dir" / NFD)
    attacks: list[tuple[str, dict[str, Any]]] = [
        ("fs.read_text_file", {"path": str(share.public / NFC / "salaries.csv")}),
        ("fs.list_directory", {"path": str(share.public / NFC)}),
        ("fs.read_text_file", {"path": str(share.bob / f"{NFC}.csv")}),
        ("fs.read_text_file", {"path": str(share.bob / f"hl_{NFC}.csv")}),
        (
            "fs.write_file",
            {"path": str(share.bob / "dir" / NFC / "planted.csv"), "content": "PLANTED\n"},
        ),
    ]
    log = tmp_path / "fs-tap.jsonl"
    async with (
        brokered(tmp_path, tapped_fs(share, log), fs_rules(share)) as env,
        env.turn(env.context("bob")) as t,
    ):
        results = [(tool, args, await t.call(tool, args)) for tool, args in attacks]
    leaked = [
        f"{tool} {args['path']!r}: {'THE SECRET' if share.secret in text_of(r) else text_of(r)[:80]}"
        for tool, args, r in results
        if not refused_as_linked(r)
    ]
    assert not leaked, "\n".join(leaked)
    assert read_tool_calls(log) == []
    assert not (share.private / "planted.csv").exists()
    codes = " ".join(str(r.error) for r in env.records())
    assert "(symlink)" in codes and "(hard_link)" in codes


async def test_a_plain_file_under_an_equivalent_name_is_served(tmp_path: Path) -> None:
    """The check follows the upstream's lookup, not a refusal of every such name."""
    share = make_share(tmp_path)
    (share.public / f"{NFD}.txt").write_text("an NFD-named public file\n", encoding="utf-8")
    log = tmp_path / "fs-tap.jsonl"
    async with (
        brokered(tmp_path, tapped_fs(share, log), fs_rules(share)) as env,
        env.turn(env.context("bob")) as t,
    ):
        read = await t.call("fs.read_text_file", {"path": str(share.public / f"{NFC}.txt")})
    assert read.is_error is False and "NFD-named public file" in text_of(read)


#: TODHRI LETTER EI (Unicode 16): NFC of U+105D2 U+0307 to a Unicode database that
#: knows it (Node's ICU), unassigned — so never composed — to an older one (this
#: Python's), which then calls the decomposed name no spelling of it
NEW_NFC = "\U000105c9"
NEW_NFD = "\U000105d2\u0307"


async def test_a_link_under_a_name_only_a_newer_unicode_relates_is_refused(
    tmp_path: Path,
) -> None:
    """Which names are equivalent is the upstream's Unicode database's answer, and the
    check's Python may know fewer characters than the upstream's Node."""
    share = make_share(tmp_path)
    os.symlink(share.private, share.public / NEW_NFD)
    os.symlink(share.salaries, share.bob / f"{NEW_NFD}.csv")
    attacks: list[tuple[str, dict[str, Any]]] = [
        ("fs.read_text_file", {"path": str(share.public / NEW_NFC / "salaries.csv")}),
        ("fs.list_directory", {"path": str(share.public / NEW_NFC)}),
        ("fs.read_text_file", {"path": str(share.bob / f"{NEW_NFC}.csv")}),
    ]
    log = tmp_path / "fs-tap.jsonl"
    async with (
        brokered(tmp_path, tapped_fs(share, log), fs_rules(share)) as env,
        env.turn(env.context("bob")) as t,
    ):
        results = [(tool, args, await t.call(tool, args)) for tool, args in attacks]
    leaked = [
        f"{tool} {args['path']!r}: {'THE SECRET' if share.secret in text_of(r) else text_of(r)[:80]}"
        for tool, args, r in results
        if not refused_as_linked(r)
    ]
    assert not leaked, "\n".join(leaked)
    assert read_tool_calls(log) == []

"""What an approver reads is the call that will run: no field of the question — asked at
the client (elicitation) or shown by ``sharedos approvals`` — can reorder, hide or
break its lines.

A canonical resource may hold characters that are not control characters yet are
not shown as themselves: a bidi override (U+202E) reverses what follows it, a line
separator (U+2028) starts what a client renders as a new line of the question, a
zero-width space hides. Each is spelled ``\\uNNNN`` wherever a person is asked to
judge the call. Real parts: the files tools, a SQLite store, the ``sharedos
approvals`` command; the client is the approval tests' back channel.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main as cli_main
from sharedos.kernel import AccessContext
from sharedos.outcomes import Outcome, ReasonCode
from tests.kernel.test_approvals import Host, _Peer

MAYA = AccessContext(principal="maya", tenant="acme", roles=("maintainer",), turn_id="t")

#: resources a model can ask for, each shown as another call than the one that runs
TRICKS = [
    # read as "/shared/release/notes.txt" followed by a line that is not there
    "/shared/release/x\u2028needed from: nobody (a read-only preview)",
    "/shared/release/x\u2029resource: /shared/release/notes.txt",
    # read right-to-left: "…/release/txt.notes" shows as "…/release/seton.txt"
    "/shared/release/\u202etxt.seton",
    "/shared/release/a\u200bb\u2066c\u2069",
    # characters Unicode says to render as nothing that are no format character: a
    # Hangul filler (Lo) or a variation selector (Mn) reads "notes.txt" for another file
    "/shared/release/notes\u3164.txt",
    "/shared/release/notes.txt\ufe00",
    "/shared/release/n\U000e0101otes.txt",
    "/shared/release/notes\u034f.txt",
]

#: Default_Ignorable_Code_Point characters outside Cf (Unicode's DerivedCoreProperties):
#: rendered as nothing, so a name holding one looks like a name without it
_IGNORABLE = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0100, 0xE01EF),
)


def _hidden(text: str) -> list[str]:
    return [
        c
        for c in text
        if (unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c != "\n")
        or any(lo <= ord(c) <= hi for lo, hi in _IGNORABLE)
    ]


@pytest.mark.parametrize("path", TRICKS)
def test_the_question_at_the_client_spells_every_hidden_character(
    tmp_path: Path, path: str
) -> None:
    h = Host(tmp_path)
    peer = _Peer({"action": "decline"})
    res = h.call({"path": path, "content": "x"}, MAYA, peer=peer)
    assert res.reason is ReasonCode.APPROVAL_REQUIRED
    ((message, schema),) = peer.asked
    assert _hidden(message) == [], message
    assert len(message.split("\n")) == 6  # the question's own lines, no more
    assert _hidden(schema["properties"]["approve"]["description"]) == []
    # the resource is still named, spelled out
    hidden = next(c for c in path if ord(c) > 0x7F)
    assert (
        f"\\u{ord(hidden):04x}" if ord(hidden) < 0x10000 else f"\\U{ord(hidden):08x}"
    ) in message


@pytest.mark.parametrize("path", TRICKS)
def test_the_operator_commands_spell_every_hidden_character(tmp_path: Path, path: str) -> None:
    h = Host(tmp_path)
    res = h.call({"path": path, "content": "x"})
    approval_id = res.structured["approvalId"]
    db = str(h.db)
    runner = CliRunner()
    for args in (
        ["approvals", "list", "--db", db],
        ["approvals", "show", approval_id, "--db", db],
        ["approvals", "approve", approval_id, "--db", db, "--as", "maya", "--role", "maintainer"],
    ):
        out = runner.invoke(cli_main, args)
        assert out.exit_code == 0, out.output
        assert _hidden(out.output) == [], (args, out.output)
    # what was approved runs, under its real name
    ran = h.call({"path": path, "content": "x"})
    assert ran.outcome is Outcome.SUCCEEDED, ran.content

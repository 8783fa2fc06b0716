"""``--kind`` and the exit status say the same in ``--help`` and the docs.

``sharedos-policy diff``, ``sharedos evidence replay`` and ``sharedos evidence shadow``
exit 0 when nothing changes in the kinds ``--kind`` looks for, however many requests
change in the kinds it leaves out (CI that must fail when access widens runs ``diff
--kind widened``). Their ``--help`` said "Exit 0: no decision can change" whatever
``--kind`` asked, which a narrowing the command was told to ignore contradicts.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
from click.testing import CliRunner

from sharedos.cli.evidence import evidence
from sharedos.cli.policy import main as policy_main

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy-language.md"
RULES = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"


def _exit0(text: str) -> str:
    found = re.search(r"Exit 0[: ].*?(?=\. 1:|, 1 when|; `1`)", " ".join(text.split()))
    assert found, text
    return found.group(0)


def test_diff_exits_0_when_only_a_kind_left_out_changes(tmp_path: Path) -> None:
    (tmp_path / "old.sos").write_text(RULES + 'permit read on "/a/**"\n')
    (tmp_path / "new.sos").write_text(RULES + 'permit read on "/a/x/**"\n')
    args = [str(tmp_path / "old.sos"), str(tmp_path / "new.sos"), "--kind", "widened"]
    result = CliRunner().invoke(policy_main, ["diff", *args])
    assert result.exit_code == 0, result.output
    assert "decides differently in other kinds" in result.output


def test_every_exit_0_sentence_names_the_kinds_left_out() -> None:
    commands: dict[str, click.Command] = {
        "sharedos-policy diff": policy_main.commands["diff"],
        "sharedos evidence replay": evidence.commands["replay"],
        "sharedos evidence shadow": evidence.commands["shadow"],
    }
    for name, command in commands.items():
        assert "--kind" in _exit0(command.help or ""), name
    text = DOC.read_text(encoding="utf-8")
    for heading in (
        "### `sharedos-policy diff",
        "### `sharedos evidence replay",
        "### `sharedos evidence shadow",
    ):
        start = text.index(heading)
        section = text[start : text.index("\n### ", start + 1)]
        sentence = re.search(
            r"(Exit codes: `0`|Exit 0 when).*?(?=, 1 when|; `1`)", " ".join(section.split())
        )
        assert sentence and "--kind" in sentence.group(0), (heading, sentence and sentence.group(0))

"""``test --coverage`` reports the when/unless conditions and or terms no test decided both ways."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.policy import main

POLICY = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'permit read on "/docs/**" when "editor" in context.roles or "admin" in context.roles\n'
    'forbid read on "/docs/secret/**" unless "admin" in context.roles\n'
    'permit read on "/never/**" when args.x == 1\n'
    'test "editors read docs" {\n'
    '  context { principal: "e", roles: ["editor"] }\n'
    '  call files.read { path: "/docs/a" }\n'
    "  expect allow\n"
    "}\n"
    'test "others do not" {\n'
    '  context { principal: "o", roles: [] }\n'
    '  call files.read { path: "/docs/a" }\n'
    "  expect deny\n"
    "}\n"
    'test "secret is forbidden to editors" {\n'
    '  context { principal: "e", roles: ["editor"] }\n'
    '  call files.read { path: "/docs/secret/a" }\n'
    "  expect deny forbidden\n"
    "}\n"
)


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    (tmp_path / "p.sos").write_text(POLICY)
    result = CliRunner().invoke(main, ["test", str(tmp_path / "p.sos"), "--coverage", *args])
    return result.exit_code, result.stdout


def test_branches_not_decided_both_ways_are_listed(tmp_path: Path) -> None:
    code, out = _run(tmp_path)
    assert code == 0, out
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("branches:"))
    # when (2) + or terms (2 x 2) + unless (2) + when (2) = 10 outcomes; decided:
    # the permit's when true and false, its first term true and false, its second
    # term false (never reached when the first is true), the unless false
    assert lines[at] == "branches: 6/10 condition outcomes decided (60.00%)"
    assert lines[at + 1 :] == [
        "  not decided both ways: "
        "p.sos:3:1 permit p.sos:3 or term 2 of when: "
        '"admin" in context.roles: never true',
        "  not decided both ways: p.sos:4:1 forbid p.sos:4 unless "
        '"admin" in context.roles: never true',
        "  not decided both ways: p.sos:5:1 permit p.sos:5 when args.x == 1: never decided",
    ]


def test_branch_coverage_in_json(tmp_path: Path) -> None:
    _code, out = _run(tmp_path, "--format", "json")
    branches = json.loads(out)["coverage"]["branches"]
    assert (branches["outcomes"], branches["covered"], branches["percent"]) == (10, 6, "60.00")
    assert [(g["clause"], g["term"], g["missing"]) for g in branches["not_decided_both_ways"]] == [
        ("when", 2, "never true"),
        ("unless", 0, "never true"),
        ("when", 0, "never decided"),
    ]


def test_an_error_decides_nothing(tmp_path: Path) -> None:
    text = POLICY.replace('"editor" in context.roles or', "context.level > 3 or")
    (tmp_path / "p.sos").write_text(text)
    result = CliRunner().invoke(main, ["test", str(tmp_path / "p.sos"), "--coverage"])
    # context.level is missing in every test: the or's first term errors, so neither
    # the term nor the when it is part of is decided by those calls
    assert "or term 1 of when: context.level > 3: never decided" in result.stdout

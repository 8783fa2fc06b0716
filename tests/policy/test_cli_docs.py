"""docs/policy-language.md stays true to the code: every diagnostic code has a
section titled as the registry titles it, and every section's example really
produces its code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sharedos.policy.checker import check
from sharedos.policy.diagnostics import CODES
from sharedos.policy.formatter import format_source
from sharedos.policy.lints import LINT_CODES, LintOptions, catalog_from_json, lint
from sharedos.policy.parser import parse_source

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy-language.md"
SECTION_RE = re.compile(r"^### (SOS\d{3}): (.+)$", re.MULTILINE)
#: Codes whose condition is outside a policy text (files, the tool itself);
#: their sections explain instead of showing.
NO_EXAMPLE = {"SOS001", "SOS002", "SOS900"}


def sections() -> dict[str, tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    matches = list(SECTION_RE.finditer(text))
    out = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out[m.group(1)] = (m.group(2).strip(), text[m.end() : end])
    return out


ALL_CODES = sorted({*CODES, *LINT_CODES})


def test_every_code_has_a_section_with_the_registry_title() -> None:
    found = sections()
    missing = [c for c in ALL_CODES if c not in found]
    assert not missing, f"codes without a section in {DOC.name}: {missing}"
    for code in ALL_CODES:
        info = CODES.get(code) or LINT_CODES[code]
        assert found[code][0] == info.title, code
        assert "Fix:" in found[code][1], code
    stale = sorted(set(found) - set(ALL_CODES))
    assert not stale, f"sections for codes the code does not define: {stale}"


@pytest.mark.parametrize("code", [c for c in ALL_CODES if c not in NO_EXAMPLE])
def test_section_example_produces_its_code(code: str) -> None:
    _, body = sections()[code]
    examples = re.findall(r"```sos\n(.*?)```", body, re.DOTALL)
    assert examples, f"{code} has no sos example"
    source = examples[0]
    catalogs = re.findall(r"```json\n(.*?)```", body, re.DOTALL)
    options = LintOptions(catalog=catalog_from_json(json.loads(catalogs[0]))) if catalogs else None
    parsed = parse_source(source, "example.sos")
    produced = {d.code for d in parsed.diagnostics}
    produced |= {d.code for d in check([parsed.file]).diagnostics}
    produced |= {d.code for d in lint([parsed.file], options)}
    produced |= {d.code for d in format_source(source, "example.sos").diagnostics}
    assert code in produced, f"{code}: the example produced {sorted(produced)}"


def test_every_cli_option_is_documented() -> None:
    import click

    from sharedos.cli.policy import main

    text = DOC.read_text(encoding="utf-8")
    for name, command in main.commands.items():
        assert f"sharedos-policy {name}" in text, name
        for param in command.params:
            if isinstance(param, click.Option):
                longest = max(param.opts, key=len)
                assert longest in text, f"{name} {longest}"

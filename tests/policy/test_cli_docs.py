"""docs/policy-language.md stays true to the code: every diagnostic code has a
section titled as the registry titles it, and every section's example really
produces its code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sharedos.policy import suppress
from sharedos.policy.checker import check
from sharedos.policy.diagnostics import CODES
from sharedos.policy.formatter import format_source
from sharedos.policy.lints import LintOptions, lint
from sharedos.policy.parser import parse_source
from sharedos.policy.schemas import catalog_from_json

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


ALL_CODES = sorted(CODES)


def test_every_code_has_a_section_with_the_registry_title() -> None:
    found = sections()
    missing = [c for c in ALL_CODES if c not in found]
    assert not missing, f"codes without a section in {DOC.name}: {missing}"
    for code in ALL_CODES:
        info = CODES[code]
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
    found = [*parsed.diagnostics, *check([parsed.file]).diagnostics, *lint([parsed.file], options)]
    produced |= {d.code for d in found}
    produced |= {d.code for d in suppress.apply([parsed.file], found).kept}  # SOS514, SOS515
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


# ----------------------------------------------- one page per code (docs/errors/)

ERRORS_DIR = DOC.parent / "errors"


def slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    return re.sub(r"[^a-z0-9_ -]", "", heading.strip().lower()).replace(" ", "-")


#: a link in the reference to a place in the reference (``#functions``) or beside it
#: (``approvals.md``): from docs/errors/ both are one directory up
_RELATIVE_LINK_RE = re.compile(r"\]\((?![a-z]+:|/|\.\./)(#[^)]*|[^)#]+\.md(?:#[^)]*)?)\)")


def _from_errors_dir(body: str) -> str:
    """``body`` with its links made to work from docs/errors/ (a section's own ``#anchor``
    named the page it was copied into, where no such heading is)."""

    def moved(m: re.Match[str]) -> str:
        target = m.group(1)
        return f"](../{DOC.name}{target})" if target.startswith("#") else f"](../{target})"

    return _RELATIVE_LINK_RE.sub(moved, body)


def error_page(code: str, title: str, body: str) -> str:
    """The docs/errors/CODE.md page: the reference section, standalone (generated)."""
    anchor = slug(f"{code}: {title}")
    return (
        f"<!-- generated from docs/policy-language.md by tests/policy/test_cli_docs.py; edit the reference -->\n"
        f"# {code}: {title}\n\n"
        f"{_from_errors_dir(body).strip()}\n\n"
        f"See the [policy language reference](../policy-language.md#{anchor}).\n"
    )


def expected_pages() -> dict[str, str]:
    return {
        f"{code}.md": error_page(code, title, body) for code, (title, body) in sections().items()
    }


def test_every_code_has_its_own_page_matching_the_reference() -> None:
    pages = expected_pages()
    present = {p.name for p in ERRORS_DIR.glob("SOS*.md")}
    assert present == set(pages), "run: .venv/bin/python tests/policy/test_cli_docs.py --write"
    for name, text in pages.items():
        assert (ERRORS_DIR / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale; run: .venv/bin/python tests/policy/test_cli_docs.py --write"
        )


def test_every_link_of_an_error_page_resolves() -> None:
    """A link of a docs/errors/ page names a file that exists and, after '#', one of its
    headings: the pages are copies of the reference's sections, whose '#functions' named a
    heading of the reference, not of the page it was copied into."""
    headings: dict[Path, set[str]] = {}
    for page in sorted(ERRORS_DIR.glob("SOS*.md")):
        for target in re.findall(r"\]\(([^)]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            name, _, anchor = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            assert path.is_file(), f"{page.name}: {target} names no file"
            if anchor:
                if path not in headings:
                    text = path.read_text(encoding="utf-8")
                    headings[path] = {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
                assert anchor in headings[path], f"{page.name}: {target} names no heading"


if __name__ == "__main__":  # regenerate docs/errors/ from the reference
    import sys

    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/policy/test_cli_docs.py --write")
    ERRORS_DIR.mkdir(exist_ok=True)
    for old in ERRORS_DIR.glob("SOS*.md"):
        old.unlink()
    for name, text in expected_pages().items():
        (ERRORS_DIR / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(expected_pages())} pages to {ERRORS_DIR}")

"""Every ReasonCode member is documented in docs/reason-codes.md, with the right outcome."""

from __future__ import annotations

import re
from pathlib import Path

from sharedos.outcomes import Outcome, ReasonCode, outcome_for_reason


def sections(repo_root: Path) -> dict[str, str]:
    text = (repo_root / "docs" / "reason-codes.md").read_text("utf-8")
    parts = re.split(r"^## `([a-z_]+)`\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_reason_code_has_a_section(repo_root: Path) -> None:
    documented = sections(repo_root)
    assert set(documented) == {str(code) for code in ReasonCode}


def test_each_section_states_meaning_outcome_and_what_to_do(repo_root: Path) -> None:
    for code, body in sections(repo_root).items():
        assert "**Meaning:**" in body, code
        assert "**Caller:**" in body, code
        match = re.search(r"\*\*Outcome:\*\* `([a-z]+)`", body)
        assert match is not None, code
        assert Outcome(match.group(1)) is outcome_for_reason(ReasonCode(code)), code

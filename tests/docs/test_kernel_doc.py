"""docs/kernel.md's "A turn, in Python" runs as pasted (in the checkout) and prints what its
comment says: the call to /private/a.txt denied, forbidden, with the one refusal text."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_python_example_runs_and_prints_the_documented_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (REPO / "docs" / "kernel.md").read_text(encoding="utf-8")
    found = re.search(r"## A turn, in Python\n\n```python\n(.*?)```", text, re.S)
    assert found is not None
    sandbox = tmp_path / "sandbox"
    (sandbox / "private").mkdir(parents=True)
    (sandbox / "private" / "a.txt").write_text("secret\n", encoding="utf-8")
    code = found.group(1).replace("/srv/sandbox", str(sandbox))
    code = code.replace("/var/lib/sharedos/evidence.db", str(tmp_path / "evidence.db"))
    monkeypatch.chdir(REPO)  # "rules/", "policy/": the checkout's, as the example reads them
    assert os.path.isdir("rules")
    exec(compile(code, "docs/kernel.md", "exec"), {"__name__": "kernel_md_example"})
    printed = capsys.readouterr().out.splitlines()
    comment = re.findall(r"^    # (.*)$", code, re.M)
    said = " ".join(line.strip() for line in comment)
    assert said.startswith("denied forbidden ")
    assert printed[-1] == said.replace('"', ""), printed

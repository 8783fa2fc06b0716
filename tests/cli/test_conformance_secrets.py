"""Host credentials a harness passes into a tool call never reach a report or the terminal.

A real Codex turn (offline, scripted model) carries a host-configuration env value
into ``files.write`` and into a path; the reports (JSON, text, HTML) and
everything the CLI printed are searched for every spelling of it.
"""

from __future__ import annotations

import html
import json
import stat
import subprocess
from pathlib import Path

import pytest

from sharedos.conformance.manifest import MANIFEST_PATH
from tests.full_matrix import sharedos_argv

pytestmark = pytest.mark.harness

SECRET = 'sk-host"cred\\ent\nial-é-0123'


def spellings(value: str) -> list[str]:
    forms = [value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]]
    forms.append(repr(value)[1:-1])
    return forms + [html.escape(f) for f in forms] + ["cred\\", "ent\\nial", "ial-\\u00e9"]


def test_planted_host_credential_is_scrubbed_from_reports_and_output(tmp_path: Path) -> None:
    manifest = MANIFEST_PATH.read_text(encoding="utf-8")
    secret_toml = json.dumps(SECRET)  # a TOML basic string is JSON-compatible here
    manifest += f"""
[[rows]]
id = "harness-echoes-a-credential"
title = "The harness writes the host's credential into a file"
tool = "files.write"
arguments = {{ path = "/home/alice/leak.txt", content = {secret_toml} }}
expect = {{ outcome = "succeeded" }}
resource = "/home/alice/leak.txt"
why = "A harness may pass anything it holds into a call."
"""
    (tmp_path / "manifest.toml").write_text(manifest, encoding="utf-8")
    (tmp_path / "host.toml").write_text(
        f'[harness.codex]\ntransport = "http"\n[harness.codex.env]\nPLANTED = {secret_toml}\n',
        encoding="utf-8",
    )
    out = tmp_path / "reports"
    argv = sharedos_argv(
        "conformance", "run", "--column", "mcp", "--harness", "codex", "--transport", "http",
        "--host-config", str(tmp_path / "host.toml"), "--manifest", str(tmp_path / "manifest.toml"),
        "--out", str(out),
    )  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(next(out.glob("*.json")).read_text())
    leak = [row[0] for row in report["cells"] if row[0]["row_id"] == "harness-echoes-a-credential"]
    assert leak and leak[0]["grade"] == "passed"  # the call was made: the secret did flow
    texts = {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}
    texts["stdout"], texts["stderr"] = proc.stdout, proc.stderr
    assert "[redacted]" in texts[next(out.glob("*.json")).name]
    for name, text in texts.items():
        for form in spellings(SECRET):
            assert form not in text, (name, form)
    for path in out.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

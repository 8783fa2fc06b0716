"""The planted-secret grep finds a secret in every form it can take, and only then."""

from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.policy import compile_paths
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.adversarial.planted import MIN_SECRET, SecretScan, encodings_of, plant

SECRET = 'PLANTED-x-"quote"\\back\nline/é%+&<>'


@pytest.mark.parametrize(
    "form",
    [
        SECRET,
        json.dumps(SECRET),
        json.dumps(SECRET, ensure_ascii=False),
        json.dumps(json.dumps(SECRET)),
        repr(SECRET),
        ascii(SECRET),
        repr(SECRET.encode()),
        html.escape(SECRET),
        quote(SECRET, safe=""),
        quote_plus(SECRET),
        quote(SECRET, safe="").lower(),
        SECRET.encode().hex(),
        SECRET.encode().hex().upper(),
    ],
)
def test_each_encoding_is_found_inside_noise(form: str) -> None:
    scan = SecretScan(SECRET)
    assert scan.text("blob", f"noise {form} more noise")
    with pytest.raises(AssertionError, match="blob @"):
        scan.assert_clean()


@pytest.mark.parametrize("prefix", ["", "a", "ab", "abc"])
@pytest.mark.parametrize("enc", [base64.b64encode, base64.urlsafe_b64encode])
def test_base64_is_found_inside_a_longer_blob_at_any_alignment(prefix: str, enc: object) -> None:
    blob = enc(f"{prefix}{{'k': '{SECRET}', 'z': 1}}".encode())  # type: ignore[operator]
    assert SecretScan(SECRET).text("b64", blob)


def test_case_is_folded() -> None:
    secret = plant("case")
    assert SecretScan(secret).text("upper", f"...{secret.upper()}...")


def test_clean_text_has_no_findings_and_short_secrets_are_refused() -> None:
    scan = SecretScan(plant("a"), plant("b"))
    scan.text("clean", "PLANTED-a-00000000 nothing to see " * 100)
    scan.assert_clean()
    with pytest.raises(ValueError, match=str(MIN_SECRET)):
        encodings_of("short")


def test_files_trees_and_utf16_are_searched(tmp_path: Path) -> None:
    secret = plant()
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "report.html").write_text(f"<td>{html.escape(secret)}</td>")
    (tmp_path / "d" / "w.bin").write_bytes(b"\x00\x01" + secret.encode("utf-16-le"))
    os.symlink("/etc/passwd", tmp_path / "d" / "link")  # not followed
    found = SecretScan(secret).tree(tmp_path)
    assert {f.encoding for f in found} >= {"raw", "utf-16"}
    assert {Path(f.artifact).name for f in found} == {"report.html", "w.bin"}


def test_an_evidence_store_is_searched_through_the_export_cli_and_its_raw_bytes(
    tmp_path: Path,
) -> None:
    secret = plant("arg")
    root = tmp_path / "root"
    (root / "public").mkdir(parents=True)
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
    db = tmp_path / "e.db"
    store = SqliteEvidenceStore(db)
    host = RuntimeHost(kernel, store)
    run = ToolPolicy(name="files", mode=RunMode.OPEN, managed=("files.*",))
    import anyio

    async def go() -> None:
        await host.invoke_tool(
            ToolCall(tool="files.read", arguments={"path": f"/public/{secret}"}),
            AccessContext(principal="bob"),
            run,
        )

    anyio.run(go)
    store.close()
    scan = SecretScan(secret)
    found = scan.evidence(db)
    artifacts = {f.artifact for f in found}
    assert "evidence export of e.db" in artifacts  # the operator-visible export
    assert any(a.startswith(str(db)) for a in artifacts)  # and the raw database / WAL
    with pytest.raises(AssertionError, match="a planted secret leaked"):
        scan.assert_clean()


def test_captured_output_is_searched(capfd: pytest.CaptureFixture[str]) -> None:
    secret = plant()
    print(f"log line {secret!r}")
    scan = SecretScan(secret)
    assert scan.captured(capfd)
    capfd.readouterr()  # drop the re-emitted copy

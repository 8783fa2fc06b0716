"""``sharedos run`` as a fleet host: its store from ``[evidence] url``, its policy from a verified bundle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sharedos.evidence.chain import Signer
from sharedos.evidence.sqlite_schema import SCHEMA_VERSION
from sharedos.policy import compile_sources
from sharedos.policy.bundle import save_bundle
from tests.fleet.test_bundles import RULES_V1
from tests.fleet.test_bundles import signed as signed_bytes

SHAREDOS = str(Path(sys.executable).parent / "sharedos")


def host_file(tmp: Path, pg_url: str, *, signed: bool) -> Path:
    signer = Signer.generate()
    (tmp / "keys").mkdir()
    (tmp / "keys" / "policy.pub").write_bytes(signer.public_pem())
    bundle = tmp / "pub" / "bundle.json"
    save_bundle(compile_sources([("files.sos", RULES_V1)]), bundle)
    if signed:
        bundle.write_bytes(signed_bytes(tmp, bundle.read_bytes(), signer.private_pem()))
    host = tmp / "host.toml"
    host.write_text(
        "[harness.claude-code]\n\n"
        f'[evidence]\nurl = "{pg_url}"\n\n'
        '[policy]\nbundle = "./pub"\nkeys = ["./keys/policy.pub"]\nstate = "./state/bundle.json"\n',
        encoding="utf-8",
    )
    (tmp / "sandbox" / "public").mkdir(parents=True)
    return host


def run(host: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            SHAREDOS,
            "run",
            "--host-config",
            str(host),
            "--policy",
            "fleet",
            "--principal",
            "alice",
            "--sandbox",
            str(tmp / "sandbox"),
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_host_takes_its_policy_from_a_signed_bundle_and_its_store_from_a_url(
    tmp_path: Path, pg_url: str
) -> None:
    host = host_file(tmp_path, pg_url, signed=True)
    proc = run(host, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "policy: bundle revision" in proc.stderr and "signed by key" in proc.stderr
    assert "catalogue for alice under fleet" in proc.stdout
    assert "files.read" in proc.stdout
    # the host opened (and so created) the shared store
    migrated = subprocess.run(
        [SHAREDOS, "evidence", "migrate", "--db", pg_url], capture_output=True, text=True
    )
    assert f"evidence schema version {SCHEMA_VERSION}, up to date" in migrated.stdout


def test_an_unsigned_bundle_means_nothing_runs(tmp_path: Path, pg_url: str) -> None:
    host = host_file(tmp_path, pg_url, signed=False)
    proc = run(host, tmp_path)
    assert proc.returncode == 1
    assert "no usable policy bundle" in proc.stderr and "is not signed" in proc.stderr

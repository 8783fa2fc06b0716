"""``sharedos bundle keygen|sign|verify`` and the host configuration's ``[evidence]`` / ``[policy]`` keys."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.harness.hostconfig import HostConfigError, parse_host_config
from sharedos.policy import compile_sources
from sharedos.policy.bundle import save_bundle
from tests.fleet.test_bundles import RULES_V1


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_keygen_sign_verify(tmp_path: Path) -> None:
    """Keys and signatures come from sharedos-policy; sharedos bundle verify checks as a host does."""
    policy_cli = str(Path(sys.executable).parent / "sharedos-policy")
    key = tmp_path / "keys" / "policy.pem"
    key.parent.mkdir()
    made = subprocess.run([policy_cli, "keygen", "-o", str(key)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = str(key) + ".pub"
    bundle = tmp_path / "pub" / "bundle.json"
    save_bundle(compile_sources([("files.sos", RULES_V1)]), bundle)
    # unsigned, with a key required: refused
    code, out = run("bundle", "verify", "--key", public, str(bundle.parent))
    assert code == 1 and "is not signed" in out
    signed = subprocess.run(
        [policy_cli, "sign", str(bundle), "--key", str(key)], capture_output=True, text=True
    )
    assert signed.returncode == 0, signed.stderr
    code, out = run("bundle", "verify", "--key", public, str(bundle.parent))
    assert code == 0 and out.startswith("ok: revision") and "signed by key" in out
    # an edited program is refused, signature or not
    doc = json.loads(bundle.read_bytes())
    doc["program"]["requirements"] = {}
    bundle.write_text(json.dumps(doc))
    code, out = run("bundle", "verify", str(bundle))
    assert code == 1 and "does not match its bundle_hash" in out
    code, out = run("bundle", "verify", str(tmp_path / "nothing-here"))
    assert code == 1 and "cannot read" in out


def test_host_configuration_names_the_store_and_the_bundle_source() -> None:
    host = parse_host_config(
        """
[harness.claude]
kind = "claude-code"

[evidence]
url = "postgresql://sharedos@/evidence?host=/run/postgresql"
sign_key = "keys/host.pem"
otlp_endpoint = "http://127.0.0.1:4318"

[policy]
bundle = "https://policy.internal/bundle.json"
keys = ["keys/policy.pub"]
poll_interval_s = 5
"""
    )
    assert host.evidence.url and host.evidence.url.startswith("postgresql://")
    assert host.policy.bundle == "https://policy.internal/bundle.json"
    assert host.policy.keys == ("keys/policy.pub",) and host.policy.poll_interval_s == 5


def test_host_configuration_refuses_what_it_cannot_use() -> None:
    with pytest.raises(HostConfigError) as exc:
        parse_host_config(
            """
[harness.claude]
kind = "claude-code"

[evidence]
url = "mysql://db/evidence"
otlp_endpoint = "grpc://collector"

[policy]
poll_interval_s = 0
"""
        )
    text = "\n".join(exc.value.problems)
    assert ":6:1: evidence.url:" in text and "unknown evidence store scheme" in text
    assert "evidence.otlp_endpoint" in text and "policy.poll_interval_s" in text

"""``[policy] shadow``: loading the candidate (sources or a verified bundle), ``sharedos host
check`` reporting it at file:line:col, and a host that runs on unchanged when it cannot load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner

from sharedos.bundles.shadow import load_shadow
from sharedos.cli.main import main
from sharedos.cli.run import _shadow
from sharedos.harness.hostconfig import load_host_config
from sharedos.kernel.shadow import ShadowDecider
from sharedos.policy import compile_sources
from sharedos.policy.bundle import save_bundle
from tests.fleet.test_bundles import (  # noqa: F401
    RULES_V1,
    RULES_V2,
    bundle_server,
    keys,
    signed,
)

BROKEN = 'namespace files\nrequirement files.read { action read; resource path(args.path) }\npermit read on "/a/**" when\n'


def host_file(tmp_path: Path, policy_table: str) -> Path:
    path = tmp_path / "host.toml"
    path.write_text(f"[harness.codex]\n\n[policy]\n{policy_table}\n", encoding="utf-8")
    return path


def test_sources_file_and_directory_load(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "files.sos").write_text(RULES_V2)
    for location in (tmp_path / "rules" / "files.sos", tmp_path / "rules"):
        loaded = load_shadow(str(location))
        assert loaded.shadow is not None and loaded.problem is None
        assert loaded.shadow.revision is None
        assert loaded.shadow.policy.bundle_hash == loaded.shadow.bundle_hash
        assert "every call is also decided by it" in loaded.line()


def test_a_candidate_that_does_not_load_says_why_and_never_raises(tmp_path: Path) -> None:
    broken = tmp_path / "broken.sos"
    broken.write_text(BROKEN)
    loaded = load_shadow(str(broken))
    assert loaded.shadow is None
    assert loaded.problem is not None and "broken.sos:3:" in loaded.problem
    assert "enforcement is unchanged" in loaded.line()
    missing = load_shadow(str(tmp_path / "nope.sos"))
    assert missing.shadow is None and "no such file" in str(missing.problem)
    garbage = tmp_path / "bundle.json"
    garbage.write_text("{not json")
    assert load_shadow(str(garbage)).shadow is None
    # an unreachable URL: refused, not raised (127.0.0.1, a port nothing listens on)
    assert load_shadow("http://127.0.0.1:9/bundle.json").shadow is None


def test_a_bundle_is_verified_with_the_hosts_keys(
    tmp_path: Path,
    keys: tuple[bytes, bytes],  # noqa: F811
) -> None:
    private_pem, public_pem = keys
    key_file = tmp_path / "trusted.pem"
    key_file.write_bytes(public_pem)
    plain = tmp_path / "plain.json"
    save_bundle(compile_sources([("files.sos", RULES_V2)]), plain)
    # without keys: an unsigned bundle is a candidate
    assert load_shadow(str(plain)).shadow is not None
    # with keys: only a bundle one of them signed
    refused = load_shadow(str(plain), [key_file])
    assert refused.shadow is None and refused.problem
    good = tmp_path / "dir"
    good.mkdir()
    (good / "bundle.json").write_bytes(signed(tmp_path, plain.read_bytes(), private_pem))
    loaded = load_shadow(str(good), [key_file])
    assert loaded.shadow is not None and loaded.shadow.signed_by
    assert "signed by key" in loaded.shadow.describe()


def test_a_candidate_url_is_shown_without_its_credential(
    tmp_path: Path,
    bundle_server: tuple[str, dict[str, Any]],  # noqa: F811
) -> None:
    """A presigned or ``?token=`` shadow URL is shown as every bundle URL is (docs/evidence.md:
    "every message shows it with the password and every query value as ***"): neither the
    line of a candidate that does not load nor the description of one that does shows it."""
    url, served = bundle_server
    plain = tmp_path / "plain.json"
    save_bundle(compile_sources([("files.sos", RULES_V2)]), plain)
    secret = "?X-Amz-Signature=the-presigned-secret"
    for location in ("http://127.0.0.1:9/bundle.json" + secret, url + secret):
        served.update(bundle=plain.read_bytes(), etag="")
        loaded = load_shadow(location)
        shown = loaded.line() + (loaded.shadow.describe() if loaded.shadow else "")
        assert "X-Amz-Signature=***" in shown and "the-presigned-secret" not in shown, shown
    assert loaded.shadow is not None  # the second: served, and loaded


def test_host_check_reports_the_shadow(tmp_path: Path) -> None:
    (tmp_path / "candidate.sos").write_text(RULES_V2)
    good = host_file(tmp_path, 'shadow = "candidate.sos"')
    res = CliRunner().invoke(main, ["host", "check", str(good)])
    assert res.exit_code == 0, res.output
    assert "shadow policy: sources" in res.output
    assert str(tmp_path / "candidate.sos") in res.output  # relative to the host file

    (tmp_path / "broken.sos").write_text(BROKEN)
    bad = host_file(tmp_path, 'time_zone = "UTC"\nshadow = "broken.sos"')
    res = CliRunner().invoke(main, ["host", "check", str(bad)])
    assert res.exit_code == 1
    assert f"error: {bad}:5:1: policy.shadow: the candidate policy cannot be used:" in res.output
    assert "broken.sos:3:" in res.output and "Traceback" not in res.output

    empty = host_file(tmp_path, 'shadow = "  "')
    res = CliRunner().invoke(main, ["host", "check", str(empty)])
    assert res.exit_code == 1
    assert f"error: {empty}:4:1: policy.shadow: shadow names a candidate policy" in res.output


def test_the_host_runs_on_without_a_shadow_that_cannot_load(tmp_path: Path, capsys: object) -> None:
    (tmp_path / "broken.sos").write_text(BROKEN)
    config = load_host_config(host_file(tmp_path, 'shadow = "broken.sos"'))
    assert _shadow(config) is None
    unset = load_host_config(host_file(tmp_path, 'shadow = "${SHADOW_UNSET_FOR_TEST}/x.sos"'))
    assert _shadow(unset) is None
    (tmp_path / "candidate.sos").write_text(RULES_V1)
    config = load_host_config(host_file(tmp_path, 'shadow = "candidate.sos"'))
    decider = _shadow(config)
    assert isinstance(decider, ShadowDecider)
    # the candidate is SharedOS state a confined harness must not see
    assert str(tmp_path / "candidate.sos") in config.state_paths({})

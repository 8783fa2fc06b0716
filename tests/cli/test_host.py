"""``sharedos host check``: every problem at once, positioned; secrets never printed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.main import main


def test_host_check_cli(tmp_path: Path) -> None:
    good = tmp_path / "host.toml"
    good.write_text(
        "[harness.claude-code]\nprovider = 'host'\ndeclared_model = 'm'\n"
        "[harness.claude-code.env]\nANTHROPIC_API_KEY = 'sk-very-secret'\n"
    )
    res = CliRunner().invoke(main, ["host", "check", str(good)])
    assert res.exit_code == 0, res.output
    assert "ANTHROPIC_API_KEY" in res.output and "sk-very-secret" not in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text("[harness.codex]\n\ntransport = 'carrier-pigeon'\n")
    res = CliRunner().invoke(main, ["host", "check", str(bad)])
    assert res.exit_code == 1
    assert f"error: {bad}:3:1: harness.codex.transport" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(main, ["host", "check", str(tmp_path / "missing.toml")])
    assert res.exit_code == 1 and "cannot read host configuration" in res.output


def test_host_check_reports_every_problem_at_its_own_key(test_data: Path) -> None:
    """One run shows them all, in file order, each at the key it is about (issue 13)."""
    path = test_data / "harness" / "host.many-problems.toml"
    res = CliRunner().invoke(main, ["host", "check", str(path)])
    assert res.exit_code == 1
    lines = [ln.removeprefix(f"error: {path}:") for ln in res.output.splitlines()]
    expected = [
        "4:1: harness.codex.transport",
        "5:1: harness.codex.timeout_s",
        "7:1: harness.weird: 'kind' is required",
        "8:1: harness.weird.command",  # the entry without a kind is still checked
        "11:1: harness.pi.kind: unknown harness kind 'nope'",
        "12:9: harness.pi.env: 'BAD NAME' is not a valid environment variable name",
        "12:27: harness.pi.env.GOOD: must be a string",  # a second bad key of the same table
        "13:1: harness.pi.vendor",
        "17:1: harness.claude-code: provider 'scripted'",  # at declared_model
        "19:1: harness.claude-code.env.K: must be a string",
        "22:1: evidence.synchronous: Input should be 'NORMAL' or 'FULL'",
        "24:1: bogus: Extra inputs are not permitted",
    ]
    assert len(lines) == len(expected), res.output
    for line, want in zip(lines, expected, strict=True):
        assert line.startswith(want), (line, want)


def test_host_check_loads_the_keys_the_host_would(tmp_path: Path) -> None:
    # before: "ok" (exit 0) for keys that are missing, or no keys at all; sharedos run then
    # refused to start on them ("[policy] keys: cannot read public key", "cannot use the
    # signing key")
    from sharedos.policy.signing import write_keypair

    keys = tmp_path / "keys"
    keys.mkdir()
    write_keypair(keys / "policy.pem")
    write_keypair(keys / "host.pem")
    host = tmp_path / "host.toml"
    good = (
        '[harness.claude-code]\n[policy]\nbundle = "b.json"\nkeys = ["keys/policy.pem.pub"]\n'
        '[evidence]\nsign_key = "keys/host.pem"\n'
    )
    host.write_text(good, encoding="utf-8")
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 0, res.output
    host.write_text(
        good.replace("policy.pem.pub", "missing.pub").replace("keys/host.pem", "keys/host.pem.pub"),
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 1, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2
    assert errors[0].startswith(f"error: {host}:4:1: policy.keys: cannot be used: ")
    assert "missing.pub" in errors[0]
    assert errors[1].startswith(f"error: {host}:6:1: evidence.sign_key: cannot be used: ")
    (keys / "host.pem").chmod(0o644)  # a private key others may read is refused by the host
    host.write_text(good, encoding="utf-8")
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 1 and f"{host}:6:1: evidence.sign_key" in res.output


def test_a_file_sharedos_run_would_stop_at_is_not_said_to_be_ok(tmp_path: Path) -> None:
    """docs/harnesses.md: problems (exit 1), or a summary (exit 0). A key file `sharedos
    run` could not load was reported, exit 1, under a first line saying `host.toml: ok`."""
    host = tmp_path / "host.toml"
    host.write_text('[harness.pi]\n[policy]\nkeys = ["missing.pub"]\n', encoding="utf-8")
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 1, res.output
    assert res.stdout.splitlines()[0] == f"{host}: 1 problem, 1 harness(es), 0 upstream(s)"
    assert ": ok," not in res.output


def test_a_location_whose_variable_is_unset_is_a_problem_not_ok(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sharedos run` refuses a host file whose [policy] bundle, [policy] state or
    [evidence] url names a ${VAR} unset in its environment (exit 1); `host check` said
    `ok`, exit 0, of the same file in the same environment. Each is now a problem at its
    key, in file order with the keys' problems."""
    for name in ("SOS_TEST_BUNDLE_DIR", "SOS_TEST_STATE_DIR", "SOS_TEST_EVIDENCE"):
        monkeypatch.delenv(name, raising=False)
    host = tmp_path / "host.toml"
    host.write_text(
        "[policy]\n"
        'bundle = "${SOS_TEST_BUNDLE_DIR}/bundle.json"\n'
        'state = "${SOS_TEST_STATE_DIR}/state.json"\n'
        "[evidence]\n"
        'url = "${SOS_TEST_EVIDENCE}"\n',
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 1, res.output
    assert res.stdout.splitlines()[0] == f"{host}: 3 problems, 0 harness(es), 0 upstream(s)"
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert [e.split(": ")[1:3] for e in errors] == [
        [f"{host}:2:1", "policy.bundle"],
        [f"{host}:3:1", "policy.state"],
        [f"{host}:5:1", "evidence.url"],
    ]
    assert all("is not set in the host environment" in e for e in errors)
    monkeypatch.setenv("SOS_TEST_BUNDLE_DIR", str(tmp_path))
    monkeypatch.setenv("SOS_TEST_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("SOS_TEST_EVIDENCE", str(tmp_path / "e.sqlite"))
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 0, res.output


def test_a_bundle_url_sharedos_run_refuses_is_a_problem_not_ok(tmp_path: Path) -> None:
    """`sharedos run` refuses a [policy] bundle URL that carries a credential over plain
    http to another machine (exit 1, before any request); `host check` said `ok`, exit 0,
    of the same file (docs/harnesses.md: a [policy] bundle it could not use is an error at
    its key). Its password is masked there as everywhere."""
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.pi]\n[policy]\nbundle = "http://ops:s3cret-pw@policy.example/bundle.json"\n',
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 1, res.output
    assert res.stdout.splitlines()[0] == f"{host}: 1 problem, 1 harness(es), 0 upstream(s)"
    (error,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert error.startswith(f"error: {host}:3:1: policy.bundle: cannot be used: "), error
    assert "is https://" in error and "s3cret-pw" not in res.output, error
    # the same URL over https is one the host fetches: ok
    host.write_text(
        '[harness.pi]\n[policy]\nbundle = "https://ops:s3cret-pw@policy.example/bundle.json"\n',
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 0, res.output


def test_host_check_spells_what_the_host_file_would_launch(tmp_path: Path) -> None:
    """A reviewer runs ``host check`` on a host file someone else wrote (a pull request):
    its summary printed an upstream's command as the file holds it, so a command written
    ``/opt/evil ESC[2K CR /usr/bin/safe-server`` read as the safe one on the terminal, and
    a U+202E reordered the rest of the line."""
    host = tmp_path / "host.toml"
    host.write_text(
        "[harness.claude-code]\n[upstream.x]\n"
        'command = "/opt/evil\\u001b[2K\\r/usr/bin/safe-server\\u202e"\n'
        'args = ["--root", "/srv\\u009b2J"]\nroots = []\npinning = "off"\n',
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["host", "check", str(host)])
    assert res.exit_code == 0, res.output
    assert not {"\x1b", "\r", "\u009b", "\u202e"} & set(res.output), ascii(res.output)
    assert "stdio /opt/evil\\x1b[2K\\x0d/usr/bin/safe-server\\u202e" in res.output

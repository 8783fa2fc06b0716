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


def test_verify_with_a_hosts_state_refuses_what_that_host_would_refuse(tmp_path: Path) -> None:
    """Without a host's history a rollback verifies; with its state file or host file, the
    verdict is the host's own: older than what it enforced, or a relabelled release, refused."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
    )

    from sharedos.bundles.state import BundleState, Enforced
    from sharedos.bundles.verify import BundleVerifier
    from sharedos.policy.bundle import sign_bundle

    key = Ed25519PrivateKey.generate()
    public = tmp_path / "keys" / "policy.pub"
    public.parent.mkdir()
    public.write_bytes(
        key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    )
    bundle = tmp_path / "pub" / "bundle.json"
    save_bundle(compile_sources([("files.sos", RULES_V1)]), bundle)
    sign_bundle(bundle, key, revision="r5", sequence=5)
    state = tmp_path / "state.json"
    newer = tmp_path / "newer.json"
    save_bundle(compile_sources([("files.sos", RULES_V1 + "\n# newer\n")]), newer)
    sign_bundle(newer, key, revision="r7", sequence=7)
    from sharedos.bundles.source import open_source

    loaded = BundleVerifier([public]).verify(open_source(str(newer)).fetch(None))  # type: ignore[arg-type]
    BundleState(state).save(Enforced.of(loaded))  # this host already enforced sequence 7

    code, out = run("bundle", "verify", "--key", str(public), str(bundle.parent))
    assert code == 0, out  # no history given: a valid, signed bundle
    code, out = run("bundle", "verify", "--key", str(public), "--state", str(state), str(bundle))
    assert code == 1 and "a rollback" in out and "sequence 7" in out, out
    code, out = run("bundle", "verify", "--key", str(public), "--state", str(state), str(newer))
    assert code == 0 and "sequence 7" in out, out
    assert "records no release" not in out
    # a state file that does not exist (a mistyped path) compares nothing: said, not implied
    missing = tmp_path / "stat.json"
    code, out = run("bundle", "verify", "--key", str(public), "--state", str(missing), str(bundle))
    assert code == 0 and "records no release (no such file)" in out, out

    # the host file gives the source, the keys and the state, resolved next to it
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.pi]\nkind = "pi"\n\n[policy]\nbundle = "pub/bundle.json"\nkeys = ["keys/policy.pub"]\nstate = "state.json"\n'
    )
    code, out = run("bundle", "verify", "--host-file", str(host))
    assert code == 1 and "a rollback" in out, out
    # a state file a host cannot read makes it refuse everything: so does verify
    state.write_text("{not json")
    code, out = run("bundle", "verify", "--host-file", str(host))
    assert code == 1 and "refuses every bundle" in out, out
    state.unlink()
    code, out = run("bundle", "verify", "--host-file", str(host))
    assert code == 0 and "r5" in out, out
    code, out = run("bundle", "verify")
    assert code == 2 and "give SOURCE" in out, out


def test_verify_never_prints_a_revision_that_would_rewrite_the_terminal(tmp_path: Path) -> None:
    # an unsigned bundle's revision printed raw: a carriage return and an erase-line turned
    # "ok: revision r7" into a forged line, an OSC retitled the window
    bundle = tmp_path / "bundle.json"
    save_bundle(compile_sources([("files.sos", RULES_V1)]), bundle)
    doc = json.loads(bundle.read_bytes())
    doc["revision"] = "r7\r\x1b[2Kok: revision r8 (signed)\x1b]0;owned\x07\u202e"
    bundle.write_text(json.dumps(doc))
    code, out = run("bundle", "verify", str(bundle))
    assert code == 1 and "malformed revision" in out, out
    assert not {"\r", "\x1b", "\x07", "\u202e"} & set(out), ascii(out)


def test_a_bundle_servers_reason_phrase_cannot_drive_the_terminal(tmp_path: Path) -> None:
    # the HTTP reason phrase is the server's: printed raw, its OSC retitled the window, its
    # CSI (and a C1 CSI) erased and moved lines of the operator's terminal
    import socket
    import threading

    from sharedos.bundles.source import SourceError, open_source

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        with server:
            for _ in range(2):
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(
                        b"HTTP/1.1 404 Not\x1b]0;owned\x07\x1b[2K\xc2\x9b1A Found\r\n"
                        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                    )

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{port}/bundle.json"
    with pytest.raises(SourceError) as err:
        open_source(url).fetch(None)
    said = str(err.value)
    assert "HTTP 404 Not\\x1b]0;owned\\x07\\x1b[2K" in said, ascii(said)
    code, out = run("bundle", "verify", url)
    assert code == 1 and "HTTP 404" in out, out
    assert not {"\x1b", "\x07", "\x9b"} & set(out), ascii(out)


def test_verify_spells_the_state_path_its_note_names(tmp_path: Path) -> None:
    # the note on a state file that records nothing printed the path raw, while the
    # 'ok:' and 'refused:' lines of the same command are spelled: a host file's
    # [policy] state holding a bidi override or a BEL reached the operator's terminal
    bundle = tmp_path / "bundle.json"
    save_bundle(compile_sources([("files.sos", RULES_V1)]), bundle)
    state = tmp_path / "st\u202eate\x07.json"
    code, out = run("bundle", "verify", "--state", str(state), str(bundle))
    assert code == 0 and "records no release (no such file)" in out, out
    assert not {"\x07", "\u202e"} & set(out), ascii(out)
    assert "st\\u202eate\\x07.json" in out, ascii(out)

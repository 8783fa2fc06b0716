"""Bundles that cannot be rolled back or relabelled, and fetches that cannot hang a host (issue 24).

Directory and HTTP sources (a real local HTTP server), real Ed25519 keys, real
state files, and ``sharedos run`` restarted as a host would be.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.bundles import BundleManager, BundleVerifier, DirectorySource, HttpSource
from sharedos.cli.main import main
from sharedos.evidence.chain import Signer
from sharedos.policy import compile_sources
from sharedos.policy.bundle import save_bundle, sign_bundle
from tests.fleet import test_bundles
from tests.fleet.test_bundles import RULES_V1, RULES_V2, _BundleServer, publish

bundle_server = test_bundles.bundle_server  # the fixture, shared

SHAREDOS = str(Path(sys.executable).parent / "sharedos")


@pytest.fixture
def signer() -> Signer:
    return Signer.generate()


def release(tmp: Path, rules: str, signer: Signer, *, revision: str, sequence: int | None) -> bytes:
    """A compiled bundle signed as release ``revision`` / ``sequence`` (sharedos-policy sign's function)."""
    from cryptography.hazmat.primitives import serialization

    path = tmp / f"release-{revision}-{sequence}-{abs(hash(rules))}.json"
    save_bundle(compile_sources([("files.sos", rules)]), path)
    key = serialization.load_pem_private_key(signer.private_pem(), password=None)
    sign_bundle(path, key, revision=revision, sequence=sequence)  # type: ignore[arg-type]
    return path.read_bytes()


def BundleState(path: Path) -> Any:  # imported late: main had no such module
    from sharedos.bundles.state import BundleState as State

    return State(path)


def verifier(signer: Signer) -> BundleVerifier:
    return BundleVerifier([signer.public_pem()])


# -- rollback and relabelling ----------------------------------------------------------------


def test_an_older_signed_bundle_is_refused_from_a_directory(
    tmp_path: Path, signer: Signer, caplog: pytest.LogCaptureFixture
) -> None:
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    manager = BundleManager(DirectorySource(pub), verifier(signer))
    assert manager.poll().status == "loaded"
    # a validly signed, older release: a rollback
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r3", sequence=3))
    with caplog.at_level(logging.ERROR, logger="sharedos.bundles"):
        result = manager.poll()
    assert result.status == "refused" and "a rollback" in result.detail
    assert manager.current().revision == "r5" and manager.current().sequence == 5
    assert any("keeping revision r5" in r.getMessage() for r in caplog.records)
    # a newer one is taken
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r6", sequence=6))
    assert manager.poll().status == "loaded" and manager.current().revision == "r6"


def test_an_older_signed_bundle_is_refused_over_http(
    tmp_path: Path, signer: Signer, bundle_server: tuple[str, dict[str, Any]]
) -> None:
    url, state = bundle_server
    state.update(bundle=release(tmp_path, RULES_V2, signer, revision="r5", sequence=5), etag='"5"')
    manager = BundleManager(HttpSource(url), verifier(signer))
    assert manager.poll().status == "loaded"
    state.update(bundle=release(tmp_path, RULES_V1, signer, revision="r3", sequence=3), etag='"3"')
    result = manager.poll()
    assert result.status == "refused" and "a rollback" in result.detail
    assert manager.current().revision == "r5"


def test_the_same_sequence_under_another_revision_or_program_is_refused(
    tmp_path: Path, signer: Signer
) -> None:
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r5", sequence=5))
    manager = BundleManager(DirectorySource(pub), verifier(signer))
    manager.poll()
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert "a relabelled release" in manager.poll().detail
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r5-bis", sequence=5))
    assert "a relabelled release" in manager.poll().detail
    assert manager.current().revision == "r5"


@pytest.mark.parametrize(
    ("field", "value"),
    [("revision", "r99-forged"), ("sequence", 99), ("compiler_version", "x")],
)
def test_the_signature_covers_the_release_and_the_compiler(
    tmp_path: Path, signer: Signer, field: str, value: Any
) -> None:
    pub = tmp_path / "pub"
    doc = json.loads(release(tmp_path, RULES_V1, signer, revision="r5", sequence=5))
    doc[field] = value
    publish(pub, json.dumps(doc).encode())
    result = BundleManager(DirectorySource(pub), verifier(signer)).poll()
    assert result.status == "refused" and result.current is None
    public = tmp_path / "policy.pub"
    public.write_bytes(signer.public_pem())
    out = CliRunner().invoke(main, ["bundle", "verify", "--key", str(public), str(pub)])
    assert out.exit_code == 1 and "refused" in out.output and "r99" not in out.output


def test_the_signature_covers_its_signing_time(tmp_path: Path, signer: Signer) -> None:
    pub = tmp_path / "pub"
    doc = json.loads(release(tmp_path, RULES_V1, signer, revision="r5", sequence=5))
    doc["signatures"][0]["signed_at"] = "2020-01-01T00:00:00Z"
    publish(pub, json.dumps(doc).encode())
    assert BundleManager(DirectorySource(pub), verifier(signer)).poll().status == "refused"


def test_a_first_format_signature_is_refused_with_how_to_re_sign(
    tmp_path: Path, signer: Signer
) -> None:
    import base64

    from sharedos.policy.signing import _legacy_message

    path = tmp_path / "b.json"
    save_bundle(compile_sources([("files.sos", RULES_V1)]), path)
    doc = json.loads(path.read_bytes())
    doc["revision"] = "r1"
    key = Signer.from_pem(signer.private_pem())
    raw = key._key.sign(_legacy_message(doc))
    doc["signatures"] = [
        {"alg": "ed25519", "key_id": key.key_id, "signature": base64.b64encode(raw).decode()}
    ]
    publish(tmp_path / "pub", json.dumps(doc).encode())
    result = BundleManager(DirectorySource(tmp_path / "pub"), verifier(signer)).poll()
    assert result.status == "refused" and "re-sign it" in result.detail


def test_a_loaded_release_says_what_was_signed(tmp_path: Path, signer: Signer) -> None:
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r7", sequence=7))
    loaded = BundleManager(DirectorySource(pub), verifier(signer)).poll().current
    assert loaded is not None
    assert (loaded.revision, loaded.sequence, loaded.signed_by) == ("r7", 7, signer.key_id)
    assert loaded.signed_at is not None and loaded.signed_at.endswith("Z")
    assert "sequence 7" in loaded.describe() and loaded.signed_at in loaded.describe()


# -- remembered across restarts --------------------------------------------------------------


def test_a_restarted_host_refuses_the_rollback_it_refused_before(
    tmp_path: Path, signer: Signer
) -> None:
    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    first = BundleManager(DirectorySource(pub), verifier(signer), state=state)
    assert first.poll().status == "loaded"
    assert json.loads(state.path.read_text())["sequence"] == 5
    assert state.path.stat().st_mode & 0o077 == 0
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r3", sequence=3))
    assert first.poll().status == "refused"
    # the host restarts: a new manager, nothing in memory, the rollback still refused
    restarted = BundleManager(DirectorySource(pub), verifier(signer), state=state)
    result = restarted.poll()
    # refused, and the release it enforced is put in force from the copy it kept
    assert result.status == "kept" and "sequence 5" in result.detail
    assert restarted.current().revision == "r5"
    # the release it enforced is still welcome (same sequence, same release)
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert restarted.poll().status in ("loaded", "unchanged")
    assert restarted.current().revision == "r5"
    # without a kept copy (a host upgraded from before copies were kept): no policy
    state.kept_path.unlink()
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r3", sequence=3))
    bare = BundleManager(DirectorySource(pub), verifier(signer), state=state)
    assert bare.poll().status == "refused"
    with pytest.raises(RuntimeError, match="no policy"):
        bare.current()


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000 + "]" * 100_000])
def test_an_unreadable_state_refuses_every_bundle(
    tmp_path: Path, signer: Signer, text: str
) -> None:
    """Not JSON, or JSON nested past the decoder's depth: refused with why, not raised."""
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r1", sequence=1))
    state = tmp_path / "state.json"
    state.write_text(text)
    result = BundleManager(DirectorySource(pub), verifier(signer), state=BundleState(state)).poll()
    assert result.status == "refused" and "not a bundle state file" in result.detail


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[]", "a JSON object of the enforced release, not list"),
        ("{}", "no sequence, revision, bundle_hash, origin"),
        (
            '{"sequence": 1, "revision": "r", "bundle_hash": "h", "origin": "o", "x": 1}',
            "unknown field(s) 'x'",
        ),
    ],
)
def test_a_state_file_of_the_wrong_shape_says_what_is_wrong(
    tmp_path: Path, text: str, why: str
) -> None:
    """A state file that is JSON but not a release record is refused in the state file's
    terms, not with the dataclass constructor's ("argument after ** must be a mapping",
    "missing 4 required positional arguments": what `bundle verify --state` printed)."""
    from sharedos.bundles.state import BundleState, StateError

    state = tmp_path / "state.json"
    state.write_text(text)
    with pytest.raises(StateError) as info:
        BundleState(state).load()
    assert str(info.value) == f"{state} is not a bundle state file ({why})"
    assert "__init__" not in str(info.value) and "argument" not in str(info.value)


@pytest.mark.parametrize(
    "fields",
    [
        {"bundle_hash": 5},
        {"bundle_hash": None},
        {"revision": 7},
        {"origin": ["x"]},
        {"signed_by": {"a": 1}},
        {"enforced_at": 0},
    ],
)
def test_a_state_field_of_another_type_refuses_every_bundle_with_why(
    tmp_path: Path, signer: Signer, fields: dict[str, Any]
) -> None:
    """A hand-edited state file whose revision or hash is no string: refused, not a TypeError."""
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r1", sequence=1))
    state = tmp_path / "state.json"
    record = {"sequence": 5, "revision": "r5", "bundle_hash": "ab" * 32, "origin": "o"}
    state.write_text(json.dumps({**record, **fields}))
    result = BundleManager(DirectorySource(pub), verifier(signer), state=BundleState(state)).poll()
    name = next(iter(fields))
    assert result.status == "refused" and f"records a malformed {name}" in result.detail
    assert result.current is None


def test_a_release_that_cannot_be_remembered_is_not_put_in_force(
    tmp_path: Path, signer: Signer
) -> None:
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r1", sequence=1))
    # nothing there to read, and nowhere anyone (root included) can create it
    unwritable = Path("/proc/sharedos-no-such-dir/state.json")
    manager = BundleManager(DirectorySource(pub), verifier(signer), state=BundleState(unwritable))
    result = manager.poll()
    assert result.status == "refused" and "cannot remember" in result.detail
    assert result.current is None


def _host_file(tmp: Path, signer: Signer) -> Path:
    (tmp / "keys").mkdir()
    (tmp / "keys" / "policy.pub").write_bytes(signer.public_pem())
    (tmp / "sandbox" / "public").mkdir(parents=True)
    host = tmp / "host.toml"
    host.write_text(
        "[harness.claude-code]\n\n"
        '[evidence]\nurl = "./evidence.db"\n\n'
        '[policy]\nbundle = "./pub"\nkeys = ["./keys/policy.pub"]\nstate = "./state/bundle.json"\n',
        encoding="utf-8",
    )
    return host


def _run_host(host: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(SHAREDOS, "run", "--host-config", str(host), "--policy", "fleet"),
            *("--principal", "alice", "--sandbox", str(tmp / "sandbox"), "--dry-run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
    )


def test_sharedos_run_remembers_the_release_across_runs(tmp_path: Path, signer: Signer) -> None:
    host = _host_file(tmp_path, signer)
    publish(tmp_path / "pub", release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    first = _run_host(host, tmp_path)
    assert first.returncode == 0, first.stderr
    assert "revision r5" in first.stderr and "sequence 5" in first.stderr
    publish(tmp_path / "pub", release(tmp_path, RULES_V1, signer, revision="r3", sequence=3))
    second = _run_host(host, tmp_path)
    # the rollback is refused, and the host goes on with the release it enforced
    assert second.returncode == 0, second.stderr
    assert "a rollback" in second.stderr
    assert "revision r5" in second.stderr and "the last release this host enforced" in second.stderr
    [in_force] = [line for line in second.stderr.splitlines() if line.startswith("policy: bundle")]
    assert in_force.startswith("policy: bundle revision r5"), in_force


def test_a_host_starting_while_its_source_fails_enforces_the_release_it_kept(
    tmp_path: Path, signer: Signer
) -> None:
    """A restart during a bundle server outage (or with a bundle refused) does not stop
    every new turn: the last release the host enforced is put in force from the copy kept
    beside its state file, verified again; a kept copy that no longer verifies is not used
    (fail closed), nor one older than the release the state records."""
    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    first = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert first.status == "loaded"
    kept = tmp_path / "state" / "bundle.last-good.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    good = kept.read_bytes()

    # the source is gone: the restarted host enforces r5, and its decisions are r5's
    for item in pub.iterdir():
        item.unlink()
    pub.rmdir()
    result = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert result.status == "kept" and result.current is not None
    assert result.current.revision == "r5" and result.current.sequence == 5
    assert result.current.bundle_hash == first.current.bundle_hash  # type: ignore[union-attr]

    # a bundle the keys refuse, served instead: refused, and r5 from the kept copy again
    publish(pub, release(tmp_path, RULES_V1, Signer.generate(), revision="r9", sequence=9))
    refused = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert refused.status == "kept" and refused.current is not None
    assert refused.current.revision == "r5" and "not signed by any trusted key" in refused.detail

    # a kept copy someone replaced with an unsigned or foreign-signed bundle: not used
    kept.write_bytes(release(tmp_path, RULES_V1, Signer.generate(), revision="r7", sequence=7))
    forged = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert forged.status == "refused" and forged.current is None
    assert "is not used" in forged.detail

    # a kept copy older than the release the state records (r5): a rollback, not used
    kept.write_bytes(release(tmp_path, RULES_V1, signer, revision="r3", sequence=3))
    older = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert older.current is None and "a rollback" in older.detail

    # a state file that cannot be read: every bundle refused, the kept copy too
    kept.write_bytes(good)
    state.path.write_text("{not json")
    broken = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert broken.current is None


def test_a_host_whose_seal_key_is_a_bundle_key_is_refused(tmp_path: Path, signer: Signer) -> None:
    """The host holds its ``[evidence] sign_key``: were it also a ``[policy] keys`` key, the
    host (or whoever reads its key file) could sign the policy it and every host trusting
    that key enforce. `sharedos run` and `sharedos host check` refuse it, saying why."""
    host = _host_file(tmp_path, signer)
    publish(tmp_path / "pub", release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    pem = tmp_path / "keys" / "host.pem"
    pem.write_bytes(signer.private_pem())
    pem.chmod(0o600)
    text = host.read_text(encoding="utf-8")
    host.write_text(
        text.replace('url = "./evidence.db"', 'url = "./evidence.db"\nsign_key = "keys/host.pem"'),
        encoding="utf-8",
    )
    why = "is the private key of a [policy] keys entry"
    ran = _run_host(host, tmp_path)
    assert ran.returncode == 1 and why in ran.stderr, ran.stderr
    assert not (tmp_path / "state" / "bundle.json").exists()  # refused before any bundle
    checked = CliRunner().invoke(main, ["host", "check", str(host)])
    assert checked.exit_code == 1 and f"evidence.sign_key: {why}" in checked.output
    pem.unlink()
    pem.write_bytes(Signer.generate().private_pem())  # a key of its own: as before
    pem.chmod(0o600)
    assert _run_host(host, tmp_path).returncode == 0


def test_sharedos_run_shows_a_bundle_url_without_its_credential(
    tmp_path: Path, signer: Signer
) -> None:
    """A host with no usable bundle says where from as every message shows a bundle URL:
    the presigned signature (or ``?token=``) masked, never as written in the host file."""
    host = _host_file(tmp_path, signer)
    text = host.read_text(encoding="utf-8")
    url = "http://127.0.0.1:9/bundle.json?token=the-bearer-secret"
    host.write_text(text.replace('bundle = "./pub"', f'bundle = "{url}"'), encoding="utf-8")
    ran = _run_host(host, tmp_path)
    assert ran.returncode == 1 and "no usable policy bundle from" in ran.stderr, ran.stderr
    assert "token=***" in ran.stderr and "the-bearer-secret" not in ran.stderr, ran.stderr


def test_sharedos_run_refuses_a_credential_over_plain_http_in_one_line(
    tmp_path: Path, signer: Signer
) -> None:
    """A bundle URL whose credential would cross the network in clear (plain http:// to
    another machine) stops `sharedos run` with one masked line, no traceback, no request."""
    host = _host_file(tmp_path, signer)
    text = host.read_text(encoding="utf-8")
    url = "http://bundles.example/bundle.json?token=the-bearer-secret"
    host.write_text(text.replace('bundle = "./pub"', f'bundle = "{url}"'), encoding="utf-8")
    ran = _run_host(host, tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert "error: [policy] bundle:" in ran.stderr and "Traceback" not in ran.stderr
    assert "the-bearer-secret" not in ran.stderr, ran.stderr


def test_sharedos_run_spells_the_bundle_url_it_refuses(tmp_path: Path, signer: Signer) -> None:
    """That line quoted the URL raw: a bidi override or a BEL in the host file's [policy]
    bundle reached the operator's terminal, where every other line about the host's bundle
    is spelled (docs/evidence.md)."""
    host = _host_file(tmp_path, signer)
    text = host.read_text(encoding="utf-8")
    url = "http://bundles.example/\\u202ebundle\\u0007.json?token=the-bearer-secret"
    host.write_text(text.replace('bundle = "./pub"', f'bundle = "{url}"'), encoding="utf-8")
    ran = _run_host(host, tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert "error: [policy] bundle:" in ran.stderr, ran.stderr
    assert not {"\u202e", "\x07"} & set(ran.stderr), ascii(ran.stderr)
    assert "/\\u202ebundle\\x07.json" in ran.stderr, ascii(ran.stderr)


def test_a_bundle_url_from_the_environment_is_fetched_as_a_url(
    tmp_path: Path, signer: Signer, bundle_server: tuple[str, dict[str, Any]]
) -> None:
    """``${VAR}`` is interpolated in ``[policy] bundle`` and ``shadow`` before they are read
    as a URL or a path: ``bundle = "${BUNDLE_URL}"`` (a presigned URL kept out of the host
    file) was a path named after the URL beside the host file, and a URL's ``${TOKEN}``
    was sent as written."""
    from sharedos.harness.hostconfig import parse_host_config

    url, served = bundle_server
    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r5", sequence=5), etag="")
    env = {"BUNDLE_URL": f"{url}?X-Amz-Signature=s1", "TOKEN": "t1"}
    for written, wanted in (
        ("${BUNDLE_URL}", f"{url}?X-Amz-Signature=s1"),
        (f"{url}?token=${{TOKEN}}", f"{url}?token=t1"),
    ):
        config = parse_host_config(
            f'[policy]\nbundle = "{written}"\nshadow = "{written}"\n', "h.toml", base_dir=tmp_path
        )
        assert config.bundle_location(env) == wanted
        assert config.shadow_source(env)[0] == wanted
        manager = BundleManager(HttpSource(config.bundle_location(env)), verifier(signer))
        assert manager.poll().status == "loaded"
        assert served["requests"][-1][0] == wanted.removeprefix(url.removesuffix("/bundle.json"))


def test_a_renewed_presigned_url_keeps_the_hosts_history(
    tmp_path: Path,
    signer: Signer,
    bundle_server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A presigned URL is renewed before it expires (a new signature, a new expiry): the
    same source, so a host with the default state file still refuses an older release."""
    from sharedos.bundles.state import BundleState as State
    from sharedos.harness.hostconfig import parse_host_config

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    url, served = bundle_server

    def host_poll(query: str) -> Any:
        config = parse_host_config(
            f'[policy]\nbundle = "{url}?{query}"\n', "host.toml", base_dir=tmp_path
        )
        state = State(config.bundle_state_path())
        return BundleManager(HttpSource(config.bundle_location()), verifier(signer), state=state)

    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r5", sequence=5), etag="")
    assert host_poll("X-Amz-Expires=3600&X-Amz-Signature=first-signature").poll().status == "loaded"
    # the object replaced with an older, validly signed release; the host's URL renewed
    served.update(bundle=release(tmp_path, RULES_V1, signer, revision="r3", sequence=3), etag="")
    result = host_poll("X-Amz-Expires=3600&X-Amz-Signature=renewed-signature").poll()
    # refused; the release it enforced goes on, from the copy it kept
    assert result.status == "kept" and "a rollback" in result.detail, result.detail
    assert result.current is not None and result.current.revision == "r5"
    assert "renewed-signature" not in result.detail and not any(
        "-signature" in p.read_text() for p in (tmp_path / "state").rglob("*.json")
    )


@pytest.mark.parametrize(
    "written_as",
    ["as written", "shown"],  # the origin each earlier release recorded (e7108aa, eaa82e3)
)
def test_the_state_an_earlier_sharedos_named_otherwise_still_holds_after_an_upgrade(
    tmp_path: Path,
    signer: Signer,
    bundle_server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    written_as: str,
) -> None:
    """Before 36dad01 the default state file was named by the URL as written; later by the
    URL as messages show it (which changed again: b29c745). A host upgraded across such a
    change found no file under the new name and took an older signed release as if it had
    enforced none: the state an earlier release wrote is found by the source it records."""
    import hashlib

    from sharedos.bundles.source import shown_url
    from sharedos.harness.hostconfig import parse_host_config

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    base, served = bundle_server
    url = f"{base}?token=abc123"
    # what the release before 36dad01 left: sequence 5 enforced, named by the raw URL
    old = tmp_path / "state" / "sharedos"
    old.mkdir(parents=True)
    (old / f"bundle-{hashlib.sha256(url.encode()).hexdigest()[:16]}.json").write_text(
        json.dumps(
            {
                "sequence": 5,
                "revision": "r5",
                "bundle_hash": "ab" * 32,
                "origin": url if written_as == "as written" else shown_url(url),
                "signed_by": None,
                "signed_at": None,
                "enforced_at": "2026-12-06T10:00:00Z",
            }
        )
    )
    # another source's state beside it, newer and unreadable: neither is this source's
    (old / "bundle-0000000000000000.json").write_text(
        json.dumps(
            {
                "sequence": 9,
                "revision": "r9",
                "bundle_hash": "cd" * 32,
                "origin": f"{base}-other?token=x",
            }
        )
    )
    (old / "bundle-1111111111111111.json").write_text("{")
    (tmp_path / "policy.pub").write_bytes(signer.public_pem())
    host = tmp_path / "host.toml"
    host.write_text(f'[policy]\nbundle = "{url}"\nkeys = ["policy.pub"]\n')
    served.update(bundle=release(tmp_path, RULES_V1, signer, revision="r3", sequence=3), etag="")
    # what the upgraded host would do, as `sharedos bundle verify` says it
    out = CliRunner().invoke(main, ["bundle", "verify", "--host-file", str(host)])
    assert out.exit_code == 1 and "a rollback" in out.output, out.output
    config = parse_host_config(host.read_text(), str(host), base_dir=tmp_path)
    manager = BundleManager(
        HttpSource(config.bundle_location()), verifier(signer), state=config.bundle_state()
    )
    result = manager.poll()
    assert result.status == "refused" and "a rollback" in result.detail, result.detail
    # a newer release is taken and recorded under the name this SharedOS gives it
    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r6", sequence=6), etag="")
    assert manager.poll().status == "loaded"
    recorded = json.loads(Path(config.bundle_state_path()).read_text())
    assert recorded["sequence"] == 6 and "abc123" not in json.dumps(recorded)


# -- fetches that cannot hang a host -----------------------------------------------------------


class _Dripper:
    """A real TCP server that answers one byte every ``every_s`` seconds, forever."""

    def __init__(self, phase: str, every_s: float = 2.0) -> None:
        self.phase = phase
        self.every_s = every_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            if self.phase == "body":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n{")
                payload = b" " * 1_000_000
            else:
                payload = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 1_000_000
            for byte in payload:
                if self.stop.wait(self.every_s):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_dripping_server_cannot_hold_a_poll(phase: str, caplog: pytest.LogCaptureFixture) -> None:
    dripper = _Dripper(phase)
    try:
        manager = BundleManager(HttpSource(f"http://127.0.0.1:{dripper.port}/b", deadline_s=3.0))
        results: list[Any] = []
        with caplog.at_level(logging.ERROR, logger="sharedos.bundles"):
            poller = threading.Thread(target=lambda: results.append(manager.poll()), daemon=True)
            poller.start()
            # liveness, not speed: without an overall deadline this poll never returns
            poller.join(60)
            assert not poller.is_alive(), "poll() is still held by a server dripping bytes"
        (result,) = results
        assert result.status == "unreachable" and "no complete answer within 3 s" in result.detail
        # a host without a policy says so
        assert any("this host has no policy" in r.getMessage() for r in caplog.records)
        with pytest.raises(RuntimeError, match="no policy"):
            manager.current()
    finally:
        dripper.close()


def test_current_does_not_wait_for_a_poll_in_progress(tmp_path: Path, signer: Signer) -> None:
    dripper = _Dripper("body", every_s=0.5)
    try:
        pub = tmp_path / "pub"
        publish(pub, release(tmp_path, RULES_V1, signer, revision="r1", sequence=1))
        manager = BundleManager(DirectorySource(pub), verifier(signer))
        manager.poll()
        manager.source = HttpSource(f"http://127.0.0.1:{dripper.port}/b", deadline_s=30.0)
        poller = threading.Thread(target=manager.poll, daemon=True)
        poller.start()
        time.sleep(0.3)  # the poll is now inside its fetch
        took = threading.Thread(target=manager.current, daemon=True)
        took.start()
        took.join(10)
        assert not took.is_alive() and poller.is_alive()
    finally:
        dripper.close()


# -- a 304 to a first request -----------------------------------------------------------------


class _StaleCache(_BundleServer):
    """A cache that answers 304 to anything but an uncached request (``Cache-Control: no-cache``)."""

    def do_GET(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        state["asked"].append(self.headers.get("Cache-Control"))
        if self.headers.get("Cache-Control") != "no-cache" or state.get("always_304"):
            self.send_response(304)
            self.end_headers()
            return
        super().do_GET()


@pytest.fixture
def stale_cache() -> Iterator[tuple[str, dict[str, Any]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StaleCache)
    server.state = {"requests": [], "asked": []}  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/bundle.json", server.state  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def test_a_304_to_a_first_request_is_said_and_the_bundle_fetched_uncached(
    tmp_path: Path,
    signer: Signer,
    stale_cache: tuple[str, dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url, state = stale_cache
    state.update(bundle=release(tmp_path, RULES_V1, signer, revision="r1", sequence=1), etag='"1"')
    manager = BundleManager(HttpSource(url), verifier(signer))
    with caplog.at_level(logging.WARNING, logger="sharedos.bundles"):
        result = manager.poll()
    assert result.status == "loaded" and manager.current().revision == "r1"
    assert any("304 Not Modified" in r.getMessage() for r in caplog.records)
    assert state["asked"] == [None, "no-cache"]


def test_a_source_that_only_answers_304_leaves_a_host_saying_it_has_no_policy(
    stale_cache: tuple[str, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    url, state = stale_cache
    state["always_304"] = True
    manager = BundleManager(HttpSource(url))
    with caplog.at_level(logging.ERROR, logger="sharedos.bundles"):
        result = manager.poll()
    assert result.status == "unreachable" and "304 Not Modified" in result.detail
    assert any("this host has no policy" in r.getMessage() for r in caplog.records)


def test_a_bare_file_name_in_policy_is_next_to_the_host_file_not_in_the_working_directory(
    tmp_path: Path, signer: Signer
) -> None:
    """``keys = ["policy.pub"]`` names the key beside the host file: run from a directory
    someone else filled (a checkout, a workspace) the host does not trust the key found
    there, load the bundle found there, nor keep its anti-rollback state there."""
    etc, cwd = tmp_path / "etc", tmp_path / "workspace"
    etc.mkdir()
    (cwd / "sandbox" / "public").mkdir(parents=True)
    (etc / "policy.pub").write_bytes(signer.public_pem())
    (etc / "bundle.json").write_bytes(
        release(tmp_path, RULES_V2, signer, revision="r5", sequence=5)
    )
    intruder = Signer.generate()
    (cwd / "policy.pub").write_bytes(intruder.public_pem())
    (cwd / "bundle.json").write_bytes(
        release(tmp_path, RULES_V2, intruder, revision="planted", sequence=9)
    )
    host = etc / "host.toml"
    host.write_text(
        '[harness.claude-code]\n\n[evidence]\nurl = "./evidence.db"\n\n'
        '[policy]\nbundle = "bundle.json"\nkeys = ["policy.pub"]\nstate = "state.json"\n',
        encoding="utf-8",
    )
    done = _run_host(host, cwd)
    assert done.returncode == 0, done.stderr
    assert "revision r5" in done.stderr and "planted" not in done.stderr
    assert (etc / "state.json").is_file() and not (cwd / "state.json").exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_state_path_that_is_no_regular_file_is_refused_not_waited_on(
    tmp_path: Path, signer: Signer, kind: str
) -> None:
    """A named pipe nobody writes to (an open that never returned) or a device (read
    forever) at the state path: the host says the state cannot be read and runs nothing."""
    import os

    host = _host_file(tmp_path, signer)
    publish(tmp_path / "pub", release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    (tmp_path / "state").mkdir()
    state = tmp_path / "state" / "bundle.json"
    if kind == "fifo":
        os.mkfifo(state)
    else:
        state.symlink_to("/dev/zero")
    done = _run_host(host, tmp_path)  # waited forever on the pipe before
    assert done.returncode == 1, done.stderr
    assert "no usable policy bundle" in done.stderr and "refusing every bundle" in done.stderr


def test_two_processes_of_one_host_cannot_lower_the_release_it_remembers(
    tmp_path: Path, signer: Signer
) -> None:
    """Two managers of one host (two ``sharedos run`` at once, a long-lived poller beside
    them) share its state file. One that read the state before the other enforced a newer
    release wrote its older one over it: the next start then took the rollback."""
    state_path = tmp_path / "state" / "bundle.json"
    early, late = tmp_path / "early", tmp_path / "late"  # two edges of one source
    publish(early, release(tmp_path, RULES_V1, signer, revision="r40", sequence=40))
    first = BundleManager(DirectorySource(early), verifier(signer), state=BundleState(state_path))
    assert first.poll().status == "loaded"
    publish(late, release(tmp_path, RULES_V2, signer, revision="r42", sequence=42))
    second = BundleManager(DirectorySource(late), verifier(signer), state=BundleState(state_path))
    assert second.poll().status == "loaded"
    # the first, polling a stale edge, sees r41: older than what this host enforced
    publish(early, release(tmp_path, RULES_V2, signer, revision="r41", sequence=41))
    result = first.poll()
    assert result.status == "refused" and "sequence 42" in result.detail
    assert result.current is not None and result.current.revision == "r40"
    assert json.loads(state_path.read_text())["sequence"] == 42
    # a restart with its source failing (two directories stand in for two edges of one
    # URL; a copy is put in force beside the record of the source it names)
    for item in late.iterdir():
        item.unlink()
    restarted = BundleManager(
        DirectorySource(late), verifier(signer), state=BundleState(state_path)
    )
    again = restarted.poll()  # the release this host enforced, from its copy
    assert again.status == "kept" and again.current is not None
    assert again.current.revision == "r42"


def test_a_start_from_the_kept_copy_keeps_the_source_its_state_records(
    tmp_path: Path,
    signer: Signer,
    bundle_server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start during an outage wrote the state again with the kept copy's path as the
    release's origin: the state no longer named its source, so the next time the default
    name changes (an upgrade: what ``BundleState._earlier`` reads) the history is lost and
    an older signed release is taken as if the host had enforced none."""
    from sharedos.bundles.state import BundleState as State

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    url, served = bundle_server
    state = State.default_for(url)
    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r5", sequence=5), etag="")
    assert BundleManager(HttpSource(url), verifier(signer), state=state).poll().status == "loaded"
    served["down"] = True
    started = BundleManager(HttpSource(url), verifier(signer), state=state).poll()
    assert started.status == "kept" and started.current is not None
    assert json.loads(state.path.read_text())["origin"] == url  # its source, not the copy
    # an upgrade names the default state file otherwise: the history is found by its source
    state.path.rename(state.path.with_name("bundle-0123456789abcdef.json"))
    state.kept_path.unlink()
    served.update(down=False, bundle=release(tmp_path, RULES_V1, signer, revision="r3", sequence=3))
    upgraded = BundleManager(HttpSource(url), verifier(signer), state=State.default_for(url))
    result = upgraded.poll()
    assert result.status == "refused" and "a rollback" in result.detail, result


def test_a_start_after_an_upgrade_renamed_the_state_runs_on_the_copy_beside_the_old_name(
    tmp_path: Path,
    signer: Signer,
    bundle_server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upgrade that names the default state file otherwise reads the release recorded
    under the earlier name (``BundleState._earlier``), but not the copy kept beside it: a
    host whose first start after the upgrade found its source down ran with no policy,
    although the copy of the release it recorded was on disk. It runs on that copy, and
    the next release it fetches is written under the new name."""
    from sharedos.bundles.state import BundleState as State

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    url, served = bundle_server
    state = State.default_for(url)
    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r5", sequence=5), etag="")
    assert BundleManager(HttpSource(url), verifier(signer), state=state).poll().status == "loaded"
    # the files as the earlier SharedOS named them
    old = State(state.path.with_name("bundle-0123456789abcdef.json"))
    state.path.rename(old.path)
    state.kept_path.rename(old.kept_path)
    # and a first save under the new name killed before the state: its bytes wait there
    r9 = release(tmp_path, RULES_V1, signer, revision="r9", sequence=9)
    state.pending_path.write_bytes(r9)
    served["down"] = True
    upgraded = BundleManager(HttpSource(url), verifier(signer), state=State.default_for(url))
    started = upgraded.poll()
    assert started.status == "kept", started.detail
    assert started.current is not None and started.current.revision == "r5"
    assert not state.path.exists()  # nothing written: the release is recorded
    served.update(down=False, bundle=release(tmp_path, RULES_V1, signer, revision="r6", sequence=6))
    assert upgraded.poll().status == "loaded"
    assert json.loads(state.path.read_text())["revision"] == "r6"
    assert State.default_for(url).kept() == served["bundle"]


@pytest.mark.parametrize("upgraded", ["no", "from the name in clear", "recorded in clear"])
def test_a_rotated_token_in_the_bundle_urls_path_keeps_the_hosts_history(
    tmp_path: Path,
    signer: Signer,
    bundle_server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    upgraded: str,
) -> None:
    """``bundle = "https://h/t/${BUNDLE_TOKEN}/bundle.json"``: the default state file was
    named by the URL with the token in clear, while the release it records names the
    source with the token masked (``…/t/***/…``). A rotated token started a new state file,
    and the earlier one was not found under the new token either: the host took an older
    signed release (a rollback), and a start whose source failed had no copy (no policy).
    The name masks the token as the record does; a host upgraded from the name with the
    token in clear finds its history and its copy there (and so does one whose state a
    SharedOS before 21b9192 wrote, recording the token in clear in the origin)."""
    from sharedos.bundles import open_source
    from sharedos.bundles.state import BundleState as State
    from sharedos.bundles.state import default_state_path
    from sharedos.harness.hostconfig import load_host_config

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    base, served = bundle_server
    served["any_directory"] = True
    (tmp_path / "policy.pub").write_bytes(signer.public_pem())
    host = tmp_path / "host.toml"
    template = base.replace("/bundle.json", "/t/${BUNDLE_TOKEN}/bundle.json")
    host.write_text(f"[policy]\nbundle = '{template}'\nkeys = ['policy.pub']\n")

    def start(token: str) -> Any:
        monkeypatch.setenv("BUNDLE_TOKEN", token)
        config = load_host_config(host)
        source = open_source(config.bundle_location(), config.bundle_hidden())
        return BundleManager(source, verifier(signer), state=config.bundle_state()).poll()

    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r6", sequence=6), etag="")
    assert start("tok-first-1111").status == "loaded"
    if upgraded != "no":  # as an earlier SharedOS named its files: the token in clear
        state = load_host_config(host).bundle_state()
        in_clear = base.replace("/bundle.json", "/t/tok-first-1111/bundle.json")
        earlier = State(default_state_path(in_clear))
        state.path.rename(earlier.path)
        state.kept_path.rename(earlier.kept_path)
        if upgraded == "recorded in clear":
            recorded = json.loads(earlier.path.read_text())
            earlier.path.write_text(json.dumps({**recorded, "origin": in_clear}))
    served["bundle"] = release(tmp_path, RULES_V1, signer, revision="r5", sequence=5)
    # the first start after that upgrade is made with the token it recorded in clear
    older = start("tok-first-1111" if upgraded == "recorded in clear" else "tok-second-2222")
    assert older.status == "kept" and "a rollback" in older.detail, older
    assert older.current is not None and older.current.revision == "r6"
    served["down"] = True
    down = start("tok-third-3333")
    assert down.status == "kept" and down.current is not None, down.detail
    assert down.current.revision == "r6"
    assert "tok-first" not in down.detail + older.detail


def test_a_kept_copy_is_used_only_beside_this_sources_record(
    tmp_path: Path, signer: Signer
) -> None:
    """The kept copy is the policy of the source whose release the state file records.
    Two hosts of two sources sharing one ``[policy] state`` (a copied host file): a start
    of the one whose source fails put the other's policy in force, as "the last release
    this host enforced". A copy beside a state that records nothing (removed to go back
    on purpose, or a valid older release planted there) is no release this host keeps."""
    shared = BundleState(tmp_path / "state" / "bundle.json")
    team_a, team_b = tmp_path / "a", tmp_path / "b"
    publish(team_a, release(tmp_path, RULES_V2, signer, revision="a10", sequence=10))
    assert BundleManager(DirectorySource(team_a), verifier(signer), state=shared).poll().current
    # B's host starts: its own release is refused against A's record, and A's copy is not B's
    publish(team_b, release(tmp_path, RULES_V1, signer, revision="b3", sequence=3))
    other = BundleManager(DirectorySource(team_b), verifier(signer), state=shared).poll()
    assert other.current is None, other.current
    assert "records a release of another source" in other.detail, other.detail
    # with B's source gone too: still not A's policy
    for item in team_b.iterdir():
        item.unlink()
    outage = BundleManager(DirectorySource(team_b), verifier(signer), state=shared).poll()
    assert outage.current is None and "another source" in outage.detail, outage.detail
    # A's own host, its source failing, still starts on its release
    mine = BundleManager(DirectorySource(team_b.parent / "a"), verifier(signer), state=shared)
    for item in team_a.iterdir():
        item.unlink()
    assert mine.poll().status == "kept" and mine.current().revision == "a10"
    # the state removed, a validly signed older release planted as the copy: not used
    shared.path.unlink()
    shared.kept_path.write_bytes(release(tmp_path, RULES_V1, signer, revision="a2", sequence=2))
    planted = BundleManager(DirectorySource(team_a), verifier(signer), state=shared).poll()
    assert planted.current is None and "records no release" in planted.detail, planted.detail


def test_a_kept_copy_is_put_in_force_only_as_the_release_its_state_records(
    tmp_path: Path, signer: Signer
) -> None:
    """The copy was taken for this source's whenever it verified and was not older than
    the state's release: a validly signed bundle of another source (another team's,
    signed by the same key) put in the state directory with a higher sequence was put in
    force at a start whose source failed, as "the last release this host enforced", and
    written down as this source's release, so every later release of the source below
    that sequence was refused as a rollback."""
    state = BundleState(tmp_path / "state" / "bundle.json")
    team_a = tmp_path / "a"
    publish(team_a, release(tmp_path, RULES_V2, signer, revision="a10", sequence=10))
    assert BundleManager(DirectorySource(team_a), verifier(signer), state=state).poll().current
    recorded = state.path.read_bytes()
    # team B's release, signed by the same key: planted as the copy, the state untouched
    other = release(tmp_path, RULES_V1, signer, revision="b20", sequence=20)
    state.kept_path.write_bytes(other)
    for item in team_a.iterdir():
        item.unlink()
    started = BundleManager(DirectorySource(team_a), verifier(signer), state=state).poll()
    assert started.current is None, started.current
    assert "is not the release the state file beside it records" in started.detail, started
    assert state.path.read_bytes() == recorded  # nothing written down of it
    # A's source back with its next release: loaded, not refused as a rollback
    publish(team_a, release(tmp_path, RULES_V1, signer, revision="a11", sequence=11))
    back = BundleManager(DirectorySource(team_a), verifier(signer), state=state).poll()
    assert back.status == "loaded" and back.current is not None
    assert back.current.revision == "a11"


def test_a_host_killed_between_its_state_and_its_copy_still_starts_on_the_release_recorded(
    tmp_path: Path, signer: Signer
) -> None:
    """The copy was written before the state (a state never names a release whose copy
    is not there), so a kill between the two left the copy of r6 beside the record of r5,
    and a start with the source down had no copy of r5 any more: no policy, nothing ran.
    The bytes of r6 now wait beside the copy until the state records r6, then replace it:
    a kill anywhere leaves the release the state records on disk."""
    from dataclasses import replace

    from sharedos.bundles.source import Fetched
    from sharedos.bundles.state import Enforced

    state = BundleState(tmp_path / "state" / "bundle.json")
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    r5 = state.kept_path.read_bytes()
    newer = release(tmp_path, RULES_V1, signer, revision="r6", sequence=6)
    loaded = verifier(signer).verify(Fetched(newer, "", str(pub)))
    written = replace(Enforced.of(loaded), origin=state.load().origin)
    for item in pub.iterdir():
        item.unlink()  # the source down for every start below

    # killed after the new bytes were written, before the state: r5 recorded, r5 kept
    state.pending_path.write_bytes(newer)
    early = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert early.status == "kept" and early.current is not None
    assert early.current.revision == "r5"

    # (the bytes of a release the state does not record are removed by that start)
    assert not state.pending_path.exists()

    # killed after the state recorded r6, before its bytes replaced the copy of r5
    state.pending_path.write_bytes(newer)
    state.save(written, None)
    assert state.kept_path.read_bytes() == r5
    late = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert late.status == "kept" and late.current is not None, late.detail
    assert late.current.revision == "r6"

    # a whole save leaves one copy, the release recorded, and no bytes waiting
    state.save(written, newer)
    assert state.kept_path.read_bytes() == newer and not state.pending_path.exists()


def test_a_start_while_another_process_writes_its_release_waits_for_both_files(
    tmp_path: Path, signer: Signer
) -> None:
    """Another process of the host writes a new release: its copy first, then the state,
    both under the state's lock. A start whose source failed read the copy and the state
    without that lock: between the two writes it found a copy that is not the release
    recorded and started with no policy ('nothing runs') although the host had written
    a good release down a moment later. It now reads them under the lock, as a writer
    leaves them: the release just written is put in force."""
    from dataclasses import replace

    from sharedos.bundles.source import Fetched
    from sharedos.bundles.state import Enforced

    state = BundleState(tmp_path / "state" / "bundle.json")
    pub = tmp_path / "pub"
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    newer = release(tmp_path, RULES_V1, signer, revision="r6", sequence=6)
    loaded = verifier(signer).verify(Fetched(newer, "", str(pub)))
    written = replace(Enforced.of(loaded), origin=state.load().origin)
    for item in pub.iterdir():
        item.unlink()  # the source down for the start
    results: list[Any] = []
    starting = threading.Thread(
        target=lambda: results.append(
            BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
        )
    )
    with state.locked():  # the other process, between its two writes
        state.kept_path.write_bytes(newer)
        starting.start()
        starting.join(timeout=0.5)  # a start that does not wait is done by now
        state.save(written, None)
    starting.join()
    assert results[0].status == "kept", results[0]
    assert results[0].current.revision == "r6"


def test_a_run_started_from_the_kept_copy_says_so_on_its_records(
    tmp_path: Path, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start from the kept copy stamped its records as a start from the source did (the
    revision and hash only): the evidence could not tell the turns a host ran on the copy,
    its source failing, from those on a release it fetched. The policy ``sharedos run``
    gives its kernel says which, and each record's identity carries ``policyBundleKept``."""
    from sharedos.cli.run import _bundle_policy
    from sharedos.harness.hostconfig import load_host_config
    from sharedos.harness.runtime import McpHarnessRuntime, bundle_stamp
    from sharedos.identity import SystemIdentity

    host = _host_file(tmp_path, signer)
    publish(tmp_path / "pub", release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    monkeypatch.chdir(tmp_path)
    fetched = _bundle_policy(load_host_config(host))
    assert fetched.bundle_revision == "r5" and fetched.bundle_kept is False
    for item in (tmp_path / "pub").iterdir():
        item.unlink()
    kept = _bundle_policy(load_host_config(host))
    assert kept.bundle_revision == "r5" and kept.bundle_kept is True

    def record(policy: Any) -> dict[str, Any]:
        # as a turn of ``sharedos run`` is stamped from its kernel's policy
        runtime = McpHarnessRuntime(load_host_config(host).get("claude-code"))
        runtime._version = "1.0.0"  # not launched
        revision, kept = bundle_stamp(policy)
        made = runtime.identity(
            catalog_hash=None, policy_hash=None, policy_revision=revision, policy_kept=kept
        )
        assert SystemIdentity.model_validate(made.as_record()) == made
        return made.as_record()

    assert "policyBundleKept" not in record(fetched)  # records as they were
    assert record(kept)["policyBundleKept"] is True


def test_what_the_bundle_manager_logs_is_spelled_out(
    tmp_path: Path, signer: Signer, caplog: pytest.LogCaptureFixture
) -> None:
    """A host's log (what ``sharedos run`` prints above its own lines, which were spelled)
    named the state path, the kept copy's, and what a state file records as they were:
    an escape sequence there retitled or rewrote the operator's terminal."""
    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "st\x1b]0;owned\x07" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    with caplog.at_level(logging.WARNING, logger="sharedos.bundles"):
        assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
        for item in pub.iterdir():
            item.unlink()
        kept = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
        assert kept.status == "kept"
        # a state file someone wrote a revision into that holds a control sequence
        recorded = json.loads(state.path.read_text())
        state.path.write_text(json.dumps({**recorded, "sequence": 9, "revision": "r9\x1b[2J"}))
        publish(pub, release(tmp_path, RULES_V1, signer, revision="r6", sequence=6))
        refused = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
        assert refused.current is None
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 3 and "\\x1b]0;owned\\x07" in said[1], said
    assert "r9\\x1b[2J" in said[-1], said
    assert not any(ch in line for line in said for ch in "\x1b\x07"), said


#: a host starting (a new process) on a disk that takes no byte more: it polls once and
#: says what it put in force (argv: the source directory, the trusted key, [the state])
_FULL_DISK_START = """
import resource, sys
from pathlib import Path
from sharedos.bundles import BundleManager, BundleVerifier, DirectorySource
from sharedos.bundles.state import BundleState
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # every write: EFBIG (SIGXFSZ is ignored)
verifier = BundleVerifier([Path(sys.argv[2]).read_bytes()])
state = BundleState(sys.argv[3]) if len(sys.argv) > 3 else None
manager = BundleManager(DirectorySource(sys.argv[1]), verifier, state=state)
result = manager.poll()
print(result.status, result.current.revision if result.current else None, result.detail)
"""


def _start_on_a_full_disk(*args: Path) -> str:
    argv = [sys.executable, "-c", _FULL_DISK_START, *map(str, args)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_bundle_is_verified_on_a_full_disk(tmp_path: Path, signer: Signer) -> None:
    """The verifier wrote the fetched bytes to a temporary file to load them from it: with
    the temporary directory full (or read-only), every poll raised (``sharedos run``
    ended in a traceback). The bytes are verified in memory now."""
    pub, key = tmp_path / "pub", tmp_path / "policy.pub"
    key.write_bytes(signer.public_pem())
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert _start_on_a_full_disk(pub, key).startswith("loaded r5")


def test_a_host_on_a_full_disk_starts_with_the_release_it_already_recorded(
    tmp_path: Path, signer: Signer
) -> None:
    """Every ``sharedos run`` is a start, and wrote the whole bundle (its kept copy) and the
    state again, fsynced, even when they already recorded that very release; on a full disk
    (or a read-only state directory) that write failed, and the host refused the release it
    had enforced, from its source or its kept copy alike: no policy, nothing ran. Nothing
    needs writing then (a restart finds that release recorded), so nothing is written."""
    pub, key = tmp_path / "pub", tmp_path / "policy.pub"
    key.write_bytes(signer.public_pem())
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().status == (
        "loaded"
    )
    recorded = state.path.read_bytes()
    started = _start_on_a_full_disk(pub, key, state.path)
    assert started.startswith("loaded r5"), f"the release the state records was refused: {started}"
    (pub / "bundle.json").unlink()  # and while the source fails: from the kept copy
    started = _start_on_a_full_disk(pub, key, state.path)
    assert started.startswith("kept r5"), f"the copy the state records was refused: {started}"
    assert state.path.read_bytes() == recorded
    # a newer release cannot be remembered there: refused (a restart could not find it),
    # and the start runs on the release recorded, as for any release refused
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r6", sequence=6))
    assert _start_on_a_full_disk(pub, key, state.path).startswith("kept r5 cannot remember")


def _start_read_only(state_dir: Path, *args: Path) -> str:
    """``_start_on_a_full_disk``'s start with ``state_dir`` mounted read-only (bubblewrap)."""
    import shutil

    bwrap = shutil.which("bwrap")
    probe = [bwrap or "bwrap", "--dev-bind", "/", "/", "true"]
    if bwrap is None or subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("no working bwrap to mount the state directory read-only")
    ro = [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(state_dir), str(state_dir)]
    argv = [*ro, sys.executable, "-c", _FULL_DISK_START, *map(str, args)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("lock_file", ["kept", "never made"])
def test_a_host_whose_state_directory_is_read_only_starts_with_the_release_it_recorded(
    tmp_path: Path, signer: Signer, lock_file: str
) -> None:
    """The lock file beside the state was opened to write (and made when missing) by every
    start, even one with nothing to write: with the state directory read-only (mounted so
    in a container, provisioned by another user), the lock could not be taken, and the host
    refused the release its state records, from its source and from its kept copy alike
    (no policy, nothing ran), although the docs said it starts on it. ``flock`` needs no
    write access: the lock file is opened to read; a directory nobody ever locked (no lock
    file) cannot be written by this process either, and is only read."""
    pub, key = tmp_path / "pub", tmp_path / "policy.pub"
    key.write_bytes(signer.public_pem())
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    if lock_file == "never made":
        (state.path.parent / f".{state.path.name}.lock").unlink()
    recorded = state.path.read_bytes()
    started = _start_read_only(state.path.parent, pub, key, state.path)
    assert started.startswith("loaded r5"), f"the release the state records was refused: {started}"
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r6", sequence=6))
    started = _start_read_only(state.path.parent, pub, key, state.path)
    assert started.startswith("kept r5 cannot remember"), started  # r6 cannot be written down
    (pub / "bundle.json").unlink()
    started = _start_read_only(state.path.parent, pub, key, state.path)
    assert started.startswith("kept r5"), f"the copy the state records was refused: {started}"
    assert state.path.read_bytes() == recorded


def test_a_host_on_a_full_disk_starts_with_the_release_a_killed_writer_recorded(
    tmp_path: Path, signer: Signer
) -> None:
    """A writer killed after the state recorded r6, before r6's bytes replaced the copy of
    r5, left them waiting. A start with the source up serving r6 found the copy kept was
    not r6 and wrote r6's bytes again, where they waited: on a full disk that write failed,
    and the release the host had recorded, whose bytes were on disk, was refused (no
    policy). The bytes waiting are put in place first (a rename): nothing to write."""
    from dataclasses import replace

    from sharedos.bundles.source import Fetched
    from sharedos.bundles.state import Enforced

    pub, key = tmp_path / "pub", tmp_path / "policy.pub"
    key.write_bytes(signer.public_pem())
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r5", sequence=5))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    r6 = release(tmp_path, RULES_V1, signer, revision="r6", sequence=6)
    loaded = verifier(signer).verify(Fetched(r6, "", str(pub)))
    # as the killed writer left them: r6's bytes waiting, the state recording r6
    state.pending_path.write_bytes(r6)
    state.save(replace(Enforced.of(loaded), origin=state.load().origin), None)
    publish(pub, r6)
    started = _start_on_a_full_disk(pub, key, state.path)
    assert started.startswith("loaded r6"), f"the release the state records was refused: {started}"
    assert state.kept_path.read_bytes() == r6 and not state.pending_path.exists()


def test_a_start_on_the_kept_copy_overtaken_by_a_newer_release_takes_the_newer(
    tmp_path: Path, signer: Signer
) -> None:
    """A start whose source failed read the copy and the state (r6) under the lock, then
    verified the copy without it; another process of the host put r7 in force meanwhile
    (its own fetch succeeded). The start then refused its copy of r6 as a rollback of r7
    and started with no policy, although the copy of r7 was on disk. It reads them again:
    the release the state records now is put in force."""
    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r6", sequence=6))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    r7 = release(tmp_path, RULES_V1, signer, revision="r7", sequence=7)
    (pub / "bundle.json").unlink()  # the source down for the start

    class Overtaken(BundleVerifier):
        """The real verifier; the other process writes r7 while the start verifies."""

        overtaken = False

        def verify(self, fetched: Any) -> Any:
            if not self.overtaken:
                self.overtaken = True
                publish(pub, r7)  # the other process's fetch succeeds
                other = BundleManager(DirectorySource(pub), verifier(signer), state=state)
                assert other.poll().status == "loaded"
                (pub / "bundle.json").unlink()
            return super().verify(fetched)

    started = BundleManager(
        DirectorySource(pub), Overtaken([signer.public_pem()]), state=state
    ).poll()
    assert started.status == "kept", started.detail
    assert started.current is not None and started.current.revision == "r7"


@pytest.mark.parametrize("which", ["kept", "pending", "state"])
def test_a_pipe_held_open_beside_the_state_does_not_hang_a_start(
    tmp_path: Path, signer: Signer, which: str
) -> None:
    """Someone who can write the state directory made the kept copy, the bytes waiting
    beside it, or the state a named pipe and held its write end open without writing: a
    start whose source failed read it (in a blocking read) and waited for ever, under the
    state's lock for the waiting bytes. Only a regular file is read there now."""
    import os

    from tests.timing import bound

    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r6", sequence=6))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    (pub / "bundle.json").unlink()  # the source down for the start
    path = {"kept": state.kept_path, "pending": state.pending_path, "state": state.path}[which]
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR)  # a writer that never writes
    result: list[Any] = []
    try:
        manager = BundleManager(DirectorySource(pub), verifier(signer), state=state)
        thread = threading.Thread(target=lambda: result.append(manager.poll()), daemon=True)
        thread.start()
        thread.join(bound(10.0))
        hung = thread.is_alive()
    finally:
        os.close(writer)  # a hung read sees the end of the pipe and returns
    thread.join()
    assert not hung, f"a start waited on the pipe at {path}"
    if which == "kept":  # no copy of r6: no policy
        assert result[0].current is None
    elif which == "state":  # no state naming r6: no policy, and why
        assert result[0].current is None and "not a regular file" in result[0].detail
    else:
        assert result[0].status == "kept", result[0].detail
        assert result[0].current is not None and result[0].current.revision == "r6"


def test_a_start_on_the_kept_copy_overtaken_at_every_read_still_starts(
    tmp_path: Path, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process of the host put a newer release in force while the start verified
    its copy, at every read (a poller whose source publishes often, on a slow host): after
    three reads the start gave up and ran with no policy, although the copy of the
    release the state records was on disk all along. Its last read now holds the state's
    lock until the copy is written down: nothing overtakes it."""
    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r6", sequence=6))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    newer = [
        release(tmp_path, rules, signer, revision=f"r{n}", sequence=n)
        for n, rules in ((7, RULES_V1), (8, RULES_V2), (9, RULES_V1), (10, RULES_V2))
    ]
    (pub / "bundle.json").unlink()  # the source down for the start

    class Overtaken(BundleVerifier):
        """The real verifier; the other process writes a newer release at every verify
        it can (its lock wait cut short: the start's lock is held while it verifies)."""

        def verify(self, fetched: Any) -> Any:
            if newer:
                publish(pub, newer[0])
                other = BundleManager(DirectorySource(pub), verifier(signer), state=state)
                if other.poll().status == "loaded":
                    newer.pop(0)
                (pub / "bundle.json").unlink()
            return super().verify(fetched)

    from sharedos.bundles import state as state_module

    monkeypatch.setattr(state_module, "_LOCK_WAIT_S", 0.05)
    started = BundleManager(
        DirectorySource(pub), Overtaken([signer.public_pem()]), state=state
    ).poll()
    assert started.status == "kept", started.detail
    assert started.current is not None
    assert started.current.sequence == state.load().sequence


def test_a_start_that_cannot_write_a_newer_release_down_runs_on_the_one_recorded(
    tmp_path: Path, signer: Signer
) -> None:
    """A start whose source served a newer release (r7) it could not write down (a full
    disk, a read-only state directory, a directory put where its bytes wait) refused r7,
    rightly, and then ran with no policy, although the release the state records (r6) had
    its copy on disk: a start whose source was down ran on r6. It falls back to r6 as for
    any release refused, and says why r7 was not put in force."""
    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r6", sequence=6))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    state.pending_path.mkdir()
    (state.pending_path / "theirs").write_text("not SharedOS's")
    publish(pub, release(tmp_path, RULES_V1, signer, revision="r7", sequence=7))
    started = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert started.status == "kept" and "cannot remember" in started.detail
    assert started.current is not None and started.current.revision == "r6", started.detail
    assert (state.pending_path / "theirs").read_text() == "not SharedOS's"
    assert state.load().revision == "r6"


@pytest.mark.parametrize("planted", ["file", "link", "dangling"])
def test_what_a_start_settles_beside_the_copy_it_says_and_never_follows_a_link(
    tmp_path: Path, signer: Signer, caplog: pytest.LogCaptureFixture, planted: str
) -> None:
    """Bytes waiting beside the copy that are not the release recorded (an older release,
    a link to another file) were removed without a word, so an operator whose file went
    missing there had no line saying why, and a dangling link stayed for ever. Each is
    removed as a name (a link's target untouched) and the host's log says so."""
    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    r5 = release(tmp_path, RULES_V1, signer, revision="r5", sequence=5)
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r6", sequence=6))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    (pub / "bundle.json").unlink()  # the source down for the start
    victim = tmp_path / "victim.json"
    if planted == "file":
        state.pending_path.write_bytes(r5)
    elif planted == "link":
        victim.write_bytes(r5)
        state.pending_path.symlink_to(victim)
    else:
        state.pending_path.symlink_to(tmp_path / "nothing")
    caplog.set_level(logging.WARNING, logger="sharedos.bundles")
    started = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
    assert started.status == "kept" and started.current is not None
    assert started.current.revision == "r6"
    assert not state.pending_path.is_symlink() and not state.pending_path.exists()
    assert f"removed {state.pending_path}" in caplog.text
    if planted == "link":
        assert victim.read_bytes() == r5


_WRITER = """
import sys
from dataclasses import replace
from pathlib import Path
from sharedos.bundles import BundleVerifier
from sharedos.bundles.source import Fetched
from sharedos.bundles.state import BundleState, Enforced
verifier = BundleVerifier([Path(sys.argv[1]).read_bytes()])
state, origin = BundleState(sys.argv[2]), sys.argv[3]
print("ready", flush=True)
for name in sys.argv[4:]:
    data = Path(name).read_bytes()
    loaded = verifier.verify(Fetched(data, "", origin))
    with state.locked():
        state.save(replace(Enforced.of(loaded), origin=origin), data)
"""


@pytest.mark.stress
def test_starts_on_the_kept_copy_beside_a_process_writing_releases_all_the_while(
    tmp_path: Path, signer: Signer
) -> None:
    """Another process of the host writes a newer release down again and again while
    hosts start with their source down: every start runs on a release the state recorded
    (never with no policy), within the lock's wait."""
    pub, key = tmp_path / "pub", tmp_path / "policy.pub"
    key.write_bytes(signer.public_pem())
    state = BundleState(tmp_path / "state" / "bundle.json")
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r1", sequence=1))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    origin = state.load().origin
    (pub / "bundle.json").unlink()
    names = []
    for n in range(2, 42):
        path = tmp_path / f"r{n}.json"
        path.write_bytes(
            release(tmp_path, RULES_V1 if n % 2 else RULES_V2, signer, revision=f"r{n}", sequence=n)
        )
        names.append(str(path))
    argv = [sys.executable, "-c", _WRITER, str(key), str(state.path), origin, *names]
    writer = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        starts = 0
        while writer.poll() is None or starts < 5:
            started = BundleManager(DirectorySource(pub), verifier(signer), state=state).poll()
            assert started.status == "kept", started.detail
            assert started.current is not None and started.current.sequence >= 1
            starts += 1
        print(f"{starts} starts beside the writer")
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.parametrize("source", ["down", "newer"])
def test_no_bundle_is_verified_again_under_the_states_lock(
    tmp_path: Path, signer: Signer, source: str
) -> None:
    """Bytes left waiting beside the copy (a writer killed midway) made every start verify
    the kept copy again while holding the state's lock: a bundle of 64 MiB takes some 10 s
    to verify here, and every other process of the host waits 5 s for that lock, then
    refuses its release and starts with no policy ("cannot lock … another process holds
    …"). A copy is verified before the lock is taken; under it, bytes verified already are
    not verified again."""
    from sharedos.atomicfile import take_lock
    from sharedos.bundles.state import lock_path_of

    pub = tmp_path / "pub"
    state = BundleState(tmp_path / "state" / "bundle.json")
    r5 = release(tmp_path, RULES_V1, signer, revision="r5", sequence=5)
    publish(pub, release(tmp_path, RULES_V2, signer, revision="r6", sequence=6))
    assert BundleManager(DirectorySource(pub), verifier(signer), state=state).poll().current
    state.pending_path.write_bytes(r5)  # left by a writer killed before the state
    if source == "down":
        (pub / "bundle.json").unlink()
    else:
        publish(pub, release(tmp_path, RULES_V1, signer, revision="r7", sequence=7))
    under_lock: list[str] = []

    class Watched(BundleVerifier):
        """The real verifier, noting each bundle it verifies while the state is locked."""

        def verify(self, fetched: Any) -> Any:
            try:
                os.close(take_lock(lock_path_of(state.path), wait_s=0))
            except TimeoutError:
                under_lock.append(fetched.origin)
            return super().verify(fetched)

    started = BundleManager(DirectorySource(pub), Watched([signer.public_pem()]), state=state)
    result = started.poll()
    assert result.current is not None
    assert result.current.revision == ("r6" if source == "down" else "r7"), result.detail
    assert not state.pending_path.exists()
    assert under_lock == []


@pytest.mark.parametrize("first", ["staging then prod", "prod down beside staging"])
@pytest.mark.parametrize(
    "where",
    [
        "/${DEPLOY_ENV}/t/${BUNDLE_TOKEN}/bundle.json",
        # in the query (bundlekeep7): every query value was masked in the state's name,
        # so staging and prod shared one history there all the same
        "/bundle.json?env=${DEPLOY_ENV}&token=${BUNDLE_TOKEN}",
        "/t/${BUNDLE_TOKEN}/bundle.json?tenant=${DEPLOY_ENV}&format=json",
    ],
)
def test_a_variable_naming_which_bundle_keeps_each_bundles_own_history(
    tmp_path: Path,
    signer: Signer,
    bundle_server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    first: str,
    where: str,
) -> None:
    """``bundle = "https://h/${DEPLOY_ENV}/bundle.json"``, one signing key for both: the
    value is masked in messages, as any host variable a path is built from, and since
    the state file was named by the URL so masked, staging and prod shared one history. A
    prod start after a staging one refused prod's release as a rollback (sequences are
    signing times by default, and staging is signed more often) and put staging's kept
    copy in force on the prod host; a prod start whose source failed took staging's copy
    as "the last release this host enforced". Only a variable named as a credential (a
    rotated ``${BUNDLE_TOKEN}``) is masked in the state's name; another names the bundle."""
    from sharedos.bundles import open_source
    from sharedos.harness.hostconfig import load_host_config

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    base, served = bundle_server
    served["any_directory"] = True
    (tmp_path / "policy.pub").write_bytes(signer.public_pem())
    host = tmp_path / "host.toml"
    template = base.replace("/bundle.json", where)
    host.write_text(f"[policy]\nbundle = '{template}'\nkeys = ['policy.pub']\n")

    def start(env: str, token: str = "tok-1111") -> Any:
        monkeypatch.setenv("DEPLOY_ENV", env)
        monkeypatch.setenv("BUNDLE_TOKEN", token)
        config = load_host_config(host)
        source = open_source(config.bundle_location(), config.bundle_hidden())
        # the state a start uses is the one a sandbox is kept from (``state_paths``)
        assert str(config.bundle_state().path) == config.bundle_state_path()
        return BundleManager(source, verifier(signer), state=config.bundle_state()).poll()

    staging = release(tmp_path, RULES_V1, signer, revision="staging-9", sequence=9)
    prod = release(tmp_path, RULES_V2, signer, revision="prod-5", sequence=5)
    served.update(bundle=staging, etag="")
    assert start("staging").status == "loaded"
    if first == "prod down beside staging":
        served["down"] = True
        down = start("production")
        assert down.current is None, f"prod runs staging's policy: {down.current.revision}"
        assert down.status == "unreachable", down
        return
    served.update(bundle=prod)
    on_prod = start("production")
    assert on_prod.status == "loaded", on_prod.detail
    assert on_prod.current is not None and on_prod.current.revision == "prod-5"
    # each keeps its own history: a rotated token is still the same bundle
    served["down"] = True
    assert start("production", "tok-2222").current.revision == "prod-5"  # type: ignore[union-attr]
    assert start("staging", "tok-3333").current.revision == "staging-9"  # type: ignore[union-attr]


_FULL_DISK_URL_START = """
import resource, sys
from pathlib import Path
from sharedos.bundles import BundleManager, BundleVerifier, HttpSource
from sharedos.bundles.state import BundleState
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # every write: EFBIG (SIGXFSZ is ignored)
url, key, state, token = sys.argv[1:]
source = HttpSource(url, hidden=[token])
state = BundleState(state, hidden=[token])
manager = BundleManager(source, BundleVerifier([Path(key).read_bytes()]), state=state)
result = manager.poll()
print(result.status, result.current.revision if result.current else None, result.detail)
"""


def test_a_host_on_a_full_disk_starts_on_a_release_recorded_with_the_token_in_clear(
    tmp_path: Path, signer: Signer, bundle_server: tuple[str, dict[str, Any]]
) -> None:
    """A state file a SharedOS before 21b9192 wrote records the URL with its path's
    ``${BUNDLE_TOKEN}`` in clear. It is this source's release (compared with the token
    masked on both sides), but the check that it is already written down compared the
    origins with the token masked on neither: on a full disk (or a read-only state
    directory) the host tried to write again what was recorded, failed, and refused the
    release from its source and from its kept copy alike: no policy, nothing ran."""
    base, served = bundle_server
    served["any_directory"] = True
    token = "tok-in-path-5555"
    url = base.replace("/bundle.json", f"/t/{token}/bundle.json")
    key = tmp_path / "policy.pub"
    key.write_bytes(signer.public_pem())
    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r5", sequence=5), etag="")
    state_path = tmp_path / "state" / "bundle.json"
    state = BundleState(state_path)
    assert BundleManager(HttpSource(url), verifier(signer), state=state).poll().current
    recorded = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**recorded, "origin": url}))  # as written before 21b9192
    argv = [sys.executable, "-c", _FULL_DISK_URL_START, url, str(key), str(state_path), token]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("loaded r5"), done.stdout
    served["down"] = True
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("kept r5"), done.stdout
    assert token not in done.stdout + done.stderr
    # where it can be written, the record is written with the token masked
    from sharedos.bundles.state import BundleState as State

    served["down"] = False
    masked = State(state_path, hidden=[token])
    source = HttpSource(url, hidden=[token])
    assert BundleManager(source, verifier(signer), state=masked).poll().status == "loaded"
    assert token not in state_path.read_text()


@pytest.mark.parametrize(
    "edited", ["HTTP://LOCALHOST:{port}/bundle.json", "http://LocalHost:{port}/bundle.json"]
)
def test_a_bundle_url_edited_only_in_case_keeps_the_hosts_history(
    tmp_path: Path,
    signer: Signer,
    bundle_server: tuple[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    edited: str,
) -> None:
    """The host file's bundle URL rewritten in another case (or with its scheme's default
    port) names the same server, and the same source: the state recorded under the name
    the URL had is found, and an older signed release is still a rollback. Before, the
    recorded origin was compared as written: another source's, and the host took the older
    release as if it had enforced none."""
    from sharedos.bundles.state import BundleState as State
    from sharedos.bundles.state import of_source

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    base, served = bundle_server
    port = base.split(":")[2].split("/")[0]
    first = f"http://localhost:{port}/bundle.json"

    def start(url: str) -> Any:
        return BundleManager(HttpSource(url), verifier(signer), state=State.default_for(url))

    served.update(bundle=release(tmp_path, RULES_V2, signer, revision="r5", sequence=5), etag="")
    assert start(first).poll().status == "loaded"
    served.update(bundle=release(tmp_path, RULES_V1, signer, revision="r3", sequence=3), etag="")
    result = start(edited.format(port=port)).poll()
    assert result.status == "kept" and "a rollback" in result.detail, result.detail
    assert result.current is not None and result.current.revision == "r5"
    # and a scheme's default port, which no server here listens on
    assert of_source("https://Bundles.example.com:443/b.json", "https://bundles.example.com/b.json")
    assert of_source("http://[::1]:80/b.json?t=***", "HTTP://[::1]/b.json?t=***")
    assert not of_source("https://h.example:8443/b.json", "https://h.example/b.json")
    assert not of_source("http://h.example/b.json", "https://h.example/b.json")
    assert not of_source("https://h.example/B.json", "https://h.example/b.json")

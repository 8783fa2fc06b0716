"""Bundles you can trust: verified hash, one hash however paths are spelled, Ed25519 signatures."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import BundleError, compile_paths, load_bundle
from sharedos.policy.bundle import sign_bundle, verify_bundle
from sharedos.policy.signing import (
    SigningKeyError,
    key_id,
    load_private_key,
    load_public_key,
    write_keypair,
)
from tests.mounts import MountFn
from tests.mounts import fill as fill_disk

CTX = {"principal": "bob", "roles": [], "tenant": "default", "attributes": {}}


@pytest.fixture
def bundle(repo_root: Path, tmp_path: Path) -> Path:
    out = tmp_path / "policy.bundle.json"
    compile_paths([repo_root / "rules", repo_root / "policy"]).save_bundle(out)
    return out


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    return write_keypair(tmp_path / "signer.key")


def test_an_edited_bundle_is_refused(bundle: Path) -> None:
    doc = json.loads(bundle.read_text())
    effects = doc["program"]["rules"]["effect"]
    flipped = effects.index(1)  # a forbid...
    effects[flipped] = 0  # ...made a permit
    bundle.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="does not match its bundle_hash"):
        load_bundle(bundle)


def test_the_hash_does_not_depend_on_how_paths_are_spelled(repo_root: Path, tmp_path: Path) -> None:
    gh = tmp_path / "gh"
    shutil.copytree(repo_root / "rules", gh)
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        spelled = {compile_paths([p]).bundle_hash for p in ("gh", "./gh", str(gh), "gh/../gh")}
    finally:
        os.chdir(cwd)
    assert len(spelled) == 1
    # and the CLI's compile agrees with the API (what the demo uses)
    out = tmp_path / "b.json"
    result = CliRunner().invoke(main, ["compile", str(gh), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.split()[0] in spelled


def test_the_demo_and_compile_agree_on_the_shipped_files(repo_root: Path, tmp_path: Path) -> None:
    from sharedos.resources import shipped_dir

    demo = compile_paths([shipped_dir("rules"), shipped_dir("policy")]).bundle_hash
    cwd = os.getcwd()
    try:
        os.chdir(repo_root)
        result = CliRunner().invoke(main, ["compile", "rules", "policy", "-o", str(tmp_path / "b")])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0 and result.stdout.split()[0] == demo


def test_a_declared_root_names_files_relative_to_it(repo_root: Path) -> None:
    policy = compile_paths([repo_root / "rules" / "files.sos"], root=repo_root)
    assert set(policy.sources) == {"rules/files.sos"}
    assert {r.file for r in policy.rules} == {"rules/files.sos"}


def test_a_signed_bundle_loads_only_with_a_trusted_key(
    bundle: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    private, public = keys
    assert oct(private.stat().st_mode & 0o777) == "0o600"
    signer = sign_bundle(bundle, load_private_key(private))
    assert signer == key_id(load_public_key(public))
    trusted = [load_public_key(public)]
    policy = load_bundle(bundle, trusted_keys=trusted)
    assert policy.decide("files.read", {"path": "/public/a"}, CTX).allowed
    assert verify_bundle(bundle, trusted) == signer
    _other_private, other_public = write_keypair(tmp_path / "other.key")
    with pytest.raises(BundleError, match="not signed by any trusted key"):
        load_bundle(bundle, trusted_keys=[load_public_key(other_public)])
    with pytest.raises(BundleError, match="not signed by any trusted key"):
        load_bundle(bundle, trusted_keys=[])
    assert load_bundle(bundle).bundle_hash == policy.bundle_hash  # no keys: not required


def test_an_unsigned_bundle_is_refused_by_a_host_that_requires_signatures(
    bundle: Path, keys: tuple[Path, Path]
) -> None:
    with pytest.raises(BundleError, match="is not signed"):
        load_bundle(bundle, trusted_keys=[load_public_key(keys[1])])


def test_a_signature_does_not_survive_a_consistent_edit(
    bundle: Path, keys: tuple[Path, Path]
) -> None:
    from sharedos.policy.policyset import program_hash

    private, public = keys
    sign_bundle(bundle, load_private_key(private))
    doc = json.loads(bundle.read_text())
    effects = doc["program"]["rules"]["effect"]
    effects[effects.index(1)] = 0  # a forbid made a permit
    doc["bundle_hash"] = program_hash(doc["program"])  # the attacker fixes the hash too
    bundle.write_text(json.dumps(doc))
    load_bundle(bundle)  # consistent, so an unverified load accepts it ...
    with pytest.raises(BundleError, match="not signed by any trusted key"):
        load_bundle(bundle, trusted_keys=[load_public_key(public)])  # ... a signed host does not


@pytest.mark.parametrize(
    ("release", "what"),
    [
        ({"sequence": "7"}, "malformed sequence"),
        ({"sequence": 0}, "malformed sequence"),
        ({"sequence": 2.0}, "malformed sequence"),
        ({"revision": "  "}, "malformed revision"),
        ({"revision": ["r1"]}, "malformed revision"),
        # printed by `bundle verify`, `sharedos run` and a host's log: it would rewrite them
        ({"revision": "r7\r\x1b[2Kok: revision r8\x1b]0;t\x07"}, "malformed revision"),
        ({"revision": "r7\u202e8r"}, "malformed revision"),
        ({"revision": "r7\u200b"}, "malformed revision"),
    ],
)
def test_sign_and_verify_refuse_a_release_every_host_refuses(
    bundle: Path, keys: tuple[Path, Path], release: dict[str, object], what: str
) -> None:
    """A release field hand-edited into the envelope: `sign` does not sign it and `verify`
    does not pass it, since every host (BundleVerifier) refuses it as malformed."""
    from sharedos.bundles import BundleRejected, BundleVerifier
    from sharedos.bundles.source import Fetched

    private, public = keys
    doc = json.loads(bundle.read_text())
    doc.update(release)
    bundle.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match=what):
        sign_bundle(bundle, load_private_key(private))
    # signed anyway (by a signer that does not check): verify says what a host says
    from sharedos.policy.bundle import write_document
    from sharedos.policy.signing import signature_entry

    doc["signatures"] = [signature_entry(doc, load_private_key(private), "2026-01-01T00:00:00Z")]
    write_document(doc, bundle)
    with pytest.raises(BundleError, match=what):
        verify_bundle(bundle, [load_public_key(public)])
    fetched = Fetched(data=bundle.read_bytes(), tag="t", origin=str(bundle))
    with pytest.raises(BundleRejected, match=what):
        BundleVerifier([public]).verify(fetched)
    # the signer names the release itself: signed, and every host takes it
    doc.pop("signatures")
    write_document(doc, bundle)
    sign_bundle(bundle, load_private_key(private), revision="r1", sequence=3)
    assert verify_bundle(bundle, [load_public_key(public)]) == key_id(load_private_key(private))
    assert (
        BundleVerifier([public])
        .verify(Fetched(data=bundle.read_bytes(), tag="t", origin=str(bundle)))
        .sequence
        == 3
    )


def test_sign_and_verify_refuse_a_program_every_host_refuses_to_run(
    bundle: Path, keys: tuple[Path, Path]
) -> None:
    """A program that matches its hash but that no host can run (hand-edited, its hash
    recomputed; a publisher's own tooling): `sign` does not sign it and `verify` does not
    say it is fine, since every host's load refuses it as malformed."""
    from sharedos.policy.bundle import write_document
    from sharedos.policy.policyset import program_hash
    from sharedos.policy.signing import signature_entry

    private, public = keys
    doc = json.loads(bundle.read_text())
    doc["program"]["index"] = "not a mapping"
    doc["bundle_hash"] = program_hash(doc["program"])
    write_document(doc, bundle)
    with pytest.raises(BundleError, match="malformed"):
        sign_bundle(bundle, load_private_key(private), revision="r1", sequence=1)
    # signed anyway (by a signer that does not check): verify says what a host says
    doc.update(revision="r1", sequence=1)
    doc["signatures"] = [signature_entry(doc, load_private_key(private), "2026-01-01T00:00:00Z")]
    write_document(doc, bundle)
    with pytest.raises(BundleError, match="malformed"):
        load_bundle(bundle, trusted_keys=[load_public_key(public)])
    with pytest.raises(BundleError, match="malformed"):
        verify_bundle(bundle, [load_public_key(public)])
    result = CliRunner().invoke(main, ["verify", str(bundle), "--pubkey", str(public)])
    assert result.exit_code == 1 and "malformed" in result.stderr
    assert "ok:" not in result.stdout


def test_garbage_signatures_verify_nothing(bundle: Path, keys: tuple[Path, Path]) -> None:
    doc = json.loads(bundle.read_text())
    kid = key_id(load_public_key(keys[1]))
    doc["signatures"] = [
        "junk",
        {"alg": "ed25519", "key_id": kid, "signature": "not base64!"},
        {"alg": "ed25519", "key_id": kid, "signature": "AAAA"},
        {"alg": "rsa", "key_id": kid, "signature": "AAAA"},
    ]
    bundle.write_text(json.dumps(doc))
    with pytest.raises(BundleError):
        load_bundle(bundle, trusted_keys=[load_public_key(keys[1])])


def test_bad_key_files_are_clear_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    with pytest.raises(SigningKeyError, match="not a PEM public key"):
        load_public_key(junk)
    with pytest.raises(SigningKeyError, match="cannot read"):
        load_private_key(tmp_path / "absent")
    write_keypair(tmp_path / "k")
    with pytest.raises(FileExistsError):
        write_keypair(tmp_path / "k")  # never overwrites a key


def test_a_public_key_file_holding_a_private_key_or_more_keys_is_refused(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """The loader takes a file's first PUBLIC KEY block and ignores the rest: a .pub with the
    private key appended was trusted (the signing key on every host), and a file of two
    public keys trusted only the first. Both are refused, with why, wherever keys are read."""
    from sharedos.bundles import BundleVerifier

    private, public = keys
    other = write_keypair(tmp_path / "other.key")[1]
    leaked = tmp_path / "leaked.pub"
    leaked.write_bytes(public.read_bytes() + private.read_bytes())
    both = tmp_path / "both.pub"
    both.write_bytes(public.read_bytes() + other.read_bytes())
    for path, why in ((leaked, "holds a private key"), (both, "holds 2 PEM blocks")):
        with pytest.raises(SigningKeyError, match=why):
            load_public_key(path)
        with pytest.raises(ValueError, match=why):
            BundleVerifier([path])
        with pytest.raises(ValueError, match=why):
            BundleVerifier([path.read_bytes()])
        result = CliRunner().invoke(
            main, ["verify", str(tmp_path / "absent.json"), "--pubkey", str(path)]
        )
        assert result.exit_code == 2 and why in result.output
    load_public_key(public)  # one public key: as before


def test_a_trusted_key_file_another_user_can_change_is_refused(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    """Whoever can write the file a host trusts a key from can make it trust any key: a
    ``.pub`` left world- or group-writable, one owned by another user, or a link to such a
    file (in ``/tmp``, say) is refused, with why, wherever bundle keys are read."""
    from sharedos.bundles import BundleVerifier

    _private, public = keys
    writable = tmp_path / "writable.pub"
    writable.write_bytes(public.read_bytes())
    theirs = tmp_path / "theirs.pub"
    theirs.write_bytes(public.read_bytes())
    os.chown(theirs, 65534, 65534)  # nobody's
    linked = tmp_path / "linked.pub"
    planted = tmp_path / "planted.pub"
    planted.write_bytes(public.read_bytes())
    planted.chmod(0o666)
    linked.symlink_to(planted)
    for path, mode, why in (
        (writable, 0o666, "other users can write (mode 0666)"),
        (writable, 0o664, "other users can write (mode 0664)"),
        (theirs, 0o644, "owned by another user (uid 65534)"),
        (linked, None, "other users can write (mode 0666)"),
    ):
        if mode is not None:
            path.chmod(mode)
        with pytest.raises(SigningKeyError, match=re.escape(why)):
            load_public_key(path)
        with pytest.raises(ValueError, match=re.escape(why)):
            BundleVerifier([path])
        result = CliRunner().invoke(
            main, ["verify", str(tmp_path / "absent.json"), "--pubkey", str(path)]
        )
        assert result.exit_code == 2 and why in result.output, result.output
    writable.chmod(0o644)
    load_public_key(writable)  # this user's (or root's), not writable by others: as before


def test_keygen_never_overwrites_a_trusted_public_key(tmp_path: Path) -> None:
    """Hosts trust ``OUT.pub`` by name: a keygen whose private key was moved away must not
    write a new public key over it (nor through a link planted at its name)."""
    run = CliRunner().invoke
    key = tmp_path / "ops.key"
    pub = tmp_path / "ops.key.pub"
    pub.write_text("the key every host trusts\n")
    refused = run(main, ["keygen", "-o", str(key)])
    assert refused.exit_code == 2 and "ops.key.pub exists" in refused.stderr
    assert pub.read_text() == "the key every host trusts\n"
    assert not key.exists()  # never half a pair
    pub.unlink()
    target = tmp_path / "elsewhere.pub"
    os.symlink(target, pub)
    assert run(main, ["keygen", "-o", str(key)]).exit_code == 2
    assert not target.exists() and not key.exists()


def test_cli_keygen_sign_verify_and_trusted_loads(bundle: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    key = tmp_path / "ops.key"
    assert run(main, ["keygen", "-o", str(key)]).exit_code == 0
    assert run(main, ["keygen", "-o", str(key)]).exit_code == 2  # refuses to overwrite
    pub = f"{key}.pub"
    unsigned = run(main, ["verify", str(bundle), "--pubkey", pub])
    assert unsigned.exit_code == 1 and "no valid signature" in unsigned.stderr
    assert run(main, ["sign", str(bundle), "--key", str(key)]).exit_code == 0
    ok = run(main, ["verify", str(bundle), "--pubkey", pub])
    assert ok.exit_code == 0 and ok.stdout.startswith("ok:")
    ev = run(
        main,
        ["eval", str(bundle), "--trusted-key", pub],
        input='{"tool": "files.read", "args": {"path": "/public/a"}}\n',
    )
    assert ev.exit_code == 0 and '"allow"' in ev.stdout
    run(main, ["keygen", "-o", str(tmp_path / "other.key")])
    refused = run(
        main,
        [
            "explain",
            str(bundle),
            "--tool",
            "files.read",
            "--trusted-key",
            f"{tmp_path / 'other.key'}.pub",
        ],
    )
    assert refused.exit_code == 1 and "not signed by any trusted key" in refused.stderr


def test_compile_counts_lint_warnings_and_prints_them_with_the_flag(tmp_path: Path) -> None:
    src = tmp_path / "p.sos"
    src.write_text(
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/a/**" when true\n'
    )
    result = CliRunner().invoke(main, ["compile", str(src), "-o", str(tmp_path / "b.json")])
    assert result.exit_code == 0
    assert "1 warning (" in result.stderr and "warning[SOS508]" not in result.stderr
    result = CliRunner().invoke(
        main, ["compile", str(src), "-o", str(tmp_path / "b.json"), "--warnings"]
    )
    assert result.exit_code == 0
    assert "warning[SOS508]" in result.stderr


def test_keygen_on_a_full_disk_leaves_no_half_pair_and_the_next_keygen_works(
    tmpfs: MountFn,
) -> None:
    """A disk with room for the private key but not the public one left OUT beside an
    empty OUT.pub, after 'cannot write': the next keygen refused 'OUT exists' (a key no
    host could trust, and no way on but deleting it by hand)."""
    disk = tmpfs("64k")
    filler = fill_disk(disk)
    os.truncate(filler, filler.stat().st_size - 4096)  # one page: one key file fits
    out = disk / "ops.key"
    result = CliRunner().invoke(main, ["keygen", "-o", str(out)])
    assert result.exit_code == 2 and "No space left on device" in result.output
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # neither key, no stray file
    filler.unlink()
    result = CliRunner().invoke(main, ["keygen", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert load_public_key(disk / "ops.key.pub") is not None
    assert (out.stat().st_mode & 0o777) == 0o600


def test_keygen_names_the_key_that_exists(tmp_path: Path) -> None:
    (tmp_path / "k.pub").write_text("someone's trusted key\n")
    result = CliRunner().invoke(main, ["keygen", "-o", str(tmp_path / "k")])
    assert result.exit_code == 2 and "k.pub exists" in result.output
    assert not (tmp_path / "k").exists()
    assert (tmp_path / "k.pub").read_text() == "someone's trusted key\n"

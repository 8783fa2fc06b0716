"""A release co-signed (or re-signed) without a declared revision is the same release."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization

from sharedos.bundles import BundleManager, BundleVerifier, DirectorySource
from sharedos.bundles.state import BundleState
from sharedos.evidence.chain import Signer
from sharedos.policy import compile_sources
from sharedos.policy.bundle import save_bundle, sign_bundle
from tests.fleet.test_bundles import RULES_V1, publish


def _key(signer: Signer):  # type: ignore[no-untyped-def]
    return serialization.load_pem_private_key(signer.private_pem(), password=None)


def test_a_release_co_signed_by_a_second_trusted_key_is_not_a_relabel(tmp_path: Path) -> None:
    """The same release (program, sequence; no revision declared) signed by a second
    trusted key is the release the host enforces, not 'a relabelled release'."""
    first, second = Signer.generate(), Signer.generate()
    path = tmp_path / "bundle.json"
    save_bundle(compile_sources([("files.sos", RULES_V1)]), path)
    sign_bundle(path, _key(first), sequence=5)  # no --revision: the usual `sharedos-policy sign`
    pub = tmp_path / "pub"
    publish(pub, path.read_bytes())
    verifier = BundleVerifier([first.public_pem(), second.public_pem()])
    state = BundleState(tmp_path / "state.json")
    manager = BundleManager(DirectorySource(pub), verifier, state=state)
    assert manager.poll().status == "loaded"
    # the second publisher adds their signature; the release is unchanged (sign_bundle keeps
    # the first signature: "others are kept while the release they signed is unchanged")
    sign_bundle(path, _key(second))
    publish(pub, path.read_bytes())
    result = manager.poll()
    assert result.status != "refused", result.detail
    # and a restarted host (state on disk) takes it too
    restarted = BundleManager(DirectorySource(pub), verifier, state=state)
    result = restarted.poll()
    assert result.status == "loaded", result.detail

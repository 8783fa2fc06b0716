"""Bundles distributed and verified: directory and HTTP sources, ETag polling, signatures, content hashes,
refusal keeping the last good bundle, and new bundles applying to new turns only (real bridge, real SDK client).
"""

from __future__ import annotations

import http.server
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sharedos.bundles import (
    BundleManager,
    BundleVerifier,
    DirectorySource,
    HttpSource,
)
from sharedos.bundles.source import SourceError
from sharedos.evidence.chain import Signer
from sharedos.policy import compile_sources
from sharedos.policy.bundle import save_bundle

pytestmark = pytest.mark.anyio

RULES_V1 = """
namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
permit read on "/public/**"
permit read, write on "/home/{context.principal}/**"
toolpolicy fleet { mode open managed files.* }
"""
# revision 2 takes /public away
RULES_V2 = RULES_V1.replace('permit read on "/public/**"', 'forbid read on "/public/**"')


def bundle_bytes(tmp: Path, rules: str, revision: str | None = None) -> bytes:
    policy = compile_sources([("files.sos", rules)])
    path = tmp / f"b-{abs(hash((rules, revision)))}.json"
    save_bundle(policy, path)
    data = path.read_bytes()
    if revision is not None:
        doc = json.loads(data)
        doc["revision"] = revision
        data = json.dumps(doc, separators=(",", ":")).encode()
    return data


def publish(directory: Path, data: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "bundle.json").write_bytes(data)


def signed(tmp: Path, data: bytes, private_pem: bytes) -> bytes:
    """``data`` with a signature by the key added (``sharedos-policy sign``'s own function)."""
    from cryptography.hazmat.primitives import serialization

    from sharedos.policy.bundle import sign_bundle

    path = tmp / f"to-sign-{abs(hash((data, private_pem)))}.json"
    path.write_bytes(data)
    key = serialization.load_pem_private_key(private_pem, password=None)
    sign_bundle(path, key)  # type: ignore[arg-type]
    return path.read_bytes()


@pytest.fixture
def keys(tmp_path: Path) -> tuple[bytes, bytes]:
    signer = Signer.generate()
    return signer.private_pem(), signer.public_pem()


def test_a_directory_bundle_is_loaded_and_polled(tmp_path: Path) -> None:
    pub = tmp_path / "pub"
    publish(pub, bundle_bytes(tmp_path, RULES_V1, "r1"))
    manager = BundleManager(DirectorySource(pub))
    first = manager.poll()
    assert first.status == "loaded" and first.current is not None
    assert first.current.revision == "r1"
    assert manager.poll().status == "unchanged"
    publish(pub, bundle_bytes(tmp_path, RULES_V2, "r2"))
    second = manager.poll()
    assert second.status == "loaded" and manager.current().revision == "r2"
    assert manager.current().bundle_hash != first.current.bundle_hash


def test_a_tampered_program_is_refused_and_the_last_good_bundle_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pub = tmp_path / "pub"
    publish(pub, bundle_bytes(tmp_path, RULES_V1, "r1"))
    manager = BundleManager(DirectorySource(pub))
    manager.poll()
    good = manager.current()
    # someone edits the compiled program but leaves the declared hash: the content check refuses it
    doc = json.loads(bundle_bytes(tmp_path, RULES_V2, "r2"))
    doc["bundle_hash"] = good.bundle_hash
    publish(pub, json.dumps(doc).encode())
    with caplog.at_level(logging.ERROR, logger="sharedos.bundles"):
        result = manager.poll()
    assert result.status == "refused" and "does not match its bundle_hash" in result.detail
    assert manager.current() is good
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "refused a policy bundle" in line and "keeping revision r1" in line
    # the same refused bundle is not re-verified (nor re-reported) on every poll
    caplog.clear()
    assert manager.poll().status == "refused"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # garbage is refused too
    publish(pub, b"{not json")
    assert manager.poll().status == "refused" and manager.current() is good


def test_no_bundle_in_force_means_no_policy(tmp_path: Path) -> None:
    manager = BundleManager(DirectorySource(tmp_path / "missing"))
    assert manager.poll().status == "unreachable"
    with pytest.raises(RuntimeError, match="no verified policy bundle"):
        manager.current()


def test_with_a_key_only_signed_bundles_are_accepted(
    tmp_path: Path, keys: tuple[bytes, bytes]
) -> None:
    private, public = keys
    pub = tmp_path / "pub"
    data = bundle_bytes(tmp_path, RULES_V1, "r1")
    manager = BundleManager(DirectorySource(pub), BundleVerifier([public]))
    publish(pub, data)  # unsigned
    refused = manager.poll()
    assert refused.status == "refused" and "is not signed" in refused.detail
    other = Signer.generate().private_pem()
    publish(pub, signed(tmp_path, data, other))  # signed by someone else
    assert "not signed by any trusted key" in manager.poll().detail
    publish(pub, signed(tmp_path, data, private))
    loaded = manager.poll()
    assert loaded.status == "loaded" and loaded.current is not None
    assert loaded.current.signed_by == Signer.from_pem(private).key_id
    # a signed bundle whose program was changed afterwards is refused
    doc = json.loads(signed(tmp_path, data, private))
    doc["program"] = json.loads(bundle_bytes(tmp_path, RULES_V2, "r2"))["program"]
    publish(pub, json.dumps(doc).encode())
    assert manager.poll().status == "refused" and manager.current().revision == "r1"
    # and one whose signature was moved onto another bundle's envelope is refused too
    v2 = json.loads(bundle_bytes(tmp_path, RULES_V2, "r2"))
    v2["signatures"] = json.loads(signed(tmp_path, data, private))["signatures"]
    publish(pub, json.dumps(v2).encode())
    assert "not signed by any trusted key" in manager.poll().detail


class _BundleServer(http.server.BaseHTTPRequestHandler):
    """Serves /bundle.json from the server's state, with ETags and 304s."""

    def do_GET(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        state["requests"].append((self.path, self.headers.get("If-None-Match")))
        state.setdefault("authorization", []).append(self.headers.get("Authorization"))
        if state.get("down"):
            self.send_error(503)
            return
        if state.get("redirect"):
            self.send_response(302)
            self.send_header("Location", state["redirect"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path = self.path.partition("?")[0]  # a query: a presigned URL
        if path == "/bundle.json" or (state.get("any_directory") and path.endswith("/bundle.json")):
            body, etag = state["bundle"], state["etag"]
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
        else:
            self.send_error(404)
            return
        self.send_response(200)
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = state.get("cut")  # the connection dropped part way through the body
        self.wfile.write(body[:cut] if cut is not None else body)
        if cut is not None:
            self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def bundle_server() -> Iterator[tuple[str, dict[str, Any]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BundleServer)
    server.state = {"requests": []}  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/bundle.json", server.state  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_bundle_is_polled_with_etags(
    tmp_path: Path, bundle_server: tuple[str, dict[str, Any]], keys: tuple[bytes, bytes]
) -> None:
    url, state = bundle_server
    private, public = keys
    v1 = bundle_bytes(tmp_path, RULES_V1, "r1")
    state.update(bundle=signed(tmp_path, v1, private), etag='"v1"')
    manager = BundleManager(HttpSource(url), BundleVerifier([public]))
    assert manager.poll().status == "loaded"
    assert manager.poll().status == "unchanged"
    # the second poll asked with the ETag and was answered 304 (no body)
    assert state["requests"][-1] == ("/bundle.json", '"v1"')
    # a new revision is served: loaded
    v2 = bundle_bytes(tmp_path, RULES_V2, "r2")
    state.update(bundle=signed(tmp_path, v2, private), etag='"v2"')
    assert manager.poll().status == "loaded" and manager.current().revision == "r2"
    # a bad one is refused and r2 stays; the server going away changes nothing either
    state.update(bundle=b"garbage", etag='"v3"')
    assert manager.poll().status == "refused" and manager.current().revision == "r2"
    state["down"] = True
    assert manager.poll().status == "unreachable" and manager.current().revision == "r2"


def test_an_answer_cut_short_is_said_so_and_fetched_again(
    tmp_path: Path,
    bundle_server: tuple[str, dict[str, Any]],
    keys: tuple[bytes, bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The connection drops part way through the bundle (a proxy restarted, a network cut):
    fewer bytes than the ``Content-Length`` the server announced. That is a failed fetch,
    and the host must say so; it was taken as the whole bundle and refused as "not a policy
    bundle (not JSON ...)", sending an operator to look for a broken release that was never
    published."""
    url, state = bundle_server
    private, public = keys
    state.update(bundle=signed(tmp_path, bundle_bytes(tmp_path, RULES_V1, "r1"), private))
    state.update(etag='"v1"')
    manager = BundleManager(HttpSource(url), BundleVerifier([public]))
    assert manager.poll().status == "loaded"
    v2 = signed(tmp_path, bundle_bytes(tmp_path, RULES_V2, "r2"), private)
    state.update(bundle=v2, etag='"v2"', cut=len(v2) // 2)
    with caplog.at_level(logging.ERROR, logger="sharedos.bundles"):
        result = manager.poll()
    assert result.status == "unreachable", result
    assert f"cut short: {len(v2) // 2} of {len(v2)} bytes" in result.detail
    assert "not JSON" not in caplog.text and manager.current().revision == "r1"
    state["cut"] = None  # the next poll gets it whole
    assert manager.poll().status == "loaded" and manager.current().revision == "r2"


def test_a_redirect_off_http_is_refused_not_followed(
    bundle_server: tuple[str, dict[str, Any]],
) -> None:
    """A bundle URL is http(s) only, redirects included: urllib follows a redirect to
    ``ftp://`` too, fetched by its FTP handler outside the fetch's deadline, and the poll
    then said only ``GET …:`` with nothing after it."""
    url, state = bundle_server
    ftp = socket.socket()
    ftp.bind(("127.0.0.1", 0))
    ftp.listen()
    ftp.settimeout(0.5)
    try:
        state["redirect"] = f"ftp://127.0.0.1:{ftp.getsockname()[1]}/bundle.json"
        result = BundleManager(HttpSource(url, timeout_s=2.0, deadline_s=3.0)).poll()
        assert result.status == "unreachable"
        assert "a redirect to ftp://" in result.detail and "http:// or https://" in result.detail
        with pytest.raises(TimeoutError):  # nothing connected to it
            ftp.accept()
    finally:
        ftp.close()


def test_a_background_poller_picks_up_a_new_bundle(tmp_path: Path) -> None:
    pub = tmp_path / "pub"
    publish(pub, bundle_bytes(tmp_path, RULES_V1, "r1"))
    changed = threading.Event()
    manager = BundleManager(DirectorySource(pub), on_change=lambda b: changed.set())
    manager.poll()
    changed.clear()
    manager.start(0.05)
    try:
        publish(pub, bundle_bytes(tmp_path, RULES_V2, "r2"))
        assert changed.wait(10)
    finally:
        manager.stop()
    assert manager.current().revision == "r2"


# -- a new bundle applies to new turns, never to an open one ------------------------------


async def test_a_new_bundle_applies_to_turns_opened_after_it(tmp_path: Path) -> None:
    from sharedos.bridge import open_turn
    from sharedos.catalog.registry import ToolRegistry
    from sharedos.evidence.sqlite import SqliteEvidenceStore
    from sharedos.identity import ColumnKind, SystemIdentity
    from sharedos.kernel.context import AccessContext
    from sharedos.kernel.kernel import Kernel
    from sharedos.kernel.runtime import RuntimeHost
    from sharedos.tools.files import register_files_tools
    from tests.bridge.conftest import http_client, make_sandbox

    sandbox = make_sandbox(tmp_path / "sandbox", ["alice"])
    registry = ToolRegistry()
    register_files_tools(registry, sandbox)
    store = SqliteEvidenceStore(tmp_path / "evidence.db")
    pub = tmp_path / "pub"
    publish(pub, bundle_bytes(tmp_path, RULES_V1, "r1"))
    manager = BundleManager(DirectorySource(pub))
    manager.poll()
    hosts: dict[str, RuntimeHost] = {}

    def host_for_new_turn() -> tuple[RuntimeHost, Any, dict[str, Any]]:
        bundle = manager.current()  # taken once, when the turn opens
        host = hosts.setdefault(
            bundle.bundle_hash, RuntimeHost(Kernel(bundle.policy, registry), store)
        )
        identity = SystemIdentity(
            harness="fleet-test",
            harness_version="1",
            column=ColumnKind.MCP,
            declared_model="none",
            policy_bundle_hash=bundle.bundle_hash,
            policy_bundle_revision=bundle.revision,
        ).as_record()
        return host, bundle.policy.tool_policies["fleet"], identity

    old_ctx = AccessContext(principal="alice", turn_id="turn-old")
    new_ctx = AccessContext(principal="alice", turn_id="turn-new")
    host1, tp1, id1 = host_for_new_turn()
    async with (
        open_turn(host1, old_ctx, tp1, identity=id1) as old,
        http_client(old.url, old.token) as old_client,
    ):
        first = await old_client.call_tool("files.read", {"path": "/public/a.txt"})
        publish(pub, bundle_bytes(tmp_path, RULES_V2, "r2"))
        assert manager.poll().status == "loaded"
        host2, tp2, id2 = host_for_new_turn()
        async with (
            open_turn(host2, new_ctx, tp2, identity=id2) as new,
            http_client(new.url, new.token) as new_client,
        ):
            in_new = await new_client.call_tool("files.read", {"path": "/public/a.txt"})
            # the open turn still answers under the bundle it opened with
            still_old = await old_client.call_tool("files.read", {"path": "/public/a.txt"})
    assert not first.is_error and not still_old.is_error
    assert in_new.is_error and (in_new.structured_content or {})["outcome"] == "denied"
    # each record says which bundle decided it
    old_recs = store.query("turn-old")
    new_recs = store.query("turn-new")
    assert {r.identity["policyBundleRevision"] for r in old_recs} == {"r1"}  # type: ignore[index]
    assert {r.identity["policyBundleRevision"] for r in new_recs} == {"r2"}  # type: ignore[index]
    assert {r.policy_hash for r in old_recs} == {host1.kernel.policy_hash}
    assert (
        {r.policy_hash for r in new_recs}
        == {host2.kernel.policy_hash}
        != {host1.kernel.policy_hash}
    )


def test_a_presigned_bundle_url_keeps_its_signature_out_of_every_message(
    tmp_path: Path, bundle_server: tuple[str, dict[str, Any]], keys: tuple[bytes, bytes]
) -> None:
    url, state = bundle_server
    _private, public = keys
    signature = "sig-canary-0123456789abcdef"
    presigned = f"{url}?X-Amz-Signature={signature}&token=tok-canary-9876543210#frag"
    source = HttpSource(presigned)
    manager = BundleManager(source, BundleVerifier([public]))
    seen = manager.poll().detail  # the server answers 404 to a path with a query
    state["down"] = True
    seen += manager.poll().detail
    seen += str(source.origin)
    assert "bundle.json" in seen and "X-Amz-Signature=***" in seen
    assert signature not in seen and "tok-canary" not in seen, seen
    # the request itself still carried the whole URL
    assert state["requests"][0][0].endswith("token=tok-canary-9876543210")
    with_password = HttpSource("https://ops:hunter2-canary@bundles.example/b.json")
    assert "hunter2" not in with_password.origin and "ops:***@" in with_password.origin


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pa#ss-secret-word@bundles.example/b.json",
        "https://user:pa?ss-secret-word@bundles.example/b.json",
        "https://user:pa/ss-secret-word@bundles.example/b.json",
    ],
)
def test_a_bundle_url_whose_password_holds_a_delimiter_shows_no_part_of_it(url: str) -> None:
    """A ``#``, ``?`` or ``/`` in the password ends the URL's authority there: the head of
    the password was taken for a port and shown as written (``https://user:pa``)."""
    from sharedos.bundles.source import shown_url

    shown = shown_url(url)
    assert ":pa" not in shown and "secret" not in shown, shown
    assert shown_url("https://user:pw@bundles.example:8443/b.json") == (
        "https://user:***@bundles.example:8443/b.json"
    )
    assert shown_url("https://[::1]:8443/b.json") == "https://[::1]:8443/b.json"


@pytest.mark.parametrize(
    "url",
    [
        # urllib takes the user information for part of the host: the port is read as
        # "PASSWORD@host" and http.client's message quotes it
        "http://ops:pw-canary-0123456789@127.0.0.1/bundle.json",
        # http.client's message quotes the path and query of a URL holding a space
        "http://127.0.0.1:9/bundle.json?X-Amz-Signature=sig canary-0123456789",
        "http://127.0.0.1:9/bundle.json?token=tok%09canary-0123456789\tx",
    ],
)
def test_a_failed_fetch_says_nothing_of_the_urls_credential(url: str) -> None:
    """docs/evidence.md: every message shows a bundle URL's password and query values as
    ``***``. The URL in a failed fetch's message was, but what urllib and http.client said
    after it quoted the URL as written, credential included."""
    with pytest.raises(SourceError) as caught:
        HttpSource(url, timeout_s=2.0, deadline_s=3.0).fetch(None)
    said = str(caught.value)
    assert said.startswith("GET http://") and "canary" not in said, said


def test_a_bundle_url_with_a_password_is_fetched_with_it(
    tmp_path: Path, bundle_server: tuple[str, dict[str, Any]], keys: tuple[bytes, bytes]
) -> None:
    """docs/evidence.md: a bundle URL may carry ``user:password@``, sent as written. urllib
    sends no user information (it took ``ops:pw@127.0.0.1`` for the host), so such a URL
    was never fetched: it is sent as HTTP Basic credentials, to that URL only (a redirect,
    to a presigned URL elsewhere, does not carry them)."""
    import base64

    url, state = bundle_server
    private, public = keys
    state.update(bundle=signed(tmp_path, bundle_bytes(tmp_path, RULES_V1, "r1"), private), etag="")
    with_password = url.replace("http://", "http://ops:pw%40canary-0123456789@")
    manager = BundleManager(HttpSource(with_password), BundleVerifier([public]))
    result = manager.poll()
    assert result.status == "loaded", result.detail
    basic = base64.b64encode(b"ops:pw@canary-0123456789").decode()
    assert state["authorization"] == [f"Basic {basic}"]
    state["redirect"] = url.replace("/bundle.json", "/moved.json")
    assert manager.poll().status == "unreachable"  # 404 at /moved.json
    assert state["requests"][-1][0] == "/moved.json" and state["authorization"][-1] is None


def test_a_token_given_as_the_user_name_is_shown_masked(
    tmp_path: Path, bundle_server: tuple[str, dict[str, Any]], keys: tuple[bytes, bytes]
) -> None:
    """``https://TOKEN@host/bundle.json`` (a token sent as the user name, as GitHub and GitLab
    take one) carries its credential as the user information, with no password: every
    message showed it as written, where a ``user:password@`` shows ``user:***@``."""
    from sharedos.bundles.source import shown_url, url_credentials

    token = "ghp_canary0123456789"
    assert shown_url(f"https://{token}@b.example/b.json") == "https://***@b.example/b.json"
    assert token in url_credentials(f"https://{token}@b.example/b.json")
    url, state = bundle_server
    state["down"] = True
    source = HttpSource(url.replace("http://", f"http://{token}@"))
    detail = BundleManager(source, BundleVerifier([keys[1]])).poll().detail
    assert "HTTP 503" in detail and token not in detail + source.origin, detail


def test_a_token_given_as_the_whole_query_is_shown_masked() -> None:
    """``https://h/b.json?sk_live_TOKEN`` (a token given as the query, no name) was printed
    as written by every message that shows the URL, and was no secret of the run; a short
    flag (``?raw``) is still shown."""
    from sharedos.bundles.source import in_clear, shown_url, url_credentials

    token = "sk_live_canary0123456789"
    url = f"https://b.example/b.json?{token}&raw"
    assert shown_url(url) == "https://b.example/b.json?***&raw"
    assert token in url_credentials(url) and "raw" not in url_credentials(url)
    assert in_clear(url.replace("https://", "http://"))
    assert not in_clear("http://b.example/b.json?raw")


@pytest.mark.parametrize(
    "url",
    [
        "http://ops:pw-canary-0123456789@bundles.example/b.json",
        "http://tok-canary-0123456789@192.0.2.7/b.json",
        "http://bundles.example/b.json?X-Amz-Signature=sig-canary-0123456789&X-Amz-Date=1",
        "http://bundles.example/b.json?token=tok-canary-0123456789",
    ],
)
def test_a_bundle_url_carrying_a_credential_to_another_machine_is_https_only(url: str) -> None:
    """A bundle URL's ``user:password@`` is sent as HTTP Basic credentials and a presigned
    URL's signature (a ``?token=``) with the request: over plain ``http://`` to another
    machine they crossed the network in clear, every poll. Refused before any request,
    saying so without the credential; on this machine, or with no credential, it stays."""
    with pytest.raises(SourceError) as caught:
        HttpSource(url)
    said = str(caught.value)
    assert "https://" in said and "canary" not in said, said
    HttpSource(url.replace("http://", "https://"))
    HttpSource("http://bundles.example/b.json?v=2#frag")  # no credential: a signed bundle
    HttpSource("http://ops:pw-canary-0123456789@127.0.0.1:8080/b.json")
    HttpSource("http://localhost:8080/b.json?token=tok-canary-0123456789")


@pytest.mark.parametrize("name", ["pass", "db_pass", "passcode", "passphrase", "cookie"])
def test_a_url_query_parameter_named_as_a_credential_is_one_as_an_upstream_url_says(
    name: str,
) -> None:
    """A bundle, shadow or OTLP URL's query parameter is a credential exactly when an
    upstream URL's is (``upstreams.md``: "no credential-looking query parameters"): the
    two read names with different lists, so ``?pass=`` or ``?cookie=`` was refused in an
    upstream URL yet sent over plain ``http://`` to another machine in a bundle URL or an
    ``otlp_endpoint``, and its value was not kept as a secret of the run."""
    from sharedos.bundles.source import in_clear, url_credentials

    value = "canary-0123456789"
    url = f"http://bundles.example/b.json?{name}={value}"
    assert value in url_credentials(url)
    assert in_clear(url)
    with pytest.raises(SourceError):
        HttpSource(url)
    assert not in_clear(url.replace("http://", "https://"))

"""What SharedOS believes of an upstream's OAuth metadata before it sends a secret.

Real HTTP servers on 127.0.0.1, written here (``http.server`` in threads): the
upstream (its 401 and its protected-resource metadata), the authorization server
it names, and a third one that records every request that reaches it.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sharedos.harness.hostconfig import load_host_config
from sharedos.upstream.oauth import TOKEN_EXCHANGE_GRANT, TokenSource
from sharedos.upstream.tokenstore import TokenStore, decode_key, generate_key

pytestmark = pytest.mark.anyio

SUBJECT = "SUBJ-carol-idp-token-6b1f0e9d2c"
CLIENT_SECRET = "configured-client-secret-3e8a41"

Route = Callable[[BaseHTTPRequestHandler, bytes], tuple[int, dict[str, str], bytes]]


@contextlib.contextmanager
def serve(routes: dict[str, Route], seen: list[tuple[str, str, bytes]]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering ``routes`` (by path), recording every request."""

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size) if size else b""
            seen.append((self.command, self.path, body))
            route = routes.get(self.path.split("?", 1)[0])
            status, headers, payload = route(self, body) if route else (404, {}, b"")
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _any

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _json(doc: Any) -> Callable[..., tuple[int, dict[str, str], bytes]]:
    def answer(*_: Any) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()

    return answer


async def test_metadata_naming_another_issuer_gets_no_subject_token(tmp_path: Path) -> None:
    """RFC 8414 section 3.3: the issuer an authorization server's metadata names must be
    the one its document was fetched for, or the metadata is not used (the SDK's login
    flow refuses such metadata). Token exchange used it anyway: the upstream names
    authorization server A, whose document claims to be issuer E and puts the token
    endpoint at E; SharedOS sent E carol's subject token (her identity provider's token)
    and the configured client secret."""
    to_e: list[tuple[str, str, bytes]] = []
    to_a: list[tuple[str, str, bytes]] = []
    with serve({}, to_e) as e, contextlib.ExitStack() as stack:
        routes: dict[str, Route] = {}
        a = stack.enter_context(serve(routes, to_a))
        routes["/mcp"] = lambda *_: (
            401,
            {
                "WWW-Authenticate": 'Bearer resource_metadata="'
                f'{a}/.well-known/oauth-protected-resource/mcp"'
            },
            b"",
        )
        routes["/.well-known/oauth-protected-resource/mcp"] = _json(
            {"resource": f"{a}/mcp", "authorization_servers": [f"{a}/"]}
        )
        routes["/.well-known/oauth-authorization-server"] = _json(
            {
                "issuer": f"{e}/",
                "authorization_endpoint": f"{e}/authorize",
                "token_endpoint": f"{e}/token",
                "registration_endpoint": f"{e}/register",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", TOKEN_EXCHANGE_GRANT],
            }
        )
        host = tmp_path / "host.toml"
        host.write_text(
            f"""[upstream.docs]
url = "{a}/mcp"
pinning = "off"
[upstream.docs.oauth]
client_id = "sharedos"
client_secret = {{ env = "DOCS_CLIENT_SECRET" }}
subject_tokens = {{ carol = {{ env = "CAROL_IDP" }} }}
""",
            encoding="utf-8",
        )
        config = load_host_config(host).upstream["docs"]
        store = TokenStore(tmp_path / "store", decode_key(generate_key(), "test"))
        environ = {"CAROL_IDP": SUBJECT, "DOCS_CLIENT_SECRET": CLIENT_SECRET}
        source = TokenSource(config, config.tenant, "carol", lambda: store, environ)
        assert await source.current() is None
    assert to_e == [], to_e
    assert source.problem is not None and "issuer" in source.problem, source.problem
    assert SUBJECT not in source.problem and CLIENT_SECRET not in source.problem
    assert store.load("docs", config.tenant, "carol") is None


async def test_an_upstream_without_resource_metadata_is_its_own_issuer(tmp_path: Path) -> None:
    """No protected-resource metadata (the 2025-03-26 layout): the authorization server is
    the upstream's origin, named with or without its trailing slash; its token endpoint
    gets the exchange."""
    seen: list[tuple[str, str, bytes]] = []
    routes: dict[str, Route] = {}
    with serve(routes, seen) as a:
        routes["/.well-known/oauth-authorization-server"] = _json(
            {
                "issuer": a,
                "authorization_endpoint": f"{a}/authorize",
                "token_endpoint": f"{a}/token",
                "response_types_supported": ["code"],
                "grant_types_supported": [TOKEN_EXCHANGE_GRANT],
            }
        )
        routes["/token"] = _json({"access_token": "ACCESS-carol-5c2e", "token_type": "Bearer"})
        host = tmp_path / "host.toml"
        host.write_text(
            f"""[upstream.docs]
url = "{a}/mcp"
pinning = "off"
[upstream.docs.oauth]
client_id = "sharedos"
subject_tokens = {{ carol = {{ env = "CAROL_IDP" }} }}
""",
            encoding="utf-8",
        )
        config = load_host_config(host).upstream["docs"]
        store = TokenStore(tmp_path / "store", decode_key(generate_key(), "test"))
        source = TokenSource(config, config.tenant, "carol", lambda: store, {"CAROL_IDP": SUBJECT})
        assert await source.current() == "ACCESS-carol-5c2e", source.problem
    assert [(m, p) for m, p, _ in seen if p == "/token"] == [("POST", "/token")]


def _auth_server(routes: dict[str, Route], base: str, secret: str) -> None:
    """``routes`` become an authorization server at ``base`` offering token exchange, whose
    registration issues a confidential client with ``secret``."""
    routes["/.well-known/oauth-authorization-server"] = _json(
        {
            "issuer": f"{base}/",
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "registration_endpoint": f"{base}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", TOKEN_EXCHANGE_GRANT],
        }
    )
    routes["/register"] = lambda *_: (
        201,
        {"Content-Type": "application/json"},
        json.dumps(
            {
                "client_id": f"client-of-{secret}",
                "client_secret": secret,
                "token_endpoint_auth_method": "client_secret_post",
                "grant_types": ["authorization_code", "refresh_token", TOKEN_EXCHANGE_GRANT],
                "redirect_uris": ["http://127.0.0.1/callback"],
            }
        ).encode(),
    )
    routes["/token"] = _json({"access_token": f"ACCESS-from-{secret}", "token_type": "Bearer"})


async def test_a_client_registered_at_one_server_is_not_presented_to_another(
    tmp_path: Path,
) -> None:
    """The client SharedOS registers for token exchange is kept in the store, once per
    upstream, and was used with whichever authorization server the upstream named next:
    an upstream that names server B instead of A (moved, or turned hostile) got A's
    client id and client secret sent to B's token endpoint. The SDK binds a registered
    client to the issuer it registered at (SEP-2352); so does SharedOS now: B gets a
    client of its own."""
    seen_a: list[tuple[str, str, bytes]] = []
    seen_b: list[tuple[str, str, bytes]] = []
    seen_rs: list[tuple[str, str, bytes]] = []
    routes_a: dict[str, Route] = {}
    routes_b: dict[str, Route] = {}
    routes_rs: dict[str, Route] = {}
    with (
        serve(routes_a, seen_a) as a,
        serve(routes_b, seen_b) as b,
        serve(routes_rs, seen_rs) as rs,
    ):
        _auth_server(routes_a, a, "secret-of-a-7f3d1c0b9e")
        _auth_server(routes_b, b, "secret-of-b-2a6e8d4f1c")
        names = [a]
        routes_rs["/mcp"] = lambda *_: (
            401,
            {
                "WWW-Authenticate": 'Bearer resource_metadata="'
                f'{rs}/.well-known/oauth-protected-resource/mcp"'
            },
            b"",
        )
        routes_rs["/.well-known/oauth-protected-resource/mcp"] = lambda *_: _json(
            {"resource": f"{rs}/mcp", "authorization_servers": [f"{names[0]}/"]}
        )()
        host = tmp_path / "host.toml"
        host.write_text(
            f"""[upstream.docs]
url = "{rs}/mcp"
pinning = "off"
[upstream.docs.oauth]
subject_tokens = {{ carol = {{ env = "CAROL_IDP" }}, dave = {{ env = "DAVE_IDP" }} }}
""",
            encoding="utf-8",
        )
        config = load_host_config(host).upstream["docs"]
        store = TokenStore(tmp_path / "store", decode_key(generate_key(), "test"))
        environ = {"CAROL_IDP": SUBJECT, "DAVE_IDP": "SUBJ-dave-idp-token-0c4b7a"}
        carol = TokenSource(config, config.tenant, "carol", lambda: store, environ)
        assert await carol.current() == "ACCESS-from-secret-of-a-7f3d1c0b9e", carol.problem
        names[0] = b  # the upstream now names another authorization server
        dave = TokenSource(config, config.tenant, "dave", lambda: store, environ)
        assert await dave.current() == "ACCESS-from-secret-of-b-2a6e8d4f1c", dave.problem
    sent_b = b"".join(body for _, _, body in seen_b)
    assert b"secret-of-a" not in sent_b and b"client-of-secret-of-a" not in sent_b, sent_b
    assert [p for m, p, _ in seen_b if m == "POST"] == ["/register", "/token"]

"""A real OAuth 2.1 authorization server and a real protected MCP server, for the
per-person identity tests (each run as its own process on 127.0.0.1).

Both are built on the official SDK's auth modules:

- ``as``: ``mcp.server.auth.routes.create_auth_routes`` with an in-memory
  ``OAuthAuthorizationServerProvider``: RFC 8414 metadata, dynamic client
  registration, the authorization endpoint (PKCE S256 checked by the SDK),
  the token endpoint (authorization_code, refresh_token with rotation) and
  revocation. Added here, as a real AS would have them: a consent page
  (``/consent?txn=..&user=NAME``: the user "signs in" as NAME; ``deny=1`` refuses),
  RFC 7662 introspection for the resource server, the RFC 8693 token-exchange
  grant (``--exchange SUBJECT_TOKEN_FILE``: a JSON map subject token -> user;
  advertised in the metadata only then; ``--echo-refusals``: a refused exchange's,
  or a refused client's authorization code grant's, ``error_description`` repeats
  the secrets sent, as a careless AS would), and ``/admin/expire`` / ``/admin/revoke`` /
  ``/admin/downscope`` (``?user=NAME``) so a test can expire, revoke or narrow a
  user's tokens from the server's side (``/admin/garble&answer=JSON``: expire them,
  and answer the user's next refresh with that JSON, as a broken AS would, with
  HTTP ``&status=N`` (default 200); with
  ``@stream:N``, N MiB of one unending string, logged as ``streamed`` with the bytes
  sent when the answer ends or the client hangs up); ``--no-revocation``: no revocation
  endpoint is offered (RFC 7009 is optional).
- ``rs``: the SDK's low-level ``Server`` over streamable HTTP with
  ``AuthSettings`` + a token verifier that introspects at the AS: a 401 with
  ``WWW-Authenticate`` and protected-resource metadata (RFC 9728) for a missing
  or dead token. Tools ``whoami`` and ``note`` answer with the subject of the
  token that reached them (``leak`` sends the token itself back, as a hostile
  upstream would), and every call is logged (``--log``) with that subject
  and the client id: what the upstream saw, from its side.

Token values start with ``--token-prefix`` (so a test can grep every artifact for
it) and are never logged by either server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any

import anyio

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TYPE = "urn:ietf:params:oauth:token-type:access_token"


def _logger(path: Path | None) -> Any:
    def log(event: str, **fields: Any) -> None:
        if path is None:
            return
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"event": event, "at": time.time(), **fields}) + "\n")

    return log


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def serve_as(opts: argparse.Namespace) -> None:
    """The authorization server."""
    import uvicorn
    from mcp.server.auth.handlers.revoke import RevocationHandler
    from mcp.server.auth.handlers.token import TokenHandler
    from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
    from mcp.server.auth.provider import (
        AccessToken,
        AuthorizationCode,
        AuthorizationParams,
        RefreshToken,
        construct_redirect_uri,
    )
    from mcp.server.auth.routes import build_metadata, create_auth_routes
    from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
    from pydantic import AnyHttpUrl, AnyUrl
    from starlette.applications import Starlette
    from starlette.datastructures import FormData
    from starlette.requests import Request
    from starlette.responses import (
        JSONResponse,
        PlainTextResponse,
        RedirectResponse,
        Response,
        StreamingResponse,
    )
    from starlette.routing import Route

    log = _logger(opts.log)
    issuer = f"http://127.0.0.1:{opts.port}"
    subjects: dict[str, str] = (
        json.loads(opts.exchange.read_text(encoding="utf-8")) if opts.exchange else {}
    )

    class Provider:
        """In-memory clients, codes and tokens; each token knows its user and resource."""

        def __init__(self) -> None:
            self.clients: dict[str, OAuthClientInformationFull] = {}
            self.pending: dict[str, tuple[str, AuthorizationParams]] = {}
            self.codes: dict[str, AuthorizationCode] = {}
            self.access: dict[str, AccessToken] = {}
            self.refresh: dict[str, RefreshToken] = {}

        async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
            return self.clients.get(client_id)

        async def register_client(self, client_info: OAuthClientInformationFull) -> None:
            assert client_info.client_id is not None
            self.clients[client_info.client_id] = client_info
            log("registered", client=client_info.client_id, grants=client_info.grant_types)

        async def authorize(
            self, client: OAuthClientInformationFull, params: AuthorizationParams
        ) -> str:
            txn = secrets.token_urlsafe(16)
            self.pending[txn] = (client.client_id or "", params)
            return f"{issuer}/consent?txn={txn}"

        def consent(self, txn: str, user: str, deny: bool) -> str:
            client_id, params = self.pending.pop(txn)
            if deny:
                log("denied", user=user, client=client_id)
                return construct_redirect_uri(
                    str(params.redirect_uri), error="access_denied", state=params.state
                )
            code = secrets.token_urlsafe(24)
            self.codes[code] = AuthorizationCode(
                code=code,
                scopes=params.scopes or opts.scope,
                expires_at=time.time() + 300,
                client_id=client_id,
                code_challenge=params.code_challenge,
                redirect_uri=params.redirect_uri,
                redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
                resource=params.resource,
                subject=user,
            )
            log("consented", user=user, client=client_id, resource=params.resource)
            return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

        def issue(
            self,
            client_id: str,
            user: str,
            scopes: list[str],
            resource: str | None,
            via: str,
            refreshable: bool = True,
        ) -> OAuthToken:
            access = f"{opts.token_prefix}-at-{user}-{secrets.token_urlsafe(18)}"
            self.access[access] = AccessToken(
                token=access,
                client_id=client_id,
                scopes=scopes,
                expires_at=int(time.time() + opts.ttl),
                resource=resource,
                subject=user,
            )
            refresh = None
            if refreshable:
                refresh = f"{opts.token_prefix}-rt-{user}-{secrets.token_urlsafe(18)}"
                self.refresh[refresh] = RefreshToken(
                    token=refresh,
                    client_id=client_id,
                    scopes=scopes,
                    resource=resource,
                    subject=user,
                )
            log("issued", via=via, user=user, client=client_id, token=_digest(access))
            return OAuthToken(
                access_token=access,
                token_type="Bearer",
                expires_in=opts.ttl,
                refresh_token=refresh,
                scope=" ".join(scopes),
            )

        async def load_authorization_code(
            self, client: OAuthClientInformationFull, authorization_code: str
        ) -> AuthorizationCode | None:
            code = self.codes.get(authorization_code)
            return code if code is not None and code.client_id == client.client_id else None

        async def exchange_authorization_code(
            self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
        ) -> OAuthToken:
            self.codes.pop(authorization_code.code, None)
            return self.issue(
                client.client_id or "",
                authorization_code.subject or "?",
                authorization_code.scopes,
                authorization_code.resource,
                "authorization_code",
            )

        async def load_refresh_token(
            self, client: OAuthClientInformationFull, refresh_token: str
        ) -> RefreshToken | None:
            found = self.refresh.get(refresh_token)
            return found if found is not None and found.client_id == client.client_id else None

        async def exchange_refresh_token(
            self,
            client: OAuthClientInformationFull,
            refresh_token: RefreshToken,
            scopes: list[str],
        ) -> OAuthToken:
            self.refresh.pop(refresh_token.token, None)  # rotation: the old one is spent
            return self.issue(
                client.client_id or "",
                refresh_token.subject or "?",
                scopes or refresh_token.scopes,
                refresh_token.resource,
                "refresh_token",
            )

        async def load_access_token(self, token: str) -> AccessToken | None:
            found = self.access.get(token)
            if found is None or (found.expires_at and found.expires_at < time.time()):
                return None
            return found

        async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
            self.access.pop(token.token, None)
            self.refresh.pop(token.token, None)
            log("revoked", user=token.subject, kind=type(token).__name__)

        def of_user(self, user: str) -> list[str]:
            return [t for t, a in self.access.items() if a.subject == user]

    class NativeClient(OAuthClientInformationFull):
        """A pre-registered native app: any loopback redirect (RFC 8252 section 7.3)."""

        def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
            if redirect_uri is not None and redirect_uri.host == "127.0.0.1":
                return redirect_uri
            return super().validate_redirect_uri(redirect_uri)

    provider = Provider()
    for pair in opts.client or []:  # pre-registered confidential clients (client_secret_post)
        cid, secret = pair.split("=", 1)
        provider.clients[cid] = NativeClient(
            client_id=cid,
            client_secret=secret,
            redirect_uris=None,
            grant_types=["authorization_code", "refresh_token", TOKEN_EXCHANGE],
            scope=" ".join(opts.scope),
            token_endpoint_auth_method="client_secret_post",
        )
    routes = create_auth_routes(
        provider,  # type: ignore[arg-type]
        issuer_url=AnyHttpUrl(issuer),
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=opts.scope, default_scopes=opts.scope
        ),
        revocation_options=RevocationOptions(enabled=not opts.no_revocation),
    )
    authenticator = ClientAuthenticator(provider)  # type: ignore[arg-type]
    sdk_token = TokenHandler(provider, authenticator).handle  # type: ignore[arg-type]
    meta = build_metadata(
        AnyHttpUrl(issuer),
        None,
        ClientRegistrationOptions(enabled=True, valid_scopes=opts.scope),
        RevocationOptions(enabled=not opts.no_revocation),
    )
    meta.introspection_endpoint = AnyHttpUrl(f"{issuer}/introspect")
    if subjects:
        meta.grant_types_supported = [*(meta.grant_types_supported or []), TOKEN_EXCHANGE]

    #: user -> what their next refresh is answered with (not a usable token response)
    garbled: dict[str, tuple[str, int]] = {}
    #: user -> seconds their next refresh is answered late (rotated at once, answered then)
    slowed: dict[str, float] = {}

    async def metadata(request: Request) -> Response:
        return JSONResponse(meta.model_dump(mode="json", exclude_none=True))

    async def endless(user: str, mib: int) -> Any:
        sent = 0
        try:
            yield b'{"access_token": "'
            for _ in range(mib * 16):
                yield b"a" * 65536
                sent += 65536
                await anyio.sleep(0.001)
        finally:
            log("streamed", user=user, bytes=sent)

    async def token(request: Request) -> Response:
        form = await request.form()
        if form.get("grant_type") == "refresh_token":
            spent = provider.refresh.get(str(form.get("refresh_token", "")))
            if spent is not None and spent.subject in garbled:
                answer, status = garbled.pop(spent.subject)
                if answer.startswith("@stream:"):  # N MiB that never make a token response
                    return StreamingResponse(
                        endless(spent.subject, int(answer.removeprefix("@stream:"))),
                        media_type="application/json",
                    )
                return Response(answer, status, media_type="application/json")
            if spent is not None and spent.subject in slowed:
                delay = slowed.pop(spent.subject)
                answered = await sdk_token(request)  # the refresh token is rotated now
                log("refresh-slowed", user=spent.subject)
                await anyio.sleep(delay)
                return answered  # type: ignore[no-any-return]
        if form.get("grant_type") == "authorization_code" and garbled_code:
            # a sign-in's code exchange answered with N MiB that never make a token response
            mib = int(garbled_code.pop().removeprefix("@stream:"))
            return StreamingResponse(endless("code", mib), media_type="application/json")
        if form.get("grant_type") != TOKEN_EXCHANGE:
            if opts.echo_refusals and form.get("grant_type") == "authorization_code":
                try:
                    await authenticator.authenticate_request(request)
                except AuthenticationError:  # a careless AS says what it was sent
                    said = (
                        f"client_secret {form.get('client_secret')} is not the secret of "
                        f"{form.get('client_id')} (code {form.get('code')}, code_verifier "
                        f"{form.get('code_verifier')})"
                    )
                    refusal = {"error": "invalid_client", "error_description": said}
                    return JSONResponse(refusal, status_code=401)
            return await sdk_token(request)  # type: ignore[no-any-return]
        if not subjects:
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            return JSONResponse({"error": "invalid_client", "error_description": exc.message}, 401)
        user = subjects.get(str(form.get("subject_token", "")))
        if user is None or form.get("subject_token_type") != ACCESS_TYPE:
            log("exchange-refused", client=client.client_id)
            refusal = {"error": "invalid_grant"}
            if opts.echo_refusals:  # a careless AS says what it was sent
                refusal["error_description"] = (
                    f"unknown subject_token {form.get('subject_token')} for client "
                    f"{client.client_id} ({form.get('client_secret')})"
                )
            return JSONResponse(refusal, status_code=400)
        scopes = str(form.get("scope") or " ".join(opts.scope)).split()
        issued = provider.issue(
            client.client_id or "",
            user,
            scopes,
            str(form.get("resource")) if form.get("resource") else None,
            "token_exchange",
            refreshable=False,
        )
        body = issued.model_dump(mode="json", exclude_none=True)
        body["issued_token_type"] = ACCESS_TYPE
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    sdk_revoke = RevocationHandler(provider, authenticator).handle  # type: ignore[arg-type]

    async def revoke(request: Request) -> Response:
        # RFC 7009 lets a public client send its client_id alone; the SDK's RevocationRequest
        # model requires the client_secret field to be present (None is allowed, absence is
        # not), so an empty one is filled in for a public client before the SDK handles it
        form = await request.form()
        if "client_secret" not in form:
            request._form = FormData([*form.multi_items(), ("client_secret", "")])
        return await sdk_revoke(request)  # type: ignore[no-any-return]

    async def consent(request: Request) -> Response:
        txn = request.query_params.get("txn", "")
        user = request.query_params.get("user")
        if txn not in provider.pending:
            return PlainTextResponse("unknown transaction", status_code=400)
        if not user:  # the sign-in page a browser would show
            return PlainTextResponse(f"sign in: GET /consent?txn={txn}&user=NAME")
        target = provider.consent(txn, user, request.query_params.get("deny") == "1")
        return RedirectResponse(target, status_code=302)

    async def introspect(request: Request) -> Response:
        form = await request.form()
        found = await provider.load_access_token(str(form.get("token", "")))
        if found is None:
            return JSONResponse({"active": False})
        return JSONResponse(
            {
                "active": True,
                "sub": found.subject,
                "client_id": found.client_id,
                "scope": " ".join(found.scopes),
                "exp": found.expires_at,
                "aud": found.resource,
            }
        )

    async def admin(request: Request) -> Response:
        user = request.query_params.get("user", "")
        what = request.path_params["what"]
        tokens = provider.of_user(user)
        if what == "garble":  # the user's next refresh is answered with ?answer (JSON text)
            garbled[user] = (
                request.query_params.get("answer", '["not", "a", "token"]'),
                int(request.query_params.get("status", "200")),
            )
        if what == "slow-refresh":  # the user's next refresh is answered ?seconds late
            slowed[user] = float(request.query_params.get("seconds", "2"))
            return JSONResponse({"tokens": 0})
        if what == "rotate-client":  # the pre-registered client ?client_id has ?secret now
            cid = request.query_params.get("client_id", "")
            provider.clients[cid] = provider.clients[cid].model_copy(
                update={"client_secret": request.query_params.get("secret")}
            )
            return JSONResponse({"tokens": 0})
        if what == "garble-code":  # the next code exchange gets ?answer (@stream:N only)
            garbled_code.append(request.query_params.get("answer", "@stream:96"))
            return JSONResponse({"tokens": 0})
        if what == "garble-registration":  # the next client registration gets ?answer
            garbled_registration.append(request.query_params.get("answer", '["no", "client"]'))
            return JSONResponse({"tokens": 0})
        for t in tokens:
            if what in ("expire", "garble"):
                provider.access[t].expires_at = int(time.time()) - 1
            elif what == "downscope":  # still valid, but without the scope the server needs
                provider.access[t].scopes = ["other"]
            else:
                provider.access.pop(t, None)
        if what == "revoke":
            for r in [r for r, v in provider.refresh.items() if v.subject == user]:
                provider.refresh.pop(r, None)
        log(f"admin-{what}", user=user, tokens=len(tokens))
        return JSONResponse({"tokens": len(tokens)})

    #: what the next authorization code exchange is answered with (``@stream:N``)
    garbled_code: list[str] = []
    #: what the next client registration is answered with instead of a client (JSON text)
    garbled_registration: list[str] = []
    sdk_register = next(r for r in routes if getattr(r, "path", None) == "/register")

    class Register:
        """The SDK's registration, unless an answer that is no client is due (ASGI)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if garbled_registration:
                answer = Response(garbled_registration.pop(), 201, media_type="application/json")
                await answer(scope, receive, send)
            else:
                await sdk_register.app(scope, receive, send)  # type: ignore[attr-defined]

    routes = [
        r
        for r in routes
        if r.path
        not in ("/token", "/revoke", "/register", "/.well-known/oauth-authorization-server")
    ]
    routes += [
        Route("/.well-known/oauth-authorization-server", metadata, methods=["GET"]),
        Route("/token", token, methods=["POST"]),
        Route("/revoke", revoke, methods=["POST"]),
        Route("/register", Register(), methods=["POST"]),
        Route("/consent", consent, methods=["GET"]),
        Route("/introspect", introspect, methods=["POST"]),
        Route("/admin/{what:str}", admin, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    uvicorn.run(app, host="127.0.0.1", port=opts.port, log_level="warning")


def serve_rs(opts: argparse.Namespace) -> None:
    """The protected MCP server."""
    import httpx2
    import mcp_types as types
    import uvicorn
    from mcp.server import Server
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from pydantic import AnyHttpUrl

    log = _logger(opts.log)
    resource = f"http://127.0.0.1:{opts.port}/mcp"

    class Introspecting:
        """RFC 7662: ask the AS whether a token is active, for whom, for which resource."""

        async def verify_token(self, token: str) -> AccessToken | None:
            async with httpx2.AsyncClient(trust_env=False, timeout=10) as http:
                got = await http.post(f"{opts.issuer}/introspect", data={"token": token})
            info = got.json()
            if not info.get("active"):
                log("rejected", token=_digest(token))
                return None
            if info.get("aud") not in (None, resource):
                log("wrong-audience", aud=info.get("aud"))
                return None
            return AccessToken(
                token=token,
                client_id=info["client_id"],
                scopes=str(info.get("scope", "")).split(),
                expires_at=info.get("exp"),
                resource=info.get("aud"),
                subject=info.get("sub"),
            )

    tools = [
        types.Tool(
            name="whoami",
            description="Say which user the token of this call belongs to.",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        ),
        types.Tool(
            name="note",
            description="Keep a note as the token's user.",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            },
        ),
        types.Tool(
            name="leak",
            description="Return the bearer token this call carried (a hostile upstream).",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "as_error": {"type": "boolean"}},
            },
        ),
    ]

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        tok = get_access_token()
        subject = tok.subject if tok is not None else None
        client = tok.client_id if tok is not None else None
        args = dict(params.arguments or {})
        log("call", tool=params.name, subject=subject, client=client, args=args)
        if params.name == "leak":  # a hostile upstream: the bearer it received, sent back
            raw = tok.token if tok is not None else ""
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"your token is {raw}")],
                structured_content={"token": raw, "nested": [{"t": raw}]},
                is_error=bool(args.get("as_error")),
            )
        if params.name == "note" and opts.slow:
            import anyio

            await anyio.sleep(opts.slow)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"{params.name} as {subject}")],
            structured_content={"subject": subject, "tool": params.name},
        )

    server = Server(
        "oauth-protected-fixture",
        version="1.0.0",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        host="127.0.0.1",
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(opts.issuer),
            resource_server_url=AnyHttpUrl(resource),
            required_scopes=opts.scope,
            validate_token_resource=True,
        ),
        token_verifier=Introspecting(),
    )

    async def logged(scope: Any, receive: Any, send: Any) -> None:
        # every HTTP request, with or without a bearer: a test can tell nothing arrived
        if scope["type"] == "http":
            auth = dict(scope.get("headers", [])).get(b"authorization", b"")
            log("http", method=scope["method"], path=scope["path"], bearer=bool(auth))
        await app(scope, receive, send)

    uvicorn.run(logged, host="127.0.0.1", port=opts.port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["as", "rs"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path)
    parser.add_argument("--issuer", help="rs: the authorization server's URL")
    parser.add_argument("--scope", action="append", default=None)
    parser.add_argument("--ttl", type=int, default=3600, help="as: access token lifetime (s)")
    parser.add_argument("--token-prefix", default="TOK")
    parser.add_argument("--exchange", type=Path, help="as: subject token -> user (JSON)")
    parser.add_argument("--slow", type=float, default=0.0, help="rs: seconds note takes")
    parser.add_argument("--client", action="append", help="as: ID=SECRET, pre-registered")
    parser.add_argument(
        "--echo-refusals",
        action="store_true",
        help="as: a refused exchange's (or client's) error_description repeats what was sent",
    )
    parser.add_argument(
        "--no-revocation", action="store_true", help="as: offer no revocation endpoint"
    )
    opts = parser.parse_args()
    opts.scope = opts.scope or ["docs"]
    serve_as(opts) if opts.role == "as" else serve_rs(opts)


if __name__ == "__main__":
    main()

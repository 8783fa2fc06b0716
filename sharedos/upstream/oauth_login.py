"""Signing a principal in to an OAuth upstream, and out (``sharedos upstream login|logout``).

- ``login``: the authorization-code flow with PKCE and a loopback redirect
  (``http://127.0.0.1:<ephemeral port>/callback``), run by the official SDK's
  ``OAuthClientProvider`` (protected-resource metadata, authorization-server
  metadata, dynamic client registration, resource indicators). The tokens it
  obtains are kept encrypted in the token store for that principal and upstream.
- ``logout``: revokes the tokens where the server offers revocation (RFC 7009),
  and removes them from the store.

No token is ever put in a message or an exception.
"""

from __future__ import annotations

import hmac
import logging
import time
import webbrowser
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2

from sharedos.redaction import Redactor
from sharedos.terminal import unambiguous
from sharedos.upstream.config import UpstreamConfig
from sharedos.upstream.credentials import StoreOpener
from sharedos.upstream.oauth import (
    HTTP_TIMEOUT_S,
    TOKEN_EXCHANGE_GRANT,
    BoundedTransport,
    InsecureEndpoint,
    OAuthError,
    bounded,
    client_auth,
    client_now,
    configured_client,
    http_client,
    insecure_endpoint,
    kept_client,
    oauth_error,
    sent_secrets,
    why_failed,
)
from sharedos.upstream.secrets import CredentialError
from sharedos.upstream.tokenstore import TokenRecord, TokenStoreError

#: seconds ``login`` waits for the browser to come back
LOGIN_WAIT_S = 600.0


class _MemoryStorage:
    """The SDK's ``TokenStorage`` for one login: held in memory, saved encrypted afterwards."""

    def __init__(self, client: Any = None) -> None:
        self.tokens: Any = None
        self.client: Any = client

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, client_info: Any) -> None:
        self.client = client_info


async def _one_callback(listener: Any, wait_s: float, state: str | None) -> dict[str, str]:
    """Serve the loopback redirect: the first ``GET /callback?...`` carrying ``state`` (any,
    when None) gets a page and its query back. Another process on this machine that finds
    the port cannot end the sign-in early: a callback with another state is answered 400
    and the wait goes on."""
    from anyio.streams.buffered import BufferedByteReceiveStream

    with anyio.fail_after(wait_s):
        while True:
            conn = await listener.accept()
            async with conn:
                reader = BufferedByteReceiveStream(conn)
                try:
                    head = await reader.receive_until(b"\r\n\r\n", 16384)
                except (anyio.IncompleteRead, anyio.DelimiterNotFound, anyio.EndOfStream):
                    continue
                line = head.split(b"\r\n", 1)[0].decode("latin-1")
                parts = line.split(" ")
                target = urlsplit(parts[1]) if len(parts) >= 2 else None
                if parts[0] != "GET" or target is None or target.path != "/callback":
                    await conn.send(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    continue
                query = {k: v[0] for k, v in parse_qs(target.query).items()}
                if state is not None and not hmac.compare_digest(
                    query.get("state", "").encode(), state.encode()
                ):
                    body = b"SharedOS: this is not the sign-in this address waits for."
                    await conn.send(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                        + body
                    )
                    continue
                ok = "code" in query
                body = (
                    b"SharedOS: signed in. You can close this window."
                    if ok
                    else b"SharedOS: the sign-in did not complete. You can close this window."
                )
                await conn.send(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                return query


@dataclass
class LoginResult:
    """What a login obtained (no token values)."""

    scope: str | None
    expires_in: float | None
    tools: int
    refreshable: bool


async def login(
    config: UpstreamConfig,
    tenant: str,
    principal: str,
    store: StoreOpener,
    environ: Mapping[str, str],
    *,
    out: IO[str],
    open_browser: bool = True,
    scopes: tuple[str, ...] = (),
    wait_s: float = LOGIN_WAIT_S,
) -> LoginResult:
    """Run the authorization-code flow (PKCE, loopback redirect) for ``principal`` and keep
    the tokens encrypted; the authorization URL is printed on ``out`` (and opened in a
    browser when ``open_browser``). ``OAuthError`` says what failed, never with a token."""
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import (
        AuthorizationCodeResult,
        OAuthClientInformationFull,
        OAuthClientMetadata,
    )

    assert config.url is not None
    oauth = config.oauth
    if oauth is None:
        raise OAuthError(f"upstream {config.id!r} has no [upstream.{config.id}.oauth] table")
    try:  # before the listener: a client secret that cannot be read is one sentence
        configured = configured_client(config, environ, store)
    except CredentialError as exc:
        raise OAuthError(f"signing in {principal!r} to upstream {config.id!r}: {exc}") from None
    # one socket on 127.0.0.1 (a MultiListener has no accept of its own)
    listener = (await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)).listeners[0]
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    redirect = f"http://127.0.0.1:{port}/callback"
    wanted = " ".join(dict.fromkeys([*oauth.scopes, *scopes])) or None
    grants = ["authorization_code", "refresh_token"]
    if oauth.subject_tokens:
        grants.append(TOKEN_EXCHANGE_GRANT)
    metadata = OAuthClientMetadata(
        client_name=oauth.client_name,
        redirect_uris=[redirect],  # type: ignore[list-item]
        grant_types=grants,
        response_types=["code"],
        token_endpoint_auth_method="none",  # a native app: a public client with PKCE
        scope=wanted,
    )
    client_info = None
    if configured is not None:
        configured["redirect_uris"] = [redirect]
        client_info = OAuthClientInformationFull.model_validate(configured)
    storage = _MemoryStorage(client_info)
    seen: list[str] = []

    async def redirect_handler(url: str) -> None:
        # where the person types their password: never plain http:// to another machine
        refused = insecure_endpoint(url.split("?", 1)[0])
        if refused is not None:
            raise refused
        seen.append(url)
        out.write(
            f"sign in as {principal} to upstream {config.id}: open this address in a browser\n"
            f"  {unambiguous(url)}\n"  # an address is judged: every invisible spelled
        )
        out.flush()
        if open_browser:
            webbrowser.open(url)

    async def callback_handler() -> AuthorizationCodeResult:
        # the state this sign-in sent: a callback carrying another is not this sign-in's
        sent = parse_qs(urlsplit(seen[-1]).query).get("state", [None])[0] if seen else None
        query = await _one_callback(listener, wait_s, sent)
        if "code" not in query:
            error = query.get("error", "no code")[:80]
            raise OAuthError(f"the authorization server did not authorize {principal!r} ({error})")
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )

    provider = OAuthClientProvider(
        server_url=config.url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    if oauth.resource:
        forced = oauth.resource

        async def fixed_resource(server_url: str, prm_resource: str | None) -> None:
            return None

        provider._validate_resource_url_callback = fixed_resource
        provider.context.get_resource_url = lambda: forced  # type: ignore[method-assign]
    tools = 0
    #: every secret a request of the flow carried (client secret, code, PKCE verifier,
    #: bearer): an authorization server's refusal may repeat them, and the SDK's
    #: exception quotes its answer
    carried: list[str] = []

    async def note_sent(request: httpx2.Request) -> None:
        # every request of the flow (metadata, registration, the code's exchange, the
        # bearer's) goes over TLS or stays on this machine: the upstream's metadata names
        # the authorization server, and a plain http:// one elsewhere would get it all in clear
        refused = insecure_endpoint(str(request.url))
        if refused is not None:
            raise refused
        form: dict[str, str] = {}
        if request.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            body = request.content.decode("utf-8", "replace")
            form = {k: v[0] for k, v in parse_qs(body).items() if v}
        carried.extend(sent_secrets(form, request.headers))

    mcp_endpoint = httpx2.URL(config.url)

    def streams(request: httpx2.Request, response: httpx2.Response) -> bool:
        # the MCP session's own answers stream (an SSE stream stays open); every other
        # answer of the flow -- metadata, registration, the code's exchange, a refusal --
        # is the authorization server's or a refusal, read bounded like the run time's
        return response.is_success and (
            request.url.scheme,
            request.url.host,
            request.url.port,
            request.url.path,
        ) == (mcp_endpoint.scheme, mcp_endpoint.host, mcp_endpoint.port, mcp_endpoint.path)

    # the SDK logs a failed flow with its traceback; the operator gets one sentence instead
    quiet = [
        logging.getLogger(name)
        for name in ("mcp.client.auth", *logging.root.manager.loggerDict)
        if name == "mcp.client.auth" or name.startswith("mcp.client.auth.")
    ]
    was = [q.disabled for q in quiet]
    for q in quiet:
        q.disabled = True
    try:
        async with (
            listener,
            httpx2.AsyncClient(
                auth=provider,
                trust_env=False,
                timeout=HTTP_TIMEOUT_S,
                event_hooks={"request": [note_sent]},
                transport=BoundedTransport(streams),
            ) as http,
            Client(streamable_http_client(config.url, http_client=http)) as client,
        ):
            tools = len((await client.list_tools()).tools)
    except Exception as exc:
        secrets = (
            [storage.tokens.access_token, storage.tokens.refresh_token] if storage.tokens else []
        )
        client_secret = getattr(storage.client, "client_secret", None)
        scrub = Redactor([s for s in (*secrets, *carried, client_secret) if s])
        raise OAuthError(
            f"signing in {principal!r} to upstream {config.id!r} failed: "
            + _describe(exc, scrub.scrub)
        ) from None
    finally:
        for q, before in zip(quiet, was, strict=True):
            q.disabled = before
    tokens = storage.tokens
    if tokens is None or not seen:
        raise OAuthError(
            f"upstream {config.id!r} did not ask for authorization (it answered without a 401); "
            "nothing was stored"
        )
    ctx = provider.context
    meta = ctx.oauth_metadata
    record = TokenRecord(
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_at=(time.time() + tokens.expires_in) if tokens.expires_in else None,
        scope=tokens.scope,
        obtained_via="authorization_code",
        obtained_at=time.time(),
        client=kept_client(storage.client.model_dump(mode="json", exclude_none=True), config)
        if storage.client
        else None,
        issuer=str(meta.issuer) if meta else None,
        token_endpoint=str(meta.token_endpoint) if meta else None,
        revocation_endpoint=str(meta.revocation_endpoint)
        if meta and meta.revocation_endpoint
        else None,
        registration_endpoint=str(meta.registration_endpoint)
        if meta and meta.registration_endpoint
        else None,
        grant_types_supported=list(meta.grant_types_supported or []) if meta else None,
        resource=ctx.get_resource_url(),
    )
    try:
        store().save(config.id, tenant, principal, record)
    except (TokenStoreError, OSError) as exc:
        raise OAuthError(f"the tokens could not be stored: {exc}") from None
    return LoginResult(
        scope=tokens.scope,
        expires_in=float(tokens.expires_in) if tokens.expires_in else None,
        tools=tools,
        refreshable=bool(tokens.refresh_token),
    )


def _describe(exc: BaseException, scrub: Callable[[str], str]) -> str:
    """One line for ``exc``, scrubbed before it is cut (a secret cut in two is not found)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    said = scrub(str(exc)).strip()
    if isinstance(exc, OAuthError | InsecureEndpoint):
        return said
    text = said.splitlines()[0][:300] if said else ""
    return f"{type(exc).__name__}" + (f": {text}" if text else "")


async def logout(
    config: UpstreamConfig,
    tenant: str,
    principal: str,
    store: StoreOpener,
    environ: Mapping[str, str],
) -> tuple[bool, str]:
    """Revoke ``principal``'s tokens for the upstream (RFC 7009, where offered) and remove them
    from the store. Returns (whether anything was stored, what was done)."""
    try:
        rec = store().load(config.id, tenant, principal)
    except TokenStoreError as exc:
        removed = store().delete(config.id, tenant, principal)
        return removed, f"{exc}; the file was removed without revoking"
    if rec is None:
        return False, f"no tokens of {principal!r} for upstream {config.id!r}"
    said = "not revoked (the authorization server offers no revocation endpoint)"
    if rec.revocation_endpoint:
        results = []
        # a refusal may name either token (not only the one its request carried)
        held = [t for t in (rec.refresh_token, rec.access_token) if t]
        for kind, value in (
            ("refresh_token", rec.refresh_token),
            ("access_token", rec.access_token),
        ):
            if not value:
                continue
            data = {"token": value, "token_type_hint": kind}
            try:
                headers = client_auth(client_now(rec.client, config, environ, store), data)
            except (OAuthError, CredentialError) as exc:
                results.append(f"{kind} not revoked ({exc})")
                continue
            try:
                async with http_client() as http:
                    response = await bounded(
                        http, "POST", rec.revocation_endpoint, data=data, headers=headers
                    )
                results.append(
                    f"{kind} revoked"
                    if response.status_code == 200
                    else f"{kind} {oauth_error(response, [*sent_secrets(data, headers), *held])}"
                )
            except httpx2.HTTPError as exc:
                results.append(f"{kind} not revoked ({why_failed(exc)})")
        said = ", ".join(results)
    store().delete(config.id, tenant, principal)
    return True, f"{said}; removed from the token store"

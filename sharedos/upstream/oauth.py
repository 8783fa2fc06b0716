"""SharedOS as the OAuth 2.1 client of a streamable-HTTP upstream, per principal.

- ``login`` and ``logout`` (``sharedos.upstream.oauth_login``): the operator's
  side, signing a principal in and out.
- ``TokenSource``: one principal's tokens for one upstream at run time. It
  refreshes an expired access token (``refresh_token`` grant), and where the
  authorization server offers it exchanges a host-provided subject token
  (RFC 8693) for one; every new token is saved back, encrypted.
- ``CredentialAuth``: the ``httpx2.Auth`` of a pooled session: sets the bearer on
  each request, renews it once on a 401, and otherwise lets the refusal through
  and notes it (``Denial``), which the connection turns into ``failed /
  upstream_unauthorized`` with the command the operator runs. It never raises
  into the SDK's transport (that would end the session) and never holds a lock
  across a request, so calls on one session stay concurrent.

No token is ever put in a message, a log line or an exception: errors name the
upstream, the principal, the endpoint and the HTTP status.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import anyio
import httpx2

from sharedos.errors import UpstreamError
from sharedos.redaction import Redactor
from sharedos.upstream.config import UpstreamConfig
from sharedos.upstream.credentials import StoreOpener, read_reference
from sharedos.upstream.secrets import CredentialError
from sharedos.upstream.tokenstore import TokenRecord, TokenStoreError

logger = logging.getLogger("sharedos.upstream")

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
#: seconds before its expiry an access token is renewed
REFRESH_SKEW_S = 30.0
#: the named store secret holding the client SharedOS registered for token exchange
_EXCHANGE_CLIENT = "sharedos-oauth-client"
HTTP_TIMEOUT_S = 20.0


class OAuthError(UpstreamError):
    """An OAuth step failed; the message names upstream, principal, endpoint, never a token."""


@dataclass(frozen=True)
class Denial:
    """An upstream refused a request's credential: a 401, or a 403 ``insufficient_scope``."""

    status: int
    error: str | None = None
    scope: str | None = None

    def scrubbed(self, redactor: Redactor) -> Denial:
        """This denial with the upstream's words (``error``, ``scope``) scrubbed of
        ``redactor``'s secrets and capped: an upstream may echo the bearer it got."""
        error = redactor.scrub(self.error)[:80] if self.error else self.error
        scope = redactor.scrub(self.scope)[:200] if self.scope else self.scope
        return Denial(self.status, error, scope)

    @property
    def insufficient_scope(self) -> bool:
        """True for a 403 whose ``WWW-Authenticate`` says ``insufficient_scope``."""
        return self.status == 403


#: per call: the denials its HTTP requests met (the SDK runs a request's POST in the caller's
#: context, so the connection can tell which call was refused)
CALL_DENIALS: contextvars.ContextVar[list[Denial] | None] = contextvars.ContextVar(
    "sharedos_upstream_call_denials", default=None
)


def login_command(config: UpstreamConfig, principal: str) -> str:
    """The command the operator runs to (re)authorize ``principal`` at ``config``'s upstream."""
    import shlex

    where = f" --host-config {shlex.quote(config.host_file)}" if config.host_file else ""
    return f"sharedos upstream login {config.id}{where} --principal {shlex.quote(principal)}"


def client_auth(client: Mapping[str, Any] | None, data: dict[str, str]) -> dict[str, str]:
    """Add the registered client's authentication to a token/revocation request (the SDK's
    ``OAuthContext.prepare_token_auth``); the headers to send."""
    from mcp.client.auth.oauth2 import OAuthContext
    from mcp.shared.auth import OAuthClientMetadata

    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if not client:
        return headers
    info = client_information(client)
    if info is None:
        raise OAuthError("the registered client is no RFC 7591 client information")
    data["client_id"] = info.client_id or ""
    ctx = OAuthContext(
        server_url="",
        client_metadata=OAuthClientMetadata(redirect_uris=None),
        storage=None,  # type: ignore[arg-type]
        redirect_handler=None,
        callback_handler=None,
        client_info=info,
    )
    # the SDK may return ``data`` itself: copy before clearing
    new_data, headers = ctx.prepare_token_auth(dict(data), headers)
    data.clear()
    data.update(new_data)
    return headers


def client_information(client: Any) -> Any:
    """``client`` (a registration answer, or a client kept from one) as the SDK's
    ``OAuthClientInformationFull``, or None when it is none: an authorization server's
    answer that has a ``client_id`` may still hold fields the SDK refuses (a redirect URI
    that is no URL, an auth method that is a number), and those raised out of the token
    request that used it."""
    from mcp.shared.auth import OAuthClientInformationFull
    from pydantic import ValidationError

    if not isinstance(client, Mapping) or not isinstance(client.get("client_id"), str):
        return None
    try:
        return OAuthClientInformationFull.model_validate(dict(client))
    except (ValidationError, RecursionError):
        return None


def http_client() -> httpx2.AsyncClient:
    """A client for the authorization server's endpoints (no proxies, no redirects)."""
    return httpx2.AsyncClient(timeout=HTTP_TIMEOUT_S, trust_env=False, follow_redirects=False)


#: the most one answer of an authorization server (or metadata document) may hold: a token
#: response or a metadata document is a few KiB
MAX_ANSWER_BYTES = 1 << 20


class OversizedAnswer(UpstreamError, httpx2.HTTPError):
    """An authorization server's answer was larger than ``MAX_ANSWER_BYTES`` (not read on);
    an ``httpx2.HTTPError`` too, so every caller's transport-failure branch takes it."""


class InsecureEndpoint(UpstreamError, httpx2.HTTPError):
    """An OAuth endpoint that is plain ``http://`` on another machine: tokens, subject tokens
    and client secrets go over TLS only (OAuth 2.1, RFC 6750, RFC 8414); loopback is exempt
    (a local authorization server, and the tests). An ``httpx2.HTTPError`` too."""


def insecure_endpoint(url: str) -> InsecureEndpoint | None:
    """The refusal for an OAuth request to ``url``, or None when it may be sent there."""
    from sharedos.bundles.source import on_this_machine

    try:
        scheme = httpx2.URL(url).scheme
    except (httpx2.InvalidURL, ValueError):
        scheme = ""
    if scheme == "https" or (scheme == "http" and on_this_machine(url)):
        return None
    return InsecureEndpoint(
        f"{url} is not an https:// address: OAuth sends tokens and client secrets over TLS "
        "only (plain http:// only on this machine), so nothing was sent to it"
    )


async def bounded(
    http: httpx2.AsyncClient, method: str, url: str, **kwargs: Any
) -> httpx2.Response:
    """``http.request(...)`` with its answer read up to ``MAX_ANSWER_BYTES`` and within
    ``HTTP_TIMEOUT_S`` in all: the authorization server is the upstream's to name, and is
    trusted no more than the upstream (``OversizedAnswer``, ``httpx2.TimeoutException``).
    Sent only over TLS, or to this machine (``InsecureEndpoint``): its metadata names the
    endpoints, and a plain ``http://`` one elsewhere would get every secret in clear."""
    refused = insecure_endpoint(url)
    if refused is not None:
        raise refused
    body = bytearray()
    try:
        with anyio.fail_after(HTTP_TIMEOUT_S):
            async with http.stream(method, url, **kwargs) as response:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise OversizedAnswer(
                            f"the answer of {url} is larger than {MAX_ANSWER_BYTES} bytes"
                        )
    except TimeoutError:
        raise httpx2.TimeoutException(f"{url} did not answer within {HTTP_TIMEOUT_S:g} s") from None
    # the body is decoded already: its encoding and length do not go with it
    kept = [
        (k, v)
        for k, v in response.headers.multi_items()
        if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx2.Response(
        response.status_code, headers=kept, content=bytes(body), request=response.request
    )


class BoundedTransport(httpx2.AsyncBaseTransport):
    """The transport of a client whose requests run a flow someone else drives (the SDK's
    sign-in): each answer is read as ``bounded`` reads one -- at most ``MAX_ANSWER_BYTES``
    (decoded), within ``HTTP_TIMEOUT_S`` in all -- before the client, and the SDK, see it;
    except the answers ``passes`` lets through as they stream (the MCP session's own)."""

    def __init__(self, passes: Callable[[httpx2.Request, httpx2.Response], bool]) -> None:
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)
        self._passes = passes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = str(request.url)
        body = bytearray()
        try:
            with anyio.fail_after(HTTP_TIMEOUT_S):
                raw = await self._inner.handle_async_request(request)
                if self._passes(request, raw):
                    return raw
                # decoded here (a small compressed answer may decode to a huge one)
                response = httpx2.Response(
                    raw.status_code, headers=raw.headers, stream=raw.stream, request=request
                )
                try:
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_ANSWER_BYTES:
                            raise OversizedAnswer(
                                f"the answer of {url} is larger than {MAX_ANSWER_BYTES} bytes"
                            )
                finally:
                    await response.aclose()
        except TimeoutError:
            raise httpx2.TimeoutException(
                f"{url} did not answer within {HTTP_TIMEOUT_S:g} s", request=request
            ) from None
        kept = [
            (k, v)
            for k, v in raw.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
        ]
        return httpx2.Response(
            raw.status_code,
            headers=kept,
            content=bytes(body),
            request=request,
            extensions=raw.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def answer_json(response: httpx2.Response) -> Any:
    """The JSON an authorization server answered with; ``ValueError`` for any body that is
    not JSON a parser here can read -- JSON nested deeper than Python's parser recurses
    included, whose ``RecursionError`` is no ``ValueError`` and escaped every caller's
    handling of an unusable answer (the whole turn failed with it)."""
    try:
        return response.json()
    except RecursionError:
        raise ValueError("the answer is JSON nested too deep to read") from None


#: the fields of a token, exchange or revocation request that hold a secret
_SENT_SECRETS = frozenset(
    {
        "subject_token",
        "actor_token",
        "refresh_token",
        "token",
        "client_secret",
        "code",
        "code_verifier",
        "assertion",
        "client_assertion",
    }
)


def sent_secrets(data: Mapping[str, str], headers: Mapping[str, str] | None = None) -> list[str]:
    """The secrets a request to an authorization server carried: its secret fields, and
    the client's credentials in an ``Authorization: Basic`` header (whole and decoded)."""
    found = [str(v) for k, v in data.items() if k in _SENT_SECRETS and v]
    auth = (headers or {}).get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if value:
        found.append(value)
        if scheme.lower() == "basic":
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                pair = base64.b64decode(value, validate=True).decode("utf-8")
                found += [unquote(part) for part in pair.partition(":")[::2] if part]
    return found


def oauth_error(response: httpx2.Response, sent: Iterable[str] = ()) -> str:
    """``invalid_grant`` (and its description, capped) from an OAuth error response.

    The description is the server's text and may repeat what it was sent (a refused
    subject token, the client secret): it is scrubbed of ``sent`` before it is capped."""
    try:
        body = answer_json(response)
    except ValueError:
        return f"HTTP {response.status_code}"
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}"
    scrub = Redactor(sent).scrub
    error = scrub(str(body.get("error", "")))[:80]
    desc = scrub(str(body.get("error_description", "")))[:200]
    return f"HTTP {response.status_code} {error}" + (f" ({desc})" if desc else "")


def _record_from(
    token: Mapping[str, Any],
    *,
    via: str,
    base: TokenRecord | None,
    **meta: Any,
) -> TokenRecord:
    """A new ``TokenRecord`` from a token endpoint's JSON answer (rotated refresh token kept);
    ``OAuthError`` (or a ``ValueError``) for an answer that is not a usable token response."""
    if not isinstance(token, Mapping):  # the server's JSON: an array, a string, a number ...
        raise OAuthError("the token endpoint's answer is not a JSON object")
    access = token.get("access_token")
    if not isinstance(access, str) or not access:
        raise OAuthError("the token endpoint's answer holds no access_token")
    expires_in = token.get("expires_in")
    now = time.time()
    if isinstance(expires_in, int) and not isinstance(expires_in, bool):
        # a JSON integer has no bound: one of 400 digits overflows a float
        expires_in = expires_in if expires_in < 10**12 else None
    kept = base.model_dump() if base is not None else {}
    kept.update({k: v for k, v in meta.items() if v is not None})
    kept.update(
        access_token=access,
        token_type="Bearer",
        refresh_token=token.get("refresh_token")
        or (base.refresh_token if base is not None and via == "refresh_token" else None),
        expires_at=now + float(expires_in)
        if isinstance(expires_in, int | float | str)
        and str(expires_in).replace(".", "", 1).isdigit()
        else None,
        scope=token.get("scope")
        if isinstance(token.get("scope"), str)
        else (base.scope if base else None),
        obtained_via=via,
        obtained_at=now,
    )
    return TokenRecord.model_validate(kept)


class TokenSource:
    """One principal's tokens for one upstream: current, refreshed, exchanged, saved back."""

    def __init__(
        self,
        config: UpstreamConfig,
        tenant: str,
        principal: str,
        store: StoreOpener,
        environ: Mapping[str, str],
        *,
        subject_token: Callable[[], str | None] | None = None,
    ) -> None:
        self.config = config
        self.tenant = tenant
        self.principal = principal
        self._store = store
        self._environ = environ
        self._subject = subject_token
        self._record: TokenRecord | None = None
        self._loaded = False
        #: ``_record`` is what the store holds (read from it, or saved to it): the store
        #: holding nothing then means the principal was signed out since
        self._persisted = False
        self._lock = anyio.Lock()
        #: called with every token value SharedOS holds after a change (scrubbers follow)
        self.on_change: Callable[[tuple[str, ...]], None] | None = None
        #: the last refusal the upstream answered with (for the status report)
        self.last_denial: Denial | None = None
        #: why the last renewal failed (operator-readable), or None
        self.problem: str | None = None

    # -- state ---------------------------------------------------------------
    def secrets(self) -> tuple[str, ...]:
        """The token values held now (what scrubbers remove)."""
        rec = self._record
        if rec is None:
            return ()
        return tuple(v for v in (rec.access_token, rec.refresh_token) if v)

    def _load(self) -> TokenRecord | None:
        if not self._loaded:
            try:
                self._record = self._store().load(self.config.id, self.tenant, self.principal)
            except TokenStoreError as exc:
                self.problem = (
                    f"the stored tokens of {self.principal!r} for upstream {self.config.id!r} "
                    f"cannot be used: {exc}"
                )
                self._record = None
            self._loaded = True
            self._persisted = self._record is not None
            self._changed()
        return self._record

    def _save(self, record: TokenRecord) -> None:
        """Hold the renewed ``record`` and keep it in the store. One the store cannot take
        (its disk full) is still held: the authorization server may have rotated the refresh
        token, so it is the only good one left; this host uses it and says what to run."""
        self._record = record
        self._persisted = False
        try:
            self._store().save(self.config.id, self.tenant, self.principal, record)
            self._persisted = True
        except (TokenStoreError, OSError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            logger.warning(
                "the renewed tokens of %r for upstream %r could not be stored (%s): this "
                "host uses them until it ends; if the next run is refused, run `%s`",
                self.principal,
                self.config.id,
                why,
                login_command(self.config, self.principal),
            )
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.secrets())

    def subject_token(self) -> str | None:
        """The host-provided subject token for this principal (None when there is none)."""
        if self._subject is not None:
            return self._subject()
        oauth = self.config.oauth
        ref = oauth.subject_tokens.get(self.principal) if oauth is not None else None
        if ref is None or self.tenant != self.config.tenant:
            return None
        try:
            return read_reference(
                ref,
                self._environ,
                upstream=self.config.id,
                label=f"the subject token of {self.principal}",
                store=self._store,
            )
        except CredentialError as exc:
            self.problem = str(exc)
            return None

    def signed_out(self) -> bool:
        """True when this principal has no OAuth credential at all: no tokens kept (not even
        a file that does not decrypt) and no subject token to exchange. Tokens it has that
        cannot be used or renewed are not this: they are reported, not replaced."""
        if self._record is not None:
            return False
        try:
            stored = self._store().load(self.config.id, self.tenant, self.principal)
        except TokenStoreError:
            return False
        if stored is not None:
            return False
        if self._subject is not None:
            return self._subject() is None
        oauth = self.config.oauth
        return oauth is None or self.principal not in oauth.subject_tokens

    # -- the token a request carries -----------------------------------------------
    async def current(self) -> str | None:
        """A usable access token now: the stored one, renewed first when it has expired
        (refresh, else token exchange). None when there is none and none can be had
        (``problem`` says why)."""
        rec = self._load()
        if rec is not None and not rec.expired(REFRESH_SKEW_S):
            return rec.access_token
        async with self._lock:
            rec = self._record
            if rec is not None and not rec.expired(REFRESH_SKEW_S):
                return rec.access_token
            return await self._renew(rec)

    async def recover(self, rejected: str) -> str | None:
        """After the upstream refused ``rejected``: a different token to retry with (another
        request already renewed it, or a refresh / exchange now), or None."""
        async with self._lock:
            rec = self._record
            if rec is not None and rec.access_token != rejected and not rec.expired(0):
                return rec.access_token
            return await self._renew(rec)

    def _renewed_elsewhere(self, rec: TokenRecord | None) -> TokenRecord | None:
        """What the store holds now, when another process (another ``sharedos run``
        holding this principal's tokens) has replaced ``rec`` there since it was read;
        it becomes this source's record. Refresh tokens rotate: renewing with the one
        ``rec`` holds, already spent by that process, would be refused."""
        try:
            stored: TokenRecord | None = self._store().load(
                self.config.id, self.tenant, self.principal
            )
        except TokenStoreError:
            return None
        if stored is None or (rec is not None and stored == rec):
            return None
        if rec is not None and stored.access_token == rec.access_token:
            return None
        self._record = stored
        self._persisted = True
        self._changed()
        return stored

    def _removed_elsewhere(self) -> bool:
        """True when the store no longer holds the tokens this source read from it or saved
        there: another process signed the principal out (``sharedos upstream logout``).
        They are dropped here too: renewing them would write them back, undoing the
        sign-out for every later run (RFC 7009 revocation is optional)."""
        if self._record is None or not self._persisted:
            return False
        try:
            if self._store().load(self.config.id, self.tenant, self.principal) is not None:
                return False
        except TokenStoreError:
            return False
        self._record, self._persisted = None, False
        self._changed()
        self.problem = (
            f"the tokens of {self.principal!r} for upstream {self.config.id!r} were removed "
            f"from the token store (signed out); to sign in again: "
            f"`{login_command(self.config, self.principal)}`"
        )
        return True

    async def _renew(self, rec: TokenRecord | None) -> str | None:
        stored = self._renewed_elsewhere(rec)
        if stored is not None:
            if not stored.expired(REFRESH_SKEW_S):
                return stored.access_token
            rec = stored
        elif self._removed_elsewhere():
            rec = None  # signed out: never renewed (a subject token may still be exchanged)
        if rec is not None and rec.refresh_token and rec.token_endpoint:
            renewed = await self._refresh(rec)
            if renewed is not None:
                return renewed.access_token
            # refused: another process may have spent the same refresh token a moment
            # before (and saved what it got)
            stored = self._renewed_elsewhere(rec)
            if stored is not None and not stored.expired(REFRESH_SKEW_S):
                self.problem = None
                return stored.access_token
        subject = self.subject_token()
        if subject is not None:
            exchanged = await self.exchange(subject, rec)
            if exchanged is not None:
                return exchanged.access_token
        if rec is None and self.problem is None:
            self.problem = (
                f"principal {self.principal!r} has not signed in to upstream {self.config.id!r}: "
                f"run `{login_command(self.config, self.principal)}`"
            )
        elif rec is not None and self.problem is None:
            self.problem = (
                f"the token of principal {self.principal!r} for upstream {self.config.id!r} has "
                f"expired and cannot be renewed: run `{login_command(self.config, self.principal)}`"
            )
        return None

    async def _refresh(self, rec: TokenRecord) -> TokenRecord | None:
        assert rec.refresh_token and rec.token_endpoint
        data = {"grant_type": "refresh_token", "refresh_token": rec.refresh_token}
        if rec.resource:
            data["resource"] = rec.resource  # RFC 8707: the same audience as before
        try:
            client = client_now(rec.client, self.config, self._environ, self._store)
            headers = client_auth(client, data)
        except (OAuthError, CredentialError) as exc:
            self.problem = (
                f"refreshing the token of {self.principal!r} for upstream {self.config.id!r} "
                f"failed: {exc}; run `{login_command(self.config, self.principal)}`"
            )
            return None
        # Once sent, the request may rotate the refresh token at the server: a call
        # cancelled between the answer and ``_save`` lost the only good one (the principal
        # had to sign in again). Finished whatever the caller does; ``bounded`` caps it.
        with anyio.CancelScope(shield=True):
            renewed = await self._refresh_sent(rec, data, headers)
        return renewed

    async def _refresh_sent(
        self, rec: TokenRecord, data: dict[str, str], headers: dict[str, str]
    ) -> TokenRecord | None:
        assert rec.token_endpoint
        try:
            async with http_client() as http:
                response = await bounded(
                    http, "POST", rec.token_endpoint, data=data, headers=headers
                )
        except httpx2.HTTPError as exc:
            self.problem = (
                f"refreshing the token of {self.principal!r} for upstream {self.config.id!r} "
                f"failed: {why_failed(exc)} at {rec.token_endpoint}"
            )
            return None
        if response.status_code != 200:
            self.problem = (
                f"the authorization server refused to refresh the token of {self.principal!r} "
                f"for upstream {self.config.id!r} "
                f"({oauth_error(response, [*sent_secrets(data, headers), *self.secrets()])}): run "
                f"`{login_command(self.config, self.principal)}`"
            )
            return None
        try:
            new = _record_from(
                answer_json(response),
                via="refresh_token",
                base=rec,
                # a record kept before the configured client's secret stayed out of it
                client=kept_client(rec.client, self.config),
            )
        except (ValueError, OAuthError) as exc:
            self.problem = (
                f"the refresh answer for {self.principal!r} is unusable ({type(exc).__name__})"
            )
            return None
        self.problem = None
        self._save(new)
        return new

    async def exchange(self, subject: str, base: TokenRecord | None = None) -> TokenRecord | None:
        """RFC 8693: trade the host-provided ``subject`` token for an access token to this
        upstream, where its authorization server offers the grant; the result is saved."""
        try:
            meta = await discover(self.config, base)
            grants = meta.get("grant_types_supported") or []
            if TOKEN_EXCHANGE_GRANT not in grants:
                self.problem = (
                    f"the authorization server of upstream {self.config.id!r} does not offer token "
                    f"exchange (RFC 8693); {self.principal!r} must sign in: "
                    f"`{login_command(self.config, self.principal)}`"
                )
                return None
            client = await self._exchange_client(meta, base)
        except OAuthError as exc:
            self.problem = str(exc)
            return None
        oauth = self.config.oauth
        data = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token": subject,
            "subject_token_type": oauth.subject_token_type if oauth else ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "resource": meta["resource"],
        }
        if oauth is not None and oauth.scopes:
            data["scope"] = " ".join(oauth.scopes)
        try:
            headers = client_auth(client, data)
        except OAuthError as exc:
            self.problem = f"token exchange for {self.principal!r} failed: {exc}"
            return None
        try:
            async with http_client() as http:
                response = await bounded(
                    http, "POST", meta["token_endpoint"], data=data, headers=headers
                )
        except httpx2.HTTPError as exc:
            self.problem = f"token exchange for {self.principal!r} failed: {why_failed(exc)}"
            return None
        if response.status_code != 200:
            self.problem = (
                f"the authorization server of upstream {self.config.id!r} refused the token "
                f"exchange for {self.principal!r} "
                f"({oauth_error(response, [*sent_secrets(data, headers), *self.secrets()])})"
            )
            return None
        try:
            new = _record_from(
                answer_json(response),
                via="token_exchange",
                base=None,
                client=kept_client(client, self.config),
                **{k: meta.get(k) for k in _META_KEYS},
            )
        except (ValueError, OAuthError) as exc:
            self.problem = f"the token exchange answer for {self.principal!r} is unusable ({type(exc).__name__})"
            return None
        self.problem = None
        self._save(new)
        return new

    async def _exchange_client(
        self, meta: Mapping[str, Any], base: TokenRecord | None
    ) -> dict[str, Any] | None:
        """The client that asks for the exchange: the configured one, the principal's own,
        or one SharedOS registers (RFC 7591) once per upstream and keeps in the store."""
        configured = configured_client(self.config, self._environ, self._store)
        if configured is not None:
            return configured
        if (
            base is not None
            and base.client
            and TOKEN_EXCHANGE_GRANT in base.client.get("grant_types", [])
        ):
            return base.client
        from mcp.client.auth.utils import issuers_match

        store = self._store()
        kept = store.secret(self.config.id, _EXCHANGE_CLIENT)
        issuer = str(meta.get("issuer") or "")
        if kept:
            with contextlib.suppress(ValueError, RecursionError):
                found = json.loads(kept)
                if (
                    client_information(found) is not None
                    and isinstance(found.get("issuer"), str)
                    and issuers_match(found["issuer"], issuer)
                ):
                    return dict(found)
            # not a client (a store written by hand?), or one registered at another
            # authorization server than the one the upstream names now (or kept before
            # clients were bound to theirs): its id and secret are that server's only
            # (SEP-2352, as the SDK binds them), so a new one is registered below
        endpoint = meta.get("registration_endpoint")
        if not endpoint:
            raise OAuthError(
                f"upstream {self.config.id!r}: its authorization server has no registration "
                "endpoint; set oauth.client_id to a client allowed to exchange tokens"
            )
        body = {
            "client_name": (self.config.oauth.client_name if self.config.oauth else "SharedOS"),
            "redirect_uris": ["http://127.0.0.1/callback"],
            "grant_types": ["authorization_code", "refresh_token", TOKEN_EXCHANGE_GRANT],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_post",
        }
        try:
            async with http_client() as http:
                response = await bounded(http, "POST", endpoint, json=body)
        except httpx2.HTTPError as exc:
            raise OAuthError(
                f"client registration at {endpoint} failed: {why_failed(exc)}"
            ) from None
        if response.status_code not in (200, 201):
            raise OAuthError(
                f"upstream {self.config.id!r}: client registration refused ({oauth_error(response, self.secrets())})"
            )
        try:
            client = answer_json(response)
        except ValueError:
            client = None
        if not isinstance(client, dict) or client_information(client) is None:
            # a non-object answer, or one the SDK refuses as client information, escaped
            # the caller's OAuthError and took the whole turn down (every upstream with
            # it), and was kept for every later exchange: it is this upstream's failure only
            raise OAuthError(
                f"upstream {self.config.id!r}: client registration at {endpoint} answered "
                "no client (RFC 7591: a JSON object with a client_id, its fields of the "
                "types RFC 7591 gives them)"
            )
        client["issuer"] = issuer  # the server it is a client of, and may be presented to
        try:
            store.put_secret(self.config.id, _EXCHANGE_CLIENT, json.dumps(client))
        except OSError as exc:  # its disk full: registered again by the next host that needs it
            logger.warning(
                "the client registered for token exchange with upstream %r could not be "
                "stored (%s): this host uses it until it ends",
                self.config.id,
                exc.strerror or exc,
            )
        return client


def why_failed(exc: BaseException) -> str:
    """What an OAuth request's failure says: an insecure endpoint's sentence (no secret in
    it), else the exception's type (an ``httpx`` message may quote what was sent)."""
    return str(exc) if isinstance(exc, InsecureEndpoint) else type(exc).__name__


_META_KEYS = (
    "issuer",
    "token_endpoint",
    "revocation_endpoint",
    "registration_endpoint",
    "grant_types_supported",
    "resource",
)


def configured_client(
    config: UpstreamConfig, environ: Mapping[str, str], store: StoreOpener | None
) -> dict[str, Any] | None:
    """The client the host file names (``oauth.client_id`` and its secret), as RFC 7591 client
    information; None when it names none (dynamic registration)."""
    oauth = config.oauth
    if oauth is None or oauth.client_id is None:
        return None
    client: dict[str, Any] = {
        "client_id": oauth.client_id,
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token", TOKEN_EXCHANGE_GRANT],
    }
    if oauth.client_secret is not None:
        client["client_secret"] = read_reference(
            oauth.client_secret,
            environ,
            upstream=config.id,
            label="oauth.client_secret",
            store=store,
        )
        client["token_endpoint_auth_method"] = "client_secret_post"
    return client


def client_now(
    client: Mapping[str, Any] | None,
    config: UpstreamConfig,
    environ: Mapping[str, str],
    store: StoreOpener | None,
) -> dict[str, Any] | None:
    """The client a principal's tokens were issued to, as it authenticates now: the one the
    host file names (``oauth.client_id``) with the secret the host file gives now -- never
    a copy kept with the tokens, which an operator's rotation of the secret left stale
    (every refresh refused ``invalid_client``). Another client (a registered one) as kept.
    ``CredentialError`` when the configured secret cannot be read."""
    if client is None:
        return None
    configured = configured_client(config, environ, store)
    if configured is None or configured["client_id"] != client.get("client_id"):
        return dict(client)
    now = {k: v for k, v in client.items() if k != "client_secret"}
    now["token_endpoint_auth_method"] = configured["token_endpoint_auth_method"]
    if "client_secret" in configured:
        now["client_secret"] = configured["client_secret"]
    return now


def kept_client(client: Mapping[str, Any] | None, config: UpstreamConfig) -> dict[str, Any] | None:
    """``client`` as kept with a principal's tokens: the configured client without its
    secret (the host file holds it; ``client_now`` reads it), any other as it is."""
    if client is None:
        return None
    oauth = config.oauth
    if (
        oauth is not None
        and oauth.client_id is not None
        and client.get("client_id") == oauth.client_id
    ):
        return {k: v for k, v in client.items() if k != "client_secret"}
    return dict(client)


async def discover(config: UpstreamConfig, base: TokenRecord | None = None) -> dict[str, Any]:
    """The upstream's authorization server metadata (RFC 9728 protected-resource metadata,
    then RFC 8414 / OpenID discovery, with the SDK's URL rules), and the resource indicator.
    Uses what ``base`` already recorded when it has a token endpoint."""
    from mcp.client.auth.utils import (
        build_oauth_authorization_server_metadata_discovery_urls,
        build_protected_resource_metadata_discovery_urls,
        extract_resource_metadata_from_www_auth,
    )
    from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
    from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

    assert config.url is not None
    if base is not None and base.token_endpoint:
        return {k: getattr(base, k) for k in _META_KEYS}
    resource = resource_url_from_server_url(config.url)
    as_url: str | None = None
    async with http_client() as http:
        try:
            probe = await bounded(
                http,
                "POST",
                config.url,
                json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                headers={"Accept": "application/json, text/event-stream"},
            )
            hint = (
                extract_resource_metadata_from_www_auth(probe) if probe.status_code == 401 else None
            )
            for url in build_protected_resource_metadata_discovery_urls(hint, config.url):
                got = await bounded(http, "GET", url)
                if got.status_code == 200:
                    prm = ProtectedResourceMetadata.model_validate_json(got.content)
                    if prm.resource and check_resource_allowed(resource, str(prm.resource)):
                        resource = str(prm.resource)
                    if prm.authorization_servers:
                        as_url = str(prm.authorization_servers[0])
                    break
            meta: OAuthMetadata | None = None
            for url in build_oauth_authorization_server_metadata_discovery_urls(as_url, config.url):
                got = await bounded(http, "GET", url)
                if got.status_code == 200:
                    meta = OAuthMetadata.model_validate_json(got.content)
                    break
        except (httpx2.HTTPError, ValueError) as exc:
            raise OAuthError(
                f"upstream {config.id!r}: its OAuth metadata could not be read ({why_failed(exc)})"
            ) from None
    if meta is None:
        raise OAuthError(f"upstream {config.id!r} publishes no OAuth authorization server metadata")
    _check_issuer(config, meta, as_url)
    if config.oauth is not None and config.oauth.resource:
        resource = config.oauth.resource
    return {
        "issuer": str(meta.issuer),
        "token_endpoint": str(meta.token_endpoint),
        "revocation_endpoint": str(meta.revocation_endpoint) if meta.revocation_endpoint else None,
        "registration_endpoint": str(meta.registration_endpoint)
        if meta.registration_endpoint
        else None,
        "grant_types_supported": list(meta.grant_types_supported or []),
        "resource": resource,
    }


def _check_issuer(config: UpstreamConfig, meta: Any, as_url: str | None) -> None:
    """RFC 8414 section 3.3 (as the SDK's login flow checks it): the metadata names as its
    issuer the authorization server its document was fetched for -- the one the upstream's
    protected-resource metadata names, or (no such metadata) the upstream's origin -- or
    it is not used. Otherwise a document could put the token endpoint, where subject
    tokens, refresh tokens and client secrets go, at a server it is not."""
    from mcp.client.auth.utils import issuers_match
    from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter

    issuer = str(meta.issuer)
    if as_url is not None:
        expected = as_url
    else:
        assert config.url is not None
        origin = httpx2.URL(config.url)
        expected = str(
            TypeAdapter(
                AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True)
            ).validate_python(f"{origin.scheme}://{origin.netloc.decode('ascii')}")
        )
        if issuers_match(issuer, expected):
            expected = issuer
    if issuer != expected:
        raise OAuthError(
            f"upstream {config.id!r}: the authorization server metadata for {expected[:200]} "
            f"names another issuer ({issuer[:200]}); RFC 8414 forbids using it, so nothing "
            "was sent to its endpoints"
        )


class CredentialAuth(httpx2.Auth):
    """The ``httpx2.Auth`` of an HTTP session. With a ``TokenSource`` (OAuth): the principal's
    current bearer token per request, renewed once after a 401. Either way, a refusal that
    remains (401, 403 ``insufficient_scope``) is let through to the SDK untouched and noted
    (``CALL_DENIALS`` of the call, and ``on_denial``)."""

    requires_response_body = False

    def __init__(
        self, source: TokenSource | None, on_denial: Callable[[Denial], None] | None = None
    ) -> None:
        self.source = source
        self._on_denial = on_denial

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        source = self.source
        token = await source.current() if source is not None else None
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        sent = [token] if token is not None else []
        if response.status_code == 401 and source is not None and token is not None:
            fresh = await source.recover(token)
            if fresh is not None and fresh != token:
                # no aclose here: httpx reads the refused response itself before the retry
                # (closing it first makes that read fail and ends the session)
                request.headers["Authorization"] = f"Bearer {fresh}"
                sent.append(fresh)
                response = yield request
        denial = _denial_of(response)
        if denial is not None:
            # the refusal's words are the upstream's: never a token this request carried
            # (one renewed a moment ago included, which no scrubber may hold yet)
            denial = denial.scrubbed(Redactor([*sent, *(source.secrets() if source else ())]))
            if source is not None:
                source.last_denial = denial
            if self._on_denial is not None:
                self._on_denial(denial)
            noted = CALL_DENIALS.get()
            if noted is not None:
                noted.append(denial)


def _denial_of(response: httpx2.Response) -> Denial | None:
    from mcp.client.auth.utils import extract_field_from_www_auth, extract_scope_from_www_auth

    if response.status_code == 401:
        return Denial(401, extract_field_from_www_auth(response, "error"))
    if (
        response.status_code == 403
        and extract_field_from_www_auth(response, "error") == "insufficient_scope"
    ):
        return Denial(403, "insufficient_scope", extract_scope_from_www_auth(response))
    return None


def denial_message(
    config: UpstreamConfig, identity: str, denial: Denial, principal: str | None
) -> str:
    """The sentence a refused call (or listing) fails with: who was refused, and what the
    operator runs. Never a token."""
    import shlex

    how = login_command(config, principal) if principal is not None else None
    if denial.insufficient_scope:
        need = f" (it asks for scope {denial.scope!r})" if denial.scope else ""
        fix = (
            # the scope is the upstream's text: quoted, so the command is one command
            f"`{how} --scope {shlex.quote(denial.scope)}`"
            if how and denial.scope
            else (f"`{how}`" if how else "a credential with that scope")
        )
        return (
            f"upstream {config.id!r} refused the call: the credential {identity} lacks the scope "
            f"it needs{need}; the operator runs {fix}"
        )
    error = f" ({denial.error})" if denial.error else ""
    fix = (
        f"`{how}`"
        if how
        else "a valid credential in its place (sharedos host check names where it is read from)"
    )
    return (
        f"upstream {config.id!r} refused the credential {identity} (HTTP 401{error}); the operator "
        f"runs {fix}"
    )

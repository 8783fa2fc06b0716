"""Where a host gets its policy bundle: a directory (or file) on disk, or an HTTP(S) URL.

A source returns the bundle's bytes (its signatures are inside it:
``sharedos-policy sign``), or ``NotModified`` when the bundle is the one the
caller already has:

* ``DirectorySource(path)``: ``path/bundle.json`` (or ``path`` itself when
  it is a file); "unchanged" when the bytes hash to the caller's tag (a file
  rewritten with the same content is no change).
* ``HttpSource(url)``: ``GET url`` with ``If-None-Match`` (a ``304`` is no
  change). Bounded: a timeout per network operation, a deadline for the whole
  fetch (a server that answers one byte at a time cannot hold a poll past
  it: its connection is shut when the deadline passes) and a size cap; only
  ``http`` and ``https``. A body shorter than its ``Content-Length`` (the
  connection closed part way) is a failed fetch, not a bundle. A ``304`` to a
  request that had nothing to compare (the host holds no bundle) is a broken cache or server: the bundle is asked
  for once more, uncached, and if the answer is still ``304`` that is an error.

Errors are ``SourceError`` with one line saying what failed where.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import logging
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sharedos import textfile
from sharedos.errors import BundleDistributionError
from sharedos.redaction import MIN_SECRET_CHARS, SECRET_NAME_RE, Redactor
from sharedos.terminal import unambiguous

logger = logging.getLogger("sharedos.bundles")

__all__ = [
    "MAX_BUNDLE_BYTES",
    "DirectorySource",
    "Fetched",
    "HttpSource",
    "NotModified",
    "SourceError",
    "open_source",
]

#: a bundle larger than this is refused (a compiled policy is kilobytes to a few megabytes)
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
BUNDLE_NAME = "bundle.json"


class SourceError(BundleDistributionError):
    """The source could not be read (unreachable, missing, too large)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """A bundle as fetched: its bytes and the tag to poll with next."""

    data: bytes
    tag: str
    origin: str


@dataclass(frozen=True, slots=True)
class NotModified:
    """The source still has the bundle the caller holds."""

    tag: str


class BundleSource(Protocol):
    """Fetch the bundle unless it is still ``tag``."""

    origin: str

    def fetch(self, tag: str | None) -> Fetched | NotModified:
        """The bundle, or ``NotModified``; ``SourceError`` when it cannot be read."""
        ...


def _content_tag(data: bytes) -> str:
    return '"sha256:' + hashlib.sha256(data).hexdigest() + '"'


def _read_capped(path: Path) -> bytes:
    try:
        return textfile.read_bytes(path, limit=MAX_BUNDLE_BYTES)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None


class DirectorySource:
    """A bundle file on disk (``DIR/bundle.json``, or the file itself)."""

    def __init__(self, path: str | Path) -> None:
        self.root = Path(path)
        self.origin = str(self.root)

    @property
    def path(self) -> Path:
        """The bundle file (decided at each fetch: the directory may appear later)."""
        return self.root / BUNDLE_NAME if self.root.is_dir() else self.root

    def fetch(self, tag: str | None) -> Fetched | NotModified:
        """Read the bundle; ``NotModified`` when its bytes hash to ``tag``."""
        path = self.path
        data = _read_capped(path)
        new_tag = _content_tag(data)
        if tag == new_tag:
            return NotModified(new_tag)
        return Fetched(data, new_tag, str(path))


class _Deadline:
    """The sockets of one fetch, shut down when its deadline passes (which unblocks any read)."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, sock: Any) -> None:
        """Shut ``sock`` down at the deadline (at once if it has passed)."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: Any) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing to unblock
        sock.shutdown(socket.SHUT_RDWR)


def _watched(base: type[http.client.HTTPConnection], deadline: _Deadline) -> Any:
    """``base`` whose socket, once connected, is handed to ``deadline``."""

    class Watched(base):  # type: ignore[misc,valid-type]
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    return Watched


class _HttpHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_watched(http.client.HTTPConnection, self._deadline), req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(
            _watched(http.client.HTTPSConnection, self._deadline),
            req,
            context=getattr(self, "_context", None),
        )


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed to ``http``/``https`` only: urllib's own also follows one to
    ``ftp://``, which its FTP handler fetches outside the fetch's deadline."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in ("http", "https"):
            raise urllib.error.HTTPError(
                req.full_url,
                code,
                f"a redirect to {shown_url(newurl)} (a bundle URL must be http:// or https://)",
                headers,
                fp,
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def shown_url(url: str, hidden: Iterable[str] = ()) -> str:
    """``url`` as a message may show it: a password in its user information (a user name
    with none: it is then the credential) and every query value replaced by ``***``, no
    fragment (a presigned URL carries its signature,
    ``?token=`` a bearer token: SharedOS cannot tell which parameter is the secret), and
    each of the ``hidden`` values in its path (the host variables the host file builds it
    from: ``https://h/t/${BUNDLE_TOKEN}/policy.tar``) as ``***`` too."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" not in netloc and not netloc.startswith("["):
            _host, colon, port = netloc.rpartition(":")
            if colon and port and not port.isdigit():
                # ``https://u:pa#ss@host/``: the URL ends its authority at the ``#`` (or ``?``,
                # ``/``) inside the password, leaving ``u:pa`` as host and port; no request can
                # be made of it, and showing it would show the password's head
                return "(a URL that cannot be parsed: its authority has no valid port)"
        if "@" in netloc:
            userinfo, _, hostport = netloc.rpartition("@")
            user, colon, _password = userinfo.partition(":")
            # a user name alone is the credential (https://TOKEN@host/: a token sent as the
            # user, as GitHub and GitLab take it)
            netloc = f"{user}:***@{hostport}" if colon else f"***@{hostport}"
        query = "&".join(
            f"{key}=***" if eq else "***" if _bare_credential(key) else key
            for key, eq, _value in (item.partition("=") for item in parts.query.split("&"))
            if key or eq
        )
        path = parts.path
        for value in sorted({v for v in hidden if v}, key=len, reverse=True):
            for form in dict.fromkeys((value, urllib.parse.quote(value))):
                path = path.replace(form, "***")
        return urllib.parse.urlunsplit(
            parts._replace(netloc=netloc, path=path, query=query, fragment="")
        )
    except ValueError:
        return "(a URL that cannot be parsed)"


#: a query parameter named as a credential: a presigned URL's signature (``X-Amz-Signature``,
#: ``X-Goog-Signature``, ``sig``), a token (``X-Amz-Security-Token``, ``token``), a key, ...
_CREDENTIAL_PARAM = re.compile(r"sig|token|secret|passw|pwd|auth|credential|key|session", re.I)


def _bare_credential(item: str) -> bool:
    """True when a query item with no ``=`` may be a credential: a token given as the whole
    query (``?sk_live_...``), at least ``MIN_SECRET_CHARS`` long; a short flag (``?dl``,
    ``?raw``) is none."""
    return len(urllib.parse.unquote_plus(item)) >= MIN_SECRET_CHARS


def _credential_name(key: str) -> bool:
    """True when a query parameter named ``key`` (percent-encoded as written) is a
    credential: by ``_CREDENTIAL_PARAM``, or as an upstream URL's is (``SECRET_NAME_RE``:
    ``?pass=``, ``?cookie=``), so one name is never a credential in one URL and sent in
    clear in another."""
    name = urllib.parse.unquote_plus(key)
    return bool(_CREDENTIAL_PARAM.search(name) or SECRET_NAME_RE.search(name))


def names_a_credential(name: str) -> bool:
    """True when a host variable (or a query parameter) called ``name`` holds a credential
    by its name (``_credential_name``: ``BUNDLE_TOKEN``, ``BUNDLE_SIG``, ``API_KEY``)."""
    return _credential_name(name)


def url_credentials(url: str) -> list[str]:
    """The credentials a bundle URL carries, which a host keeps out of what it records and
    prints as it does its other secrets: the password of its user information (the user
    name when there is none: ``https://TOKEN@host/``), the value of each query parameter named as a credential (``_credential_name``), its fragment. Not
    every query value, as a message masks them: a presigned URL's ``X-Amz-Algorithm`` or
    date would then be scrubbed from every record, and hold back every tool naming it."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return [url]
    user, colon, password = parts.netloc.rpartition("@")[0].partition(":")
    found = [password if colon else user, parts.fragment]
    found += [
        value if eq else key
        for key, eq, value in (i.partition("=") for i in parts.query.split("&"))
        if (_credential_name(key) if eq else _bare_credential(key))
    ]
    return [v for value in found if value for v in {value, urllib.parse.unquote_plus(value)}]


def in_clear(url: str) -> bool:
    """True when a request to ``url`` would carry a credential of it across a network in
    clear: plain ``http://`` to another machine, with a user information or a query value
    named as a credential (``url_credentials`` less the fragment, which is never sent)."""
    try:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
    except ValueError:
        return False
    return scheme == "http" and _sends_credential(url) and not on_this_machine(url)


def _sends_credential(url: str) -> bool:
    """True when a request to ``url`` carries a credential of it over the network: its user
    information (sent as HTTP Basic) or a query value named as a credential (a fragment is
    never sent)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return True
    if parts.netloc.rpartition("@")[0]:
        return True
    return any(
        (value and _credential_name(key)) or (not eq and _bare_credential(key))
        for key, eq, value in (i.partition("=") for i in parts.query.split("&"))
    )


def on_this_machine(url: str) -> bool:
    """True when ``url``'s host is this machine (localhost, 127.0.0.0/8, ::1)."""
    import ipaddress

    try:
        host = urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_secrets(url: str) -> list[str]:
    """What in ``url`` may be a credential: what ``shown_url`` masks (the user information,
    every query value, the fragment; all of a URL it cannot show), as written and
    percent-decoded."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return [url]
    userinfo = parts.netloc.rpartition("@")[0]
    # the query as urlsplit reads it (tabs and newlines dropped) and as written (as urllib
    # sends it, and http.client quotes it refusing it)
    written = url.partition("?")[2].partition("#")[0]
    found = [userinfo, userinfo.partition(":")[2], parts.fragment]
    for query in (parts.query, written):
        found.append(query)
        found += [value for _key, _eq, value in (i.partition("=") for i in query.split("&"))]
    if shown_url(url).startswith("("):
        # shown as nothing at all (a password holding ``#``, ``?`` or ``/`` ends the
        # authority there, and the rest of it reads as the path)
        found += [url, parts.netloc, parts.path]
    return [v for value in found if value for v in {value, urllib.parse.unquote_plus(value)}]


class HttpSource:
    """A bundle served over HTTP(S), polled with ``If-None-Match``.

    ``timeout_s`` bounds each network operation (connect, each read);
    ``deadline_s`` the whole fetch, redirects and body included.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        deadline_s: float = 30.0,
        hidden: Iterable[str] = (),
    ) -> None:
        hidden = tuple(hidden)
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise SourceError(f"{shown_url(url, hidden)}: a bundle URL must be http:// or https://")
        if in_clear(url):
            raise SourceError(
                f"{shown_url(url, hidden)}: a bundle URL that carries a credential (a user:password@, "
                "a token, a presigned signature) is https:// (plain http:// only on this "
                "machine): it would cross the network in clear with every poll"
            )
        if timeout_s <= 0 or deadline_s <= 0:
            raise ValueError("timeout_s and deadline_s must be positive")
        self.url = url
        #: the URL as messages show it (a presigned URL's signature is a credential)
        #: (and ``hidden``: the host variables the host file builds its path from)
        self.origin = shown_url(url, hidden)
        #: what is requested, and the Basic credentials of the URL's ``user:password@``
        self._request_url, self._authorization = _basic_auth(url)
        #: the URL's credentials, scrubbed from what a failed fetch says (``_said``)
        self._secrets = Redactor([*url_secrets(url), *hidden])
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s

    def _get(self, tag: str | None, *, uncached: bool = False) -> tuple[int, bytes, str | None]:
        request = urllib.request.Request(self._request_url, headers={"Accept": "application/json"})
        if self._authorization is not None:
            # to this URL only, never to where it redirects (a presigned URL elsewhere)
            request.add_unredirected_header("Authorization", self._authorization)
        url = self.origin  # the messages show the URL with its credentials masked
        if tag:
            request.add_header("If-None-Match", tag)
        if uncached:
            request.add_header("Cache-Control", "no-cache")
            request.add_header("Pragma", "no-cache")
        with _Deadline(self.deadline_s) as deadline:
            opener = urllib.request.build_opener(
                _HttpHandler(deadline), _HttpsHandler(deadline), _HttpOnlyRedirects()
            )
            try:
                with opener.open(request, timeout=min(self.timeout_s, self.deadline_s)) as resp:
                    data = resp.read(MAX_BUNDLE_BYTES + 1)
                    status, etag = int(resp.status), resp.headers.get("ETag")
                    announced = _content_length(resp.headers.get("Content-Length"))
            except urllib.error.HTTPError as exc:
                if exc.code == 304:
                    return 304, b"", tag
                raise SourceError(f"GET {url}: HTTP {exc.code} {self._said(exc.reason)}") from None
            except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
                if deadline.expired:
                    raise self._late() from None
                reason = getattr(exc, "reason", exc)
                raise SourceError(f"GET {url}: {self._said(reason)}") from None
            if deadline.expired:  # the body was cut short when the deadline passed
                raise self._late()
        if len(data) > MAX_BUNDLE_BYTES:
            raise SourceError(f"GET {url}: larger than {MAX_BUNDLE_BYTES} bytes")
        if announced is not None and len(data) < announced:
            # a sized read returns what came before the connection closed, without an error:
            # that is a failed fetch, not a bundle to verify (and refuse as "not JSON")
            raise SourceError(
                f"GET {url}: the answer was cut short: {len(data)} of {announced} bytes "
                "before the connection closed"
            )
        return status, data, etag

    def _said(self, reason: object) -> str:
        """What urllib, http.client or the server said of a failed fetch, without the URL's
        credentials: their messages quote the URL, or part of it (``nonnumeric port:
        'PASSWORD@host'`` of a URL with a password, ``URL can't contain control
        characters. '/b.json?token=…'``), as written; and spelled out (``unambiguous``):
        the server chose its reason phrase, which a host logs and ``sharedos bundle verify``
        and ``sharedos run`` print (an escape sequence there retitled or rewrote the
        operator's terminal)."""
        return unambiguous(self._secrets.scrub(str(reason)))

    def _late(self) -> SourceError:
        return SourceError(f"GET {self.origin}: no complete answer within {self.deadline_s:g} s")

    def fetch(self, tag: str | None) -> Fetched | NotModified:
        """GET the bundle, conditional on ``tag`` (unconditional, and uncached if need be, without)."""
        status, data, etag = self._get(tag)
        if status == 304 and not tag:
            # nothing was asked to compare against: a cache (or the server) is wrong
            logger.warning(
                "sharedos: GET %s answered 304 Not Modified to a request that had no "
                "If-None-Match (this host holds no bundle); asking again, uncached",
                self.origin,
            )
            status, data, etag = self._get(None, uncached=True)
            if status == 304:
                raise SourceError(
                    f"GET {self.origin}: answered 304 Not Modified to a request that had no "
                    "If-None-Match (the host holds no bundle yet), even uncached; "
                    "the server or a cache in front of it is misconfigured"
                )
        if status == 304:
            return NotModified(tag or "")
        return Fetched(data, etag or _content_tag(data), self.origin)


def _basic_auth(url: str) -> tuple[str, str | None]:
    """``url`` without its user information, and that as an HTTP Basic ``Authorization``
    value (None when it has none). urllib sends no user information: it takes it for part
    of the host, so a bundle URL with ``user:password@`` could never be fetched."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url, None
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _colon, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    token = base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return urllib.parse.urlunsplit(parts._replace(netloc=hostport)), f"Basic {token}"


def _content_length(value: str | None) -> int | None:
    """The length a ``Content-Length`` header announces (None: none, or not a number)."""
    if value is None or not value.strip().isdigit():
        return None
    return int(value.strip())


def is_url(location: str) -> bool:
    """True when a bundle or shadow location is an http(s) URL, not a path."""
    return location[:8].lower().startswith(("http://", "https://"))


def shown_location(location: str, hidden: Iterable[str] = ()) -> str:
    """A bundle or shadow location as messages and state files show it: a URL without its
    credentials (``shown_url``, ``hidden`` masked in its path), a path as it is."""
    return shown_url(location, hidden) if is_url(location) else location


def open_source(location: str | Path, hidden: Iterable[str] = ()) -> DirectorySource | HttpSource:
    """An ``HttpSource`` for an http(s) URL (``hidden``: the values its messages and
    records mask, ``HostConfig.bundle_hidden``), else a ``DirectorySource``."""
    text = str(location)
    if is_url(text):
        return HttpSource(text, hidden=hidden)
    return DirectorySource(text)

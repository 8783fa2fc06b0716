"""Where a host gets its policy bundle: a directory (or file) on disk, or an HTTP(S) URL.

A source returns the bundle's bytes (its signatures are inside it:
``sharedos-policy sign``), or ``NotModified`` when the bundle is the one the
caller already has:

* ``DirectorySource(path)``: ``path/bundle.json`` (or ``path`` itself when
  it is a file); "unchanged" when the bytes hash to the caller's tag (a file
  rewritten with the same content is no change).
* ``HttpSource(url)``: ``GET url`` with ``If-None-Match`` (a ``304`` is no
  change). Bounded: a timeout per request and a size cap; only ``http`` and
  ``https``.

Errors are ``SourceError`` with one line saying what failed where.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sharedos.errors import SharedOSError

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


class SourceError(SharedOSError):
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
        with path.open("rb") as fh:
            data = fh.read(MAX_BUNDLE_BYTES + 1)
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_BUNDLE_BYTES:
        raise SourceError(f"{path} is larger than {MAX_BUNDLE_BYTES} bytes")
    return data


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


class HttpSource:
    """A bundle served over HTTP(S), polled with ``If-None-Match``."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise SourceError(f"{url}: a bundle URL must be http:// or https://")
        self.url = url
        self.origin = url
        self.timeout_s = timeout_s

    def _get(self, url: str, tag: str | None) -> tuple[int, bytes, str | None]:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if tag:
            request.add_header("If-None-Match", tag)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                data = resp.read(MAX_BUNDLE_BYTES + 1)
                status, etag = int(resp.status), resp.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            if exc.code == 304:
                return 304, b"", tag
            raise SourceError(f"GET {url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SourceError(f"GET {url}: {reason}") from None
        if len(data) > MAX_BUNDLE_BYTES:
            raise SourceError(f"GET {url}: larger than {MAX_BUNDLE_BYTES} bytes")
        return status, data, etag

    def fetch(self, tag: str | None) -> Fetched | NotModified:
        """GET the bundle, conditional on ``tag``."""
        status, data, etag = self._get(self.url, tag)
        if status == 304:
            return NotModified(tag or "")
        return Fetched(data, etag or _content_tag(data), self.origin)


def open_source(location: str | Path) -> DirectorySource | HttpSource:
    """An ``HttpSource`` for an http(s) URL, else a ``DirectorySource``."""
    text = str(location)
    if text.lower().startswith(("http://", "https://")):
        return HttpSource(text)
    return DirectorySource(text)

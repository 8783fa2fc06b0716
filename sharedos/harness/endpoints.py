"""Before a harness starts: does the model endpoint it is configured with accept connections?

A harness whose model endpoint refuses connections does not fail fast: Claude
Code, Codex and Pi retry with back-off until the turn's deadline (measured:
exit 3 only after 130 s with ``--timeout 120``). So before launching, the
runtime finds the model endpoints the launch names — environment variables
``*_BASE_URL`` (``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``,
``DEEPSEEK_BASE_URL`` ...) and ``base_url`` / ``baseUrl`` keys in the
configuration files the adapter wrote (Codex's ``config.toml``, Pi's
``models.json``) — and tries one TCP connection to each whose host is a
literal address or ``localhost`` (names are not resolved here: a DNS lookup
can hang, and a remote provider's failures are the harness's to report).
One that refuses is reported at once, and the harness is not started.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import socket
import tomllib
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

from sharedos import textfile
from sharedos.harness.adapters.base import HarnessUnavailable, Launch
from sharedos.harness.process import redact

#: how long one probe may take (a listening endpoint answers a SYN at once)
PROBE_TIMEOUT_S = 2.0
_URL_KEYS = frozenset({"base_url", "baseUrl", "baseURL"})


class ModelEndpointRefused(HarnessUnavailable):
    """The harness's model endpoint refuses connections: the turn would only run into its deadline."""


def _urls_in(value: Any, depth: int = 0) -> Iterator[str]:
    """Values of ``base_url``-like keys anywhere in a parsed configuration."""
    if depth > 12:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _URL_KEYS and isinstance(item, str):
                yield item
            else:
                yield from _urls_in(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _urls_in(item, depth + 1)


def model_endpoints(launch: Launch, *, skip: Iterable[str | None] = ()) -> list[str]:
    """The http(s) model endpoints ``launch`` names, in order, without ``skip`` (the bridge's)."""
    found: list[str] = [v for k, v in launch.env.items() if k.upper().endswith("_BASE_URL")]
    for path in launch.files:
        with contextlib.suppress(OSError, ValueError):
            text = textfile.read_text(path)
            if path.suffix == ".toml":
                found.extend(_urls_in(tomllib.loads(text)))
            elif path.suffix == ".json":
                found.extend(_urls_in(json.loads(text)))
    skipped = {s.rstrip("/") for s in skip if s}
    out: list[str] = []
    for url in found:
        if urlsplit(url).scheme not in ("http", "https"):
            continue
        if any(url.rstrip("/").startswith(s) for s in skipped) or url in out:
            continue
        out.append(url)
    return out


def _probe_target(url: str) -> tuple[str, int] | None:
    """(host, port) to probe for ``url``, or None when its host is a name (not resolved here)."""
    parts = urlsplit(url)
    host = parts.hostname
    if host is None:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if host == "localhost":
        return "127.0.0.1", port
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return host, port


def loopback_ports(launch: Launch, *, skip: Iterable[str | None] = ()) -> list[int]:
    """The ports of the model endpoints ``launch`` names on this host's loopback.

    A confined harness (network ``loopback``) reaches the bridge and its model
    endpoint: an operator's model served on ``127.0.0.1`` / ``localhost`` is let
    in by its port, exactly like ``[confinement] loopback_ports``; a model on
    another host is not (docs/confinement.md: an egress proxy's port is).
    """
    ports: list[int] = []
    for url in model_endpoints(launch, skip=skip):
        target = _probe_target(url)
        if target is None:
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(target[0]).is_loopback and target[1] not in ports:
                ports.append(target[1])
    return ports


def refusal_of(url: str) -> str | None:
    """Why ``url``'s endpoint refuses connections (``ECONNREFUSED`` ...), or None if it accepts
    them (or was not probed)."""
    target = _probe_target(url)
    if target is None:
        return None
    family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(PROBE_TIMEOUT_S)
        try:
            sock.connect(target)
        except ConnectionRefusedError:
            return "connection refused (ECONNREFUSED)"
        except OSError as exc:
            if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                return f"{exc.strerror or 'unreachable'} ({errno.errorcode.get(exc.errno, '')})"
            return None  # a timeout or anything else: not known to refuse
    return None


def _shown(url: str, launch: Launch) -> str:
    """``url`` as a message may show it: with its credentials masked (``shown_url``: a
    password, every query value, no fragment; a ``base_url`` written from ``vendor`` is no
    env value, yet may carry one), or — when it is a secret of the launch, as every env
    value of the host file is — where it was set and the address probed (a literal address
    and port, which no credential is), never the value."""
    from sharedos.bundles.source import shown_url

    shown = redact(url, launch.secret_values)
    if shown == url:
        return shown_url(url)
    named = [k for k, v in launch.env.items() if v == url and k.upper().endswith("_BASE_URL")]
    target = _probe_target(url)
    where = named[0] if named else "a base_url of its configuration"
    if target is None:
        return where
    host, port = target
    return f"{where} (at {f'[{host}]' if ':' in host else host}:{port})"


def check_model_endpoints(harness_id: str, launch: Launch, *, skip: Iterable[str | None]) -> None:
    """Raise ``ModelEndpointRefused`` when a model endpoint of ``launch`` refuses connections."""
    for url in model_endpoints(launch, skip=skip):
        why = refusal_of(url)
        if why is not None:
            shown = _shown(url, launch)
            raise ModelEndpointRefused(
                f"{harness_id}: its model endpoint {shown} refuses connections ({why}); the "
                "harness was not started (it would retry until the deadline). Check the "
                "provider's base URL in the host configuration."
            )

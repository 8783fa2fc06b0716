"""Upstream configuration: the ``[upstream.ID]`` tables of the host configuration.

An upstream is an MCP server SharedOS connects to as a client and brokers:
its tools are published as ``NAMESPACE.TOOL`` and every call is authorized
by the kernel before it is forwarded. Per upstream the operator gives::

    [upstream.git]
    namespace = "git"                      # optional; the table id by default
    command = "mcp-server-git"             # stdio: the program, its args and cwd
    args = ["--repository", "/srv/git"]
    cwd = "/srv/git"
    # url = "http://127.0.0.1:8931/mcp"   # or streamable HTTP (exactly one of command/url)
    timeouts = { connect_s = 15, list_s = 10, call_s = 60 }
    limits = { max_result_bytes = 4194304, max_concurrency = 16, max_tools = 1000 }

    [upstream.git.env]                     # plain, non-secret environment of the process
    GIT_CONFIG_NOSYSTEM = "1"

    [upstream.git.credentials]             # by environment reference only, never a value
    GITHUB_PERSONAL_ACCESS_TOKEN = { env = "SHAREDOS_GITHUB_TOKEN" }

For stdio a credential's key is the environment variable the upstream
process receives; for HTTP it is the header sent (``prefix`` is prepended,
e.g. ``"Bearer "``). The host environment variable named by ``env`` is read
only when a session is opened, only into that session, and its value is
scrubbed from everything the upstream returns.

This module only validates; it imports no MCP machinery (the host
configuration is loaded by commands that must start fast). Problems are
reported as ``file:line:col: upstream.ID.key: message`` and never echo a
value that may be a secret.
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from sharedos import textfile
from sharedos.bundles.source import on_this_machine, url_credentials
from sharedos.confine.sockets import socket_problem
from sharedos.errors import UpstreamError
from sharedos.redaction import MIN_SECRET_CHARS as _MIN_SECRET_CHARS
from sharedos.redaction import SECRET_NAME_RE as _SECRET_NAME_RE
from sharedos.redaction import command_line_holds_password as _command_line_holds_password
from sharedos.redaction import credential_name as _credential_name
from sharedos.redaction import credential_path as _credential_path
from sharedos.redaction import holds_password as _holds_password
from sharedos.tomlpos import key_positions, locate, value_message

#: Namespaces SharedOS's own tools use; an upstream may not claim them (its tools
#: would be governed by, and collide with, the built-in rules).
RESERVED_NAMESPACES = frozenset({"files", "conformance", "sharedos"})

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_INTERPOLATION_RE = re.compile(r"\$\{[^}]*\}|\$[A-Za-z_]")

UPSTREAM_KEYS = frozenset(
    {
        "namespace",
        "command",
        "args",
        "cwd",
        "env",
        "url",
        "headers",
        "credentials",
        "timeouts",
        "limits",
        "pinning",
        "protocol",
        "list_cache_s",
        "enabled",
        "description",
        "roots",
        "network",
        "readonly",
        "path_check",
        "identity",
        "principals",
        "groups",
        "tenant",
        "oauth",
        "sessions",
    }
)
#: how an upstream's credentials are chosen for a turn (docs/upstreams.md, "Per-person identity")
IdentityMode = Literal["shared", "per-person", "per-person-or-shared"]
OAUTH_KEYS = frozenset(
    {
        "scopes",
        "client_id",
        "client_secret",
        "client_name",
        "resource",
        "subject_tokens",
        "subject_token_type",
    }
)


class CredentialRef(BaseModel):
    """Where a credential is read from, never the credential itself: exactly one of a host
    environment variable (``env``), a file only its owner may read (``file``, mode 0600 or
    0400), or an entry of the encrypted token store (``store``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the host environment variable holding the value
    env: str | None = None
    #: a file holding the value (trailing newline dropped); absolute after parsing
    file: str | None = None
    #: a named secret of the encrypted token store (``sharedos upstream secret set``)
    store: str | None = None
    #: prepended to the value (HTTP headers: ``"Bearer "``)
    prefix: str = ""

    @field_validator("env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME_RE.fullmatch(value):
            raise ValueError(f"env {value!r} is not a valid environment variable name")
        return value

    @field_validator("store")
    @classmethod
    def _store(cls, value: str | None) -> str | None:
        if value is not None and not _ID_RE.fullmatch(value):
            raise ValueError(
                "a store entry is named by 1-64 letters, digits, '_' and '-' (sharedos upstream "
                "secret set ID NAME)"
            )
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> CredentialRef:
        given = [k for k in ("env", "file", "store") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                'give exactly one of env = "HOST_VARIABLE", file = "/path/0600-file" or '
                'store = "NAME"'
            )
        return self

    def describe(self) -> str:
        """Where the value comes from, by name only (``env ALICE_TOKEN``): safe to print."""
        if self.env is not None:
            return f"env {self.env}"
        if self.file is not None:
            return f"file {self.file}"
        return f"store {self.store}"


class OAuthConfig(BaseModel):
    """``[upstream.ID.oauth]``: SharedOS is the OAuth 2.1 client of a streamable-HTTP upstream.

    Each principal logs in once (``sharedos upstream login ID --principal P``: the
    authorization-code flow with PKCE and a loopback redirect); their tokens are kept
    encrypted in the token store and refreshed by SharedOS. ``subject_tokens`` names,
    per principal, a host-provided token that SharedOS exchanges (RFC 8693) for an access
    token where the authorization server offers the token-exchange grant.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: scopes requested at login (default: what the upstream's metadata asks for)
    scopes: tuple[str, ...] = ()
    #: a client registered beforehand (a public client, or confidential with client_secret);
    #: unset: dynamic client registration at login
    client_id: str | None = None
    client_secret: CredentialRef | None = None
    client_name: str = "SharedOS"
    #: the RFC 8707 resource indicator (default: from the protected-resource metadata / URL)
    resource: str | None = None
    #: principal -> where its host-provided subject token is read (RFC 8693 token exchange)
    subject_tokens: dict[str, CredentialRef] = Field(default_factory=dict)
    subject_token_type: str = "urn:ietf:params:oauth:token-type:access_token"


class SessionLimits(BaseModel):
    """``sessions``: how many pooled sessions one upstream may have open (one per distinct
    credential set), and how long an unused one is kept."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: sessions open at once for this upstream; at the cap the longest-idle session no open
    #: turn uses is closed, and a turn that would need one more gets the upstream reported
    #: unavailable
    max: int = Field(default=32, gt=0, le=4096)
    #: seconds a session no open turn uses and no call runs on is kept before it is closed
    idle_s: float = Field(default=600.0, gt=0, le=86400)


class TokenStoreConfig(BaseModel):
    """``[tokens]``: where principals' OAuth tokens and stored secrets are kept (encrypted)
    and where the key is read from (``sharedos.upstream.tokenstore``).

    ``path``: the store's directory (default ``$XDG_STATE_HOME/sharedos/tokens``);
    ``key``: ``{ env = "VAR" }`` (default ``SHAREDOS_TOKEN_KEY``) or ``{ file = "/path" }``
    (0600), never inside ``path``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str | None = None
    key: CredentialRef = Field(default_factory=lambda: CredentialRef(env="SHAREDOS_TOKEN_KEY"))

    @field_validator("key")
    @classmethod
    def _key(cls, value: CredentialRef) -> CredentialRef:
        if value.store is not None or value.prefix:
            raise ValueError(
                'the key is { env = "VAR" } or { file = "/path" } (no store, no prefix)'
            )
        return value

    def location(self, environ: Mapping[str, str], base_dir: Path | None = None) -> Path:
        """The store's directory (``path``, relative to the host file, or the default)."""
        if self.path is not None:
            path = Path(self.path).expanduser()
            return path if path.is_absolute() or base_dir is None else (base_dir / path)
        state = environ.get("XDG_STATE_HOME") or str(
            Path(environ.get("HOME", "~")) / ".local" / "state"
        )
        return Path(state).expanduser() / "sharedos" / "tokens"

    def summary(self, environ: Mapping[str, str], base_dir: Path | None = None) -> str:
        """One line for ``sharedos host check`` (names only)."""
        return f"{self.location(environ, base_dir)}, key from {self.key.describe()}"


class UpstreamRoot(BaseModel):
    """A directory (or file) a confined stdio upstream may see: ``ro`` or ``rw``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    mode: Literal["ro", "rw"] = "ro"


class UpstreamTimeouts(BaseModel):
    """Seconds allowed to open a session, to list tools, and for one forwarded call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect_s: float = Field(default=15.0, gt=0, le=600)
    list_s: float = Field(default=10.0, gt=0, le=600)
    call_s: float = Field(default=60.0, gt=0, le=3600)


class UpstreamLimits(BaseModel):
    """Per-upstream limits: what is read from it, relayed, published, and run at once.

    ``max_result_bytes`` bounds a call's result while it is read (nothing more is
    buffered; the call fails promptly and the session stays usable);
    ``max_listing_bytes`` bounds one ``tools/list`` answer the same way. A listed
    tool past ``max_tools``, or whose description or title is over
    ``max_description_bytes``, or whose input schema, output schema or other fields
    (annotations, ``_meta``, icons) are over ``max_schema_bytes`` each, is refused by
    name (the rest of the upstream is still served).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_result_bytes: int = Field(default=4 * 1024 * 1024, gt=0, le=256 * 1024 * 1024)
    max_concurrency: int = Field(default=16, gt=0, le=1024)
    max_listing_bytes: int = Field(default=16 * 1024 * 1024, gt=0, le=256 * 1024 * 1024)
    max_tools: int = Field(default=1000, gt=0, le=100_000)
    max_description_bytes: int = Field(default=64 * 1024, gt=0, le=16 * 1024 * 1024)
    max_schema_bytes: int = Field(default=256 * 1024, gt=0, le=64 * 1024 * 1024)


class UpstreamConfig(BaseModel):
    """One brokered upstream MCP server (validated; see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    namespace: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    credentials: dict[str, CredentialRef] = Field(default_factory=dict)
    timeouts: UpstreamTimeouts = Field(default_factory=UpstreamTimeouts)
    limits: UpstreamLimits = Field(default_factory=UpstreamLimits)
    #: ``required``: a tool is published only while its definition matches the pin file
    #: (new and changed tools are held back); ``off``: publish whatever is listed
    pinning: Literal["required", "off"] = "required"
    #: ``auto``: discover 2026-07-28, fall back to the initialize handshake; ``legacy``: handshake only
    protocol: Literal["auto", "legacy"] = "auto"
    #: seconds a tools/list answer is reused by later turns (0: every turn lists afresh).
    #: A ``list_changed`` notification or a reconnect always forces a new listing.
    list_cache_s: float = Field(default=0.0, ge=0, le=3600)
    enabled: bool = True
    description: str = ""
    #: stdio: the only paths its sandbox shows besides the system and its own program
    #: (docs/confinement.md); ``[]`` = no files at all; absent (None) = it cannot be confined
    roots: tuple[UpstreamRoot, ...] | None = None
    #: stdio, confined: ``true`` lets it reach the host's network (off by default)
    network: bool = False
    #: stdio, confined: more read-only paths its runtime needs (beyond what is found)
    readonly: tuple[str, ...] = ()
    #: where a brokered call's path resource is checked for links before it is forwarded
    #: (docs/upstreams.md, "Links"): ``local``, on this host's filesystem (the default for
    #: stdio and for a loopback URL); ``off``, not at all (an upstream on another host,
    #: whose own host keeps its links in check). Unset on an HTTP upstream on another
    #: host: its path calls are refused, since nothing here can check them.
    path_check: Literal["local", "off"] | None = None
    #: ``shared``: every principal's calls use ``credentials`` (the operator's); ``per-person``:
    #: each principal's own (``principals``, else ``groups``, else its OAuth login) and none
    #: without one; ``per-person-or-shared``: its own, else ``credentials``
    identity: IdentityMode = "shared"
    #: principal -> its own credentials (same targets as ``credentials``)
    principals: dict[str, dict[str, CredentialRef]] = Field(default_factory=dict)
    #: role -> credentials for principals with that role (first matching group, in file order)
    groups: dict[str, dict[str, CredentialRef]] = Field(default_factory=dict)
    #: the tenant whose principals the per-person entries name (another tenant's "alice" is
    #: not this alice)
    tenant: str = "default"
    #: OAuth 2.1 (streamable HTTP only): each principal's own tokens from the token store
    oauth: OAuthConfig | None = None
    sessions: SessionLimits = Field(default_factory=SessionLimits)
    #: the host file this upstream was read from (for the commands messages name); not
    #: part of the configuration's value (no dump, no equality)
    _host_file: str | None = PrivateAttr(default=None)

    @property
    def host_file(self) -> str | None:
        """The host file this upstream was read from, when it came from one."""
        return self._host_file

    @property
    def per_person(self) -> bool:
        """True when principals use credentials of their own (not only the operator's)."""
        return self.identity != "shared"

    @property
    def links(self) -> Literal["local", "off", "unchecked"]:
        """How this upstream's path resources are checked: ``path_check``, or its default."""
        if self.path_check is not None:
            return self.path_check
        if self.transport == "stdio" or on_this_machine(self.url or ""):
            return "local"
        return "unchecked"

    @property
    def source(self) -> str:
        """The ``metadata.source`` of this upstream's tools (part of catalogHash)."""
        return f"upstream:{self.id}"

    def credential_names(self) -> list[str]:
        """Where this upstream's shared credentials are read, by name (safe to print)."""
        return sorted({ref.describe().removeprefix("env ") for ref in self.credentials.values()})

    def identity_summary(self) -> str:
        """Who uses which credentials, by reference only (``sharedos host check``)."""
        if not self.per_person:
            return "identity shared (every principal acts as the operator)"

        def refs(table: Mapping[str, CredentialRef]) -> str:
            return ", ".join(f"{t} from {r.describe()}" for t, r in sorted(table.items()))

        parts = [f"identity {self.identity}"]
        if self.tenant != "default":
            parts.append(f"tenant {self.tenant}")
        parts += [f"principal {p}: {refs(t)}" for p, t in self.principals.items()]
        parts += [f"group {g}: {refs(t)}" for g, t in self.groups.items()]
        if self.oauth is not None:
            o = self.oauth
            client = f"client {o.client_id}" if o.client_id else "dynamic client registration"
            scopes = " ".join(o.scopes) or "as the upstream asks"
            line = f"oauth ({client}; scopes {scopes}; `sharedos upstream login {self.id} --principal P`)"
            if o.subject_tokens:
                line += "; token exchange for " + ", ".join(
                    f"{p} from {r.describe()}" for p, r in sorted(o.subject_tokens.items())
                )
            parts.append(line)
        if self.identity == "per-person-or-shared":
            parts.append(f"others: shared from {', '.join(self.credential_names()) or 'none'}")
        else:
            parts.append("others: no credential, the upstream's tools are absent for them")
        parts.append(f"sessions at most {self.sessions.max}, idle {self.sessions.idle_s:g}s")
        return "; ".join(parts)

    def summary(self) -> str:
        """One line for ``sharedos host check``: no values, only names."""
        where = (
            f"stdio {self.command}"
            if self.transport == "stdio"
            else f"http {_without_query(self.url or '')}"
        )
        creds = ", ".join(self.credential_names()) or "none"
        t = self.timeouts
        roots = ""
        if self.transport == "stdio":
            shown = ", ".join(f"{r.path} ({r.mode})" for r in self.roots or ()) or "no files"
            roots = (
                f", roots: {shown}" + (", network on" if self.network else "")
                if self.roots is not None
                else ", roots: not declared (cannot be confined)"
            )
        links = {
            "local": "path links checked on this host",
            "off": "path links not checked (path_check = off)",
            "unchecked": "path calls refused (another host; set path_check)",
        }[self.links]
        return (
            f"namespace {self.namespace}, {where}, pinning {self.pinning}, {links}, "
            f"timeouts connect {t.connect_s:g}s / list {t.list_s:g}s / call {t.call_s:g}s, "
            f"credentials from: {creds}{roots}" + ("" if self.enabled else " (disabled)")
        )


def _without_query(url: str) -> str:
    return url.split("?", 1)[0]


def _plain_http_elsewhere(url: str) -> bool:
    """True when ``url`` is plain ``http://`` to another machine (no TLS over a network)."""
    try:
        scheme = urlsplit(url).scheme
    except ValueError:
        return False
    return scheme == "http" and not on_this_machine(url)


class UpstreamConfigProblems(UpstreamError, ValueError):
    """Positioned problems (``file:line:col: ...``) found in the upstream tables."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def parse_upstreams(
    table: Any, text: str, source: str, base_dir: Path | None = None
) -> tuple[dict[str, UpstreamConfig], list[str]]:
    """Validate the ``upstream`` table of a host file; return (configs, problems).

    Every upstream is checked, so one bad entry does not hide the others'
    problems; an upstream with a problem is left out of the result. Relative
    ``command`` paths (containing ``/``) and ``cwd`` are made relative to
    ``base_dir`` (the host file's directory).
    """
    problems: list[str] = []
    configs: dict[str, UpstreamConfig] = {}
    if table is None:
        return configs, problems

    positions = key_positions(text)

    def report(loc: tuple[str, ...], message: str) -> None:
        line, col = locate(positions, ("upstream", *loc))
        label = ".".join(("upstream", *loc))
        problems.append(f"{source}:{line}:{col}: {label}: {message}")

    if not isinstance(table, dict):
        report((), "must be a table of [upstream.<id>] tables")
        return configs, problems
    namespaces: dict[str, str] = {}
    for uid, entry in table.items():
        before = len(problems)
        config = _parse_one(str(uid), entry, base_dir, report)
        if config is None or len(problems) > before:
            continue
        other = namespaces.get(config.namespace)
        if other is not None:
            report(
                (uid, "namespace"),
                f"namespace {config.namespace!r} is already used by upstream {other!r}; "
                "two upstreams must not share a namespace",
            )
            continue
        namespaces[config.namespace] = config.id
        if base_dir is not None and source and not source.startswith("<"):
            config._host_file = str(Path(source).resolve())
        configs[config.id] = config
    return configs, problems


def _parse_one(uid: str, entry: Any, base_dir: Path | None, report: Any) -> UpstreamConfig | None:
    if not _ID_RE.fullmatch(uid):
        report((uid,), "an upstream id is 1-64 characters of letters, digits, '_' and '-'")
        return None
    if not isinstance(entry, dict):
        report((uid,), "must be a table ([upstream.ID] with command or url)")
        return None
    for key in entry:
        if key not in UPSTREAM_KEYS:
            report((uid, str(key)), f"unknown key (known: {', '.join(sorted(UPSTREAM_KEYS))})")
    data = {k: v for k, v in entry.items() if k in UPSTREAM_KEYS}
    namespace = data.get("namespace", uid)
    usable = True
    if not isinstance(namespace, str) or not _ID_RE.fullmatch(namespace):
        report(
            (uid, "namespace"),
            "a namespace is 1-64 characters of letters, digits, '_' and '-' (no '.': tools "
            "are published as NAMESPACE.TOOL)",
        )
        usable = False
    elif namespace in RESERVED_NAMESPACES:
        report(
            (uid, "namespace"),
            f"namespace {namespace!r} is SharedOS's own; choose another for the upstream",
        )
        usable = False
    has_cmd, has_url = "command" in data, "url" in data
    if has_cmd == has_url:
        report(
            (uid,),
            "give exactly one of command (stdio) or url (streamable HTTP)",
        )
        # the entry's keys that do not depend on its transport are still checked
        # (`sharedos host check` reports every problem at once); the entry is left out
        rest = {k: v for k, v in data.items() if k in _ANY_TRANSPORT_KEYS}
        placeholder = {"id": uid, "namespace": "x", "transport": "stdio", "command": "x"}
        _validated(uid, {**rest, **placeholder}, report)
        return None
    if not usable:
        data["namespace"] = namespace = "x"  # reported above; the rest is still checked
    transport = "stdio" if has_cmd else "http"
    _check_people(uid, data, transport, base_dir, report)
    _check_plain(uid, "env", data.get("env"), report, names=_ENV_NAME_RE, what="environment")
    _check_plain(uid, "headers", data.get("headers"), report, names=_HEADER_NAME_RE, what="header")
    if transport == "stdio":
        for key in ("url", "headers"):
            if key in data:
                report((uid, key), f"{key} is for url upstreams; this one has a command")
        _check_stdio(uid, data, report)
        _check_roots(uid, data, report)
    else:
        for key in ("command", "args", "cwd", "env", "roots", "network", "readonly"):
            if key in data:
                report((uid, key), f"{key} is for command upstreams; this one has a url")
        _check_url(uid, data.get("url"), report)
    data["id"] = uid
    data["namespace"] = namespace
    data["transport"] = transport
    if has_cmd and isinstance(data.get("command"), str):
        data["command"] = _relative_to(data["command"], base_dir, only_with_slash=True)
    if isinstance(data.get("cwd"), str):
        data["cwd"] = _relative_to(data["cwd"], base_dir, only_with_slash=False)
    config = _validated(uid, data, report)
    return config if usable else None


#: the keys of an upstream whose meaning does not depend on its transport
_ANY_TRANSPORT_KEYS = frozenset(
    {"timeouts", "limits", "pinning", "protocol", "list_cache_s", "enabled", "description"}
)


def _validated(uid: str, data: dict[str, Any], report: Any) -> UpstreamConfig | None:
    try:
        return UpstreamConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = tuple(str(p) for p in err["loc"])
            msg = value_message(err)
            # pydantic may quote the input; never echo a credential-ish value
            report((uid, *loc), msg)
        return None


def _relative_to(value: str, base_dir: Path | None, *, only_with_slash: bool) -> str:
    if value.startswith("~"):
        # as a shell would, and as every other path of the host file is read: "~/bin/x"
        # is never a directory named "~" next to the host file
        value = os.path.expanduser(value)
    if base_dir is None or Path(value).is_absolute():
        return value
    if only_with_slash and "/" not in value:
        return value  # a program looked up on PATH
    return str((base_dir / value).resolve())


def _check_people(
    uid: str, data: dict[str, Any], transport: str, base_dir: Path | None, report: Any
) -> None:
    """``credentials``, ``principals``, ``groups``, ``oauth`` and ``identity``: each credential a
    reference (never a value), each reference well-formed; bad entries are dropped from
    ``data`` after being reported (so the rest is still validated)."""
    if "credentials" in data:
        data["credentials"] = _credential_table(
            uid, ("credentials",), data["credentials"], transport, base_dir, report
        )
    for kind in ("principals", "groups"):
        if kind not in data:
            continue
        table = data[kind]
        what = "principal" if kind == "principals" else "role"
        if not isinstance(table, dict):
            report((uid, kind), f"must be a table of [upstream.{uid}.{kind}.<{what}>] tables")
            data.pop(kind)
            continue
        clean: dict[str, Any] = {}
        for name, entry in table.items():
            if not isinstance(name, str) or not name or any(ord(c) < 32 for c in name):
                report(
                    (uid, kind), f"a {what} name is a non-empty string without control characters"
                )
                continue
            creds = _credential_table(uid, (kind, name), entry, transport, base_dir, report)
            if creds:
                clean[name] = creds
            elif isinstance(entry, dict) and not entry:
                report((uid, kind, name), "names no credential")
        data[kind] = clean
    if "oauth" in data:
        _check_oauth(uid, data, transport, base_dir, report)
    else:
        url = data.get("url")
        static = data.get("credentials") or any(data.get(k) for k in ("principals", "groups"))
        if transport == "http" and isinstance(url, str) and static and _plain_http_elsewhere(url):
            # a credential of an url upstream is a header of every request (an OAuth
            # upstream's url is refused alike by _check_oauth)
            report(
                (uid, "url"),
                "an upstream given credentials is reached over https:// (plain http:// only "
                "on this machine): they ride every request as headers, and would cross the "
                "network in clear",
            )
    tenant = data.get("tenant", "default")
    if not isinstance(tenant, str) or not tenant or any(ord(c) < 32 for c in tenant):
        report((uid, "tenant"), "must be a tenant id (a non-empty string)")
        data.pop("tenant", None)
    personal = any(data.get(k) for k in ("principals", "groups")) or "oauth" in data
    identity = data.get("identity")
    if identity is None:
        identity = data["identity"] = "per-person" if personal else "shared"
    if identity not in ("shared", "per-person", "per-person-or-shared"):
        report((uid, "identity"), 'must be "shared", "per-person" or "per-person-or-shared"')
        data.pop("identity")
        return
    if identity == "shared" and personal:
        report(
            (uid, "identity"),
            "principals, groups and oauth give principals credentials of their own: set identity "
            '= "per-person" (or "per-person-or-shared"), or remove them',
        )
    elif identity == "per-person" and data.get("credentials"):
        report(
            (uid, "credentials"),
            'shared credentials and per-person ones: with identity = "per-person" a principal '
            'without a credential of its own gets none; say identity = "per-person-or-shared" '
            "to give those the shared ones",
        )
    elif identity != "shared" and not personal:
        report(
            (uid, "identity"),
            f"{identity} needs [upstream.{uid}.principals.<name>], [upstream.{uid}.groups.<role>] "
            f"or [upstream.{uid}.oauth]",
        )


def _credential_table(
    uid: str,
    loc: tuple[str, ...],
    creds: Any,
    transport: str,
    base_dir: Path | None,
    report: Any,
) -> dict[str, Any]:
    """A table of ``TARGET = { env | file | store, prefix }``, checked; the good entries."""
    if not isinstance(creds, dict):
        report((uid, *loc), 'must be a table of NAME = { env = "HOST_VARIABLE" }')
        return {}
    names = _ENV_NAME_RE if transport == "stdio" else _HEADER_NAME_RE
    clean: dict[str, Any] = {}
    for key, ref in creds.items():
        where = (uid, *loc, str(key))
        if not names.fullmatch(str(key)):
            what = "environment variable" if transport == "stdio" else "HTTP header"
            report(where, f"{key!r} is not a valid {what} name")
            continue
        checked = _credential_ref(where, ref, base_dir, report, example=str(key))
        if checked is not None:
            clean[str(key)] = checked
    return clean


def _credential_ref(
    where: tuple[str, ...], ref: Any, base_dir: Path | None, report: Any, *, example: str
) -> dict[str, Any] | None:
    """One credential reference, checked (a file reference made absolute and its mode
    checked when it exists); None after reporting a problem. Never echoes a value."""
    if isinstance(ref, str):
        # never echo the value: it may be the secret itself
        report(
            where,
            "a literal value is not allowed: credentials are referenced, never written — "
            f'e.g. {example} = {{ env = "HOST_VARIABLE" }}, {{ file = "/etc/sharedos/x.token" }} '
            'or { store = "NAME" }',
        )
        return None
    if not isinstance(ref, dict):
        report(where, f'must be {{ env = "HOST_VARIABLE" }} (got {type(ref).__name__})')
        return None
    sources = [k for k in ("env", "file", "store") if k in ref]
    if set(ref) - {"env", "file", "store", "prefix"} or len(sources) != 1:
        report(
            where,
            'must be exactly one of { env = "HOST_VARIABLE" }, { file = "/path" } or '
            '{ store = "NAME" }, with an optional prefix (e.g. "Bearer ")',
        )
        return None
    if not all(isinstance(v, str) for v in ref.values()):
        report(where, "env, file, store and prefix are strings")
        return None
    out = dict(ref)
    if "file" in out:
        path = Path(out["file"]).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        out["file"] = str(path)
        problem = secret_file_problem(path, must_exist=False)
        if problem is not None:
            report(where, f"file {path}: {problem}")
            return None
    return out


def secret_file_problem(path: Path, *, must_exist: bool) -> str | None:
    """Why ``path`` cannot hold a credential (None when it can): it must be a regular file
    (no symbolic link), owned by this user, readable by nobody else (0600 or 0400)."""
    import stat

    try:
        st = path.lstat()
    except FileNotFoundError:
        return "does not exist" if must_exist else None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link (give the file itself)"
    problem = textfile.secret_problem(st)  # what the read checks again, on the file it opens
    return None if problem is None else f"is {problem}"


def _check_oauth(
    uid: str, data: dict[str, Any], transport: str, base_dir: Path | None, report: Any
) -> None:
    table = data["oauth"]
    if transport != "http":
        report((uid, "oauth"), "OAuth is for url (streamable HTTP) upstreams")
        data.pop("oauth")
        return
    if not isinstance(table, dict):
        report((uid, "oauth"), "must be a table ([upstream.ID.oauth])")
        data.pop("oauth")
        return
    url = data.get("url")
    if isinstance(url, str) and _plain_http_elsewhere(url):
        report(
            (uid, "url"),
            "an OAuth upstream is reached over https:// (plain http:// only on this machine): "
            "its principals' bearer tokens would cross the network in clear",
        )
    for key in list(table):
        if key not in OAUTH_KEYS:
            report(
                (uid, "oauth", str(key)), f"unknown key (known: {', '.join(sorted(OAUTH_KEYS))})"
            )
            table.pop(key)
    if "client_secret" in table:
        secret = _credential_ref(
            (uid, "oauth", "client_secret"),
            table["client_secret"],
            base_dir,
            report,
            example="client_secret",
        )
        if secret is None:
            table.pop("client_secret")
        else:
            table["client_secret"] = secret
            if "client_id" not in table:
                report((uid, "oauth", "client_secret"), "a client_secret needs its client_id")
    subjects = table.get("subject_tokens")
    if subjects is not None:
        if not isinstance(subjects, dict):
            report(
                (uid, "oauth", "subject_tokens"), 'must be a table of PRINCIPAL = { env = "VAR" }'
            )
            table.pop("subject_tokens")
        else:
            clean = {}
            for principal, ref in subjects.items():
                checked = _credential_ref(
                    (uid, "oauth", "subject_tokens", str(principal)),
                    ref,
                    base_dir,
                    report,
                    example=str(principal),
                )
                if checked is not None:
                    clean[str(principal)] = checked
            table["subject_tokens"] = clean
    scopes = table.get("scopes")
    if scopes is not None and (
        not isinstance(scopes, list)
        or not all(isinstance(x, str) and x and " " not in x for x in scopes)
    ):
        report((uid, "oauth", "scopes"), "must be a list of scope names (no spaces)")
        table.pop("scopes")
    resource = table.get("resource")
    if resource is not None:
        _check_url(uid, resource, lambda loc, msg: report((uid, "oauth", "resource"), msg))


#: a setting's value that is no credential whatever its name (``MAX_TOKENS = "4096"``,
#: ``AUTH_MODE = "none"``)
_NO_CREDENTIAL_RE = re.compile(
    r"[0-9]{1,7}(?:\.[0-9]+)?|true|false|yes|no|on|off|none", re.IGNORECASE
)


#: the last word of a setting's name that says what its value tells *of* a credential (which
#: provider, region, header, profile), never the credential itself
_DESCRIPTORS = frozenset(
    {
        "algorithm", "audience", "backend", "domain", "format", "issuer", "kind", "location",
        "method", "mode", "name", "profile", "provider", "realm", "region", "scheme", "scope",
        "scopes", "type", "version",
    }
)  # fmt: skip


def _describes(name: str) -> bool:
    """Whether a setting's name ends in a word that describes a credential rather than
    holding one (``_DESCRIPTORS``: ``AUTH_PROVIDER``, ``SECRETS_MANAGER_REGION``)."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name.lower()) if w]
    return bool(words) and words[-1] in _DESCRIPTORS


#: the characters of tokens and keys: base64 (both alphabets), hex, JWTs, ``ghp_…``, ``sk-…``
_TOKEN_ALPHABET_RE = re.compile(r"[A-Za-z0-9_.+/=~-]+")


def _token_like(value: str) -> bool:
    """Whether ``value`` could hold a token pasted in the wrong place: a word of it written
    in a token's alphabet, 32 characters or more, or 16 or more mixing letters and digits
    (``ghp_…``; ``Bearer sk-…``: the scheme's word is no token, the next one is)."""
    for word in value.split():
        if not _TOKEN_ALPHABET_RE.fullmatch(word):
            continue  # a colon: a URN, an address, no token's alphabet
        mixed = any(c.isalpha() for c in word) and any(c.isdigit() for c in word)
        if len(word) >= 32 or (len(word) >= 16 and mixed):
            return True
    return False


def _no_credential(name: str, value: str) -> bool:
    """Whether an env value named like a credential cannot be one: a number shorter than
    a credential may be (``MIN_CREDENTIAL_LENGTH``: ``MAX_TOKENS = "4096"``), a switch
    (``AUTH_MODE = "none"``) or a file's path (``GOOGLE_APPLICATION_CREDENTIALS``,
    ``SSL_KEY_FILE``: a file holds the credential, the setting names it). Refused, such
    a setting had no way to be given at all: moved to credentials as the message said, a
    value under eight characters is refused there, and a path was scrubbed from every
    record and answer as a secret. So is any value under eight characters where the name
    does not say it is the credential itself (``AUTH_TYPE = "oauth"``: ``credential_name``
    false; ``DB_PASSWORD = "hunter2"`` is still refused). Where the name says the value is the credential
    itself (``API_KEY``, ``GITHUB_TOKEN``: ``credential_name``), a leading ``/`` is no
    path unless it looks like a file's (``credential_path``): a base64 key may start so."""
    if _NO_CREDENTIAL_RE.fullmatch(value):
        return True
    if len(value) < _MIN_SECRET_CHARS and not _credential_name(name):
        # AUTH_TYPE = "oauth", SESSION_TTL = "30m", TOKEN_LIMIT = "100k": a name that only
        # mentions a credential, with a value credentials would refuse as too short
        return True
    if not _credential_name(name) and _describes(name) and not _token_like(value):
        # AUTH_PROVIDER = "keycloak", SECRETS_MANAGER_REGION = "eu-west-1",
        # AUTH_HEADER_NAME = "X-Api-Key": the name says what the value tells of a credential
        return True
    if not value or any(c.isspace() for c in value):
        return False
    if _credential_name(name):
        return _credential_path(value)
    if _plain_url(value):
        # OAUTH_TOKEN_URL, AUTH_ISSUER_URL: a name that only mentions a credential, with an
        # address that carries none
        return True
    return value.startswith(("/", "~"))


def _plain_url(value: str) -> bool:
    """Whether ``value`` is an ``http(s)://`` address that carries no credential: no user
    information, no query value named as one (``url_credentials``), no fragment."""
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        return False
    return (
        parts.scheme.lower() in ("http", "https")
        and bool(parts.hostname)
        and "@" not in parts.netloc
        and not url_credentials(value)
    )


def _check_plain(
    uid: str, key: str, table: Any, report: Any, *, names: re.Pattern[str], what: str
) -> None:
    if table is None:
        return
    if not isinstance(table, dict):
        report((uid, key), f'must be a table of NAME = "value" ({what} entries)')
        return
    for name, value in table.items():
        if not names.fullmatch(str(name)):
            report((uid, key, str(name)), f"{name!r} is not a valid {what} name")
            continue
        if not isinstance(value, str):
            report((uid, key, str(name)), f"must be a string, got {type(value).__name__}")
            continue
        if _SECRET_NAME_RE.search(str(name)) and not (
            key == "env" and _no_credential(str(name), value)
        ):
            report(
                (uid, key, str(name)),
                f"{name!r} looks like a credential; {key} holds plain values only. Move it to "
                f'[upstream.{uid}.credentials] as {name} = {{ env = "HOST_VARIABLE" }}',
            )
        elif _INTERPOLATION_RE.search(value):
            report(
                (uid, key, str(name)),
                "values are literal (no $VAR interpolation): a value read from the host "
                f"environment is a credential; declare it under [upstream.{uid}.credentials]",
            )
        elif _holds_password(value):
            report(
                (uid, key, str(name)),
                "holds a URL with a password (user:password@, ?password=), a password= "
                "keyword or a credential option or header (--api-key=V, Authorization: ..., "
                'JSON\'s "Authorization": "Bearer ..." or "api_key": "..."): a credential, '
                "which SharedOS "
                "would neither keep out of what the upstream says nor hide; declare the value "
                f'under [upstream.{uid}.credentials] as {name} = {{ env = "HOST_VARIABLE" }}',
            )


#: a reference an argument may hold for the program to expand itself: ``${NAME}``, ``$NAME``
_ARG_REFERENCE_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


#: an argument that is one reference as a whole value, the only place a program expands
#: it into a value of its own and no further: ``${NAME}``, ``--option=${NAME}``, a header
#: ``Name:${NAME}`` or ``Name: Bearer ${NAME}`` (mcp-remote's ``--header``), an
#: authorization scheme before it (``Bearer ${NAME}``), never inside other text; the
#: scheme is one HTTP authorization uses, as ``srv $TOKEN`` is a script
_WHOLE_REFERENCE_RE = re.compile(
    r"(?:--?[A-Za-z0-9][\w.-]*=)?(?:[A-Za-z0-9][\w-]*:[ \t]*)?"
    r"(?:(?i:bearer|basic|token|bot|digest|oauth|apikey|api-key|jwt|key)[ \t]+)?"
    r"(?:\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*)"
)

#: programs that expand ``$VAR`` in the text they are given and run other programs with it
_SHELLS = frozenset(
    {
        "sh",
        "bash",
        "rbash",
        "dash",
        "zsh",
        "ksh",
        "mksh",
        "pdksh",
        "ash",
        "yash",
        "posh",
        "csh",
        "tcsh",
        "fish",
        "busybox",
        "env",
    }
)


def _is_shell(command: Any) -> bool:
    """Whether ``command`` names a shell (``/bin/sh``, ``bash``) or ``env`` (which runs
    ``sh -c`` as readily), by its name or by the program it is a link to (``rbash``,
    ``/bin/sh.distrib``): its arguments may not name a variable for it to expand."""
    if not isinstance(command, str) or not command.strip():
        return False
    command = command.strip()
    found = command if os.path.isabs(command) else shutil.which(command)
    names = {os.path.basename(command)}
    if found:
        names.add(os.path.basename(os.path.realpath(found)))
    return not names.isdisjoint(_SHELLS)


def _embedded_references(args: list[str]) -> bool:
    """Whether an argument names a variable inside other text: a script (``sh -c 'srv
    --token $TOKEN'`` after ``timeout`` or ``uv run``, ``python -c "os.system('srv
    $TOKEN')"``, ``npx -c``, ``node -e``), which the program expands and runs, putting
    the value on its child's command line for every local user to read. Only a reference
    as a whole value (``_WHOLE_REFERENCE_RE``) is a template the program fills itself."""
    return any(
        _INTERPOLATION_RE.search(arg) and not _WHOLE_REFERENCE_RE.fullmatch(arg) for arg in args
    )


#: package runners whose ``-c``/``--call``/``--shell-mode`` runs a string in a shell
_SHELL_RUNNERS = frozenset({"npx", "npm", "pnpm"})
_SHELL_RUNNER_FLAGS = ("-c", "--call", "--shell-mode")


def _runs_a_shell(command: Any, args: list[str]) -> bool:
    """Whether the upstream's command line runs a shell (``/bin/sh``, ``bash``) or ``env``
    (``env -S`` expands ``${VAR}``): its arguments may not name a variable for it to expand.

    Not only as the command: a wrapper runs its arguments as the program (``timeout 600
    sh -c '...'``, ``nice``, ``setsid``, ``xargs``), so a shell named by any argument
    counts, and so does ``npx -c '...'`` (npm, pnpm), which runs its string in a shell.
    Checking the command alone let ``timeout 600 sh -c 'srv --token $TOKEN'`` through,
    the value expanded onto ``srv``'s command line."""
    if _is_shell(command) or any(os.path.basename(a.strip()) in _SHELLS for a in args):
        return True
    runner = isinstance(command, str) and os.path.basename(command.strip()) in _SHELL_RUNNERS
    return runner and any(
        a in _SHELL_RUNNER_FLAGS or a.startswith(tuple(f"{f}=" for f in _SHELL_RUNNER_FLAGS))
        for a in args
    )


def _environment_names(data: dict[str, Any]) -> frozenset[str]:
    """The variables SharedOS puts in a stdio upstream's environment: its ``env`` and its
    ``credentials``, and every principal's and group's own credentials."""
    names: set[str] = set()
    for key in ("env", "credentials"):
        if isinstance(data.get(key), dict):
            names.update(str(name) for name in data[key])
    for kind in ("principals", "groups"):
        for table in (data.get(kind) or {}).values() if isinstance(data.get(kind), dict) else ():
            if isinstance(table, dict):
                names.update(str(name) for name in table)
    return frozenset(names)


def _unknown_references(args: list[str], known: frozenset[str]) -> list[str]:
    """The ``$`` references in ``args`` that name no variable of the upstream's own
    environment (``known``), or are not a plain ``${NAME}`` / ``$NAME`` (``${NAME:-x}``),
    as written. SharedOS passes arguments as they are: a reference to one of the upstream's
    own variables is the program's to expand (mcp-remote's ``--header
    "Authorization:${AUTH_HEADER}"``), and the value stays off the command line; any other
    would be read as SharedOS expanding it from the host's environment, which it never does."""
    unknown: list[str] = []
    for arg in args:
        plain = {m.start(): m for m in _ARG_REFERENCE_RE.finditer(arg)}
        for found in _INTERPOLATION_RE.finditer(arg):
            ref = plain.get(found.start())
            name = ref and (ref[1] or ref[2])
            if not name or name not in known:
                shown = ref[0] if ref else found[0]
                if shown not in unknown:
                    unknown.append(shown)
    return unknown


def _check_stdio(uid: str, data: dict[str, Any], report: Any) -> None:
    command = data.get("command")
    if not isinstance(command, str) or not command.strip():
        report((uid, "command"), "must be a non-empty string (the program to run)")
    args = data.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        report((uid, "args"), "must be a list of strings")
        data.pop("args", None)  # reported: not again by the model's validation
    elif _runs_a_shell(command, args) and any(_INTERPOLATION_RE.search(a) for a in args):
        report(
            (uid, "args"),
            "a shell's arguments name no $VAR: the shell would expand it into the command "
            'lines of the programs it starts (curl -H "Authorization: $TOKEN"), which every '
            "user of this machine can read; run the upstream's program itself, which reads "
            f"the value from its environment ([upstream.{uid}.credentials])",
        )
    elif unknown := _unknown_references(args, _environment_names(data)):
        report(
            (uid, "args"),
            "arguments are passed as written: SharedOS expands no $VAR, and a value from the "
            "host environment is a credential that never goes on a command line; "
            f"{', '.join(unknown)} {'names' if len(unknown) == 1 else 'name'} no variable of "
            f"the upstream's env or credentials. Declare the value under "
            f"[upstream.{uid}.credentials] (or env, for a plain value): the upstream gets it "
            "in its environment, and an argument may name it for the program to expand "
            'itself (mcp-remote\'s --header "Authorization:${AUTH_HEADER}")',
        )
    elif _embedded_references(args):
        report(
            (uid, "args"),
            "an argument names a variable inside other text: a script (sh -c 'srv --token "
            "$TOKEN', even after timeout or uv run; python -c \"os.system('srv $TOKEN')\"; "
            "npx -c) is expanded and run, and its value put on the command line of the program "
            "started, which every user of this machine can read; a reference is a whole value "
            '(${NAME}, --option=${NAME}, a header "Name:${NAME}" or "Name: Bearer ${NAME}"), '
            "for the program to expand itself",
        )
    elif _command_line_holds_password(args, shell=_runs_a_shell(command, args)):
        # a command line is every local user's to read (ps, /proc/PID/cmdline) for as long
        # as the upstream runs, and this one is its sandbox's too
        report(
            (uid, "args"),
            "an argument holds a URL with a password (user:password@, ?password=), a "
            "password= keyword or a credential option or header (--api-key V, --token=V, "
            "Authorization: ...), in a script too (sh -c 'srv --api-key K', python -c), and "
            "a value a shell fills in there (--api-key $(op read ...)): a credential never "
            "goes on a command "
            "line, which every user of this machine can read; pass it through credentials "
            "(the environment: most servers read their key from a variable; a script may "
            "set one: KEY=$(op read ...) exec srv)",
        )
    cwd = data.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        report((uid, "cwd"), "must be a string (a directory)")


def _check_roots(uid: str, data: dict[str, Any], report: Any) -> None:
    """``roots``: each ``{ path, mode }`` absolute, existing, canonical, with no symlink in it."""
    roots = data.get("roots")
    if roots is None:
        return
    if not isinstance(roots, list):
        report((uid, "roots"), 'must be a list of { path = "/abs/dir", mode = "ro" | "rw" }')
        data.pop("roots")
        return
    clean: list[dict[str, Any]] = []
    for i, root in enumerate(roots):
        if not isinstance(root, dict) or not isinstance(root.get("path"), str):
            report((uid, "roots"), f'entry {i + 1}: write {{ path = "/abs/dir", mode = "ro" }}')
            continue
        extra = set(root) - {"path", "mode"}
        if extra:
            report((uid, "roots"), f"entry {i + 1}: unknown key(s) {', '.join(sorted(extra))}")
            continue
        if root.get("mode", "ro") not in ("ro", "rw"):
            report((uid, "roots"), f'entry {i + 1}: mode is "ro" or "rw"')
            continue
        problem = root_problem(root["path"]) or socket_problem(root["path"], what="it")
        if problem is not None:
            report((uid, "roots"), f"entry {i + 1} ({root['path']}): {problem}")
            continue
        clean.append({"path": root["path"], "mode": root.get("mode", "ro")})
    data["roots"] = clean
    for key, kind in (("network", bool), ("readonly", list)):
        if key in data and not isinstance(data[key], kind):
            report(
                (uid, key), "must be true or false" if kind is bool else "must be a list of paths"
            )
            data.pop(key)
    for path in data.get("readonly", []):
        if not isinstance(path, str) or not os.path.isabs(path):
            report((uid, "readonly"), "each entry must be an absolute path")
            data.pop("readonly")
            break


def root_problem(path: str) -> str | None:
    """Why ``path`` cannot be an upstream root (None when it can).

    A root is an absolute, existing path, written canonically (no ``.``, ``..``,
    ``//`` or trailing ``/``), with no symbolic link in any component: what the
    kernel decides on and what the sandbox shows must be the same place.
    """
    if not os.path.isabs(path):
        return "must be an absolute path"
    if os.path.normpath(path) != path or path.startswith("//"):
        return f"must be written canonically ({os.path.normpath(path)})"
    current = "/"
    for part in Path(path).parts[1:]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            return f"{current} is a symbolic link (give the path it points to)"
    if not os.path.exists(path):
        return "does not exist"
    return None


def _check_url(uid: str, url: Any, report: Any) -> None:
    if not isinstance(url, str):
        report((uid, "url"), "must be a string (http:// or https:// URL of the MCP endpoint)")
        return
    try:
        parts = urlsplit(url)
    except ValueError:
        report((uid, "url"), "is not a valid URL")
        return
    if parts.scheme not in ("http", "https") or not parts.hostname:
        report((uid, "url"), "must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        report(
            (uid, "url"),
            "must not carry user:password@; send credentials as a header under credentials",
        )
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if _SECRET_NAME_RE.search(name):
            report(
                (uid, "url"),
                f"query parameter {name!r} looks like a credential; send it as a header "
                "under credentials instead",
            )
    if _INTERPOLATION_RE.search(url):
        report((uid, "url"), "is literal (no $VAR interpolation)")

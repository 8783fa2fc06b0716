"""Host configuration: how the operator's host launches each harness CLI.

A TOML file the operator supplies (ADR 0014: "Provider names, base URLs,
credentials, and per-vendor flags live in a host configuration file the
operator supplies"). Per harness it gives the command, extra args, the
environment (values may reference the host's environment as ``${VAR}``), the
declared model string, the transport preference, the model provider
(``scripted``: SharedOS's offline scripted model; ``host``: whatever the env
and args configure) and per-vendor settings.

SharedOS passes ``env`` and ``args`` through opaquely and selects no model:
``declared_model`` is only recorded on SystemIdentity. Environment values are
treated as secrets: they are resolved only when a harness is launched, only
into that harness's own environment, and every repr, log line and report shows
them redacted.

Errors are ``HostConfigError`` whose message lists ``file:line:col: problem``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from sharedos import textfile
from sharedos.errors import HarnessError
from sharedos.evidence.approvals import MAX_TTL_S
from sharedos.names import IdentifierSchema
from sharedos.redaction import (
    SECRET_NAME_RE,
    command_line_holds_password,
    credential_parts,
    pem_body,
)
from sharedos.terminal import unambiguous
from sharedos.testing.scripted_model.plan import SCRIPTED_MODEL_NAME
from sharedos.tomlpos import decode_error_position, key_positions, locate, value_message
from sharedos.upstream.config import (
    CredentialRef,
    TokenStoreConfig,
    UpstreamConfig,
    parse_upstreams,
)

if TYPE_CHECKING:
    from sharedos.bundles.state import BundleState

REDACTED = "<redacted>"
#: the most of a key file read for its secrets: as much as any key file the host loads may
#: be (``textfile.read_private``'s bound; a PEM key is some hundreds of bytes)
_KEY_FILE_LIMIT = 1 << 20
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: a harness id: it names the harness's turn directory (``ID-*`` under the run directory) and
#: its conformance columns (``mcp/ID/http``), so no ``/``, ``..`` or other path syntax
_HARNESS_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


class HostConfigError(HarnessError, ValueError):
    """A host configuration that cannot be used; ``str()`` lists positioned problems."""

    def __init__(self, problems: list[str]) -> None:
        # each problem spelled (``unambiguous``), once, for every command that prints it: a
        # problem quotes the file (an unknown key, a value), and a host file may come from
        # someone else (a pull request): a quoted key "x\u001b]0;…\u0007\nerror: …" would
        # retitle the terminal and print a line of its own
        self.problems = [unambiguous(p) for p in problems]
        super().__init__("\n".join(self.problems))


#: the host variables every process has that are never credentials: the user, the home
#: and working directories, the search path, the locale, the terminal, the XDG directories
#: (and the locale categories, ``LC_*``). Scrubbed as secrets, their values (a home directory is in every path a
#: harness passes) would be "[redacted]" in every record, answer and report, and every
#: upstream tool whose description names one would be held back as holding a credential
ORDINARY_VARIABLES = frozenset(
    {
        "HOME", "USER", "LOGNAME", "USERNAME", "PATH", "SHELL", "PWD", "OLDPWD",
        "TMPDIR", "TMP", "TEMP", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ",
        "HOSTNAME", "DISPLAY", "EDITOR", "VISUAL", "PAGER",
        "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS",
        # the locale categories (POSIX, glibc) and the terminal's, which ssh sends as LC_*
        "LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC",
        "LC_TIME", "LC_ADDRESS", "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_NAME",
        "LC_PAPER", "LC_TELEPHONE", "LC_TERMINAL", "LC_TERMINAL_VERSION",
    }
)  # fmt: skip


def _ordinary(name: str) -> bool:
    """A host variable that is never a credential (``ORDINARY_VARIABLES``): by its exact
    name, never a prefix: sshd passes every ``LC_*`` on (``AcceptEnv LANG LC_*``), so
    ``LC_GITHUB_TOKEN`` is how a token is carried to a remote shell, and no ordinary one."""
    return name in ORDINARY_VARIABLES


def _ordinary_path(template: str, used: list[str]) -> bool:
    """Whether an env value is built only from ordinary variables and the path they spell
    (``${HOME}/.local/bin:${PATH}``, ``/opt/bin:${PATH}``, ``${XDG_CONFIG_HOME}/app``): each
    piece of literal text continues a path (starts with ``/`` or ``:``) and has no space.
    Any other literal beside them (``sk-...-${USER}``, ``x-api-key: sk-... ${HOME}``) is
    written text the host file gives, a credential like a value with no variable at all."""
    if not used or not all(map(_ordinary, used)):
        return False
    pieces = [p for p in _VAR_RE.split(template)[::2] if p]
    return all(p.startswith(("/", ":")) and not any(c.isspace() for c in p) for p in pieces)


def _url_variables(
    template: str, environ: Mapping[str, str], *, rotating: bool = False
) -> list[str]:
    """The value of every host variable (but an ordinary one) a bundle or shadow URL
    ``template`` is built from: ``https://h/t/${BUNDLE_TOKEN}/policy.tar`` kept the token out
    of the host file, but a path is no credential by its place; a variable giving a whole
    URL has its credentials found by ``url_credentials``, and one giving only the host or
    port (``https://${BUNDLE_HOST}:${PORT}/policy.tar``) is none: a server's name is no
    credential, and scrubbed it was "[redacted]" in every record, answer and message.

    ``rotating``: only those named as a credential (``names_a_credential``: a
    ``${BUNDLE_TOKEN}``, a ``${BUNDLE_SIG}``), whose value is replaced while the bundle
    stays the same (``HostConfig.bundle_rotating``)."""
    from sharedos.bundles.source import names_a_credential

    return [
        environ[name]
        for name in dict.fromkeys(m.group(1) for m in _VAR_RE.finditer(template))
        if not _ordinary(name)
        and name in environ
        and environ[name]
        and not _is_url(environ[name])
        and not _names_the_server(template, name, environ[name])
        and (not rotating or names_a_credential(name))
    ]


def _names_the_server(template: str, name: str, value: str) -> bool:
    """Whether ``${name}`` stands, everywhere in a URL ``template``, for its host or port
    (after the authority's ``@``, before its path), and its ``value`` says no more than a
    host and port (no ``/ ? # @`` to carry it into a path, a query or a user's password)."""
    if any(c in value for c in "/?#@") or any(c.isspace() for c in value):
        return False
    _scheme, sep, rest = template.partition("://")
    if not sep:
        return False
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    server = authority.rpartition("@")[2]
    ref = f"${{{name}}}"
    return ref in server and template.count(ref) == server.count(ref)


class MissingHostVariable(HostConfigError):
    """A ``${VAR}`` reference whose variable is not set in the host environment."""


def interpolate(template: str, environ: Mapping[str, str], *, what: str) -> str:
    """Replace ``${VAR}`` from ``environ``; an unset variable is an error (fail closed)."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in environ:
            raise MissingHostVariable([f"{what}: ${{{name}}} is not set in the host environment"])
        return environ[name]

    return _VAR_RE.sub(sub, template)


class SecretEnv(BaseModel):
    """Environment entries for a harness. Values never appear in repr, str or dumps."""

    model_config = ConfigDict(frozen=True)

    entries: dict[str, str] = Field(default_factory=dict)

    @model_serializer(mode="plain")
    def _dump(self) -> dict[str, str]:
        # Dumps (JSON reports, logs) carry names only: values stay in memory.
        return self.redacted()

    def __repr__(self) -> str:
        return f"SecretEnv({', '.join(f'{k}={REDACTED}' for k in sorted(self.entries))})"

    __str__ = __repr__

    def redacted(self) -> dict[str, str]:
        """Names only, values replaced: safe to log or report."""
        return dict.fromkeys(sorted(self.entries), REDACTED)

    def resolve(self, environ: Mapping[str, str], *, harness: str) -> dict[str, str]:
        """Resolved values for the harness's own environment (the only place they go)."""
        return {
            k: interpolate(v, environ, what=f"harness {harness!r}: env.{k}")
            for k, v in self.entries.items()
        }

    def secrets(self, environ: Mapping[str, str]) -> list[str]:
        """What scrubbing removes of these entries: each resolved value, and the value of
        every ``${VAR}`` it is built from (``AUTH = "Bearer ${API_KEY}"``: the key alone is
        the credential, and a harness that passes it on or prints it without the prefix
        must not get it recorded). An entry naming an unset variable contributes nothing.

        An ordinary variable (``ORDINARY_VARIABLES``: ``HOME``, ``USER``, ``PATH``, ...) is
        no secret alone, and neither is a value built only from such variables, unless its
        entry is named as a credential: ``PATH = "${HOME}/.local/bin:${PATH}"`` made the
        home directory "[redacted]" in every path the run recorded or answered. Only the
        path a value spells with them is no secret (``_ordinary_path``): a literal written
        beside one (``"x-api-key: sk-... user=${USER}"``) is still this host's credential."""
        values: list[str] = []
        for name, template in self.entries.items():
            try:
                resolved = interpolate(template, environ, what="env")
            except MissingHostVariable:
                continue
            used = [m.group(1) for m in _VAR_RE.finditer(template)]
            if SECRET_NAME_RE.search(name) or not _ordinary_path(template, used):
                values.append(resolved)
            values += [environ[v] for v in used if not _ordinary(v)]
        return [v for v in dict.fromkeys(values) if v]


class HarnessConfig(BaseModel):
    """How to launch one harness."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    #: a harness kind with an adapter in ``sharedos.harness.adapters``
    kind: str
    #: argv prefix; ``None`` = the pinned CLI installed by scripts/install-tools.sh
    command: tuple[str, ...] | None = None
    #: extra arguments appended to the runtime's own, passed through unread
    args: tuple[str, ...] = ()
    env: SecretEnv = Field(default_factory=SecretEnv)
    #: ``scripted``: SharedOS's offline model endpoint; ``host``: env/args/vendor pick the provider
    provider: Literal["scripted", "host"] = "scripted"
    #: recorded on SystemIdentity, never used to select anything
    declared_model: str = SCRIPTED_MODEL_NAME
    transport: Literal["http", "stdio"] = "http"
    timeout_s: float = Field(default=120.0, gt=0, le=3600)
    #: per-vendor settings (see docs/harnesses.md); opaque to everything but the recipe
    vendor: dict[str, Any] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        if isinstance(value, SecretEnv):
            return value
        if not isinstance(value, dict):
            raise ValueError('env must be a table of NAME = "value"')
        for key, val in value.items():
            if not _ENV_NAME_RE.fullmatch(str(key)):
                raise ValueError(f"env name {key!r} is not a valid environment variable name")
            if not isinstance(val, str):
                raise ValueError(f"env.{key} must be a string")
        return SecretEnv(entries=dict(value))

    @field_validator("command", "args")
    @classmethod
    def _no_password(cls, value: Any) -> Any:
        # a command line is every local user's to read (ps, /proc/PID/cmdline) for as long
        # as the harness runs, and nothing scrubs a value that is no env value
        if isinstance(value, tuple | list) and command_line_holds_password(
            a for a in value if isinstance(a, str)
        ):
            raise ValueError(
                "an argument holds a URL with a password (user:password@, ?password=), a "
                "password= keyword or a credential option or header (--api-key V, "
                "--token=V, Authorization: ...): a credential never goes on a command "
                'line; give it in [harness.ID.env] (NAME = "${VAR}"), which the harness '
                "reads (most take their key from the environment: ANTHROPIC_API_KEY, ...)"
            )
        return value

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _HARNESS_ID_RE.fullmatch(value):
            raise ValueError(
                f"harness id {value!r} is not 1-64 characters of letters, digits, '_' and '-' "
                "(starting with a letter or digit): it names the harness's turn directory"
            )
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        kinds = harness_kinds()
        if value == _MISSING_KIND:
            raise ValueError("'kind' is required")
        if value not in kinds:
            raise ValueError(f"unknown harness kind {value!r} (one of {', '.join(kinds)})")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("command must be a non-empty list whose first item is the program")
        return value

    @model_validator(mode="after")
    def _declared(self) -> HarnessConfig:
        said = declared_model_problem(self.provider, self.declared_model)
        if said is not None:
            raise ValueError(said)
        return self

    @property
    def mcp_support(self) -> str:
        """``native`` for CLIs with their own MCP client, ``extension`` for pi-mcp-adapter."""
        from sharedos.harness.adapters import get_adapter

        return get_adapter(self.kind).mcp_support.value

    @property
    def mcp_extension(self) -> str | None:
        """The extension's name when the MCP client is not the harness's own."""
        from sharedos.harness.adapters import get_adapter

        return get_adapter(self.kind).mcp_extension


class EvidenceConfig(BaseModel):
    """``[evidence]``: where the host's evidence goes and how it commits (docs/evidence.md).

    ``url``: a SQLite path (or ``sqlite:///path``) or a ``postgresql://`` URL;
    unset, each turn's environment keeps its own SQLite file.
    ``synchronous = "NORMAL"`` (default) survives a killed process; ``"FULL"``
    also survives power loss, at an fsync per commit (SQLite; docs/kernel.md).
    ``sign_key``: an ed25519 private key (PEM) that signs each turn's seal and
    the store-wide checkpoints. ``checkpoint_interval_s``: how often the host
    writes a checkpoint over the turn heads it committed (docs/evidence.md).
    ``otlp_endpoint``: an OTLP/HTTP base URL for a log record and span per attempt.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    url: str | None = None
    sign_key: str | None = None
    checkpoint_interval_s: float = Field(default=10.0, gt=0)
    otlp_endpoint: str | None = None

    @field_validator("url")
    @classmethod
    def _store_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        from sharedos.evidence.url import parse_store_url

        parse_store_url(value)  # ValueError names the problem
        return value

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("otlp_endpoint must be an http:// or https:// URL (OTLP/HTTP)")
        from sharedos.bundles.source import in_clear

        if value is not None and in_clear(value):
            # a user:password@ (sent as HTTP Basic) or an ?api-key= rides every export
            raise ValueError(
                "an otlp_endpoint that carries a credential is https:// (plain http:// only "
                "on this machine): it would cross the network in clear with every export"
            )
        return value


class PolicySourceConfig(BaseModel):
    """``[policy]``: a host that takes its policy from a distributed bundle (docs/evidence.md).

    ``bundle``: a directory, a bundle file, or an http(s) URL; polled every
    ``poll_interval_s``. ``keys``: public keys (PEM files); when given, only
    bundles signed by one of them are used. ``state``: the file where the host
    remembers the last release it enforced, so a restart cannot be rolled back
    (default: under ``$XDG_STATE_HOME/sharedos/``, one file per source:
    ``sharedos.bundles.state``). ``time_zone``: the IANA zone of ``context.now``
    for a policy that reads the time (default ``UTC``; docs/policy-language.md).
    ``shadow``: a candidate policy (sources, or a bundle verified with ``keys``)
    that decides every call too, never enforced, its decision recorded beside
    the enforced one (``sharedos.bundles.shadow``; docs/policy-language.md,
    "Changing a policy safely").
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bundle: str | None = None
    keys: tuple[str, ...] = ()
    poll_interval_s: float = Field(default=30.0, gt=0)
    state: str | None = None
    time_zone: str = "UTC"
    shadow: str | None = None

    @field_validator("shadow")
    @classmethod
    def _shadow(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("shadow names a candidate policy: a path or a bundle URL")
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from sharedos.policy.clock import ClockError, zone

        try:
            zone(value)
        except ClockError as exc:
            raise ValueError(f"{exc} (an IANA name such as UTC or Europe/Paris)") from None
        return value


class ConfinementConfig(BaseModel):
    """``[confinement]``: how a confined harness reaches the network, and what more it may read.

    ``network = "loopback"`` (default): the sandbox has its own loopback, where
    only the bridge, the scripted model and ``loopback_ports`` of the host's
    loopback answer (an egress proxy for a remote model API, say: point the
    CLI's ``HTTPS_PROXY`` at ``http://127.0.0.1:PORT``); nothing else is
    reachable. ``network = "host"``: the host's network, unfiltered (a remote
    model API without a proxy; every destination stays open — see
    docs/confinement.md). ``readonly``: more host paths the harness may read
    (a CLI installed outside the pinned tools), read as every path of this file
    (``written_path``: ``${VAR}``, ``~``, relative to its directory); a path inside
    a managed root is refused when the turn opens.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    network: Literal["loopback", "host"] = "loopback"
    loopback_ports: tuple[int, ...] = ()
    readonly: tuple[str, ...] = ()

    @field_validator("loopback_ports")
    @classmethod
    def _ports(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"loopback port {port} is not between 1 and 65535")
        return value


class ApproverConfig(BaseModel):
    """``[approvals.approvers.NAME]``: the roles the host gives NAME when they answer out of band."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    roles: tuple[str, ...] = ()


class ApprovalsConfig(BaseModel):
    """``[approvals]``: how this host asks for approvals and who may give them (docs/approvals.md).

    ``request_ttl_s``: a request not answered in time lapses; ``approval_ttl_s``:
    an approval not used in time lapses. ``elicitation``: ask the client at once
    (MCP elicitation) when it can be asked and its person (the turn's principal)
    may approve; ``elicitation_timeout_s`` bounds the wait. ``groups``: the
    members of each group an approval rule may name (``group "release"``),
    principals of the tenant ``tenant`` (default ``"default"``).
    ``approvers``: the roles of each person who answers with ``sharedos
    approvals approve --as NAME``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # finite and bounded: each becomes an expiry time the store writes (or a timeout)
    request_ttl_s: float = Field(default=3600.0, gt=0, le=MAX_TTL_S, allow_inf_nan=False)
    approval_ttl_s: float = Field(default=900.0, gt=0, le=MAX_TTL_S, allow_inf_nan=False)
    elicitation: bool = True
    elicitation_timeout_s: float = Field(default=120.0, gt=0, le=MAX_TTL_S, allow_inf_nan=False)
    groups: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    #: whose principals ``groups`` names: another tenant's rita is not this rita
    tenant: IdentifierSchema = "default"
    approvers: dict[str, ApproverConfig] = Field(default_factory=dict)

    def settings(self) -> Any:
        """As the kernel takes them (``sharedos.kernel.approvals.ApprovalSettings``)."""
        from sharedos.kernel.approvals import ApprovalSettings

        return ApprovalSettings(
            request_ttl_s=self.request_ttl_s,
            approval_ttl_s=self.approval_ttl_s,
            elicitation=self.elicitation,
            elicitation_timeout_s=self.elicitation_timeout_s,
            groups={name: frozenset(members) for name, members in self.groups.items()},
            groups_tenant=self.tenant,
            approvers={name: frozenset(a.roles) for name, a in self.approvers.items()},
        )


class HostConfig(BaseModel):
    """The whole host file: a table of harnesses keyed by id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    harness: dict[str, HarnessConfig]
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig)
    #: brokered upstream MCP servers (``[upstream.ID]``; see sharedos.upstream.config)
    upstream: dict[str, UpstreamConfig] = Field(default_factory=dict)
    policy: PolicySourceConfig = Field(default_factory=PolicySourceConfig)
    confinement: ConfinementConfig = Field(default_factory=ConfinementConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    #: ``[tokens]``: the encrypted store of principals' upstream tokens, and its key
    tokens: TokenStoreConfig = Field(default_factory=TokenStoreConfig)
    source: str = "<host config>"
    base_dir: Path = Path(".")

    @model_validator(mode="after")
    def _key_apart(self) -> HostConfig:
        key = self.tokens.key.file
        if key is not None:
            store = self.tokens.location(os.environ, self.base_dir).resolve()
            where = (self.base_dir / key).resolve()
            if where == store or store in where.parents:
                raise ValueError(
                    "tokens.key: the key file lies inside the token store; keep it apart (a "
                    "copy of the store must not carry its key)"
                )
        return self

    def token_store_path(self, environ: Mapping[str, str] | None = None) -> Path:
        """The token store's directory."""
        return self.tokens.location(environ if environ is not None else os.environ, self.base_dir)

    def get(self, harness_id: str) -> HarnessConfig:
        """The harness with this id; ``HostConfigError`` naming the known ids otherwise."""
        try:
            return self.harness[harness_id]
        except KeyError:
            known = ", ".join(sorted(self.harness)) or "none"
            raise HostConfigError(
                [f"{self.source}: no harness {harness_id!r} (configured: {known})"]
            ) from None

    def secret_values(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """Every env value this file gives any harness, resolved against ``environ``, and
        every host variable such a value is built from (``SecretEnv.secrets``).

        These are the host's credentials: whatever a harness later passes back
        into a tool call or prints is scrubbed of them (``sharedos.redaction``).
        A reference to an unset variable contributes nothing (it is not a value).
        """
        values = [v for cfg in self.harness.values() for v in cfg.env.secrets(environ)]
        # a token inside a JSON value ({"Authorization": "Bearer T"}) is said on its own too
        values += [part for v in values for part in credential_parts(v)]
        return tuple(dict.fromkeys(values))

    def key_secrets(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The contents of the private keys this file names: ``[evidence] sign_key`` and the
        token store's key (``[tokens] key``, from its variable or its file: it decrypts every
        principal's stored tokens).

        Hidden from every sandbox (``state_paths``), but a model that has it anyway (an
        open run's harness reads any file) must not have it recorded or printed: the
        key's text, stripped, and its base64 body (the PEM lines between the armour,
        joined, and each on its own) are secrets like the env values. An unreadable key
        contributes nothing here (the store that signs with it says why).
        """
        ref = self.tokens.key
        if ref.env is not None:
            token = (environ.get(ref.env) or "").strip()
        else:
            token = self._key_file_text(ref.file, environ) if ref.file is not None else ""
        values = [token]
        if self.evidence.sign_key:
            text = self._key_file_text(self.evidence.sign_key, environ)
            values += [text, *pem_body(text)]
        return tuple(dict.fromkeys(v for v in values if v))

    def credential_secrets(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """Every upstream credential this file names that can be read in plain text now: the
        shared ones, every principal's and group's, the OAuth client secrets and subject
        tokens, from the host environment or a file (a value kept in the token store is
        encrypted there, under the key ``key_secrets`` names).

        A run serves one principal, but the host holds the others' credentials as well
        (its environment, its files): a model that has one anyway (an open run's harness
        reads any file of its user, and the environment of that user's processes) must
        not have another person's credential recorded or printed any more than its own.
        A reference that cannot be read contributes nothing (it is not a value).
        """
        from sharedos.upstream.credentials import read_reference
        from sharedos.upstream.secrets import CredentialError

        values: list[str] = []
        for uid, upstream in self.upstream.items():
            for ref in _credential_refs(upstream):
                if ref.store is not None:
                    continue
                with contextlib.suppress(CredentialError):
                    values.append(read_reference(ref, environ, upstream=uid, label="credential"))
        return tuple(dict.fromkeys(v for v in values if v))

    def bundle_secrets(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        """The credentials the ``[policy] bundle`` and ``shadow`` URLs carry, ``${VAR}``
        interpolated, and the ``[evidence] otlp_endpoint`` (``sharedos.bundles.source.
        url_credentials``: a password, a presigned URL's signature, a ``?token=``), and the
        value of every host variable (but an ordinary one) such a URL is built from. A
        location that is a path, or names an unset variable, contributes nothing."""
        from sharedos.bundles.source import url_credentials

        values: list[str] = []
        if self.evidence.otlp_endpoint:
            values += url_credentials(self.evidence.otlp_endpoint)
        for location in (self.policy.bundle, self.policy.shadow):
            if not location:
                continue
            try:
                url = self._bundle_source(location, environ, what="[policy]")
            except HostConfigError:
                continue
            if _is_url(url):
                values += url_credentials(url)
                # and every host variable but an ordinary one the URL is built from
                values += _url_variables(location, environ)
        return tuple(dict.fromkeys(v for v in values if v))

    def bundle_hidden(
        self, location: str | None = None, environ: Mapping[str, str] | None = None
    ) -> tuple[str, ...]:
        """What a message or record naming the ``[policy] bundle`` (or the given location
        as written: ``[policy] shadow``) masks in its URL: the host variables it is built
        from (``bundle_secrets``), which ``shown_url`` masks as it does a password."""
        written = self.policy.bundle if location is None else location
        env = environ if environ is not None else os.environ
        return tuple(_url_variables(written, env)) if written else ()

    def bundle_rotating(self, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """Of ``bundle_hidden``, the values of the variables named as a credential (a
        ``${BUNDLE_TOKEN}``): rotated, the bundle is the same, and its history too
        (``sharedos.bundles.state.default_state_path``). Any other (``${DEPLOY_ENV}``,
        ``${TENANT}``) says which bundle it is, masked in messages all the same."""
        written = self.policy.bundle
        env = environ if environ is not None else os.environ
        return tuple(_url_variables(written, env, rotating=True)) if written else ()

    def held_secrets(
        self, environ: Mapping[str, str], location: str | None = None
    ) -> tuple[str, ...]:
        """Every secret this host holds by this file, one list for whatever the host records,
        answers, pins or prints: the harnesses' env values (``secret_values``), the key
        files' contents (``key_secrets``), every upstream credential it can read
        (``credential_secrets``), the policy bundle URLs' credentials (``bundle_secrets``)
        and the evidence store's passwords (``store_passwords``, of ``location``, or of
        ``[evidence] url`` when None).

        ``sharedos run`` holds them all, and so does every command that lists the upstreams
        (``sharedos upstream pin``/``status``/``diff``/``approve``): a tool definition holding
        one is held back there as in a turn, never pinned or printed.
        """
        from sharedos.evidence.url import store_passwords

        values = [
            *self.secret_values(environ),
            *self.key_secrets(environ),
            # every principal's upstream credentials, not only this turn's: the host holds them
            *self.credential_secrets(environ),
            *self.bundle_secrets(environ),
        ]
        if location is None:
            with contextlib.suppress(HostConfigError, ValueError):
                location = self.evidence_location(environ)
        if location:
            # wherever libpq finds it: the location, PGPASSWORD, the password file
            values += store_passwords(location, environ)
        # a token inside a JSON credential ({"Authorization": "Bearer T"}: another
        # principal's, a file's, a harness env value) is said on its own too, as the
        # turn's own credentials' are (``credential_parts``)
        values += [part for v in values for part in credential_parts(v)]
        return tuple(dict.fromkeys(values))

    def _key_file_text(self, value: str, environ: Mapping[str, str]) -> str:
        """The stripped text of the key file ``value`` names (resolved as every file this
        host keeps); empty when it cannot be read."""
        try:
            # never waiting on a pipe put in the key's place (``textfile``)
            data = textfile.read_bytes(self.resolve_file(value, environ), limit=_KEY_FILE_LIMIT)
            return data.decode("utf-8").strip()
        except (OSError, UnicodeDecodeError, HostConfigError):
            return ""

    def managed_paths(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """Paths of this file that a confined harness must never see.

        ``state_paths`` (SharedOS's own state) and every upstream's roots and
        working directory.
        """
        out = self.state_paths(environ)
        for upstream in self.upstream.values():
            out += [root.path for root in upstream.roots or ()]
            if upstream.cwd:
                out.append(upstream.cwd)
        return out

    def state_paths(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """SharedOS's own state named by this file, which no sandbox may show.

        The host file itself and its pin file, the policy bundle and the shadow
        policy (when local), the bundle's anti-rollback state, the trusted keys, the evidence signing key, the evidence database
        (a SQLite URL, with its ``-wal``, ``-shm`` and ``-journal``).
        """
        from sharedos.upstream.pins import pin_path_for

        env = environ if environ is not None else os.environ
        out: list[str] = []
        source = Path(self.source)
        if source.is_file():
            # also as the host reaches them: by the path it was given (a link, say) and
            # the pin file beside it (``pin_path_for``, what ``sharedos run`` reads)
            given = Path(os.path.abspath(source))
            out += [str(source.resolve()), str(source.resolve().with_suffix(".pins.json"))]
            out += [str(given), str(pin_path_for(given))]

        def written(value: str) -> str:
            return self.written_path(value, env)

        for value in (*self.policy.keys, self.evidence.sign_key):
            if value:
                with contextlib.suppress(HostConfigError):
                    out += [self.resolve_file(value, env), written(value)]
        # every upstream credential read from a file (a principal's, a group's, the shared
        # one, the OAuth client secret, a subject token): a sandbox of one principal's
        # session must not read another's; and the token store with its key wherever
        # anything is kept there (principals' tokens, stored secrets)
        refs = [ref for u in self.upstream.values() for ref in _credential_refs(u)]
        for ref in refs:
            if ref.file:
                out += [str(Path(ref.file).resolve()), os.path.abspath(ref.file)]
        if any(u.per_person for u in self.upstream.values()) or any(r.store for r in refs):
            store = self.token_store_path(env)
            out += [str(store.resolve()), os.path.abspath(store)]
            if self.tokens.key.file:
                key = self.base_dir / self.tokens.key.file
                out += [str(key.resolve()), os.path.abspath(key)]
        bundle = self.policy.bundle
        if bundle:
            with contextlib.suppress(HostConfigError):
                # as interpolated: ``bundle = "${BUNDLE_URL}"`` is a URL, no file to hide (a
                # presigned URL taken for one was named, signature and all, in the refusal
                # of a files root it lay "within")
                if not _is_url(fetched := self.bundle_location(env)):
                    out += [fetched, written(bundle)]
            # the last release enforced (anti-rollback): as ``sharedos run`` finds it
            from sharedos.bundles.state import BundleState, lock_path_of

            with contextlib.suppress(HostConfigError):
                # and its lock: a sandbox holding it would stall every poll of the host; and
                # the release's kept copy with the bytes waiting beside it, which a start
                # whose source fails puts in force
                state = Path(self.bundle_state_path(env))
                kept = BundleState(state)
                out += [str(state), str(lock_path_of(state))]
                out += [str(kept.kept_path), str(kept.pending_path)]
                if self.policy.state:
                    out.append(written(self.policy.state))
                    out.append(str(lock_path_of(Path(written(self.policy.state)))))
        if self.policy.shadow:
            with contextlib.suppress(HostConfigError):
                shadow = self.shadow_source(env)[0]
                if not _is_url(shadow):
                    out += [shadow, written(self.policy.shadow)]
        location = None
        with contextlib.suppress(HostConfigError):
            location = self.evidence_location(env)
        if location is not None:
            from sharedos.evidence.url import store_files

            out += store_files(location, env)
        return out

    def bundle_location(self, environ: Mapping[str, str] | None = None) -> str:
        """``[policy] bundle`` as the source to fetch, ``${VAR}`` interpolated: an http(s)
        URL as it then reads, a file or directory resolved next to this file
        (``resolve_file``). ``HostConfigError`` when there is none or a ``${VAR}`` in it is
        unset."""
        bundle = self.policy.bundle
        if not bundle:
            raise HostConfigError([f"{self.source}: no [policy] bundle"])
        return self._bundle_source(bundle, environ, what="[policy] bundle")

    def _bundle_source(self, value: str, environ: Mapping[str, str] | None, *, what: str) -> str:
        """A bundle source as written: ``${VAR}`` interpolated first (a URL given whole by
        the environment, a presigned URL or a ``?token=`` kept out of this file), then an
        http(s) URL as it reads, anything else a path relative to this file's directory.
        Interpolated after deciding, ``${BUNDLE_URL}`` became a path named after the URL
        beside this file, and a URL's ``${TOKEN}`` was sent as those eight characters."""
        text = interpolate(value, environ if environ is not None else os.environ, what=what)
        if _is_url(text):
            return text
        return str((self.base_dir / Path(text).expanduser()).resolve())

    def bundle_state_path(self, environ: Mapping[str, str] | None = None) -> str:
        """Where this host remembers the last bundle release it enforced (anti-rollback):
        ``[policy] state`` resolved next to this file, else the default for the bundle's
        source (``sharedos.bundles.state.default_state_path``), named with the host
        variables its URL's path is built from that are named as a credential masked
        (``bundle_rotating``), so a rotated ``${BUNDLE_TOKEN}`` keeps the host's history,
        and ``${DEPLOY_ENV}`` = staging and prod keep one each."""
        if self.policy.state:
            return self.resolve_file(self.policy.state, environ, what="[policy] state")
        from sharedos.bundles.state import default_state_path

        location = self.bundle_location(environ)
        rotating = self.bundle_rotating(environ)
        return str(default_state_path(location, rotating, self.bundle_hidden(environ=environ)))

    def bundle_state(self, environ: Mapping[str, str] | None = None) -> BundleState:
        """The anti-rollback state at ``bundle_state_path``: the default one of the bundle's
        source also finds what an earlier SharedOS recorded under another default name."""
        from sharedos.bundles.state import BundleState

        if self.policy.state:
            hidden = self.bundle_hidden(environ=environ)
            return BundleState(self.bundle_state_path(environ), hidden=hidden)
        location = self.bundle_location(environ)
        hidden = self.bundle_hidden(environ=environ)
        return BundleState.default_for(location, hidden, self.bundle_rotating(environ))

    def evidence_location(self, environ: Mapping[str, str] | None = None) -> str | None:
        """``[evidence] url`` as the store to open, ``${VAR}`` interpolated first (a whole URL
        too): a SQLite path with ``~`` expanded, a relative one (a bare file name too, or
        ``sqlite:relative``) relative to this file's directory, like every file this host keeps
        (``resolve_file``); anything else as written. None when unset;
        ``HostConfigError`` for an unset variable."""
        written = self.evidence.url
        if written is None:
            return None
        from sharedos.evidence.url import parse_store_url

        env = environ if environ is not None else os.environ
        # interpolated before it is read as a URL or a path (as a bundle's location is):
        # read first, url = "${EVIDENCE_URL}" naming a PostgreSQL store was a SQLite file
        # beside this file, named after the URL, its password included
        url = interpolate(written, env, what="[evidence] url")
        try:
            target = parse_store_url(url)
        except ValueError as exc:
            raise HostConfigError([f"{self.source}: [evidence] url: {exc}"]) from None
        if target.kind != "sqlite" or target.location == ":memory:":
            return url
        path = Path(target.location).expanduser()
        if not path.is_absolute():
            return str((self.base_dir / path).resolve())
        # as written when nothing was interpolated or expanded (``parse_store_url`` expands
        # ``~`` itself, so its location is no sign of that)
        return written if str(path) == written.removeprefix("sqlite:") else str(path)

    def shadow_source(
        self, environ: Mapping[str, str] | None = None
    ) -> tuple[str, list[str], tuple[str, ...]]:
        """``[policy] shadow`` as a location to load, ``${VAR}`` interpolated (an http(s) URL
        as it then reads; a path relative to this file's directory), the ``keys`` a
        bundle there must be signed by, and what its messages mask (``bundle_hidden``).
        ``HostConfigError`` for an unset variable."""
        location = self.policy.shadow
        if location is None:
            raise HostConfigError([f"{self.source}: no [policy] shadow"])
        env = environ if environ is not None else os.environ
        keys = [self.resolve_file(k, env) for k in self.policy.keys]
        shown = self.bundle_hidden(location, env)
        return self._bundle_source(location, env, what="[policy] shadow"), keys, shown

    def resolve_file(
        self, value: str, environ: Mapping[str, str] | None = None, *, what: str = "path"
    ) -> str:
        """A file this host reads or keeps (a key, the bundle, its state): ``${VAR}``
        interpolated, ``~`` expanded, a relative path — a bare file name too — relative
        to this file's directory. Never the working directory: a host run from a
        directory someone else filled must not trust a key, or load a bundle, found there."""
        text = interpolate(value, environ if environ is not None else os.environ, what=what)
        return str((self.base_dir / Path(text).expanduser()).resolve())

    def written_path(
        self, value: str, environ: Mapping[str, str] | None = None, *, what: str = "path"
    ) -> str:
        """A path as this file names it, symbolic links kept: ``${VAR}`` interpolated, ``~``
        expanded, a relative one (a bare name too) relative to this file's directory, never
        the working directory (``resolve_file`` without resolving links)."""
        text = interpolate(value, environ if environ is not None else os.environ, what=what)
        return os.path.abspath(self.base_dir / Path(text).expanduser())

    def resolve_path(self, value: str, environ: Mapping[str, str] | None = None) -> str:
        """Interpolate ``${VAR}``, expand ``~`` and make a relative path (one containing '/')
        relative to the file.

        For a command, whose bare name is looked up on ``PATH``; a file is
        ``resolve_file``'s."""
        text = interpolate(value, environ if environ is not None else os.environ, what="command")
        if text.startswith("~"):
            text = os.path.expanduser(text)  # as a shell would: never a directory named "~"
        if "/" in text and not os.path.isabs(text):
            return str((self.base_dir / text).resolve())
        return text


def _is_url(location: str) -> bool:
    """True when a bundle or shadow location (interpolated) is an http(s) URL, not a path."""
    return location.lower().startswith(("http://", "https://"))


def _credential_refs(upstream: UpstreamConfig) -> list[CredentialRef]:
    """Every credential reference of one upstream: shared, per principal, per group, and its
    OAuth client secret and subject tokens."""
    refs = [*upstream.credentials.values()]
    for table in (*upstream.principals.values(), *upstream.groups.values()):
        refs += table.values()
    if upstream.oauth is not None:
        if upstream.oauth.client_secret is not None:
            refs.append(upstream.oauth.client_secret)
        refs += upstream.oauth.subject_tokens.values()
    return refs


def check_shadow(config: HostConfig, text: str) -> tuple[str | None, str | None]:
    """Load ``config``'s ``[policy] shadow`` as the host would (``text``: the host file, for
    positions): ``(the line the host would print, None)`` when it loads, ``(None, problem)``
    with the problem at the ``shadow`` key's ``file:line:col`` when it does not, and
    ``(None, None)`` without a shadow. A host runs on without a shadow that fails to load;
    ``sharedos host check`` reports it as an error, so the operator hears of it first."""
    if config.policy.shadow is None:
        return None, None
    from sharedos.bundles.shadow import load_shadow

    line, col = locate(key_positions(text), ("policy", "shadow"))
    where = f"{config.source}:{line}:{col}: policy.shadow"
    try:
        loaded = load_shadow(*config.shadow_source())
    except HostConfigError as exc:
        return None, f"{where}: {exc}"
    if loaded.shadow is None:
        return None, f"{where}: the candidate policy cannot be used: {loaded.problem}"
    return loaded.line(), None


def check_locations(config: HostConfig, text: str) -> list[str]:
    """The locations ``config`` names, read as the host reads them (``text``: the host file,
    for positions): ``[policy] bundle``, ``[policy] state`` and ``[evidence] url``, each
    ``${VAR}`` interpolated from this environment. A problem per location that cannot be
    used (a variable not set here, a URL that is no store), at its key's ``file:line:col``:
    ``sharedos run`` refuses to start without it, as it does for a key."""
    positions = key_positions(text)
    problems: list[str] = []
    checks: list[tuple[tuple[str, ...], Callable[[], object]]] = []

    def bundle_source() -> object:
        # opened as the host opens it: a URL it refuses to fetch (not http(s), or carrying a
        # credential over plain http to another machine) is refused here too
        from sharedos.bundles.source import SourceError, open_source

        try:
            return open_source(config.bundle_location(), config.bundle_hidden())
        except SourceError as exc:
            raise HostConfigError([str(exc)]) from None

    if config.policy.bundle:
        checks.append((("policy", "bundle"), bundle_source))
    if config.policy.state:
        checks.append((("policy", "state"), config.bundle_state_path))
    if config.evidence.url is not None:
        checks.append((("evidence", "url"), config.evidence_location))
    for loc, resolve in checks:
        try:
            resolve()
        except HostConfigError as exc:
            line, col = locate(positions, loc)
            for problem in exc.problems:
                problem = problem.removeprefix(f"{config.source}: ")
                problems.append(
                    f"{config.source}:{line}:{col}: {'.'.join(loc)}: cannot be used: {problem}"
                )
    # a readonly path shown to a sandbox that holds the host's sockets refuses every
    # confined turn (exit 5) or leaves the upstream's tools out: said here, as for a root
    from sharedos.confine.sockets import socket_problem

    shown: list[tuple[tuple[str, ...], int, str]] = []
    for i, value in enumerate(config.confinement.readonly):
        try:
            path = config.written_path(value, what="[confinement] readonly")
        except HostConfigError:
            continue  # an unset ${VAR}: the turn says it
        shown.append((("confinement", "readonly"), i, path))
    for uid, upstream in config.upstream.items():
        shown.extend((("upstream", uid, "readonly"), i, p) for i, p in enumerate(upstream.readonly))
    for loc, i, path in shown:
        held = socket_problem(path, what="it")
        if held is not None:
            line, col = locate(positions, loc)
            problems.append(
                f"{config.source}:{line}:{col}: {'.'.join(loc)}: entry {i + 1} ({path}): "
                f"cannot be used: {held}"
            )
    return problems


def check_keys(config: HostConfig, text: str) -> list[str]:
    """The keys ``config`` names, loaded as the host loads them (``text``: the host file, for
    positions): each ``[policy] keys`` file an Ed25519 public key, the ``[evidence] sign_key``
    an Ed25519 private key only this user may read. A problem per key that cannot be used,
    at its key's ``file:line:col`` (``sharedos run`` refuses to start without it)."""
    from sharedos.evidence.chain import Signer
    from sharedos.policy.signing import load_public_key

    positions = key_positions(text)
    problems: list[str] = []

    def at(loc: tuple[str, ...], msg: str) -> None:
        line, col = locate(positions, loc)
        problems.append(f"{config.source}:{line}:{col}: {'.'.join(loc)}: {msg}")

    trusted: list[Any] = []
    for value in config.policy.keys:
        try:
            trusted.append(load_public_key(config.resolve_file(value, what="[policy] keys")))
        except (OSError, ValueError) as exc:  # SigningKeyError and HostConfigError too
            at(("policy", "keys"), f"cannot be used: {exc}")
    if config.evidence.sign_key:
        try:
            path = config.resolve_file(config.evidence.sign_key, what="[evidence] sign_key")
            signer = Signer.from_pem(textfile.read_private(path))
        except (OSError, ValueError) as exc:
            at(("evidence", "sign_key"), f"cannot be used: {exc}")
        else:
            problem = host_key_signs_bundles(signer.key_id, trusted)
            if problem is not None:
                at(("evidence", "sign_key"), problem)
    return problems


def host_key_signs_bundles(sign_key_id: str, trusted: Sequence[Any]) -> str | None:
    """Why a host whose ``[evidence] sign_key`` has the id ``sign_key_id`` cannot trust the
    bundle keys ``trusted`` (Ed25519 public keys), or None: the key that signs this host's
    seals and checkpoints must not be one its bundles are trusted from. The host holds
    that private key, so it (and anyone who takes it, or reads its key file) could sign a
    policy every host trusting the key enforces: evidence and policy need two keys."""
    from sharedos.policy.signing import key_id

    if any(key_id(k) == sign_key_id for k in trusted):
        return (
            "is the private key of a [policy] keys entry: this host could sign the policy "
            "bundles it (and every host trusting that key) enforces; sign bundles with a key "
            "kept off the hosts, and seals with another"
        )
    return None


def harness_kinds() -> tuple[str, ...]:
    """The harness kinds with an adapter (``sharedos.harness.adapters.HARNESS_KINDS``)."""
    from sharedos.harness.adapters import HARNESS_KINDS

    return HARNESS_KINDS


def default_host_config() -> HostConfig:
    """The embedded offline default: every known harness, scripted model, HTTP, pinned CLIs."""
    return HostConfig(
        harness={k: HarnessConfig(id=k, kind=k) for k in harness_kinds()},
        source="<embedded default>",
    )


def load_host_config(path: str | Path) -> HostConfig:
    """Read and validate a host file; raise ``HostConfigError`` with ``file:line:col`` problems."""
    target = Path(path)
    try:
        text = textfile.read_text(target)
    except OSError as exc:
        raise HostConfigError(
            [f"{target}: cannot read host configuration: {exc.strerror or exc}"]
        ) from None
    return parse_host_config(text, str(target), base_dir=target.resolve().parent)


def _tables(data: Mapping[str, Any]) -> list[str]:
    """The top-level tables a host file sets (``upstream`` and ``harness`` aside)."""
    return [k for k, v in data.items() if k not in ("upstream", "harness") and isinstance(v, dict)]


def parse_host_config(
    text: str, source: str = "<host config>", *, base_dir: Path | None = None
) -> HostConfig:
    """Parse host TOML text (see ``load_host_config``): every problem at once, each at its key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        stated = decode_error_position(str(exc))
        where = f"{source}:{stated[0]}:{stated[1]}" if stated else source
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise HostConfigError([f"{where}: invalid TOML: {msg}"]) from None
    positions = key_positions(text)

    def at(loc: tuple[Any, ...], label: str, msg: str) -> str:
        line, col = locate(positions, loc)
        return f"{source}:{line}:{col}: {label}: {msg}"

    problems: list[str] = []
    upstreams, upstream_problems = parse_upstreams(
        data.pop("upstream", None), text, source, base_dir
    )
    problems.extend(upstream_problems)
    data["upstream"] = upstreams
    table = data.get("harness")
    if isinstance(table, dict):
        for hid, entry in table.items():
            if isinstance(entry, dict):
                problems += _prepare_entry(str(hid), entry, at)
    elif "harness" not in data and not upstreams and not upstream_problems and not _tables(data):
        # a file of only ``version``: nothing configured. A host file without harnesses
        # is still a host's store, policy and approvers (``sharedos approvals
        # --host-file``, ``sharedos bundle verify --host-file``); ``sharedos run`` names
        # the harness it cannot find itself
        problems.append(f"{source}:1:1: no [harness.<id>] table: nothing to launch")
    if "harness" not in data:
        data["harness"] = {}
    data["source"] = source
    data["base_dir"] = base_dir or Path(".")
    try:
        config = HostConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = tuple(p for p in err["loc"] if not str(p).startswith("function-after"))
            if err["input"] is _MISSING_KIND and loc[-1:] == ("kind",):
                continue  # reported by _prepare_entry, at the harness's header
            label = ".".join(str(p) for p in loc) or "file"
            msg = value_message(err)
            if len(loc) == 2 and loc[0] == "harness" and "declared_model" in msg:
                loc = (*loc, "declared_model")  # the entry-level check is about this key
            problems.append(at(loc, label, msg))
        raise HostConfigError(_in_file_order(problems)) from None
    if problems:
        raise HostConfigError(_in_file_order(problems))
    return config


def _in_file_order(problems: list[str]) -> list[str]:
    """Problems sorted by their ``file:line:col`` position (stable for equal ones)."""

    def key(problem: str) -> tuple[int, int]:
        m = re.search(r":(\d+):(\d+): ", problem)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

    return sorted(problems, key=key)


#: stands in for a missing ``kind`` so the rest of the entry is still validated
_MISSING_KIND = "<missing kind>"


def declared_model_problem(provider: str, declared_model: str) -> str | None:
    """Why ``declared_model`` does not tell the truth about ``provider``'s model, or None."""
    if provider == "scripted" and declared_model != SCRIPTED_MODEL_NAME:
        return (
            f"provider 'scripted' declares itself as {SCRIPTED_MODEL_NAME!r}; "
            f"declared_model {declared_model!r} would record a model that did not run"
        )
    if provider == "host" and declared_model == SCRIPTED_MODEL_NAME:
        return "provider 'host' needs declared_model: the model your env/args configure"
    return None


def _prepare_entry(hid: str, entry: dict[str, Any], at: Any) -> list[str]:
    """Fill ``id``/``kind`` defaults and check each env entry at its own key; return problems.

    Problems found here are removed from the entry (so validation reports the
    rest of the file too, instead of stopping at the first bad key).
    """
    problems: list[str] = []
    if "id" in entry and entry["id"] != hid:
        # the table key is the id (``--harness ID``); a second id would launch one name
        # under another
        problems.append(
            at(
                ("harness", hid, "id"),
                f"harness.{hid}.id",
                "the id is the table's name ([harness.ID]); leave id out",
            )
        )
    entry["id"] = hid
    if "kind" not in entry:
        if hid in harness_kinds():
            entry["kind"] = hid
        else:
            problems.append(
                at(
                    ("harness", hid),
                    f"harness.{hid}",
                    f"'kind' is required (one of {', '.join(harness_kinds())}) when the id is "
                    "not a harness kind",
                )
            )
            entry["kind"] = _MISSING_KIND
    provider = entry.get("provider", "scripted")
    declared = entry.get("declared_model", SCRIPTED_MODEL_NAME)
    if isinstance(provider, str) and isinstance(declared, str):
        # checked here, not only by the model's own validator, which pydantic runs only
        # when every field of the entry is valid: "every problem at once"
        said = declared_model_problem(provider, declared)
        if said is not None:
            problems.append(at(("harness", hid, "declared_model"), f"harness.{hid}", said))
            entry.pop("provider", None)
            entry.pop("declared_model", None)
    vendor = entry.get("vendor")
    if isinstance(vendor, dict) and entry["kind"] in harness_kinds():
        problems += _check_vendor(hid, str(entry["kind"]), vendor, at)
    env = entry.get("env")
    if isinstance(env, dict):
        for key, value in list(env.items()):
            loc = ("harness", hid, "env", str(key))
            if not _ENV_NAME_RE.fullmatch(str(key)):
                problems.append(
                    at(
                        loc,
                        f"harness.{hid}.env",
                        f"{key!r} is not a valid environment variable name",
                    )
                )
                del env[key]
            elif not isinstance(value, str):
                # never the value itself: it may be a credential
                problems.append(at(loc, f"harness.{hid}.env.{key}", "must be a string"))
                del env[key]
    return problems


_TYPE_NAMES = {bool: "true or false", dict: "a table", str: "a string"}


def _check_vendor(hid: str, kind: str, vendor: dict[str, Any], at: Any) -> list[str]:
    """``[harness.ID.vendor]``: only the keys the kind's adapter reads, each of its type (bad
    ones are reported at their key and removed). A misspelt or mistyped setting was ignored
    without a word: the CLI ran without it."""
    from sharedos.harness.adapters import get_adapter

    known = get_adapter(kind).vendor_keys
    problems: list[str] = []
    for key, value in list(vendor.items()):
        where = ("harness", hid, "vendor", str(key))
        label = f"harness.{hid}.vendor.{key}"
        if key not in known:
            names = ", ".join(sorted(known)) or "none"
            problems.append(at(where, label, f"unknown key for kind {kind} (known: {names})"))
            del vendor[key]
        elif not isinstance(value, known[key]):
            problems.append(at(where, label, f"must be {_TYPE_NAMES.get(known[key], known[key])}"))
            del vendor[key]
    return problems

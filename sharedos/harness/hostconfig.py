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

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from sharedos.harness.scripted_model.plan import SCRIPTED_MODEL_NAME
from sharedos.upstream.config import UpstreamConfig, parse_upstreams

#: Harness kinds the runtime knows how to drive.
HARNESS_KINDS = ("claude-code", "codex", "pi", "pi-adapter")

REDACTED = "<redacted>"
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class HostConfigError(ValueError):
    """A host configuration that cannot be used; ``str()`` lists positioned problems."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


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


class HarnessConfig(BaseModel):
    """How to launch one harness."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: Literal["claude-code", "codex", "pi", "pi-adapter"]
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

    @field_validator("command")
    @classmethod
    def _command(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("command must be a non-empty list whose first item is the program")
        return value

    @model_validator(mode="after")
    def _declared(self) -> HarnessConfig:
        if self.provider == "scripted" and self.declared_model != SCRIPTED_MODEL_NAME:
            raise ValueError(
                f"provider 'scripted' declares itself as {SCRIPTED_MODEL_NAME!r}; "
                f"declared_model {self.declared_model!r} would record a model that did not run"
            )
        if self.provider == "host" and self.declared_model == SCRIPTED_MODEL_NAME:
            raise ValueError(
                "provider 'host' needs declared_model: the model your env/args configure"
            )
        return self

    @property
    def mcp_support(self) -> str:
        """``native`` for CLIs with their own MCP client, ``extension`` for pi-mcp-adapter."""
        return "extension" if self.kind == "pi-adapter" else "native"

    @property
    def mcp_extension(self) -> str | None:
        """The extension's name when the MCP client is not the harness's own."""
        return "pi-mcp-adapter" if self.kind == "pi-adapter" else None


class HostConfig(BaseModel):
    """The whole host file: a table of harnesses keyed by id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    harness: dict[str, HarnessConfig]
    #: brokered upstream MCP servers (``[upstream.ID]``; see sharedos.upstream.config)
    upstream: dict[str, UpstreamConfig] = Field(default_factory=dict)
    source: str = "<host config>"
    base_dir: Path = Path(".")

    def get(self, harness_id: str) -> HarnessConfig:
        """The harness with this id; ``HostConfigError`` naming the known ids otherwise."""
        try:
            return self.harness[harness_id]
        except KeyError:
            known = ", ".join(sorted(self.harness)) or "none"
            raise HostConfigError(
                [f"{self.source}: no harness {harness_id!r} (configured: {known})"]
            ) from None

    def resolve_path(self, value: str, environ: Mapping[str, str] | None = None) -> str:
        """Interpolate ``${VAR}`` and make a relative path (one containing '/') relative to the file."""
        text = interpolate(value, environ if environ is not None else os.environ, what="command")
        if "/" in text and not os.path.isabs(text):
            return str((self.base_dir / text).resolve())
        return text


def default_host_config() -> HostConfig:
    """The embedded offline default: every known harness, scripted model, HTTP, pinned CLIs."""
    return HostConfig(
        harness={k: HarnessConfig(id=k, kind=k) for k in HARNESS_KINDS},  # type: ignore[arg-type]
        source="<embedded default>",
    )


def load_host_config(path: str | Path) -> HostConfig:
    """Read and validate a host file; raise ``HostConfigError`` with ``file:line:col`` problems."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise HostConfigError(
            [f"{target}: cannot read host configuration: {exc.strerror or exc}"]
        ) from None
    return parse_host_config(text, str(target), base_dir=target.resolve().parent)


def parse_host_config(
    text: str, source: str = "<host config>", *, base_dir: Path | None = None
) -> HostConfig:
    """Parse host TOML text (see ``load_host_config``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{source}:{m.group(1)}:{m.group(2)}" if m else source
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise HostConfigError([f"{where}: invalid TOML: {msg}"]) from None
    problems: list[str] = []
    upstreams, upstream_problems = parse_upstreams(
        data.pop("upstream", None), text, source, base_dir
    )
    problems.extend(upstream_problems)
    data["upstream"] = upstreams
    table = data.get("harness")
    if isinstance(table, dict):
        for hid, entry in list(table.items()):
            if isinstance(entry, dict):
                entry.setdefault("id", hid)
                if "kind" not in entry and hid in HARNESS_KINDS:
                    entry["kind"] = hid
                elif "kind" not in entry:
                    line, col = _locate(text, ("harness", hid))
                    problems.append(
                        f"{source}:{line}:{col}: harness.{hid}: 'kind' is required "
                        f"(one of {', '.join(HARNESS_KINDS)}) when the id is not a harness kind"
                    )
                    del table[hid]  # reported; validate the rest too
    elif "harness" not in data and not upstreams and not upstream_problems:
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
            line, col = _locate(text, loc)
            label = ".".join(str(p) for p in loc) or "file"
            msg = str(err["msg"]).removeprefix("Value error, ")
            problems.append(f"{source}:{line}:{col}: {label}: {msg}")
        raise HostConfigError(problems) from None
    if problems:
        raise HostConfigError(problems)
    return config


def _locate(text: str, loc: tuple[Any, ...]) -> tuple[int, int]:
    """Best-effort 1-based line/column of the key an error points at (1:1 when unknown)."""
    start, end = 0, len(text)
    rest = list(loc)
    if len(rest) >= 2 and rest[0] == "harness":
        hid = re.escape(str(rest[1]))
        header = re.search(
            rf'^[ \t]*\[[ \t]*harness[ \t]*\.[ \t]*"?{hid}"?[ \t]*\]', text, re.MULTILINE
        )
        if header:
            start = header.start()
            nxt = re.search(
                r"^[ \t]*\[(?!\s*harness\s*\.\s*\"?" + hid + r"\"?\s*\.)",
                text[header.end() :],
                re.MULTILINE,
            )
            end = header.end() + nxt.start() if nxt else len(text)
            rest = rest[2:]
            if rest and rest[0] == "env" and len(rest) == 1:
                sub = re.search(
                    rf"^[ \t]*\[[ \t]*harness\.\"?{hid}\"?\.env[ \t]*\]", text, re.MULTILINE
                )
                if sub:
                    start = sub.start()
        else:
            rest = rest[2:]
    offset = start
    for part in reversed(rest):
        if isinstance(part, str):
            m = re.search(rf'(^|[\s{{,])"?({re.escape(part)})"?\s*=', text[start:end], re.MULTILINE)
            if m:
                offset = start + m.start(2)
                break
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col

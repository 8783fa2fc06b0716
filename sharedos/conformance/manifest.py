"""The conformance manifest: kernel rows, their contexts, run policies and sandbox tree.

The committed manifest is ``sharedos/conformance/manifest.toml`` (shipped in the
wheel). ``load_manifest`` parses and validates it; any problem is reported as a
``ManifestError`` whose message names the file, the line and column where
possible, and the row id — never a traceback.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sharedos.context import AccessContext
from sharedos.errors import SharedOSError
from sharedos.outcomes import Outcome, ReasonCode, outcome_for_reason
from sharedos.toolpolicy import ToolPolicy

MANIFEST_PATH = Path(__file__).resolve().parent / "manifest.toml"

#: ``{ID.root}``: the directory holding the repositories of the brokered upstream
#: fixture ``ID`` (``[upstreams.ID]``), resolved per column environment.
PLACEHOLDER_RE = re.compile(r"\{([a-z0-9][a-z0-9_-]{0,31})\.root\}")
#: Fixture ids that would read like a policy template (``{context.principal}``) if
#: used as a placeholder.
_TEMPLATE_ROOTS = frozenset({"context", "args", "resource", "action"})


class ManifestError(SharedOSError, ValueError):
    """A manifest that cannot be used; ``str()`` is a positioned, human message."""


class RepeatedName(BaseModel):
    """A tool name written as ``{ repeat = "a", times = 200 }`` (long names stay readable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repeat: str = Field(min_length=1)
    times: int = Field(ge=1, le=10_000)

    def render(self) -> str:
        return self.repeat * self.times


class ContextSpec(BaseModel):
    """A trusted access context a row runs under (the host resolves it, never the harness)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    principal: str
    tenant: str = "default"
    roles: tuple[str, ...] = ()

    def access_context(self, turn_id: str) -> AccessContext:
        """The ``AccessContext`` for one turn of this context."""
        return AccessContext(
            principal=self.principal, tenant=self.tenant, roles=self.roles, turn_id=turn_id
        )


class Expectation(BaseModel):
    """The outcome (and, unless succeeded, the reason code) a row must produce."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    outcome: Outcome
    reason: ReasonCode | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Expectation:
        if self.outcome is Outcome.SUCCEEDED:
            if self.reason not in (None, ReasonCode.ALLOWED):
                raise ValueError(f"a succeeded row cannot expect reason {self.reason.value!r}")
        else:
            if self.reason is None:
                raise ValueError(f"a {self.outcome.value} row must name the expected reason code")
            implied = outcome_for_reason(self.reason)
            if implied is not self.outcome:
                raise ValueError(
                    f"reason {self.reason.value!r} means {implied.value}, not {self.outcome.value}"
                )
        return self

    def describe(self) -> str:
        """``denied/forbidden`` or ``succeeded``."""
        if self.reason is None or self.outcome is Outcome.SUCCEEDED:
            return self.outcome.value
        return f"{self.outcome.value}/{self.reason.value}"


class UpstreamFixture(BaseModel):
    """A brokered upstream the column environment starts for the rows that name it.

    ``server`` is a closed set on purpose (a manifest names fixtures, it never
    runs arbitrary commands): ``mcp-server-git``, the PyPI server, over stdio
    behind a tap that logs what reached it, against ``repositories`` (one commit
    each) created fresh under ``{ID.root}``. ``rules`` is policy text compiled
    with the run's rules after ``{ID.root}`` is resolved: it grants what the
    rows need on the fixture's paths (the shipped rules govern ``/srv/git``).

    ``symlinks`` (``"team/linked" = "other"``) and ``gitdir_pointers``
    (``"team/pointer" = "other"``: a directory whose ``.git`` is a ``gitdir:``
    file naming another repository's git directory) are planted after the
    repositories, both sides relative to ``{ID.root}``: the links a brokered
    call must never be forwarded through (issue 22).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    server: Literal["mcp-server-git"]
    namespace: str = Field(default="", pattern=r"^([A-Za-z0-9_-]{1,64})?$")
    repositories: tuple[str, ...] = Field(min_length=1)
    rules: str = ""
    symlinks: dict[str, str] = Field(default_factory=dict)
    gitdir_pointers: dict[str, str] = Field(default_factory=dict)

    @field_validator("symlinks", "gitdir_pointers")
    @classmethod
    def _relative(cls, value: dict[str, str]) -> dict[str, str]:
        for name, target in value.items():
            for path in (name, target):
                parts = path.split("/")
                if path != "." and not all(
                    re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", p) for p in parts
                ):
                    raise ValueError(
                        f"{path!r} must be a relative path of plain names below the fixture "
                        "root ('.' for the root itself; no '..', no absolute path)"
                    )
            if name == ".":
                raise ValueError("a link cannot replace the fixture root")
        return value

    @field_validator("repositories")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", name):
                raise ValueError(f"repository name {name!r} must match [a-z0-9][a-z0-9_-]*")
        if len(set(value)) != len(value):
            raise ValueError("a repository is named twice")
        return value


def placeholders_in(value: Any) -> set[str]:
    """The fixture ids of every ``{ID.root}`` in a JSON-shaped value."""
    if isinstance(value, str):
        return set(PLACEHOLDER_RE.findall(value))
    if isinstance(value, dict):
        return set().union(*(placeholders_in(v) for v in value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*(placeholders_in(v) for v in value)) if value else set()
    return set()


def bind_value(value: Any, bindings: Mapping[str, str]) -> Any:
    """``value`` with each ``{ID.root}`` whose ``ID.root`` is in ``bindings`` replaced."""
    if isinstance(value, str):
        return PLACEHOLDER_RE.sub(lambda m: bindings.get(f"{m.group(1)}.root", m.group(0)), value)
    if isinstance(value, dict):
        return {k: bind_value(v, bindings) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bind_value(v, bindings) for v in value]
    return value


class Row(BaseModel):
    """One kernel row: an attempt (tool, arguments, context, run policy) and what must happen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    title: str = Field(min_length=1)
    tool: str | RepeatedName
    arguments: Any = Field(default_factory=dict)
    context: str | None = None
    policy: str | None = None
    expect: Expectation
    #: the canonical resource a tool+resource column matches on (None: no resource, e.g. an unknown tool)
    resource: str | None = None
    #: a tool+resource column must also see the row's exact arguments (for rows whose point
    #: is the spelling of the argument, e.g. a traversal that canonicalizes to another row's resource)
    match_arguments: bool = False
    #: which columns may match this row: by call id only, or also on tool + resource
    match: tuple[Literal["call_id", "tool_resource"], ...] = ("call_id", "tool_resource")
    #: the brokered upstream fixture (``[upstreams.ID]``) whose tool this row calls; a
    #: column that cannot serve it grades the row not available, with the reason
    upstream: str | None = None
    #: a short note on why this row matters (shown in the report)
    why: str = ""

    def bind(self, bindings: Mapping[str, str]) -> Row:
        """This row with ``{ID.root}`` placeholders in arguments and resource resolved."""
        if self.upstream is None or not bindings:
            return self
        return self.model_copy(
            update={
                "arguments": bind_value(self.arguments, bindings),
                "resource": bind_value(self.resource, bindings),
            }
        )

    @property
    def tool_name(self) -> str:
        """The raw tool string the attempt carries (never narrowed)."""
        return self.tool if isinstance(self.tool, str) else self.tool.render()

    @field_validator("tool")
    @classmethod
    def _non_empty(cls, value: str | RepeatedName) -> str | RepeatedName:
        if isinstance(value, str) and value == "":
            raise ValueError("tool must not be empty")
        return value


class SandboxSpec(BaseModel):
    """The file tree the rows expect, created fresh for every run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: dict[str, str]
    dirs: tuple[str, ...] = ()

    @field_validator("files")
    @classmethod
    def _absolute(cls, value: dict[str, str]) -> dict[str, str]:
        for path in value:
            if not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"sandbox path {path!r} must be absolute and contain no '..'")
        return value


class Manifest(BaseModel):
    """The whole manifest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    title: str
    default_context: str
    default_policy: str
    contexts: dict[str, ContextSpec]
    policies: dict[str, ToolPolicy]
    sandbox: SandboxSpec
    upstreams: dict[str, UpstreamFixture] = Field(default_factory=dict)
    rows: tuple[Row, ...] = Field(min_length=1)
    source: str = "<manifest>"

    @model_validator(mode="after")
    def _references(self) -> Manifest:
        if self.default_context not in self.contexts:
            raise ValueError(
                f"default_context {self.default_context!r} is not defined in [contexts]"
            )
        if self.default_policy not in self.policies:
            raise ValueError(f"default_policy {self.default_policy!r} is not defined in [policies]")
        seen: set[str] = set()
        for row in self.rows:
            if row.id in seen:
                raise ValueError(f"row id {row.id!r} is used twice")
            seen.add(row.id)
            if row.context is not None and row.context not in self.contexts:
                raise ValueError(
                    f"row {row.id!r}: context {row.context!r} is not defined in [contexts]"
                )
            if row.policy is not None and row.policy not in self.policies:
                raise ValueError(
                    f"row {row.id!r}: policy {row.policy!r} is not defined in [policies]"
                )
            self._check_upstream(row)
        for uid, fixture in self.upstreams.items():
            if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,31}", uid) or uid in _TEMPLATE_ROOTS:
                raise ValueError(
                    f"upstream fixture id {uid!r} must match [a-z0-9][a-z0-9_-]* and not be "
                    f"one of {sorted(_TEMPLATE_ROOTS)}"
                )
            if self.namespace_of(uid) in {"files", "conformance", "sharedos"}:
                raise ValueError(f"upstream fixture {uid!r}: namespace is reserved")
            stray = set(PLACEHOLDER_RE.findall(fixture.rules)) - {uid}
            if stray:
                raise ValueError(
                    f"upstream fixture {uid!r}: its rules may use only {{{uid}.root}}, "
                    f"not {', '.join(sorted(f'{{{s}.root}}' for s in stray))}"
                )
        return self

    def _check_upstream(self, row: Row) -> None:
        used = placeholders_in(row.arguments) | placeholders_in(row.resource)
        if row.upstream is None:
            if used:
                raise ValueError(
                    f"row {row.id!r}: uses {{{sorted(used)[0]}.root}} but names no upstream "
                    "(set upstream = ID)"
                )
            return
        if row.upstream not in self.upstreams:
            raise ValueError(
                f"row {row.id!r}: upstream {row.upstream!r} is not defined in [upstreams]"
            )
        if used - {row.upstream}:
            raise ValueError(
                f"row {row.id!r}: may use only {{{row.upstream}.root}}, the root of its upstream"
            )
        prefix = self.namespace_of(row.upstream) + "."
        if not row.tool_name.startswith(prefix):
            raise ValueError(
                f"row {row.id!r}: a row of upstream {row.upstream!r} calls a {prefix}* tool"
            )

    def namespace_of(self, upstream: str) -> str:
        """The namespace an upstream fixture's tools are published under (its id by default)."""
        return self.upstreams[upstream].namespace or upstream

    def brokered_rows(self) -> tuple[Row, ...]:
        """The rows that call a brokered upstream fixture's tool."""
        return tuple(r for r in self.rows if r.upstream is not None)

    def context_of(self, row: Row) -> str:
        """Name of the context the row runs under."""
        return row.context or self.default_context

    def policy_of(self, row: Row) -> str:
        """Name of the run policy the row runs under."""
        return row.policy or self.default_policy

    def row(self, row_id: str) -> Row:
        """The row with this id (``KeyError`` if absent)."""
        for row in self.rows:
            if row.id == row_id:
                return row
        raise KeyError(row_id)


def load_manifest(path: str | Path | None = None) -> Manifest:
    """Load and validate a manifest (default: the shipped one); raise ``ManifestError`` with positions."""
    target = Path(path) if path is not None else MANIFEST_PATH
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{target}: cannot read manifest: {exc.strerror or exc}") from None
    return parse_manifest(text, str(target))


def parse_manifest(text: str, source: str = "<manifest>") -> Manifest:
    """Parse manifest TOML text; raise ``ManifestError`` naming file:line:col for every problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: invalid TOML: {exc}") from None
    data["source"] = source
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(_render_validation(exc, text, source, data)) from None


def _render_validation(
    exc: ValidationError, text: str, source: str, data: Mapping[str, Any]
) -> str:
    lines = [f"{source}: invalid manifest ({exc.error_count()} problem(s))"]
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        line, col = _locate(text, loc)
        where = f"{source}:{line}:{col}" if line else source
        lines.append(f"  {where}: {_loc_label(loc, data)}: {err['msg']}")
    return "\n".join(lines)


def _loc_label(loc: tuple[Any, ...], data: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int) and i > 0 and loc[i - 1] == "rows":
            rows = data.get("rows")
            row_id = None
            if isinstance(rows, list) and part < len(rows) and isinstance(rows[part], dict):
                row_id = rows[part].get("id")
            parts[-1] = f"rows[{part}]" + (f" (id {row_id!r})" if row_id else "")
        elif isinstance(part, str) and part in {"str", "RepeatedName"} | {
            "function-after[_consistent(), Expectation]"
        }:
            continue
        else:
            parts.append(str(part))
    return ".".join(parts) or "manifest"


_HEADER_RE = re.compile(r"^[ \t]*\[\[[ \t]*rows[ \t]*\]\]", re.MULTILINE)


def _locate(text: str, loc: tuple[Any, ...]) -> tuple[int, int]:
    """Best-effort line/column of the key a validation error points at (1-based; 0 if unknown)."""
    offset = 0
    end = len(text)
    start_idx = 0
    if len(loc) >= 2 and loc[0] == "rows" and isinstance(loc[1], int):
        headers = list(_HEADER_RE.finditer(text))
        if loc[1] < len(headers):
            offset = headers[loc[1]].start()
            end = headers[loc[1] + 1].start() if loc[1] + 1 < len(headers) else len(text)
        start_idx = 2
    elif loc and isinstance(loc[0], str):
        table = None
        if len(loc) >= 2 and isinstance(loc[1], str):
            # a sub-table such as [policies.p]
            table = re.search(
                rf"^[ \t]*\[[ \t]*{re.escape(loc[0])}\.{re.escape(loc[1])}[ \t]*\]",
                text,
                re.MULTILINE,
            )
            start_idx = 2
        if table is None:
            table = re.search(rf"^[ \t]*\[[ \t]*{re.escape(loc[0])}(\]|\.)", text, re.MULTILINE)
            start_idx = 1
        if table:
            offset = table.start()
        else:
            start_idx = 0
    # find the deepest key of the loc inside the region
    for part in reversed(loc[start_idx:]):
        if isinstance(part, str):
            m = re.search(rf"(^|[\s{{,.])({re.escape(part)})\s*=", text[offset:end], re.MULTILINE)
            if m:
                offset += m.start(2)
                break
    if offset == 0 and not loc:
        return 0, 0
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col

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

from sharedos import textfile
from sharedos.context import AccessContext
from sharedos.errors import ConformanceError
from sharedos.evidence.record import MAX_STORED_ARGUMENTS, MAX_STORED_TOOL, storable_arguments
from sharedos.names import IdentifierSchema
from sharedos.outcomes import Outcome, ReasonCode, outcome_for_reason
from sharedos.tomlpos import key_positions, locate
from sharedos.toolpolicy import ToolPolicy

MANIFEST_PATH = Path(__file__).resolve().parent / "manifest.toml"

#: ``{ID.root}``: the directory holding the repositories of the brokered upstream
#: fixture ``ID`` (``[upstreams.ID]``), resolved per column environment.
PLACEHOLDER_RE = re.compile(r"\{([a-z0-9][a-z0-9_-]{0,31})\.root\}")
#: Fixture ids that would read like a policy template (``{context.principal}``) if
#: used as a placeholder.
_TEMPLATE_ROOTS = frozenset({"context", "args", "resource", "action"})
#: Placeholders of a harness-local row (``local = {...}``): ``{files.root}`` (the
#: ``files.*`` sandbox root), ``{canary.port}`` (the TCP canary the column starts on
#: the host) and ``{ID.root}`` of the row's own upstream fixture.
LOCAL_PLACEHOLDER_RE = re.compile(r"\{(files\.root|canary\.port|[a-z0-9][a-z0-9_-]{0,31}\.root)\}")
#: The kinds of harness-local attempt a row can make (docs/conformance.md).
LocalKind = Literal["shell", "read", "write", "network"]
#: A context or run policy name: it names the turns a column runs (in their turn ids).
_GROUP_NAME_RE = re.compile(r"[^\x00-\x1f\x7f-\x9f]{1,64}")
#: A guarded secret shorter than this (stripped) would be found by chance.
MIN_SECRET_CHARS = 16


class ManifestError(ConformanceError, ValueError):
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

    #: what an ``AccessContext`` accepts, checked here so the manifest says where
    principal: IdentifierSchema
    tenant: IdentifierSchema = "default"
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
    #: more files committed into the repositories (``"REPO/PATH" = content``): what a
    #: harness-local row guards on the upstream's side (``{ID.root}/REPO/PATH``)
    files: dict[str, str] = Field(default_factory=dict)

    @field_validator("files")
    @classmethod
    def _file_paths(cls, value: dict[str, str]) -> dict[str, str]:
        for path in value:
            parts = path.split("/")
            if len(parts) < 2 or any(p in ("", ".", "..", ".git") for p in parts):
                raise ValueError(
                    f"fixture file {path!r} must be REPOSITORY/PATH with no empty, '.', '..' "
                    "or '.git' part"
                )
        return value

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


def bind_local(value: str, bindings: Mapping[str, str]) -> str:
    """``value`` with each local-row placeholder whose key is in ``bindings`` replaced."""
    return LOCAL_PLACEHOLDER_RE.sub(lambda m: bindings.get(m.group(1), m.group(0)), value)


def bind_value(value: Any, bindings: Mapping[str, str]) -> Any:
    """``value`` with each ``{ID.root}`` whose ``ID.root`` is in ``bindings`` replaced."""
    if isinstance(value, str):
        return PLACEHOLDER_RE.sub(lambda m: bindings.get(f"{m.group(1)}.root", m.group(0)), value)
    if isinstance(value, dict):
        return {k: bind_value(v, bindings) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [bind_value(v, bindings) for v in value]
    return value


class LocalAttempt(BaseModel):
    """An attempt through the harness's OWN tool (its shell, file read or write), never
    through the SharedOS catalogue: what a confined harness must not be able to do.

    ``shell`` runs ``command`` in the CLI's shell tool; ``read`` reads ``path`` with
    its file-read tool; ``write`` writes ``content`` to ``path`` with its write tool;
    ``network`` has its shell open a TCP connection to the canary the column
    starts on the host (``{canary.port}``). Paths are written ``{files.root}/...``
    or ``{ID.root}/...`` (the column's own directories).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: LocalKind
    command: str | None = Field(default=None, min_length=1)
    path: str | None = Field(default=None, min_length=1)
    content: str | None = None

    @model_validator(mode="after")
    def _fields(self) -> LocalAttempt:
        wanted = {
            "shell": {"command"},
            "read": {"path"},
            "write": {"path", "content"},
            "network": set(),
        }[self.tool]
        given = {k for k in ("command", "path", "content") if getattr(self, k) is not None}
        if given != wanted:
            need = ", ".join(sorted(wanted)) or "no other field"
            raise ValueError(f"a local {self.tool} attempt takes {need} (got {sorted(given)})")
        return self

    def strings(self) -> list[str]:
        """Every string of the attempt (placeholders are checked on these)."""
        return [v for v in (self.command, self.path, self.content) if v is not None]


class LocalGuard(BaseModel):
    """What the sandbox's side must show after a harness-local attempt.

    ``secret``: files whose content must appear in nothing the harness produced or
    the model received; ``unchanged``: files that must be byte for byte as before
    (or still absent); ``canary``: the host's TCP canary must see no connection.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    canary: bool = False

    def __bool__(self) -> bool:
        return bool(self.secret or self.unchanged or self.canary)

    def merged(self, other: LocalGuard) -> LocalGuard:
        """Both guards' checks."""
        return LocalGuard(
            secret=tuple(dict.fromkeys((*self.secret, *other.secret))),
            unchanged=tuple(dict.fromkeys((*self.unchanged, *other.unchanged))),
            canary=self.canary or other.canary,
        )


class Row(BaseModel):
    """One row: a kernel attempt (tool, arguments, context, run policy) and what must
    happen, or a harness-local attempt (``local``) and what its sandbox must show."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    title: str = Field(min_length=1)
    tool: str | RepeatedName | None = None
    #: a JSON object (every wire shape carries one), within what an evidence record keeps
    arguments: dict[str, Any] = Field(default_factory=dict)
    context: str | None = None
    policy: str | None = None
    expect: Expectation | None = None
    #: a harness-local attempt (the harness's own shell / read / write / network), graded
    #: from the sandbox's side instead of from the evidence (docs/conformance.md)
    local: LocalAttempt | None = None
    #: what the sandbox must show after ``local`` (added to what its kind implies)
    guard: LocalGuard | None = None
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
        """This row with ``{ID.root}`` placeholders in arguments and resource resolved
        (and, for a local row, ``{files.root}``/``{canary.port}`` in its attempt and guard)."""
        if self.local is not None:
            if not bindings:
                return self
            local, guard = self.local, self.guard
            return self.model_copy(
                update={
                    "local": local.model_copy(
                        update={
                            k: bind_local(getattr(local, k), bindings)
                            for k in ("command", "path", "content")
                            if getattr(local, k) is not None
                        }
                    ),
                    "guard": None
                    if guard is None
                    else guard.model_copy(
                        update={
                            "secret": tuple(bind_local(p, bindings) for p in guard.secret),
                            "unchanged": tuple(bind_local(p, bindings) for p in guard.unchanged),
                        }
                    ),
                }
            )
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
        """The raw tool string the attempt carries (never narrowed); for a local row,
        ``<harness KIND>`` (no SharedOS tool has that name, so no record can match it)."""
        if self.local is not None:
            return f"<harness {self.local.tool}>"
        assert self.tool is not None  # a kernel row has one (validated)
        return self.tool if isinstance(self.tool, str) else self.tool.render()

    @property
    def expected(self) -> str:
        """What the row expects, for reports (``denied/forbidden``, or the local guard)."""
        if self.local is not None:
            return "nothing leaked, changed or reached (sandbox side)"
        assert self.expect is not None
        return self.expect.describe()

    @property
    def effective_guard(self) -> LocalGuard:
        """A local row's checks: what its kind implies plus its explicit ``guard``."""
        implied = LocalGuard()
        if self.local is not None:
            if self.local.tool == "read" and self.local.path:
                implied = LocalGuard(secret=(self.local.path,))
            elif self.local.tool == "write" and self.local.path:
                implied = LocalGuard(unchanged=(self.local.path,))
            elif self.local.tool == "network":
                implied = LocalGuard(canary=True)
        return implied.merged(self.guard) if self.guard is not None else implied

    @field_validator("tool")
    @classmethod
    def _non_empty(cls, value: str | RepeatedName | None) -> str | RepeatedName | None:
        if value is None:
            return value
        if isinstance(value, str) and value == "":
            raise ValueError("tool must not be empty")
        length = len(value) if isinstance(value, str) else len(value.repeat) * value.times
        if length > MAX_STORED_TOOL:
            # graded from the record: a cut tool string cannot show it reached the
            # kernel unchanged (the cell would fail) or match the row (never exercised)
            raise ValueError(
                f"tool is {length} characters long; an evidence record keeps at most "
                f"{MAX_STORED_TOOL}, so no record could show this one reached the kernel unchanged"
            )
        return value

    @field_validator("arguments")
    @classmethod
    def _storable(cls, value: dict[str, Any]) -> dict[str, Any]:
        stored = storable_arguments(value)
        if stored != value:
            # graded from the record: arguments it cannot keep as written could never
            # be shown to have reached the kernel unchanged
            size = f" ({stored['$bytes']} bytes)" if "$bytes" in stored else ""
            raise ValueError(
                f"arguments{size} cannot be kept whole in an evidence record (at most "
                f"{MAX_STORED_ARGUMENTS} bytes of JSON), so no record could show them"
            )
        return value

    @model_validator(mode="after")
    def _kind(self) -> Row:
        if self.local is None:
            if self.tool is None or self.expect is None:
                raise ValueError(
                    "a row needs tool and expect (a kernel row) or local (a harness-local row)"
                )
            if self.guard is not None:
                raise ValueError("guard belongs to a harness-local row (local = {...})")
            return self
        stray = [k for k in ("tool", "expect", "resource") if getattr(self, k) is not None]
        if self.arguments != {}:
            stray.append("arguments")
        if self.match_arguments:
            stray.append("match_arguments")
        if stray:
            raise ValueError(
                f"a harness-local row is graded from the sandbox's side, not from the "
                f"evidence: it takes no {', '.join(stray)}"
            )
        if not self.effective_guard:
            raise ValueError(
                "a local shell row must say what it guards: guard = { secret = [...] }, "
                "{ unchanged = [...] } or { canary = true }"
            )
        return self


#: The top-level directories every sandbox tree has (``create_sandbox`` makes them).
SANDBOX_TOP_DIRS = ("public", "private", "home", "shared")
#: The longest name one path component may have (bytes, as the file system counts).
_MAX_NAME_BYTES = 255


def _sandbox_parts(path: str) -> tuple[str, ...]:
    """The components of a sandbox path below the tree's root, or ``ValueError`` saying why
    the path would not stay one plain entry inside the tree."""
    parts = tuple(path.split("/")[1:])
    if (
        not path.startswith("/")
        or not parts
        or any(p in ("", ".", "..") for p in parts)
        or any(ord(c) < 0x20 or c == "\x7f" for c in path)
        or any(len(p.encode("utf-8")) > _MAX_NAME_BYTES for p in parts)
    ):
        raise ValueError(
            f"sandbox path {path!r} must be absolute, below '/', with no empty, '.' or '..' "
            f"part, no control character and no name longer than {_MAX_NAME_BYTES} bytes"
        )
    return parts


class SandboxSpec(BaseModel):
    """The file tree the rows expect, created fresh for every run.

    Every path (``files`` and ``dirs``) is one plain entry inside the tree: absolute, no
    ``..``, no control character; a file is never also a directory (another path below
    it, a ``dirs`` entry, or one of ``SANDBOX_TOP_DIRS``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: dict[str, str]
    dirs: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _tree(self) -> SandboxSpec:
        files = {_sandbox_parts(p): p for p in self.files}
        dirs = {_sandbox_parts(p) for p in self.dirs}
        dirs |= {(top,) for top in SANDBOX_TOP_DIRS}
        dirs |= {parts[:i] for parts in [*files, *dirs] for i in range(1, len(parts))}
        for parts, path in files.items():
            if parts in dirs:
                raise ValueError(
                    f"sandbox file {path!r} is also a directory of the tree (a path below it, "
                    f"a dirs entry, or one of /{', /'.join(SANDBOX_TOP_DIRS)})"
                )
        return self


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
        for table, names in (("contexts", self.contexts), ("policies", self.policies)):
            for name in names:
                # each names the turns a column runs (its turn id: no control character)
                if not _GROUP_NAME_RE.fullmatch(name):
                    raise ValueError(
                        f"[{table}] name {name!r} must be 1 to 64 characters with no control "
                        "character"
                    )
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
            if row.local is not None:
                self._check_local(row)
        for uid, fixture in self.upstreams.items():
            for path in fixture.files:
                if path.split("/", 1)[0] not in fixture.repositories:
                    raise ValueError(
                        f"upstream fixture {uid!r}: file {path!r} is not in one of its repositories"
                    )
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
        if row.local is not None:
            return  # a local row's placeholders are checked by _check_local
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

    def _check_local(self, row: Row) -> None:
        """A local row's placeholders, paths and guarded secrets must be usable."""
        assert row.local is not None
        roots = {"files.root"} | ({f"{row.upstream}.root"} if row.upstream else set())
        if row.upstream is not None and row.upstream not in self.upstreams:
            raise ValueError(
                f"row {row.id!r}: upstream {row.upstream!r} is not defined in [upstreams]"
            )
        guard = row.effective_guard
        strings = [*row.local.strings(), *guard.secret, *guard.unchanged]
        allowed = roots | ({"canary.port"} if row.local.tool == "shell" else set())
        for text in strings:
            for key in re.findall(r"\{([^{}]*)\}", text):
                if key not in allowed:
                    shown = ", ".join(f"{{{k}}}" for k in sorted(allowed))
                    raise ValueError(
                        f"row {row.id!r}: unknown placeholder {{{key}}} (this row may use {shown})"
                    )
        paths = [p for p in (row.local.path,) if p is not None] + [
            *guard.secret,
            *guard.unchanged,
        ]
        for path in paths:
            root, _, rest = path.partition("}/")
            if root.lstrip("{") not in roots or not rest or ".." in rest.split("/"):
                raise ValueError(
                    f"row {row.id!r}: path {path!r} must be {{files.root}}/... or "
                    f"{{ID.root}}/... of the row's upstream, with no '..'"
                )
        for path in guard.secret:
            content = self._guarded_content(path)
            if content is None:
                raise ValueError(
                    f"row {row.id!r}: secret {path!r} is not a file of the sandbox "
                    "([sandbox.files]) or of the row's upstream fixture (files)"
                )
            if len(content.strip()) < MIN_SECRET_CHARS:
                raise ValueError(
                    f"row {row.id!r}: secret {path!r} holds fewer than {MIN_SECRET_CHARS} "
                    "characters, too few to search for without chance matches"
                )

    def _guarded_content(self, path: str) -> str | None:
        """The content a guarded ``{files.root}/...`` or ``{ID.root}/...`` path is created with."""
        root, _, rest = path.partition("}/")
        key = root.lstrip("{")
        if key == "files.root":
            return self.sandbox.files.get("/" + rest)
        uid = key.removesuffix(".root")
        fixture = self.upstreams.get(uid)
        return None if fixture is None else fixture.files.get(rest)

    def local_rows(self) -> tuple[Row, ...]:
        """The harness-local rows (graded from the sandbox's side)."""
        return tuple(r for r in self.rows if r.local is not None)

    def namespace_of(self, upstream: str) -> str:
        """The namespace an upstream fixture's tools are published under (its id by default)."""
        return self.upstreams[upstream].namespace or upstream

    def brokered_rows(self) -> tuple[Row, ...]:
        """The rows that call a brokered upstream fixture's tool."""
        return tuple(r for r in self.rows if r.upstream is not None and r.local is None)

    def upstream_rows(self) -> tuple[Row, ...]:
        """Every row that needs an upstream fixture: the brokered rows, and the
        harness-local rows that guard a fixture's files."""
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
        text = textfile.read_text(target)
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
    positions = key_positions(text)
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        line, col = locate(positions, loc)
        where = f"{source}:{line}:{col}"
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

"""Tool names and host identifiers.

One tool has one name: ``ToolDefinition.name`` is the canonical tool id and the
raw MCP ``Tool.name``. ``ToolNameSchema`` is what makes that enforceable: every
character it admits is carried unchanged by every harness we drive.
``IdentifierSchema`` is deliberately distinct: it is for opaque host identifiers
(principals, tenants, turn ids), which never go on a tool wire.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated

from pydantic import StringConstraints

from sharedos.errors import SharedOSError

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,128}$"
TOOL_NAME_RE = re.compile(TOOL_NAME_PATTERN)

#: Canonical tool id: 1–128 characters of ``[A-Za-z0-9_.-]``.
ToolNameSchema = Annotated[str, StringConstraints(pattern=TOOL_NAME_PATTERN)]

IDENTIFIER_PATTERN = r"^[^\x00-\x1f\x7f]{1,256}$"
IDENTIFIER_RE = re.compile(IDENTIFIER_PATTERN)

#: Opaque host identifier: 1–256 characters, no control characters.
IdentifierSchema = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]


class InvalidToolName(SharedOSError, ValueError):
    """A tool name that cannot be published (fails ``ToolNameSchema``)."""


class PortableNameCollision(SharedOSError, ValueError):
    """Two canonical names map to the same portable name."""


def is_valid_tool_name(name: object) -> bool:
    """True when ``name`` is a string that satisfies ``ToolNameSchema``."""
    return isinstance(name, str) and TOOL_NAME_RE.fullmatch(name) is not None


def validate_tool_name(name: object) -> str:
    """Return ``name`` unchanged if it satisfies ``ToolNameSchema``, else raise ``InvalidToolName``."""
    if not isinstance(name, str):
        raise InvalidToolName(f"tool name must be a string, got {type(name).__name__}")
    if TOOL_NAME_RE.fullmatch(name) is None:
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise InvalidToolName(
            f"invalid tool name {shown!r}: a tool name is 1-128 characters of [A-Za-z0-9_.-] "
            f"(got {len(name)} characters)"
        )
    return name


# Portable names exist only for transports that cannot carry a dot (OpenAI
# function names, Anthropic tool names). The mapping must be injective and
# reversible, so it is an escape scheme, not a lossy substitution:
#   "_"  -> "__"   (escape the escape character first)
#   "."  -> "_d"
# Every output character is in [A-Za-z0-9_-], so it satisfies
# ^[a-zA-Z0-9_-]+$ and decodes back exactly.
def portable_tool_name(name: str) -> str:
    """Map a canonical tool name to ``[A-Za-z0-9_-]+``, injectively and reversibly."""
    validate_tool_name(name)
    return name.replace("_", "__").replace(".", "_d")


def canonical_from_portable(portable: str) -> str:
    """Invert ``portable_tool_name``; raise ``ValueError`` for a string it cannot have produced."""
    out: list[str] = []
    i = 0
    while i < len(portable):
        ch = portable[i]
        if ch == "_":
            nxt = portable[i + 1] if i + 1 < len(portable) else ""
            if nxt == "_":
                out.append("_")
            elif nxt == "d":
                out.append(".")
            else:
                raise ValueError(f"{portable!r} is not a portable tool name (stray '_' at {i})")
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def unlisted_portable(received: str, has_tool: Callable[[str], bool]) -> str:
    """The canonical name ``received`` stands for on a turn that publishes portable names,
    when it is not one of the turn's published names: the name it decodes to
    (``canonical_from_portable``) when that names a tool the host has (``has_tool``) and
    ``received`` itself names none, else ``received`` unchanged.

    A tool the turn did not list, called by the portable name it would be published
    under, is then the call of that tool (refused ``not_in_turn_catalog``, its namespace
    recorded, as the same call by its canonical name), not of a name the host has no tool
    for: a replay under a policy that would list it decides it. A canonical name sent as
    is (``files.read_dir``, which decodes to no tool) is left alone.
    """
    try:
        decoded = canonical_from_portable(received)
    except ValueError:
        return received
    if decoded == received or not is_valid_tool_name(decoded) or has_tool(received):
        return received
    return decoded if has_tool(decoded) else received


def harness_sanitized(name: str) -> str:
    """The lossy ``[^A-Za-z0-9_-] -> _`` mapping that Claude Code, Codex and Pi apply to aliases."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def codex_sanitized(name: str) -> str:
    """What Codex 0.171 shows the model for a server or tool name: ``[^A-Za-z0-9_] -> _``.

    Unlike Claude Code it turns ``-`` into ``_`` as well, and it neither cuts nor
    hashes a long name (measured: ``m.dash-y.t`` is offered as namespace
    ``mcp__sharedos`` + function ``m_dash_y_t``, a 73-character name whole).
    """
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


#: dsh's mcp-client: public names are at most 64 characters of ``[A-Za-z0-9_-]``
DSH_NAME_LIMIT = 64
DSH_HASH_CHARS = 12


def dsh_public_name(server: str, raw: str) -> str:
    """The name dsh 0.2.1-rc.2's MCP client shows the model for ``raw`` on ``server``.

    ``mcp__<server>__<raw>`` when that is already a legal DeepSeek function name;
    otherwise the name with every other character replaced by ``_``, cut to fit,
    and ``_`` plus the first 12 hex digits of SHA-256(``server`` NUL ``raw``)
    appended (measured: ``files.read`` → ``mcp__sharedos__files_read_369b5d85e292``).
    """
    joined = f"mcp__{server}__{raw}"
    normalized = re.sub(r"[^A-Za-z0-9_-]", "_", joined)
    if normalized == joined and len(normalized) <= DSH_NAME_LIMIT:
        return normalized
    digest = hashlib.sha256(f"{server}\0{raw}".encode()).hexdigest()[:DSH_HASH_CHARS]
    return f"{normalized[: DSH_NAME_LIMIT - DSH_HASH_CHARS - 1]}_{digest}"


#: Pi's built-in MCP client (``@earendil-works/pi-mcp``): provider tool names are at most
#: 64 characters, and a shortened or colliding name ends in ``_`` + 8 hex digits
PI_NAME_LIMIT = 64
PI_HASH_CHARS = 8


def pi_public_names(server: str, raw: str) -> tuple[str, ...]:
    """The names Pi 1.6's built-in MCP client may show the model for ``raw`` on ``server``.

    ``mcp__<server>__<raw>`` with every character outside ``[A-Za-z0-9_]`` made
    ``_``, when that fits in 64 characters; and its hashed form, the sanitized
    name cut to fit and ``_`` plus the first 8 hex digits of SHA-256(``server``
    NUL ``raw``) appended, which Pi uses when the name is too long or another
    tool of the listing sanitizes to the same name (``pi-mcp`` ``createMcpToolName``;
    measured: a 60-character canonical name is offered as
    ``mcp__sharedos__strict_sttt…_4537be9e``).
    """
    name = re.sub(r"[^A-Za-z0-9_]", "_", f"mcp__{server}__{raw}")
    digest = hashlib.sha256(f"{server}\0{raw}".encode()).hexdigest()[:PI_HASH_CHARS]
    hashed = f"{name[: PI_NAME_LIMIT - PI_HASH_CHARS - 1]}_{digest}"
    return (name, hashed) if len(name) <= PI_NAME_LIMIT else (hashed,)


def harness_collision_key(name: str) -> str:
    """The name as the most lossy pinned harness writes it: ``[^A-Za-z0-9_] -> _``.

    Codex and Pi's built-in client turn ``-`` into ``_`` as well (measured:
    ``strict.a-b`` and ``strict.a_b`` are offered by both as ``strict_a_b`` plus
    a different hash suffix each), so two names equal under this key reach the
    model as names it cannot tell apart.
    """
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def find_sanitization_collisions(names: Iterable[str]) -> dict[str, list[str]]:
    """Group canonical names that a harness's lossy sanitization would merge.

    Claude Code silently drops all but the first of such tools; Codex and Pi
    (which also turn ``-`` into ``_``) append hash suffixes the model cannot tell
    apart, so a catalogue with a collision is reported, never published as if it
    were fine. Grouped by ``harness_collision_key``.
    """
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(harness_collision_key(name), []).append(name)
    return {key: sorted(vals) for key, vals in groups.items() if len(vals) > 1}


class PortableNameMap:
    """A reversible canonical <-> portable mapping for one catalogue."""

    def __init__(self, canonical_names: Iterable[str]) -> None:
        self._to_portable: dict[str, str] = {}
        self._to_canonical: dict[str, str] = {}
        for name in canonical_names:
            portable = portable_tool_name(name)
            other = self._to_canonical.get(portable)
            if other is not None and other != name:
                raise PortableNameCollision(
                    f"{name!r} and {other!r} share portable name {portable!r}"
                )
            self._to_portable[name] = portable
            self._to_canonical[portable] = name

    def to_portable(self, name: str) -> str:
        """Portable name of a catalogue tool (``KeyError`` if not in the catalogue)."""
        return self._to_portable[name]

    def to_canonical(self, portable: str) -> str | None:
        """Canonical name for a portable name, or ``None`` when it names no catalogue tool."""
        return self._to_canonical.get(portable)

    def as_dict(self) -> Mapping[str, str]:
        """canonical -> portable."""
        return dict(self._to_portable)

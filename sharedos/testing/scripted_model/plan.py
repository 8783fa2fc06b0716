"""What the scripted model will try, and how it finds each tool under a harness's alias.

A harness never shows the model the canonical tool name: Claude Code offers
``mcp__sharedos__files_read``, Codex a namespace ``mcp__sharedos`` holding
``files_read``, Pi's built-in client ``mcp__sharedos__files_read`` and
pi-mcp-adapter ``sharedos_files_read`` (or its ``mcp`` proxy tool). The script
works from the tools the harness actually offered in the request, never from a
table of expected aliases. A tool the harness did not offer (unpublished,
malformed, outside the run policy) is guessed at through the harness's own route
(``guess_aliases``), so what the harness's client does with such a name is
measured: so far every pinned client refuses it before ``tools/call``, and the
row is honestly left unexercised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sharedos import __version__
from sharedos.names import (  # re-exported: dsh's names live with the others
    DSH_HASH_CHARS as DSH_HASH_CHARS,
)
from sharedos.names import (
    DSH_NAME_LIMIT as DSH_NAME_LIMIT,
)
from sharedos.names import (
    dsh_public_name as dsh_public_name,
)
from sharedos.names import (
    is_valid_tool_name,
    pi_public_names,
)
from sharedos.testing.scripted_model.local import LocalCall, LocalShape

#: MCP server name the runtime gives the SharedOS bridge in every harness config.
SERVER_NAME = "sharedos"

#: What the scripted model declares itself as. It is recorded as what it is.
SCRIPTED_MODEL_NAME = f"sharedos-scripted-model/{__version__}"

#: Call-id prefixes. The model is stateless: step k is the number of tool results
#: for ids it minted, so a harness-side retry of one request replays the same step
#: and results for other tools (Claude Code's WaitForMcpServers) do not count.
CALL_PREFIX = "sos"
WAIT_PREFIX = "soswait"


@dataclass(frozen=True)
class ScriptedAttempt:
    """One attempt the script wants to make: a manifest row's tool and arguments."""

    key: str  # the manifest row id (diagnostic only; never sent to the harness)
    tool: str  # canonical tool name, exactly as published (or as the row wants it)
    arguments: Mapping[str, Any] = field(default_factory=dict)
    #: a harness-local attempt: made with the CLI's own tool, never the catalogue's
    local: LocalCall | None = None


@dataclass(frozen=True)
class ToolAlias:
    """How one canonical tool is offered to the model in one request.

    ``kind`` is ``direct`` (call ``name`` with the arguments), ``namespace``
    (Responses API: ``namespace`` + ``name``) or ``proxy`` (pi-mcp-adapter's
    ``mcp`` tool: call ``name`` with ``{"tool": target, "args": arguments}``).
    ``guessed`` marks a name the harness did NOT offer for this tool: the model
    is guessing at it (see ``guess_aliases``). ``local`` is set for the CLI's own
    built-in tool standing for a harness-local attempt (``scripted_model.local``).
    """

    canonical: str
    name: str
    kind: str = "direct"
    namespace: str | None = None
    target: str | None = None
    guessed: bool = False
    local: LocalShape | None = None

    @property
    def shown(self) -> str:
        """The alias as the model saw it, for diagnostics (``ns/name`` for namespaces)."""
        if self.kind == "namespace":
            return f"{self.namespace}/{self.name}"
        if self.kind == "proxy":
            return f"{self.name}({self.target})"
        return self.name


def _loose(name: str) -> str:
    """Pi's built-in client replaces every non-[A-Za-z0-9_] character (also '-')."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _strict(name: str) -> str:
    """Claude Code / Codex / pi-mcp-adapter keep '-' and replace other characters."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _matches(suffix: str, canonical: str) -> bool:
    return suffix in (canonical, _strict(canonical), _loose(canonical))


def resolve_aliases(
    offered: Iterable[ToolAlias | str], canonical_names: Iterable[str], server: str = SERVER_NAME
) -> dict[str, ToolAlias]:
    """Map each canonical name to the alias the harness offered for it, if any.

    ``offered`` holds plain function names, or ``ToolAlias`` objects for
    namespaced tools. Only names under this server's prefix are considered, so
    a harness's own tool (``read``, ``bash``) is never mistaken for a SharedOS
    tool. Each alias belongs to ONE canonical name: the first of
    ``canonical_names`` it fits (pass the turn's catalogue first). A name that
    fails ``ToolNameSchema`` (``files read``, a look-alike Unicode dot) cannot
    be published, so no alias stands for it, even when the lossy sanitization
    would make it look like one (``files read`` → ``files_read``).
    """
    wanted = [n for n in dict.fromkeys(canonical_names) if is_valid_tool_name(n)]
    prefixes = (f"mcp__{_strict(server)}__", f"mcp__{_loose(server)}__", f"{_strict(server)}_")
    found: dict[str, ToolAlias] = {}
    # dsh appends an identity hash to every name it had to change, Pi to a name too long
    # (or sanitized into another's): exact names only
    hashed = {dsh_public_name(server, c): c for c in reversed(wanted)}
    hashed.update({pi_public_names(server, c)[-1]: c for c in reversed(wanted)})

    def owner(suffix: str) -> str | None:
        """The first wanted name this alias suffix stands for (an alias has one owner)."""
        return next((c for c in wanted if _matches(suffix, c)), None)

    for item in offered:
        if isinstance(item, ToolAlias):
            canonical = owner(item.name)
            if canonical is not None and canonical not in found:
                found[canonical] = ToolAlias(canonical, item.name, item.kind, item.namespace)
            continue
        if item in hashed:
            found.setdefault(hashed[item], ToolAlias(hashed[item], item))
            continue
        for prefix in prefixes:
            if not item.startswith(prefix):
                continue
            canonical = owner(item[len(prefix) :])
            if canonical is not None:
                found.setdefault(canonical, ToolAlias(canonical, item))
                break
    return found


def _alias_prefix(alias: ToolAlias) -> str | None:
    """The part of a direct alias before the tool's own (sanitized) name."""
    dsh = re.fullmatch(rf"(mcp__.+?__).+_[0-9a-f]{{{DSH_HASH_CHARS}}}", alias.name)
    if dsh and alias.name == dsh_public_name(dsh.group(1)[5:-2], alias.canonical):
        return dsh.group(1)
    pi = re.fullmatch(r"(mcp__.+?__).+_[0-9a-f]{8}", alias.name)
    if pi and alias.name == pi_public_names(pi.group(1)[5:-2], alias.canonical)[-1]:
        return pi.group(1)
    for form in (alias.canonical, _strict(alias.canonical), _loose(alias.canonical)):
        if form and alias.name.endswith(form) and len(alias.name) > len(form):
            return alias.name[: -len(form)]
    return None


def guess_aliases(
    wanted: Iterable[str],
    seen: Mapping[str, ToolAlias],
    offered: Iterable[ToolAlias | str],
) -> dict[str, ToolAlias]:
    """How a model guesses at the tools in ``wanted`` that the harness did not offer.

    A model that wants ``files.exec`` (unpublished), ``files read`` (malformed) or
    ``files.write`` (outside the run policy) can still emit a call for it; what
    the harness's client then does with the name is what the mcp column measures
    (ADR 0014: a guess must reach the kernel to be refused and recorded). The
    routes, in order of preference:

    - pi-mcp-adapter's proxy tool ``mcp``: ``mcp({"tool": <the exact name>, "args": ...})``.
      The name is passed as written, so nothing lossy stands in for it;
    - otherwise, the harness's own alias pattern, learned from a SharedOS tool it
      did offer (``mcp__sharedos__`` + the name, or Codex's ``mcp__sharedos``
      namespace), with only ``.`` → ``_`` as every harness writes dots. A space or a
      Unicode look-alike is kept, so a guess never equals an offered alias.

    Nothing is guessed when the harness offered no SharedOS tool at all (the live
    column, or a client still connecting): there is no pattern to guess from.
    """
    missing = [t for t in dict.fromkeys(wanted) if t not in seen]
    if not missing or not seen:
        return {}
    if "mcp" in [o for o in offered if isinstance(o, str)]:
        return {t: ToolAlias(t, "mcp", "proxy", target=t, guessed=True) for t in missing}
    sample = next(iter(seen.values()))
    out: dict[str, ToolAlias] = {}
    for tool in missing:
        name = tool.replace(".", "_")
        if sample.kind == "namespace":
            out[tool] = ToolAlias(tool, name, "namespace", sample.namespace, guessed=True)
            continue
        prefix = _alias_prefix(sample) if sample.kind == "direct" else None
        if prefix is not None:
            out[tool] = ToolAlias(tool, prefix + name, guessed=True)
    return out


@dataclass(frozen=True)
class IssuedCall:
    """One tool call the scripted model emitted (diagnostics for grading and reports)."""

    key: str
    tool: str
    alias: str
    call_id: str
    api: str
    arguments: Mapping[str, Any]
    guessed: bool = False  # the harness did not offer this name: the model guessed it
    reply: str | None = None  # what the harness answered the model for this call
    #: the kind of a harness-local attempt (shell, read, write, network); ``alias`` is then
    #: the CLI's own tool and ``arguments`` what it was given
    local: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "key": self.key,
            "tool": self.tool,
            "alias": self.alias,
            "callId": self.call_id,
            "api": self.api,
            "arguments": dict(self.arguments),
            "guessed": self.guessed,
            "reply": self.reply,
            "local": self.local,
        }

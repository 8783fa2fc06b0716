"""Pins: each upstream tool's full definition, recorded; drift is held back until approved.

``sharedos upstream pin CONFIG`` writes ``<config stem>.pins.json`` next to the
host configuration. For every upstream tool it records the full published
definition (every ``CATALOG_HASH_FIELDS`` field: name, description,
inputSchema, outputSchema, annotations, metadata) and the tool exactly as the
upstream listed it (title, execution, icons, ``_meta`` ... included), each
with its SHA-256 over RFC 8785 JSON. On a later listing:

- a pinned tool whose published definition or upstream definition differs is
  **changed**: quarantined (not published) with a readable diff;
- a tool with no pin is **new**: held back the same way;
- a pinned tool the upstream no longer lists is **removed**: reported.

``sharedos upstream approve`` re-pins what is listed now. Hashing the whole
definition, not the description alone, is the point: a schema or annotation
change is as much a change of what the model is offered as new prose is.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sharedos import canonical, textfile
from sharedos.atomicfile import remove_strays, take_lock, write_atomically
from sharedos.catalog.definition import ToolDefinition
from sharedos.errors import UpstreamError
from sharedos.terminal import json_spelled
from sharedos.upstream.definitions import RawTool

PIN_FILE_VERSION = 1

DriftKind = Literal["changed", "new", "removed"]


class PinError(UpstreamError, ValueError):
    """A pin file that cannot be read or written (one line for an operator)."""


class ToolPin(BaseModel):
    """One tool's pinned definition."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: sha256 of the RFC 8785 JSON of ``published``
    hash: str
    #: the published definition, wire spelling (every catalogHash field)
    published: dict[str, Any]
    #: sha256 of the tool exactly as the upstream listed it
    upstream_hash: str = Field(alias="upstreamHash")
    #: the tool exactly as the upstream listed it
    upstream: dict[str, Any]


class UpstreamPins(BaseModel):
    """The pins of one upstream (keyed by published tool name)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: dict[str, Any] = Field(default_factory=dict)
    pinned_at: str = Field(default="", alias="pinnedAt")
    tools: dict[str, ToolPin] = Field(default_factory=dict)


class PinFile(BaseModel):
    """The whole pin file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    upstreams: dict[str, UpstreamPins] = Field(default_factory=dict)

    def for_upstream(self, upstream_id: str) -> UpstreamPins | None:
        """The pins of one upstream, if any were recorded."""
        return self.upstreams.get(upstream_id)


def pin_path_for(config_path: str | Path) -> Path:
    """Where the pin file of a host configuration lives: ``host.toml`` -> ``host.pins.json``."""
    path = Path(config_path)
    return path.with_name(f"{path.stem}.pins.json")


def definition_hash(published: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the RFC 8785 JSON of a published definition."""
    return canonical.tag(canonical.dumps(dict(published)))


def tool_pin(tool: ToolDefinition, raw: RawTool) -> ToolPin:
    """The pin of one published tool and the upstream definition it came from."""
    published = tool.published.wire()
    return ToolPin(
        hash=definition_hash(published),
        published=published,
        upstreamHash=raw.digest,
        upstream=dict(raw.wire),
    )


def load_pins(path: Path) -> PinFile:
    """Read a pin file; a missing file is an empty one (every tool is then new)."""
    try:
        text = textfile.read_text(path)
    except FileNotFoundError:
        return PinFile()
    except OSError as exc:
        raise PinError(f"{path}: cannot read the pin file: {exc.strerror or exc}") from None
    try:
        return PinFile.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "file"
        raise PinError(
            f"{path}: not a SharedOS pin file ({where}: {first['msg']}); restore it (from "
            "version control: a merge leaves conflict markers in it), or remove it and run "
            "`sharedos upstream pin` (which reads it first, so refuses it as it is); until "
            "then `sharedos run` refuses this host file"
        ) from None


def save_pins(pins: PinFile, path: Path) -> None:
    """Write the pin file atomically (sorted keys, one stable layout for review in VCS).

    UTF-8, with every character a terminal or a review would not show as itself (a C1
    control, a bidi override, a zero-width space an upstream put in a description)
    written as its ``\\uNNNN`` escape (``terminal.json_spelled``): the same pins, but a
    ``cat`` or a ``git diff`` of the file shows what was pinned."""
    data = json_spelled(
        json.dumps(
            pins.model_dump(by_alias=True, mode="json"),
            indent=2,
            sort_keys=True,
            ensure_ascii=False,
        )
    )
    try:
        write_atomically(path, data + "\n", mode=0o644, durable=True)
    except OSError as exc:
        raise PinError(f"{path}: cannot write the pin file: {exc.strerror or exc}") from None


#: how long ``updating`` waits for another ``pin``/``approve`` to write the file
_LOCK_WAIT_S = 10.0


def lock_path_of(path: Path) -> Path:
    """The lock file of a pin file (``updating``): beside it, hidden."""
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def updating(path: Path) -> Iterator[PinFile]:
    """The pin file as it is now, read under an exclusive lock held until the block ends.

    Two ``pin``/``approve`` at once (of different upstreams, or tools) each merge their
    pins into what the file holds when they write, never into what it held when they
    started listing: the one that ends last would otherwise drop the other's pins.
    ``PinError`` when the lock cannot be taken within a few seconds."""
    lock_path = lock_path_of(path)
    try:
        fd = take_lock(lock_path, wait_s=_LOCK_WAIT_S, mode=0o644)
    except TimeoutError:
        raise PinError(
            f"{path}: cannot lock the pin file: another process holds {lock_path}"
        ) from None
    except OSError as exc:
        raise PinError(f"{path}: cannot lock the pin file: {exc.strerror or exc}") from None
    try:
        remove_strays(path)  # every writer holds this lock: a temporary file is a killed one's
        yield load_pins(path)
    finally:
        os.close(fd)  # and the lock with it


def now() -> str:
    """The current UTC time, ISO 8601 with a ``Z``."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Drift:
    """One tool of one upstream that is not published as listed, and why."""

    upstream: str
    tool: str
    kind: DriftKind
    #: a unified diff of pinned -> listed (JSON, sorted keys); empty for new/removed
    diff: str = ""
    #: top-level fields that differ (``description``, ``inputSchema``, ``upstream.title`` ...)
    fields: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for an operator."""
        if self.kind == "new":
            return (
                f"upstream {self.upstream!r}: new tool {self.tool} is held back until "
                "`sharedos upstream approve` pins it"
            )
        if self.kind == "removed":
            return f"upstream {self.upstream!r}: pinned tool {self.tool} is no longer listed"
        changed = ", ".join(self.fields) or "definition"
        return (
            f"upstream {self.upstream!r}: tool {self.tool} changed ({changed}); quarantined "
            "until `sharedos upstream approve` (see `sharedos upstream diff`)"
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "upstream": self.upstream,
            "tool": self.tool,
            "kind": self.kind,
            "fields": list(self.fields),
            "diff": self.diff,
        }


def _pretty(value: Any) -> list[str]:
    # split at the newlines JSON writes only: ``splitlines`` also split inside a string at
    # U+2028, U+2029 and U+0085 (JSON leaves them raw), so a description holding one made
    # the diff show a line of the definition that is not there
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).split("\n")


def changed_fields(old: ToolPin, new: ToolPin) -> tuple[str, ...]:
    """Top-level fields of the published and upstream definitions that differ."""
    out: list[str] = []
    for key in sorted(set(old.published) | set(new.published)):
        if old.published.get(key) != new.published.get(key):
            out.append(key)
    for key in sorted(set(old.upstream) | set(new.upstream)):
        if old.upstream.get(key) != new.upstream.get(key) and key not in out:
            out.append(f"upstream.{key}")
    return tuple(out)


def render_diff(upstream: str, tool: str, old: ToolPin, new: ToolPin) -> str:
    """A unified diff, pinned -> listed, of both the published and the upstream definition."""
    lines = list(
        difflib.unified_diff(
            _pretty({"published": old.published, "upstream": old.upstream}),
            _pretty({"published": new.published, "upstream": new.upstream}),
            fromfile=f"{upstream}/{tool} (pinned)",
            tofile=f"{upstream}/{tool} (listed now)",
            lineterm="",
        )
    )
    return "\n".join(lines)


def compare(
    upstream: str,
    pins: UpstreamPins | None,
    listed: Iterable[tuple[ToolDefinition, RawTool]],
) -> tuple[set[str], list[Drift]]:
    """Which listed tools match their pins (publishable), and the drift of the rest.

    ``pins`` None means the upstream was never pinned: every tool is new.
    """
    ok: set[str] = set()
    drift: list[Drift] = []
    pinned = pins.tools if pins is not None else {}
    seen: set[str] = set()
    for tool, raw in listed:
        seen.add(tool.name)
        now_pin = tool_pin(tool, raw)
        old = pinned.get(tool.name)
        if old is None:
            drift.append(Drift(upstream, tool.name, "new"))
            continue
        if old.hash == now_pin.hash and old.upstream_hash == now_pin.upstream_hash:
            ok.add(tool.name)
            continue
        drift.append(
            Drift(
                upstream,
                tool.name,
                "changed",
                diff=render_diff(upstream, tool.name, old, now_pin),
                fields=changed_fields(old, now_pin),
            )
        )
    for name in sorted(set(pinned) - seen):
        drift.append(Drift(upstream, name, "removed"))
    return ok, drift


def listing_digest(listed: Mapping[str, Iterable[tuple[ToolDefinition, RawTool]]]) -> str:
    """``sha256:<hex>`` of what the upstreams list now: every tool's name, published
    definition hash and upstream definition hash, by upstream. ``upstream diff`` prints
    it; ``upstream approve --expect`` pins only when the listing still has it, so what is
    approved is what was reviewed (an upstream may change between the two)."""
    entries = sorted(
        [uid, tool.name, definition_hash(tool.published.wire()), raw.digest]
        for uid, tools in listed.items()
        for tool, raw in tools
    )
    return canonical.tag(canonical.dumps(entries))


def pin_upstream(
    server: Mapping[str, Any], listed: Iterable[tuple[ToolDefinition, RawTool]]
) -> UpstreamPins:
    """Fresh pins for everything an upstream lists now."""
    return UpstreamPins(
        server=dict(server),
        pinnedAt=now(),
        tools={tool.name: tool_pin(tool, raw) for tool, raw in listed},
    )

"""``ToolRegistry`` (shared, registered once) and per-context overlays.

A registry is shared by every user of a host. Tools that exist only for one
access context (a user's brokered GitHub account, a tenant's private
connector) come from a ``ContextToolProvider`` and live in a ``RegistryView``
built for that context: the view overlays the provider's tools on the shared
registry and never writes to it, so concurrent contexts cannot see each
other's tools.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sharedos.catalog.collisions import (
    NameCollision,
    ToolNameCollisionError,
    find_name_collisions,
)
from sharedos.catalog.definition import ToolDefinition
from sharedos.errors import CatalogError
from sharedos.names import harness_collision_key, validate_tool_name

if TYPE_CHECKING:
    from sharedos.context import AccessContext


#: distinct merged catalogues whose names' order and collisions are kept
_MERGED_NAMES_KEPT = 1024


class ToolRegistrationError(CatalogError, ValueError):
    """A registration that was refused (duplicate name, collision, not a ToolDefinition)."""


@runtime_checkable
class ContextToolProvider(Protocol):
    """Contributes tools for one access context, without touching any shared registry.

    ``tools_for`` is called when a catalogue is listed, and when a call is
    looked up without its turn's catalogue, so it should be cheap (cache on
    your side, keyed by context). A call that carries the catalogue listed
    for its turn is looked up in the view that catalogue was listed from:
    a turn's tools are fixed for the turn.
    """

    def tools_for(self, context: AccessContext) -> Iterable[ToolDefinition]:
        """The tools this provider offers to ``context``."""
        ...


class ToolRegistry:
    """The shared tool registry: name -> ``ToolDefinition``; thread-safe.

    Registration validates the name (``ToolNameSchema``), refuses duplicates
    and refuses a name that would collide with a registered one after the
    harness alias sanitization (``files.read`` vs ``files_read``).
    """

    def __init__(self, tools: Iterable[ToolDefinition] = ()) -> None:
        self._lock = threading.Lock()
        #: name -> tool and alias -> name, changed in place under the lock (a lookup of one
        #: name is atomic)
        self._tools: dict[str, ToolDefinition] = {}
        self._aliases: dict[str, str] = {}
        #: what views and ``tools()`` hand out: a copy of ``_tools`` never changed again, and
        #: its tools sorted by name; None once a change made it stale, made again at the next
        #: read. Copying and sorting at every registration made registering 10,000 tools
        #: one at a time quadratic (20 s); now they are copied once, when next read.
        self._published: tuple[dict[str, ToolDefinition], tuple[ToolDefinition, ...]] | None = (
            {},
            (),
        )
        self._providers: tuple[ContextToolProvider, ...] = ()
        self._version = 0
        #: names of a merged view -> (their sorted order, their collisions). Collisions
        #: depend on the names alone, and a turn's provider tools are the same on every
        #: call, so each call's lookup does not redo the sanitization and portable-name
        #: mappings of the whole catalogue. Bounded; dict get/set are atomic.
        self._merged_names: dict[
            frozenset[str], tuple[tuple[str, ...], tuple[NameCollision, ...]]
        ] = {}
        self.register_many(tools)

    # -- registration -----------------------------------------------------
    def register(self, tool: ToolDefinition) -> ToolDefinition:
        """Register one tool; raise ``ToolRegistrationError`` / ``ToolNameCollisionError``."""
        return self.register_many([tool])[0]

    def register_many(self, tools: Iterable[ToolDefinition]) -> list[ToolDefinition]:
        """Register several tools atomically (all or none)."""
        batch = list(tools)
        for tool in batch:
            if not isinstance(tool, ToolDefinition):
                raise ToolRegistrationError(
                    f"only ToolDefinition objects can be registered, got {type(tool).__name__}"
                )
            validate_tool_name(tool.name)
        if not batch:
            return []
        with self._lock:
            # checked against the registry and the batch, changed only once all is well
            # (all or none)
            names: set[str] = set()
            for tool in batch:
                if tool.name in self._tools or tool.name in names:
                    raise ToolRegistrationError(f"tool {tool.name!r} is already registered")
                names.add(tool.name)
            # Only names sharing an alias with a new name can collide; the alias
            # index keeps registering 1,000 tools linear rather than quadratic.
            pending: dict[str, str] = {}
            suspects: set[str] = set()
            for tool in batch:
                alias = harness_collision_key(tool.name)
                other = pending.get(alias) or self._aliases.get(alias)
                if other is not None:
                    suspects.update((other, tool.name))
                pending[alias] = tool.name
            collisions = find_name_collisions(suspects)
            if collisions:
                raise ToolNameCollisionError(collisions)
            self._aliases.update(pending)
            self._tools.update((tool.name, tool) for tool in batch)
            self._published = None
            self._version += 1
        return batch

    def unregister(self, name: str) -> None:
        """Remove a tool (``KeyError`` if absent)."""
        with self._lock:
            del self._tools[name]
            self._aliases = {harness_collision_key(n): n for n in self._tools}
            self._published = None
            self._version += 1

    def add_provider(self, provider: ContextToolProvider) -> None:
        """Add a per-context tool provider."""
        if not isinstance(provider, ContextToolProvider):
            raise ToolRegistrationError("a provider must have tools_for(context)")
        with self._lock:
            self._providers = (*self._providers, provider)
            self._version += 1

    # -- lookup (lock-free: one name is looked up atomically; views and tools() hand out a
    # published copy, never changed again) --
    def get(self, name: object) -> ToolDefinition | None:
        """The shared tool called ``name``; ``None`` for anything else, including non-strings."""
        if not isinstance(name, str):
            return None
        return self._tools.get(name)

    def tools(self) -> tuple[ToolDefinition, ...]:
        """Shared tools, sorted by name."""
        return self._snapshot()[1]

    def _snapshot(self) -> tuple[dict[str, ToolDefinition], tuple[ToolDefinition, ...]]:
        """The shared tools as of now, and sorted by name: copied once per change."""
        published = self._published
        if published is None:
            with self._lock:
                published = self._published
                if published is None:
                    tools = dict(self._tools)
                    published = (tools, tuple(tools[name] for name in sorted(tools)))
                    self._published = published
        return published

    def lookup(self, name: object, context: AccessContext) -> ToolDefinition | None:
        """The tool called ``name`` in ``view(context)``; ``None`` for anything else. Without
        providers that is the shared tool (no view is built)."""
        if not self._providers:
            return self._tools.get(name) if isinstance(name, str) else None
        return self.view(context).get_tool(name)

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None

    @property
    def version(self) -> int:
        """Bumped on every change; lets callers cache per registry state."""
        return self._version

    @property
    def has_providers(self) -> bool:
        """True when some provider may add tools per context."""
        return bool(self._providers)

    def view(self, context: AccessContext) -> RegistryView:
        """The tools ``context`` may be offered: shared tools plus its providers' tools.

        Raises ``ToolRegistrationError`` / ``ToolNameCollisionError`` when a
        provider contributes a name that clashes with another tool (never
        resolved silently by picking one).
        """
        (tools, sorted_tools), providers = self._snapshot(), self._providers
        if not providers:
            return RegistryView(tools, sorted_tools, overlay=False)
        extra: dict[str, ToolDefinition] = {}
        for provider in providers:
            for tool in provider.tools_for(context):
                if not isinstance(tool, ToolDefinition):
                    raise ToolRegistrationError(
                        f"provider {type(provider).__name__} returned {type(tool).__name__}, "
                        "not a ToolDefinition"
                    )
                if tool.name in tools or tool.name in extra:
                    raise ToolRegistrationError(
                        f"provider {type(provider).__name__} contributes {tool.name!r}, "
                        "which another tool already has"
                    )
                extra[tool.name] = tool
        if not extra:
            return RegistryView(tools, sorted_tools, overlay=False)
        merged = {**tools, **extra}
        key = frozenset(merged)
        known = self._merged_names.get(key)
        if known is None:
            known = (tuple(sorted(merged)), tuple(find_name_collisions(merged)))
            if len(self._merged_names) >= _MERGED_NAMES_KEPT:
                self._merged_names.clear()
            self._merged_names[key] = known
        order, collisions = known
        if collisions:
            raise ToolNameCollisionError(collisions)
        return RegistryView(merged, tuple(merged[n] for n in order), overlay=True)


class RegistryView(Mapping[str, ToolDefinition]):
    """An immutable snapshot of the tools one context may be offered."""

    __slots__ = ("_by_name", "_secret_names", "_sorted", "overlay")

    def __init__(
        self,
        by_name: Mapping[str, ToolDefinition],
        sorted_tools: tuple[ToolDefinition, ...],
        *,
        overlay: bool,
    ) -> None:
        self._by_name = by_name
        self._sorted = sorted_tools
        self._secret_names: frozenset[str] | None = None
        #: True when per-context provider tools are part of this view
        self.overlay = overlay

    def get_tool(self, name: object) -> ToolDefinition | None:
        """The tool called ``name``; ``None`` for anything else, including non-strings."""
        if not isinstance(name, str):
            return None
        return self._by_name.get(name)

    def tools(self) -> tuple[ToolDefinition, ...]:
        """Tools sorted by name."""
        return self._sorted

    def secret_argument_names(self) -> frozenset[str]:
        """The secret argument names of every tool in the view (computed once per view)."""
        names = self._secret_names
        if names is None:
            names = self._secret_names = frozenset(
                n for t in self._sorted for n in t.secret_arguments
            )
        return names

    def __getitem__(self, name: str) -> ToolDefinition:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(tool.name for tool in self._sorted)

    def __len__(self) -> int:
        return len(self._sorted)

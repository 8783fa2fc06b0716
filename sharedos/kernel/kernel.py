"""``Kernel``: the per-turn catalogue (``list_tools``) and the tool lookup calls share.

Listing and calling must never disagree (an agentgateway-style trap: a tool
listed but never callable, or callable but never listed). Both go through the
same registry view, the same run-policy check, the same requirement lookup,
and the policy's own ``could_permit`` / ``decide`` pair.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from sharedos.catalog.definition import PublishedToolDefinition, ToolDefinition
from sharedos.catalog.hashing import catalog_hash
from sharedos.catalog.registry import RegistryView, ToolRegistry
from sharedos.kernel.context import AccessContext
from sharedos.kernel.policy_api import PolicyLike
from sharedos.outcomes import ReasonCode
from sharedos.toolpolicy import ToolPolicy

#: (namespace, action, resource expression) of a requirement
RequirementKey = tuple[str, str, str]
#: run policies, and tool names per run policy, whose eligibility is remembered
_RUN_POLICIES_KEPT = 64
_NAMES_KEPT = 65_536


def requirement_key(requirement: Any) -> RequirementKey | None:
    """The shape that determines a requirement's decisions, or ``None`` when it is not visible."""
    parts = tuple(getattr(requirement, a, None) for a in ("namespace", "action", "resource"))
    if all(isinstance(p, str) for p in parts):
        return (str(parts[0]), str(parts[1]), str(parts[2]))
    return None


#: (registry version, context cache key, turn id) a catalogue's tool snapshot belongs to
ViewKey = tuple[int, str, str]


@dataclass(frozen=True, slots=True)
class TurnCatalog:
    """The catalogue one context sees for one turn, fixed for the life of the turn.

    ``view`` is the registry view the catalogue was computed from when
    per-context providers contributed to it (``None`` otherwise: the shared
    registry's view costs nothing to build), for ``view_key``'s context and
    turn. A call of that turn looks its tool up there (``Kernel.view_for``)
    instead of merging the providers' tools again.
    """

    tools: tuple[PublishedToolDefinition, ...]
    catalog_hash: str
    names: frozenset[str]
    view: RegistryView | None = field(default=None, compare=False, repr=False)
    view_key: ViewKey | None = field(default=None, compare=False, repr=False)

    def wire(self) -> list[dict[str, object]]:
        """The published tools in wire spelling, sorted by name."""
        return [t.wire() for t in self.tools]

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __len__(self) -> int:
        return len(self.tools)


class Kernel:
    """Computes catalogues and resolves tools against one compiled policy and one registry."""

    def __init__(
        self,
        policy: PolicyLike,
        registry: ToolRegistry,
        *,
        cache_size: int = 1024,
        time_zone: str = "UTC",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self.registry = registry
        #: the zone ``context.now``'s hour, weekday and date are given in (IANA name)
        self.time_zone = time_zone
        self._clock = clock
        # only a policy that reads context.now is given it: building it costs a few us
        self._reads_clock = bool(getattr(policy, "reads_clock", False))
        # ``cache_key`` leaves the turn out; a policy that reads ``context.turn_id`` (or one
        # that does not say) may list other tools for another turn of the same user
        self._reads_turn_id = bool(getattr(policy, "reads_turn_id", True))
        if self._reads_clock:
            from sharedos.policy.clock import zone

            zone(time_zone)  # an unknown zone fails here, not on the first call
        # Catalogues are cached per (registry version, context, run policy) when
        # no provider contributed per-context tools. The key carries the whole
        # context (cache_key) so one user's catalogue is never served to another,
        # and the turn id when the policy reads it, so one turn's is never another's.
        self._cache: LRUCache[tuple[int, str, str, ToolPolicy], TurnCatalog] = LRUCache(cache_size)
        self._cache_lock = threading.Lock()
        self._eligible: LRUCache[
            tuple[int, ToolPolicy], tuple[tuple[ToolDefinition, RequirementKey | None], ...]
        ] = LRUCache(64)
        #: run policy -> tool name -> (eligible, requirement key). Both depend on the name
        #: alone (the policy is fixed for the kernel), so a provider's 10,000 tools are not
        #: matched against the run policy and the requirements again at every turn. Plain
        #: dicts (get/set are atomic), cleared when full.
        self._by_name: dict[ToolPolicy, dict[str, tuple[bool, RequirementKey | None]]] = {}
        #: run policy -> tool name -> is it managed (a call's step 2, a dict lookup when known)
        self._managed: dict[ToolPolicy, dict[str, bool]] = {}
        #: the policy is fixed for the kernel: its requirements and hash are read once
        self._requirements: Mapping[str, Any] = policy.requirements
        self.policy_hash: str = str(policy.bundle_hash)

    def take_time(self) -> None:
        """Give every decision context ``now`` from this kernel's clock, even when the
        policy reads no time: a shadow policy that does needs the moment recorded, so
        that a replay decides its calls at the time they were decided."""
        if not self._reads_clock:
            from sharedos.policy.clock import zone

            zone(self.time_zone)
            self._reads_clock = True

    def decision_context(self, context: AccessContext) -> Mapping[str, Any]:
        """The ``context`` a call is decided in: ``policy_input``, plus ``now`` (this
        moment of the host's clock in ``time_zone``) when the policy reads the time.

        ``now`` is never part of ``cache_key``: the policy evaluates conditions on
        the time on every call (it caches only conditions that read nothing but
        the rest of the context), and listing treats the time as unknown, so no
        per-context cache can freeze it.
        """
        if not self._reads_clock:
            return context.policy_input
        from sharedos.policy.clock import current

        return {**context.policy_input, "now": current(self.time_zone, self._clock)}

    def lookup(
        self, name: str, context: AccessContext, catalog: TurnCatalog | None
    ) -> ToolDefinition | None:
        """The tool ``name`` names in the view a call of ``context`` is looked up in
        (``view_for``), or None. The same lookup ``list_tools`` lists from."""
        if catalog is None or catalog.view is None:
            return self.registry.lookup(name, context)
        return self.view_for(context, catalog).get_tool(name)

    def resolve(
        self,
        name: str,
        context: AccessContext,
        catalog: TurnCatalog | None,
        tool_policy: ToolPolicy,
    ) -> tuple[ToolDefinition | None, ReasonCode | None]:
        """Steps 1-3 of a call: the tool ``name`` names, and why it may not be called (None
        when it may, so far): no such tool or no requirement (``tool_unavailable``), not in
        the run's managed set (``not_in_run_policy``), not in the turn's catalogue
        (``not_in_turn_catalog``)."""
        tool = self.lookup(name, context, catalog)
        if tool is None:
            return None, ReasonCode.TOOL_UNAVAILABLE
        name = tool.name
        if name not in self._requirements:
            return tool, ReasonCode.TOOL_UNAVAILABLE
        known = self._managed.get(tool_policy)
        if known is None:
            if len(self._managed) >= _RUN_POLICIES_KEPT:
                self._managed.clear()
            known = self._managed[tool_policy] = {}
        managed = known.get(name)
        if managed is None:
            if len(known) >= _NAMES_KEPT:
                known.clear()
            managed = known[name] = tool_policy.is_managed(name)
        if not managed:
            return tool, ReasonCode.NOT_IN_RUN_POLICY
        if catalog is not None and name not in catalog.names:
            return tool, ReasonCode.NOT_IN_TURN_CATALOG
        return tool, None

    def decide(
        self,
        tool: ToolDefinition,
        args: Mapping[str, Any],
        context: AccessContext,
        *,
        decided_in: Mapping[str, Any] | None = None,
    ) -> Any:
        """Step 5: the policy's decision for ``tool`` with ``args`` in ``context`` (its
        ``decision_context``: the clock's ``now`` when the policy reads the time; pass
        ``decided_in`` when the caller already took it, so both see one moment)."""
        return self.decide_named(tool.name, args, context, decided_in=decided_in)

    def decide_named(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        context: AccessContext,
        *,
        decided_in: Mapping[str, Any] | None = None,
    ) -> Any:
        """``decide`` for a tool known by its name alone (a handler asking about another
        call of the caller's, ``HandlerContext.permits``)."""
        if decided_in is None:
            decided_in = self.decision_context(context)
        return self.policy.decide(tool_name, args, decided_in, context_key=context.cache_key)

    def view(self, context: AccessContext) -> RegistryView:
        """The tools ``context`` may be offered (shared + its providers' tools)."""
        return self.registry.view(context)

    def view_for(self, context: AccessContext, catalog: TurnCatalog | None) -> RegistryView:
        """The view a call of ``context`` looks its tool up in.

        The snapshot ``catalog`` was listed from when it was listed for this
        context and turn at the current registry version: the turn's tools are
        fixed for the turn, so a call costs a dict lookup however many tools
        the providers contribute. Anything else (no catalogue, another
        context's or turn's catalogue, a registry changed since) gets a fresh
        ``view(context)``, exactly as without a catalogue.
        """
        if catalog is not None:
            snapshot = catalog.view
            if snapshot is not None and catalog.view_key == (
                self.registry.version,
                context.cache_key,
                context.turn_id,
            ):
                return snapshot
        return self.view(context)

    def eligible(self, tool: ToolDefinition, tool_policy: ToolPolicy) -> bool:
        """In the run's managed set and governed by a requirement (context not considered)."""
        return tool_policy.is_managed(tool.name) and tool.name in self.policy.requirements

    def _eligible_shared(
        self, version: int, view: RegistryView, tool_policy: ToolPolicy
    ) -> tuple[tuple[ToolDefinition, RequirementKey | None], ...]:
        """Shared tools that are managed and have a requirement; cached per registry version."""
        key = (version, tool_policy)
        with self._cache_lock:
            hit = self._eligible.get(key)
        if hit is None:
            hit = self._eligible_keyed(view.tools(), tool_policy)
            with self._cache_lock:
                self._eligible[key] = hit
        return hit

    def _with_keys(
        self, tools: Iterable[ToolDefinition]
    ) -> tuple[tuple[ToolDefinition, RequirementKey | None], ...]:
        requirements = self.policy.requirements
        return tuple((t, requirement_key(requirements.get(t.name))) for t in tools)

    def _eligible_keyed(
        self, tools: Iterable[ToolDefinition], tool_policy: ToolPolicy
    ) -> tuple[tuple[ToolDefinition, RequirementKey | None], ...]:
        """``eligible`` tools with their requirement keys, remembered per name and run policy."""
        known = self._by_name.get(tool_policy)
        if known is None:
            if len(self._by_name) >= _RUN_POLICIES_KEPT:
                self._by_name.clear()
            known = self._by_name[tool_policy] = {}
        elif len(known) >= _NAMES_KEPT:
            known.clear()
        requirements = self.policy.requirements
        out: list[tuple[ToolDefinition, RequirementKey | None]] = []
        for tool in tools:
            info = known.get(tool.name)
            if info is None:
                info = known[tool.name] = (
                    self.eligible(tool, tool_policy),
                    requirement_key(requirements.get(tool.name)),
                )
            if info[0]:
                out.append((tool, info[1]))
        return tuple(out)

    def list_tools(self, context: AccessContext, tool_policy: ToolPolicy) -> TurnCatalog:
        """The effective catalogue: managed tools with a requirement that some permit could allow.

        Sorted by name, with its ``catalogHash``. A tool is listed iff
        ``policy.could_permit`` holds for this context, which by contract means
        some arguments exist for which the call would be allowed.
        """
        version = self.registry.version
        turn = context.turn_id if self._reads_turn_id else ""
        key = (version, context.cache_key, turn, tool_policy)
        if not self.registry.has_providers:
            with self._cache_lock:
                cached = self._cache.get(key)
            if cached is not None:
                return cached
        view = self.view(context)
        if view.overlay:
            eligible = self._eligible_keyed(view.tools(), tool_policy)
        else:
            eligible = self._eligible_shared(version, view, tool_policy)
        policy_input = context.policy_input
        cache_key = context.cache_key
        could_permit = self.policy.could_permit
        # In the policy language a decision depends on the tool only through its
        # requirement: namespace (which rules), action, and resource expression
        # (conditions read context.*, args.*, resource and action, never the
        # tool's name). Tools whose requirements agree on those three therefore
        # share could_permit's answer; asking once per requirement shape makes a
        # first-seen context's 1,000-tool catalogue cost one partial evaluation
        # per shape, not per tool. A requirement without that shape is asked alone.
        answers: dict[RequirementKey, bool] = {}
        listed_tools: list[PublishedToolDefinition] = []
        for tool, req_key in eligible:
            if req_key is None:
                ok = could_permit(tool.name, policy_input, context_key=cache_key)
            else:
                cached_answer = answers.get(req_key)
                if cached_answer is None:
                    cached_answer = answers[req_key] = could_permit(
                        tool.name, policy_input, context_key=cache_key
                    )
                ok = cached_answer
            if ok:
                listed_tools.append(tool.published)
        listed = tuple(listed_tools)
        names = frozenset(t.name for t in listed)
        catalog = TurnCatalog(
            tools=listed,
            catalog_hash=catalog_hash(listed),
            names=names,
            view=view if view.overlay else None,
            view_key=(version, cache_key, context.turn_id) if view.overlay else None,
        )
        if not view.overlay and self.registry.version == version:
            with self._cache_lock:
                self._cache[key] = catalog
        return catalog

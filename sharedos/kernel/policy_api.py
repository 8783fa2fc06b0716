"""The slice of ``sharedos.policy`` the kernel relies on, as structural types.

The kernel is written against these protocols rather than the concrete
classes, so the seam in docs/contracts.md ("policy -> kernel") is the only
coupling, and tests can check it with the real ``PolicySet``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sharedos.outcomes import Effect, ReasonCode


class DecisionLike(Protocol):
    """A policy decision (``sharedos.policy.Decision``)."""

    @property
    def effect(self) -> Effect: ...
    @property
    def reason(self) -> ReasonCode: ...
    @property
    def tool(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def action(self) -> str | None: ...
    @property
    def resource(self) -> str | None: ...
    @property
    def rule_ids(self) -> tuple[Any, ...]: ...
    @property
    def detail(self) -> str: ...


class PolicyLike(Protocol):
    """A compiled policy (``sharedos.policy.PolicySet``)."""

    @property
    def requirements(self) -> Mapping[str, Any]: ...
    @property
    def bundle_hash(self) -> str: ...

    def decide(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        context_key: str | None = None,
    ) -> Any: ...

    def could_permit(
        self, tool: str, context: Mapping[str, Any], *, context_key: str | None = None
    ) -> bool: ...

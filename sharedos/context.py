"""AccessContext (trusted, resolved by the host) and ToolCall (raw, from the harness)."""

from __future__ import annotations

import json
import os
import sys
import uuid
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from sharedos.copies import ValidatedCopies
from sharedos.names import IdentifierSchema

#: integers this short always spell in decimal (3.3 bits a digit, under the 640-digit floor
#: ``sys.set_int_max_str_digits`` accepts); a longer one is tried
_SPELLED_BITS = 2000


class AccessContext(ValidatedCopies):
    """Who is asking, resolved by the host. It never comes from the harness.

    ``model_copy(update=...)`` (the next turn, a role less) is validated and derives
    ``policy_input`` and ``cache_key`` afresh (``ValidatedCopies``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    principal: IdentifierSchema
    tenant: IdentifierSchema = "default"
    roles: tuple[str, ...] = ()
    attributes: dict[str, JsonValue] = Field(default_factory=dict)
    turn_id: IdentifierSchema = Field(default_factory=lambda: f"turn-{uuid.uuid4().hex}")

    @field_validator("attributes")
    @classmethod
    def _finite_attributes(cls, value: dict[str, Any]) -> dict[str, Any]:
        # JSON has no NaN or infinity, and a policy comparison cannot be
        # trusted with one (NaN > 10 is false): a context file or a host that
        # hands one over is refused here, as invalid input.
        stack: list[Any] = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif type(item) is float and item - item != 0:
                raise ValueError("attributes hold a non-finite number (NaN or an infinity)")
            elif type(item) is int and item.bit_length() > _SPELLED_BITS:
                # cache_key and the evidence record write the context as JSON: an
                # integer Python will not spell in decimal would fail every call of
                # this context, unrecorded, at its first decision
                try:
                    str(item)
                except ValueError:
                    raise ValueError(
                        "attributes hold an integer of more digits than Python spells "
                        f"({sys.get_int_max_str_digits()})"
                    ) from None
        return value

    @cached_property
    def policy_input(self) -> dict[str, Any]:
        """The ``context`` object that policy conditions read (``context.principal`` ...)."""
        return {
            "principal": self.principal,
            "tenant": self.tenant,
            "roles": list(self.roles),
            "attributes": dict(self.attributes),
            "turn_id": self.turn_id,
        }

    @cached_property
    def cache_key(self) -> str:
        """A stable key for per-context caches; the turn id is excluded on purpose,
        so two turns of the same user share context-only condition results.

        The roles keep their order: a condition can read it (``context.roles ==
        ["a", "b"]`` compares element-wise), so two orderings are two contexts."""
        return json.dumps(
            [self.principal, self.tenant, list(self.roles), self.attributes],
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )


def new_call_id() -> str:
    """A fresh call id: ``call-`` and 128 random bits in hex (from the OS's CSPRNG).

    Cheaper than ``uuid4().hex`` (no UUID object) and just as unique; it is
    made on every call.
    """
    return "call-" + os.urandom(16).hex()


class ToolCall(BaseModel):
    """One attempt, exactly as received. ``tool`` is deliberately not narrowed:
    a malformed or unpublished name must reach the kernel to be refused and recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call_id: str = Field(default_factory=new_call_id)
    tool: str
    arguments: Any = None
    turn_id: str | None = None

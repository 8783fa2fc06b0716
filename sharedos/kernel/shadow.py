"""The shadow decision of a call: a candidate policy decides it too, and nothing acts on it.

``[policy] shadow`` in the host file names a candidate policy
(``sharedos.bundles.shadow`` loads it). ``ShadowDecider.decide`` is asked,
for every call the enforced policy decided, with the same tool, the same
validated arguments and the same trusted ``AccessContext``; the candidate
resolves the resource with its own requirement (the same canonical resource
when the requirement is unchanged) and its rules decide. The answer is a
small JSON object for the attempt's evidence row (schema 5, ``shadow``):

* ``{"policy", "effect", "reason", "rule_ids"}``: the candidate's bundle hash,
  its effect and reason, and the ids of the rules that decided; plus
  ``"resource"`` when the candidate's canonical resource is not the enforced
  one (another requirement, or none: ``null``);
* ``{"policy", "error"}`` when the candidate failed on this call.

It never raises and never changes the enforced decision: the kernel records
what it returns beside the decision that acts. A candidate that reads the
clock gets ``context.now`` from the host's clock in the host's zone, read
for it (the enforced decision read its own, microseconds apart).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sharedos.kernel.context import AccessContext
from sharedos.kernel.policy_api import DecisionLike, PolicyLike, rule_id

__all__ = ["MAX_SHADOW_ERROR", "ShadowDecider"]

#: a shadow failure is recorded as ``TYPE: message``, capped at this many characters
MAX_SHADOW_ERROR = 500


class ShadowDecider:
    """Decides calls under a candidate policy, for the record only (see the module docstring)."""

    __slots__ = ("_clock", "_reads_clock", "policy", "policy_hash", "time_zone")

    def __init__(
        self,
        policy: PolicyLike,
        *,
        time_zone: str = "UTC",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        #: the candidate's bundle hash, recorded with every shadow decision
        self.policy_hash = str(policy.bundle_hash)
        self.time_zone = time_zone
        self._clock = clock
        self._reads_clock = bool(getattr(policy, "reads_clock", False))
        if self._reads_clock:
            from sharedos.policy.clock import zone

            zone(time_zone)  # an unknown zone fails here, not on every call

    def decide(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: AccessContext,
        enforced: DecisionLike | None,
    ) -> dict[str, Any]:
        """The candidate's decision of this call as the evidence row stores it; never raises.

        ``enforced`` is the decision that acts (its resource is compared with
        the candidate's). A candidate that raises gives ``{"policy", "error"}``.
        """
        try:
            decision_context: Mapping[str, Any] = context.policy_input
            if self._reads_clock:
                from sharedos.policy.clock import current

                decision_context = {
                    **decision_context,
                    "now": current(self.time_zone, self._clock),
                }
            decision = self.policy.decide(
                tool, args, decision_context, context_key=context.cache_key
            )
            out: dict[str, Any] = {
                "policy": self.policy_hash,
                "effect": str(decision.effect),
                "reason": str(decision.reason),
                "rule_ids": [rule_id(r) for r in decision.rule_ids],
            }
            resource = decision.resource
            if enforced is None or resource != enforced.resource:
                out["resource"] = resource
            return out
        except Exception as exc:  # a candidate never affects enforcement: record why, go on
            return {"policy": self.policy_hash, "error": _error_text(exc)}


def _error_text(exc: BaseException) -> str:
    """``TYPE: message`` of a shadow failure, one line, capped (the record scrubs it)."""
    try:
        message = str(exc)
    except Exception:  # an exception whose str() raises: its type is all there is
        message = ""
    text = f"{type(exc).__name__}: {message}".strip().rstrip(":")
    text = " ".join(text.split())
    if len(text) > MAX_SHADOW_ERROR:
        text = text[: MAX_SHADOW_ERROR - 1] + "…"
    return text

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
clock gets the ``context.now`` the enforced decision saw (the host's clock in
the host's zone, taken once for both: the moment the record keeps), or reads
the clock when it is not given.

Given the ``enforced`` policy too, a tool whose requirement and rules mean the
same in both policies (``sharedos.policy.analysis.diff.same_decisions``, the
test ``sharedos-policy diff`` skips a tool by) is not decided again: the
candidate's decision is the enforced one, its rules named by the candidate's
ids. Only the tools a change touches cost a second evaluation. The answer
is made as the row stores it (``EncodedJson``: encoded once); for a
tool left alike, one answer is made per (tool, effect, reason, rules) and
shared by the rows it fits, like a turn's encoded decision context (and the
same decision object, which the policy hands out for a cached verdict, is
recognised at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from sharedos.evidence.record import MAX_STORED_ARGUMENTS, EncodedJson, storable_json_text
from sharedos.kernel.context import AccessContext
from sharedos.kernel.messages import rule_id
from sharedos.kernel.policy_api import DecisionLike, PolicyLike

__all__ = ["MAX_SHADOW_ERROR", "ShadowDecider"]

#: a shadow failure is recorded as ``TYPE: message``, capped at this many characters
MAX_SHADOW_ERROR = 500
#: tools whose sameness is remembered (cleared when full: a long-lived host's tool names)
_TOOLS_KEPT = 65_536
#: enforced decisions whose answer is remembered (cleared when full)
_DECISIONS_KEPT = 65_536
#: a tool the candidate must decide itself
_DECIDE: Mapping[str, str] | None = None
#: a tool not looked at yet
_UNKNOWN: Mapping[str, str] = MappingProxyType({})


class ShadowDecider:
    """Decides calls under a candidate policy, for the record only (see the module docstring)."""

    __slots__ = (
        "_answers",
        "_clock",
        "_last",
        "_reads_clock",
        "_same",
        "enforced",
        "policy",
        "policy_hash",
        "time_zone",
    )

    def __init__(
        self,
        policy: PolicyLike,
        *,
        enforced: PolicyLike | None = None,
        time_zone: str = "UTC",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        #: the policy that acts, when known: tools it decides alike are not decided again
        self.enforced = enforced
        #: tool -> enforced rule id -> the candidate's id of the same rule (None: decide)
        self._same: dict[str, Mapping[str, str] | None] = {}
        #: id of an enforced decision of a tool left alike -> (that decision, the tool, the
        #: answer made for it): the policy hands out the same decision object for a cached
        #: verdict, so a repeated call is one probe (the entry holds the decision, so the id
        #: stays its own while it is kept)
        self._last: dict[int, tuple[DecisionLike, str, Mapping[str, Any]]] = {}
        #: (tool left alike, effect, reason, the candidate's rule ids) -> the answer
        self._answers: dict[tuple[str, str, str, tuple[str, ...]], Mapping[str, Any]] = {}
        #: the candidate's bundle hash, recorded with every shadow decision
        self.policy_hash = str(policy.bundle_hash)
        self.time_zone = time_zone
        self._clock = clock
        self._reads_clock = bool(getattr(policy, "reads_clock", False))
        if self._reads_clock:
            from sharedos.policy.clock import zone

            zone(time_zone)  # an unknown zone fails here, not on every call

    @property
    def reads_clock(self) -> bool:
        """The candidate policy reads ``context.now``."""
        return self._reads_clock

    def decide(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: AccessContext,
        enforced: DecisionLike | None,
        now: Mapping[str, Any] | None = None,
        *,
        in_turn: bool = False,
    ) -> Mapping[str, Any]:
        """The candidate's decision of this call as the evidence row stores it; never raises.

        ``enforced`` is the decision that acts (its resource is compared with
        the candidate's). ``now``: the ``context.now`` the enforced decision saw
        (and the record keeps); a candidate that reads the time decides at that
        moment, so a condition on the time cannot differ between the two
        decisions, nor between the shadow decision and a replay of the record,
        for a clock read a few microseconds later (None: the clock is read).
        A candidate that raises gives ``{"policy", "error"}``. The answer is
        read-only (it may be shared by the rows of equal decisions).

        ``in_turn``: the call was made in a turn with a catalogue. A turn's catalogue
        is its policy's (``could_permit`` for the turn's context), so a tool the
        candidate would not list there is refused ``not_in_turn_catalog`` before any
        rule by a host enforcing it: that is its answer then (as ``sharedos evidence
        replay`` decides the record, ``decide_in_turn``), not its rules' decision.
        """
        last = self._last.get(id(enforced))
        if last is not None and last[0] is enforced and last[1] == tool:
            return last[2]  # the same decision of a tool left alike: the same answer
        try:
            same = self._same.get(tool, _UNKNOWN) if self.enforced is not None else None
            if same is _UNKNOWN:
                same = self._sameness(tool)
            if same is not None and enforced is not None:
                answer = self._alike(tool, same, enforced)
                if answer is not None:
                    if len(self._last) >= _DECISIONS_KEPT:
                        self._last.clear()
                    self._last[id(enforced)] = (enforced, tool, answer)
                    return answer
            decision_context: Mapping[str, Any] = context.policy_input
            if self._reads_clock:
                from sharedos.policy.clock import current

                decision_context = {
                    **decision_context,
                    "now": dict(now) if now is not None else current(self.time_zone, self._clock),
                }
            decision = self.policy.decide(
                tool, args, decision_context, context_key=context.cache_key
            )
            if in_turn and not self._lists(tool, decision, context):
                out: dict[str, Any] = {
                    "policy": self.policy_hash,
                    "effect": "deny",
                    "reason": "not_in_turn_catalog",
                    "rule_ids": [],
                }
                resource = None
            else:
                out = {
                    "policy": self.policy_hash,
                    "effect": str(decision.effect),
                    "reason": str(decision.reason),
                    "rule_ids": [rule_id(r) for r in decision.rule_ids],
                }
                resource = decision.resource
            if enforced is None or resource != enforced.resource:
                out["resource"] = resource
            return _stored(out)
        except Exception as exc:  # a candidate never affects enforcement: record why, go on
            return _stored({"policy": self.policy_hash, "error": _error_text(exc)})

    def _lists(self, tool: str, decision: DecisionLike, context: AccessContext) -> bool:
        """Would the candidate list ``tool`` in a turn of ``context``? (A tool it declares
        no requirement for is refused ``tool_unavailable`` before the catalogue is read.)"""
        if str(decision.reason) == "tool_unavailable":
            return True
        return bool(
            self.policy.could_permit(tool, context.policy_input, context_key=context.cache_key)
        )

    def _alike(
        self, tool: str, same: Mapping[str, str], enforced: DecisionLike
    ) -> Mapping[str, Any] | None:
        """The answer for a tool left alike: the enforced decision, cited by the candidate's
        rule ids, made once per (tool, effect, reason, rules); None when a rule the decision
        cites is not one of the tool's (then the candidate decides)."""
        try:
            ids = tuple([same[r.id] for r in enforced.rule_ids])
        except (KeyError, AttributeError, TypeError):
            return None
        key = (tool, str(enforced.effect), str(enforced.reason), ids)
        answer = self._answers.get(key)
        if answer is None:
            answer = _stored(
                {
                    "policy": self.policy_hash,
                    "effect": key[1],
                    "reason": key[2],
                    "rule_ids": list(ids),
                }
            )
            if len(self._answers) >= _TOOLS_KEPT:
                self._answers.clear()
            self._answers[key] = answer
        return answer

    def _sameness(self, tool: str) -> Mapping[str, str] | None:
        """The rule-id map of a tool both policies decide alike, or None (remembered)."""
        try:
            from sharedos.policy.analysis.diff import same_decisions

            same: Mapping[str, str] | None = same_decisions(
                self.enforced,  # type: ignore[arg-type]
                self.policy,  # type: ignore[arg-type]
                tool,
            )
        except Exception:  # a policy the analysis cannot read: decide every call
            same = _DECIDE
        if len(self._same) >= _TOOLS_KEPT:
            self._same.clear()
        self._same[tool] = same
        return same


def _stored(answer: dict[str, Any]) -> Mapping[str, Any]:
    """``answer`` with the text the store writes (``EncodedJson``), encoded once here so the
    row does not encode it again. ``answer`` is made fresh by this module from strings,
    lists of strings and None, so it is already detached and needs no round trip."""
    try:
        text = storable_json_text(answer)
    except Exception:  # cannot happen for such values; the row encodes it then
        return answer
    if len(text) > MAX_STORED_ARGUMENTS:
        return answer  # the row keeps a size marker instead (``plain_json``)
    return EncodedJson(answer, text)


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

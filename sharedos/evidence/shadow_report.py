"""What a shadow policy would have done: recorded shadow decisions against the enforced ones.

A host with ``[policy] shadow`` records, on every attempt its policy decided,
the candidate's decision beside the one enforced (the ``shadow`` field,
schema 5: ``{"policy", "effect", "reason", "rule_ids"[, "resource"]}`` or
``{"policy", "error"}``). ``shadow_report(records)`` reads them back and
counts, per shadow policy:

* **would allow**: the candidate lets the call go further than enforced
  (deny, then approval_required, then allow: access it would widen, as
  replay's ``widened``; a refused call it would run on an approval counts
  here);
* **would deny**: the candidate lets it go less far (access it would take
  away, replay's ``narrowed``: a candidate that would need an approval for an
  allowed call, or refuse one that ran or waited on an approval);
* **reason changed**: the same effect, for different reasons;
* **same**: the same effect and reason; **errors**: the candidate failed on
  the call (its error text, counted): nothing was compared there, so a report
  with errors and no difference is ``unknown``, never ``unchanged``.

Differences are grouped by (shadow policy, kind, tool, the candidate's rules,
the enforced rules) with examples, and counted by tool and by rule. Records
with no shadow decision (no shadow policy then, a call refused before any
decision, a record older than schema 5) are counted apart. Nothing is decided
again: this reads what the host recorded as it enforced (``replay`` is the
command that decides recorded calls under a policy now).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sharedos.evidence.record import EvidenceRecord
from sharedos.outcomes import EFFECT_REACH

__all__ = ["SHADOW_KINDS", "ShadowExample", "ShadowGroup", "ShadowReport", "shadow_report"]

ShadowKind = Literal["would allow", "would deny", "reason changed"]
#: the kinds of difference, in report order
SHADOW_KINDS: tuple[ShadowKind, ...] = ("would allow", "would deny", "reason changed")
_HEADINGS = {
    "would allow": "would have been allowed",
    "would deny": "would have been denied",
    "reason changed": "denied under both, for another reason",
}


@dataclass(frozen=True, slots=True)
class ShadowExample:
    """One recorded attempt the candidate decided differently."""

    seq: int | None
    turn_id: str
    call_id: str
    started_at: str
    principal: str | None
    tool: str
    resource: str | None
    arguments: Any
    enforced: Mapping[str, Any]
    shadow: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "seq": self.seq,
            "turn_id": self.turn_id,
            "call_id": self.call_id,
            "started_at": self.started_at,
            "principal": self.principal,
            "tool": self.tool,
            "resource": self.resource,
            "arguments": self.arguments,
            "enforced": dict(self.enforced),
            "shadow": dict(self.shadow),
        }


@dataclass(slots=True)
class ShadowGroup:
    """Attempts of one tool that one candidate decides differently in the same way."""

    policy: str
    kind: ShadowKind
    tool: str
    #: the candidate's rules that decided (permits that would allow, forbids that would deny)
    shadow_rules: tuple[str, ...]
    #: the rules that decided as enforced
    enforced_rules: tuple[str, ...]
    count: int = 0
    examples: list[ShadowExample] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "policy": self.policy,
            "kind": self.kind,
            "tool": self.tool,
            "shadow_rules": list(self.shadow_rules),
            "enforced_rules": list(self.enforced_rules),
            "count": self.count,
            "examples": [e.to_dict() for e in self.examples],
        }


@dataclass(slots=True)
class ShadowReport:
    """What ``shadow_report`` found (see the module docstring)."""

    groups: list[ShadowGroup] = field(default_factory=list)
    #: records read
    attempts: int = 0
    #: records with no shadow decision
    without: int = 0
    #: records another shadow policy decided (left out by ``policy``)
    others: int = 0
    #: shadow policy hash -> records it decided (errors included)
    policies: Counter[str] = field(default_factory=Counter)
    #: shadow policy hash -> records it decided as enforced
    same: Counter[str] = field(default_factory=Counter)
    #: (shadow policy hash, error text) -> records it failed on
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: tool -> kind -> records
    by_tool: dict[str, Counter[str]] = field(default_factory=dict)
    #: rule (``shadow:ID`` / ``enforced:ID``) -> kind -> records
    by_rule: dict[str, Counter[str]] = field(default_factory=dict)
    kinds: tuple[ShadowKind, ...] = SHADOW_KINDS
    #: records decided differently, in a kind ``kinds`` leaves out
    other_kinds: int = 0
    #: the shadow policies looked at (a prefix of their bundle hash; None: every one)
    only_policy: str | None = None

    @property
    def changed(self) -> bool:
        """True when some recorded attempt was decided differently by a shadow policy."""
        return bool(self.groups)

    @property
    def failed(self) -> int:
        """Attempts a shadow policy failed on: what it would have decided is not known."""
        return sum(self.errors.values())

    @property
    def verdict(self) -> str:
        """``changed``; ``unknown`` when nothing differs but the candidate failed on some
        call (its decision there was never compared); else ``unchanged``."""
        if self.changed:
            return "changed"
        return "unknown" if self.failed else "unchanged"

    def counts(self) -> dict[str, int]:
        """Attempts per kind of difference, every kind (0 for a kind ``kinds`` leaves out:
        those attempts are ``other_kinds``), so a document has the same keys whatever
        ``--kind`` asked for."""
        out: dict[str, int] = dict.fromkeys(SHADOW_KINDS, 0)
        for group in self.groups:
            out[group.kind] += group.count
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``--format json`` document)."""
        return {
            "verdict": self.verdict,
            "changed": self.changed,
            "kinds": list(self.kinds),
            "summary": {
                "attempts": self.attempts,
                "shadowed": sum(self.policies.values()),
                "without_shadow": self.without,
                "other_policies": self.others,
                "same": sum(self.same.values()),
                "errors": sum(self.errors.values()),
                **{k.replace(" ", "_"): n for k, n in self.counts().items()},
                "other_kinds": self.other_kinds,
            },
            "policies": [
                {
                    "policy": policy,
                    "decided": n,
                    "same": self.same[policy],
                    "errors": [
                        {"error": text, "count": c}
                        for (p, text), c in self.errors.most_common()
                        if p == policy
                    ],
                }
                for policy, n in self.policies.most_common()
            ],
            "groups": [g.to_dict() for g in self.groups],
            "by_tool": {t: dict(c) for t, c in sorted(self.by_tool.items())},
            "by_rule": {r: dict(c) for r, c in sorted(self.by_rule.items())},
        }

    def render(self) -> str:
        """The text report."""
        lines: list[str] = []
        for policy, n in self.policies.most_common():
            lines.append(f"shadow policy {policy[:12]}: {n} {_plural(n)} decided by it too")
            mine = [g for g in self.groups if g.policy == policy]
            for kind in self.kinds:
                groups = [g for g in mine if g.kind == kind]
                total = sum(g.count for g in groups)
                lines.append(f"  {_HEADINGS[kind]}: {total} {_plural(total)}")
                for group in groups:
                    lines.extend(_render_group(group))
            lines.append(f"  same decision: {self.same[policy]} {_plural(self.same[policy])}")
            failed = [(text, c) for (p, text), c in self.errors.most_common() if p == policy]
            lines.append(f"  shadow errors: {sum(c for _, c in failed)}")
            lines.extend(f"    {c} x {text}" for text, c in failed)
        if self.by_tool:
            lines.append("by tool:")
            lines.extend(f"  {tool}: {_kinds(c)}" for tool, c in sorted(self.by_tool.items()))
        if self.by_rule:
            lines.append("by rule:")
            lines.extend(f"  {rule}: {_kinds(c)}" for rule, c in sorted(self.by_rule.items()))
        lines.append(
            f"{self.attempts} {_plural(self.attempts)} read, "
            f"{sum(self.policies.values())} with a shadow decision, "
            f"{self.without} without (no shadow policy, refused before a decision, or "
            "recorded before schema 5)"
            + (f", {self.others} by other shadow policies (left out)" if self.others else "")
        )
        only = "" if self.kinds == SHADOW_KINDS else f" (looking for: {', '.join(self.kinds)})"
        if self.changed:
            lines.append(
                f"result: the shadow policy would have decided some calls differently{only}"
            )
        elif self.failed:
            lines.append(
                f"result: the shadow policy failed on {self.failed} {_plural(self.failed)}: "
                "what it would have decided there is not known"
            )
        elif self.other_kinds:
            # never "every call as enforced": some were not, in kinds not looked for
            lines.append(
                f"result: no call decided differently in the kinds looked for{only}; "
                f"{self.other_kinds} {_plural(self.other_kinds)} in other kinds"
            )
        elif self.policies:
            lines.append("result: the shadow policy decided every call as enforced")
        elif self.others:
            # nothing compared, yet shadow decisions were recorded: never "none recorded"
            lines.append(
                f"result: no shadow policy whose hash starts with {self.only_policy!r} "
                f"decided these attempts; {self.others} {_plural(self.others)} "
                f"{'was' if self.others == 1 else 'were'} decided by other shadow policies"
            )
        else:
            lines.append("result: no shadow decision recorded")
        return "\n".join(lines)


def _render_group(group: ShadowGroup) -> list[str]:
    shadow = ", ".join(group.shadow_rules) or "no rule"
    enforced = ", ".join(group.enforced_rules) or "no rule"
    lines = [
        f"    {group.tool}: {group.count} {_plural(group.count)}  "
        f"(shadow: {shadow}; enforced: {enforced})"
    ]
    for ex in group.examples:
        lines.append(
            f"      - turn {ex.turn_id} call {ex.call_id} at {ex.started_at}: "
            f"principal {ex.principal}, resource {ex.resource}"
        )
        lines.append(f"        arguments {_show(ex.arguments)}")
        lines.append(f"        enforced: {_decision(ex.enforced)}; shadow: {_decision(ex.shadow)}")
    return lines


def _decision(d: Mapping[str, Any]) -> str:
    rules = d.get("rule_ids") or []
    text = f"{d.get('effect')} {d.get('reason')}"
    if rules:
        text += " by " + ", ".join(map(str, rules))
    if "resource" in d:  # recorded only when the candidate's resource is another
        text += f" (resource {d['resource']})"
    if d.get("approved"):
        text += " (approved, then it ran)"
    return text


def _kinds(counter: Counter[str]) -> str:
    return ", ".join(f"{counter[k]} {k}" for k in SHADOW_KINDS if counter[k])


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 200 else text[:199] + "…"


def _plural(n: int) -> str:
    return "attempt" if n == 1 else "attempts"


def enforced_decision(record: EvidenceRecord, *, approved: bool = False) -> dict[str, Any]:
    """The decision a record was enforced with: effect, reason (``allowed`` for an allowed
    call, whatever its handler did afterwards; ``approval_required`` for a call that
    needed an approval, whatever ended it) and the rules that decided.

    ``approved``: the call ran on an approval (``approvals.approved_calls``). Its
    shadow decision was taken on the policy's own decision, before the approval
    settled it, so it is compared with that: ``approval_required``."""
    if approved and record.effect == "allow":
        return {
            "effect": "approval_required",
            "reason": "approval_required",
            "rule_ids": list(record.rule_ids),
            "approved": True,
        }
    allowed = record.effect == "allow"
    if record.effect == "approval_required":
        # the policy's reason, whatever ended the call (cancelled while its approver
        # was asked, an internal error in the approval step: the outcome's reason)
        reason: str | None = "approval_required"
    else:
        reason = "allowed" if allowed else (str(record.reason) if record.reason else None)
    return {"effect": record.effect, "reason": reason, "rule_ids": list(record.rule_ids)}


def _kind(enforced: Mapping[str, Any], shadow: Mapping[str, Any]) -> ShadowKind | None:
    # ordered as replay orders them (``EFFECT_REACH``), so a difference has replay's kind
    was = EFFECT_REACH.get(str(enforced["effect"]), 0)
    would = EFFECT_REACH.get(str(shadow.get("effect")), 0)
    if would > was:
        return "would allow"
    if would < was:
        return "would deny"
    if enforced["reason"] != shadow.get("reason"):
        return "reason changed"
    return None


def shadow_report(
    records: Iterable[EvidenceRecord],
    *,
    policy: str | None = None,
    kinds: Iterable[ShadowKind] | None = None,
    max_examples: int = 3,
    approved: Container[tuple[str, str]] = frozenset(),
) -> ShadowReport:
    """Count, group and exemplify the recorded shadow decisions of ``records``.

    ``policy``: only the decisions of shadow policies whose hash starts with it.
    ``kinds``: report only these kinds (the others count as neither). ``max_examples``:
    attempts kept per group (0: every one).
    """
    wanted = tuple(k for k in SHADOW_KINDS if kinds is None or k in set(kinds))
    report = ShadowReport(kinds=wanted, only_policy=policy)
    groups: dict[tuple[Any, ...], ShadowGroup] = {}
    for record in records:
        report.attempts += 1
        shadow = record.shadow
        if not isinstance(shadow, Mapping) or not isinstance(shadow.get("policy"), str):
            report.without += 1
            continue
        hash_ = str(shadow["policy"])
        if policy is not None and not hash_.startswith(policy):
            report.others += 1
            continue
        report.policies[hash_] += 1
        if "error" in shadow:
            report.errors[(hash_, str(shadow["error"]))] += 1
            continue
        enforced = enforced_decision(record, approved=(record.turn_id, record.call_id) in approved)
        kind = _kind(enforced, shadow)
        if kind is None:
            report.same[hash_] += 1
            continue
        if kind not in wanted:
            report.other_kinds += 1
            continue
        shadow_rules = tuple(map(str, shadow.get("rule_ids") or ()))
        key = (hash_, kind, record.tool, shadow_rules, tuple(record.rule_ids))
        group = groups.get(key)
        if group is None:
            group = groups[key] = ShadowGroup(
                hash_, kind, record.tool, shadow_rules, tuple(record.rule_ids)
            )
        group.count += 1
        if max_examples == 0 or len(group.examples) < max_examples:
            group.examples.append(
                ShadowExample(
                    record.seq,
                    record.turn_id,
                    record.call_id,
                    record.started_at,
                    record.principal,
                    record.tool,
                    record.resource,
                    record.arguments,
                    enforced,
                    dict(shadow),
                )
            )
        report.by_tool.setdefault(record.tool, Counter())[kind] += 1
        for rid in shadow_rules:
            report.by_rule.setdefault(f"shadow:{rid}", Counter())[kind] += 1
        for rid in record.rule_ids:
            report.by_rule.setdefault(f"enforced:{rid}", Counter())[kind] += 1
    order = {k: i for i, k in enumerate(SHADOW_KINDS)}
    report.groups = sorted(
        groups.values(), key=lambda g: (g.policy, order[g.kind], -g.count, g.tool)
    )
    return report

"""Replay: decide recorded attempts again under a candidate policy, report what would change.

``replay(records, new)`` takes the attempts a store holds (``iter_records``)
and, for each one the kernel decided, builds the request it decided — the
tool, the recorded arguments, the recorded decision context
(``EvidenceRecord.access_context()``: principal, tenant, roles, attributes)
and, for a policy that reads the clock, the time of the call — decides it
under NEW with the real evaluator, and compares the result with the decision
that was *recorded* (what was enforced). The differences are grouped and
rendered by ``sharedos.policy.analysis.compare``, exactly as ``diff`` groups
its counterexamples: by (tool, action, pattern, kind), the kinds being
widened, narrowed and reason changed.

What is not replayed, and why (each counted in ``ReplayReport.skipped``):

* ``no_context``: an attempt recorded before schema 4 has no decision context
  (only its principal and tenant; its roles and attributes were never
  written), so there is nothing faithful to decide it in;
* ``context_too_large``: a context over 64 KiB was kept as a marker only;
* ``context_malformed``: a context SharedOS does not record (roles that are
  not a list of strings, attributes that are not an object, a principal that
  is no identifier, a time of the call that is no time): the store was
  changed outside SharedOS, and the call it spells is not the one decided;
* ``arguments_not_kept``: arguments over 64 KiB (or not JSON) were kept as a
  marker only: the call cannot be rebuilt;
* ``refused before a decision: <reason>``: a call refused before the policy
  was asked (``tool_unavailable``: no such tool, or no requirement;
  ``not_in_run_policy``; ``not_in_turn_catalog``; ``invalid_arguments``;
  ``malformed_request``; ``turn_closed``; ``internal_error``;
  ``evidence_unavailable``): no policy decided it, so there is no decision to
  compare, and its refusal does not depend on the rules a new policy changes
  (the catalogue, the run policy and the input schema decide it). Replayed
  all the same, as refusals the policy made: a ``tool_unavailable`` call of a
  tool the host has (its namespace recorded) that no requirement declared (a
  requirement NEW adds lets its rules decide it), a ``not_in_turn_catalog``
  call (a turn's catalogue is the policy's ``could_permit``: one NEW would list
  is decided by its rules, one it would not is the same refusal), an
  ``invalid_arguments`` call (checked after the lookup, the run policy and the
  turn's catalogue: the same refusal unless one of those refuses it under NEW;
  the input schema is the host's), and, with ``run_policy``, a
  ``not_in_run_policy`` refusal (the run policy is then NEW's, and one that
  now manages the tool widens, or changes the reason of, a call the recorded
  run refused).

A call made in a turn (its record names the turn's ``catalog_hash``) is decided as a
turn under NEW would decide it: the turn's catalogue is the policy's (``could_permit``
for the turn's context), so a tool NEW would not list there is refused
``not_in_turn_catalog`` before any rule (``decide_in_turn``), as the kernel refuses it.

Replayed but not exactly as made (``ReplayReport.notes``): arguments or a
decision context a secret was redacted from (conditions see ``[redacted]``),
and the time of a call recorded without ``now`` (before the host recorded it; the host records the
``now`` a decision saw whenever the policy reads the time): ``started_at`` in
``time_zone``, the wall clock, which a host with its own clock does not follow.

With ``old`` (the policy the records were decided under), attempts recorded
under that policy (``policy_hash`` equal to its ``bundle_hash``) get the
responsible rules exactly as ``diff`` names them, and are decided under OLD
too: an attempt OLD does not decide as recorded is counted in ``mismatched``
(a sign that the context or arguments replayed are not what was decided).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sharedos.errors import EvidenceError
from sharedos.evidence.record import EvidenceRecord
from sharedos.outcomes import Effect, ReasonCode
from sharedos.policy.analysis.compare import (
    KINDS,
    Change,
    ChangeGroup,
    ChangeKind,
    Comparer,
    Request,
    change_kind,
    decide_request,
    group_changes,
    render_groups,
    summary,
)
from sharedos.policy.clock import FIELDS, ClockError, expand, now_value
from sharedos.policy.decision import Decision, RuleRef
from sharedos.redaction import REDACTED

__all__ = ["ReplayReport", "decide_in_turn", "recorded_decision", "replay", "request_of"]

#: the reasons a decision of the policy can be recorded with (anything else was refused
#: before the policy was asked)
_DECIDED = frozenset(
    {
        ReasonCode.ALLOWED,
        ReasonCode.NO_MATCHING_PERMIT,
        ReasonCode.FORBIDDEN,
        ReasonCode.UNRESOLVABLE_RESOURCE,
        ReasonCode.TOOL_UNAVAILABLE,
        ReasonCode.APPROVAL_REQUIRED,
    }
)


class NotReplayable(EvidenceError):
    """Why one recorded attempt cannot be replayed (its ``str`` is the skip key)."""


@dataclass(slots=True)
class ReplayReport:
    """What ``replay`` found (see the module docstring)."""

    groups: list[ChangeGroup] = field(default_factory=list)
    #: attempts read from the store
    attempts: int = 0
    #: attempts decided again under NEW
    replayed: int = 0
    #: why -> how many attempts were not replayed
    skipped: Counter[str] = field(default_factory=Counter)
    #: what -> how many replayed attempts it concerns (approximations)
    notes: Counter[str] = field(default_factory=Counter)
    #: recorded policy hash -> attempts replayed that it decided
    recorded_policies: Counter[str] = field(default_factory=Counter)
    #: attempts recorded under OLD (with ``old``) that OLD decides otherwise now
    mismatched: int = 0
    matched_old: int = 0
    kinds: tuple[ChangeKind, ...] = KINDS
    #: replayed attempts that change in a kind ``kinds`` leaves out (not grouped)
    other_kinds: int = 0

    @property
    def changed(self) -> bool:
        """True when some replayed attempt decides differently under NEW."""
        return bool(self.groups)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``--format json`` document)."""
        return {
            "verdict": "changed" if self.changed else "unchanged",
            "changed": self.changed,
            "kinds": list(self.kinds),
            "summary": {
                **summary(self.groups),
                "attempts": self.attempts,
                "replayed": self.replayed,
                "skipped": sum(self.skipped.values()),
                "matched_old": self.matched_old,
                "mismatched": self.mismatched,
                "other_kinds": self.other_kinds,
            },
            "groups": [g.to_dict() for g in self.groups],
            "skipped": dict(sorted(self.skipped.items())),
            "notes": dict(sorted(self.notes.items())),
            "recorded_policies": dict(self.recorded_policies.most_common()),
        }

    def render(self) -> str:
        """The text report."""
        lines = render_groups(self.groups)
        if self.skipped:
            lines.append("not replayed:")
            for why, n in sorted(self.skipped.items()):
                lines.append(f"  {n} {_plural(n)}: {why}")
        if self.notes:
            lines.append("replayed, not exactly as decided:")
            for what, n in sorted(self.notes.items()):
                lines.append(f"  {n} {_plural(n)}: {what}")
        if self.mismatched:
            lines.append(
                f"warning: {self.mismatched} of {self.matched_old} attempts recorded under "
                "OLD are not decided as recorded by OLD now: their replayed context or "
                "arguments are not what was decided"
            )
        s = summary(self.groups)
        lines.append(
            f"{self.attempts} attempts read, {self.replayed} decided again; "
            f"{s['changes']} decide differently in {s['groups']} groups "
            f"({s['widened']} widened, {s['narrowed']} narrowed, "
            f"{s['reason_changed']} reason changed)"
        )
        only = "" if self.kinds == KINDS else f" (looking for: {', '.join(self.kinds)})"
        if self.changed:
            lines.append(f"result: some recorded decisions would change{only}")
        elif self.replayed and self.other_kinds:
            # never "no recorded decision would change": some would, in kinds not looked for
            lines.append(
                f"result: no recorded decision changes in the kinds looked for{only}; "
                f"{self.other_kinds} {_plural(self.other_kinds)} in other kinds"
            )
        elif self.replayed:
            lines.append(f"result: no recorded decision would change{only}")
        else:
            lines.append("result: no attempt could be replayed (see above)")
        return "\n".join(lines)


def _plural(n: int) -> str:
    return "attempt" if n == 1 else "attempts"


def recorded_decision(
    record: EvidenceRecord,
    rules: Mapping[str, RuleRef] | None = None,
    *,
    approved: bool = False,
    run_policy: str | None = None,
) -> Decision:
    """The decision the policy made of ``record``, as a ``Decision`` (its rules' positions
    from ``rules``, the old policy's rules by id, when given, else their ids only);
    ``NotReplayable`` when none was made.

    ``approved``: the call ran on an approval (``approvals.approved_calls``): it is
    recorded ``allow``, but the policy decided ``approval_required``, and that is what
    a new policy's decision is compared with (the same need is no change; an allow
    without anyone's yes is a widening).

    ``run_policy``: the attempts are replayed as runs under a toolpolicy, so a call
    refused ``not_in_run_policy`` (before any rule) is a decision to compare: a run
    policy that now manages the tool lets it reach the rules. So is a call of a tool
    the host has that no requirement declared (``tool_unavailable``), and one the
    turn's catalogue did not list (``not_in_turn_catalog``: the catalogue is the
    policy's, ``decide_in_turn``)."""
    effect = record.effect
    refused = record.reason
    if effect is None and refused is not None and _policy_refused(record, run_policy):
        return Decision(
            effect=Effect.DENY,
            reason=refused,
            tool=record.tool,
            namespace=record.namespace,
            action=record.action,
            resource=record.resource,
            rule_ids=(),
            detail="as recorded",
        )
    if effect is None:
        reason = record.reason.value if record.reason is not None else "unknown"
        raise NotReplayable(f"refused before a decision: {reason}")
    kind: Literal["permit", "forbid"]
    if effect == Effect.ALLOW.value and approved:
        effect, reason_code, kind = (
            Effect.APPROVAL_REQUIRED.value,
            ReasonCode.APPROVAL_REQUIRED,
            "permit",
        )
    elif effect == Effect.ALLOW.value:
        reason_code = ReasonCode.ALLOWED
        kind = "permit"
    elif effect == Effect.APPROVAL_REQUIRED.value:
        # the policy's reason, whatever ended the call (the record's reason is the
        # outcome's: cancelled while its approver was asked, an internal error there)
        reason_code = ReasonCode.APPROVAL_REQUIRED
        kind = "permit"
    else:
        if record.reason is None or record.reason not in _DECIDED:
            raise NotReplayable("a denial without its decision's reason")
        reason_code = record.reason
        kind = "forbid" if reason_code is ReasonCode.FORBIDDEN else "permit"
    known = rules or {}
    refs = tuple(known.get(rid) or RuleRef(rid, "", 0, 0, kind) for rid in record.rule_ids)
    return Decision(
        effect=Effect(effect),
        reason=reason_code,
        tool=record.tool,
        namespace=record.namespace,
        action=record.action,
        resource=record.resource,
        rule_ids=refs,
        detail="as recorded",
    )


def _policy_refused(record: EvidenceRecord, run_policy: str | None) -> bool:
    """Was ``record`` refused, before any rule, for what the policy declares? A tool the
    host has (its namespace recorded) but no requirement declares (``tool_unavailable``:
    a new requirement lets the rules decide it), or, when replaying as a run, a tool
    outside the run's managed set (``not_in_run_policy``: the run policy is NEW's)."""
    if record.reason is ReasonCode.TOOL_UNAVAILABLE:
        return record.namespace is not None
    if record.reason is ReasonCode.NOT_IN_TURN_CATALOG:
        return True
    if record.reason is ReasonCode.INVALID_ARGUMENTS:
        # refused after the lookup, the run policy and the turn's catalogue: a policy
        # under which one of those refuses it refuses it for that (``decide_in_turn``)
        return record.namespace is not None
    return record.reason is ReasonCode.NOT_IN_RUN_POLICY and run_policy is not None


def decide_in_turn(
    policy: Any, request: Request, *, in_turn: bool = False, invalid: Decision | None = None
) -> Decision:
    """``decide_request``, and for a call made in a turn with a catalogue (``in_turn``:
    its record names the catalogue's hash) the refusal a turn under ``policy`` makes:
    its catalogue lists a tool only when some call of it could be allowed for the
    turn's context (``could_permit``, the time of the call unknown), so a tool
    ``policy`` would not list is refused ``not_in_turn_catalog`` before any rule; one
    it lists is decided by its rules.

    ``invalid``: the call's recorded refusal ``invalid_arguments`` (its arguments are
    not valid for the tool's input schema, which is the host's, not the policy's). It
    is refused so again unless a step before the arguments' refuses it under
    ``policy`` (no requirement, outside the run policy, not in the turn's catalogue);
    the rules never decide it."""
    decision = decide_request(policy, request)
    if decision.reason in (ReasonCode.TOOL_UNAVAILABLE, ReasonCode.NOT_IN_RUN_POLICY):
        return decision
    listing = {k: v for k, v in request.context.items() if k != "now"}
    if not in_turn or policy.could_permit(request.tool, listing):
        return decision if invalid is None else invalid
    return Decision(
        effect=Effect.DENY,
        reason=ReasonCode.NOT_IN_TURN_CATALOG,
        tool=request.tool,
        namespace=decision.namespace,
        action=decision.action,
        resource=None,
        rule_ids=(),
        detail=f"{request.tool} is not in the catalogue this policy lists for the turn",
    )


def request_of(
    record: EvidenceRecord,
    *,
    reads_clock: bool,
    time_zone: str = "UTC",
    run_policy: str | None = None,
) -> tuple[Request, list[str]]:
    """The request ``record`` decided: tool, recorded arguments, recorded context (and the
    time of the call when ``reads_clock``), with what is approximate about it."""
    notes: list[str] = []
    recorded = record.context
    try:
        access = record.access_context()
        now_recorded = recorded.get("now") if isinstance(recorded, Mapping) else None
        if now_recorded is not None and not _time_object(now_recorded):
            raise ValueError("the time of the call is not one SharedOS records")
    except ValueError:
        if not recorded:
            raise NotReplayable(
                "no_context: recorded before schema 4 (no decision context)"
            ) from None
        if isinstance(recorded, Mapping) and recorded.get("$truncated") is True:
            raise NotReplayable("context_too_large") from None
        raise NotReplayable(
            "context_malformed: not a decision context SharedOS records (the store was "
            "changed outside SharedOS?)"
        ) from None
    args = record.arguments if record.arguments is not None else {}
    if not isinstance(args, Mapping) or _marker(args):
        raise NotReplayable("arguments_not_kept: too large or not JSON when recorded")
    if _redacted(args):
        notes.append(f"arguments hold a redacted secret (conditions see {REDACTED!r})")
    if _redacted(access.policy_input):
        # the host's secrets are scrubbed from the recorded context like any field
        notes.append(f"the decision context holds a redacted secret (conditions see {REDACTED!r})")
    context: dict[str, Any] = dict(access.policy_input)
    if reads_clock:
        now: Any = None
        if isinstance(now_recorded, Mapping):
            now = dict(now_recorded)
        else:
            try:
                now = now_value(datetime.fromisoformat(record.started_at), time_zone)
            except (ClockError, ValueError):
                try:
                    now = expand(record.started_at)
                except ClockError:
                    now = None
            notes.append(f"time of the call not recorded: its started_at in {time_zone}")
        if now is not None:
            context["now"] = now
    origin = {
        "seq": record.seq,
        "turn_id": record.turn_id,
        "call_id": record.call_id,
        "started_at": record.started_at,
        "policy_hash": record.policy_hash,
    }
    return Request(record.tool, dict(args), context, run_policy, origin), notes


def _time_object(value: Any) -> bool:
    """Is ``value`` a ``context.now`` as the host records it (every member, valid)?"""
    if not isinstance(value, Mapping) or set(value) != set(FIELDS):
        return False
    stamp, zone_name = value["timestamp"], value["zone"]
    if type(stamp) is not int or type(zone_name) is not str:
        return False
    try:
        made = now_value(datetime.fromtimestamp(stamp, UTC), zone_name)
    except (ClockError, TypeError, ValueError, OverflowError, OSError):
        return False
    # member by member, types included (a policy never takes true for 1)
    return all(type(value[k]) is type(made[k]) and value[k] == made[k] for k in FIELDS)


def _marker(args: Mapping[str, Any]) -> bool:
    """Is ``args`` the marker stored in place of arguments that could not be kept?"""
    return (args.get("$truncated") is True and "$bytes" in args) or (
        len(args) == 1 and "$unstorable" in args
    )


def _redacted(value: Any) -> bool:
    """Does a redacted secret (or a value scrubbed of one) appear in ``value``?"""
    try:
        return REDACTED in json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return True


def replay(
    records: Iterable[EvidenceRecord],
    new: Any,
    *,
    old: Any = None,
    time_zone: str = "UTC",
    run_policy: str | None = None,
    kinds: Iterable[ChangeKind] | None = None,
    max_examples: int = 3,
    approved: Container[tuple[str, str]] = frozenset(),
) -> ReplayReport:
    """Decide each recorded attempt of ``records`` again under ``new`` and group those
    that would change (see the module docstring). ``old``: the policy the records were
    decided under, when known. ``run_policy``: decide as a run under that toolpolicy of
    ``new`` (a tool outside its managed set is ``not_in_run_policy``). ``approved``:
    (turn id, call id) of the calls that ran on an approval (``approvals.approved_calls``
    of the store): their policy decision was ``approval_required``."""
    wanted = tuple(k for k in KINDS if kinds is None or k in set(kinds))
    report = ReplayReport(kinds=wanted)
    reads_clock = bool(getattr(new, "reads_clock", False)) or bool(
        getattr(old, "reads_clock", False)
    )
    known = Comparer(old, new) if old is not None else None
    unknown = Comparer(None, new)
    old_hash = getattr(old, "bundle_hash", None)
    old_rules = {r.id: r for r in old.rules} if old is not None else None

    def changes() -> Iterator[Change]:
        for record in records:
            report.attempts += 1
            try:
                matches_old = old_hash is not None and record.policy_hash == old_hash
                # the context first: a record older than schema 4 may lack its effect too
                request, notes = request_of(
                    record, reads_clock=reads_clock, time_zone=time_zone, run_policy=run_policy
                )
                was = recorded_decision(
                    record,
                    old_rules if matches_old else None,
                    approved=(record.turn_id, record.call_id) in approved,
                    run_policy=run_policy,
                )
            except NotReplayable as exc:
                report.skipped[str(exc)] += 1
                continue
            report.replayed += 1
            report.recorded_policies[record.policy_hash or "(none)"] += 1
            for note in notes:
                report.notes[note] += 1
            # a call made in a turn: each policy lists the turn's catalogue its own way
            in_turn = (
                record.catalog_hash is not None or was.reason is ReasonCode.NOT_IN_TURN_CATALOG
            )
            invalid = was if was.reason is ReasonCode.INVALID_ARGUMENTS else None
            if matches_old:
                report.matched_old += 1
                # a run's refusal is OLD's to make again under its own toolpolicy of
                # that name (none: the run the record was refused in is not OLD's)
                refused = was.reason is ReasonCode.NOT_IN_RUN_POLICY
                if not refused or run_policy in old.tool_policies:
                    run = run_policy if refused else None
                    again = decide_in_turn(
                        old,
                        Request(request.tool, request.args, request.context, run),
                        in_turn=in_turn,
                        invalid=invalid,
                    )
                    if change_kind(was, again) is not None:
                        report.mismatched += 1
            comparer = known if matches_old and known is not None else unknown
            now = decide_in_turn(new, request, in_turn=in_turn, invalid=invalid)
            change = comparer.change(request, was, now)
            if change is None:
                continue
            if change.kind in wanted:
                yield change
            else:
                report.other_kinds += 1

    report.groups = group_changes(changes(), max_examples)
    return report

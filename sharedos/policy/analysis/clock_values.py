"""The times worth trying for ``context.now``: one complete time object per combination of
what the conditions tell apart in its members.

``context.now`` is never missing and never inconsistent: the host builds it from
one instant (``sharedos.policy.clock``). So its members are not varied one by
one like other variables: each condition's uses of a member (the bounds of
``context.now.hour >= 9``, the constants of ``context.now.weekday in ["sat",
"sun"]``, the dates compared with ``context.now.date``) split that member's
values into *classes*, and ``now_values`` builds candidate instants — every
weekday of the weeks around each timestamp bound and each date named, at one
time of day per class of hour and minute, the bounds themselves to the second,
in every zone named — and keeps one time object per combination of classes
that some candidate reaches.

The zones tried are UTC, each zone named, one zone per class of names the
tests of ``zone`` tell apart (a zone that is not UTC for ``!= "UTC"``), and a
zone that spells each ``iso`` named (its offset at its instant).

What is exact and what is not: each member alone, and any combination of
hour, minute, weekday and zone, are exact, and so are those with timestamp
bounds at least a week apart (every weekday and time of day occurs on each
side of each); a timestamp (or ``iso``) combined with year, month, day or
date tests, or with bounds closer than a week, and the weekday combined with
day, month or year tests, are tried over the candidates above (the week
after each bound, seven years that have each date named), and say so (``note``).
"""

from __future__ import annotations

import calendar
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import available_timezones

from sharedos.policy.analysis.strings import Glob
from sharedos.policy.clock import WEEKDAYS, ClockError, expand, now_value, zone

#: members holding integers, with their valid range
NUMERIC: dict[str, tuple[int, int]] = {
    "timestamp": (-(2**62), 2**62),
    "year": (1, 9999),
    "month": (1, 12),
    "day": (1, 31),
    "hour": (0, 23),
    "minute": (0, 59),
}
#: members holding strings
TEXTUAL = ("iso", "zone", "date", "weekday")
#: calendar members (those a timestamp bound does not fix by itself)
CALENDAR = ("year", "month", "day", "hour", "minute", "weekday", "date")

#: the day the candidates start from when nothing names one (a Monday)
_BASE = date(2026, 1, 5)
#: years within which every day of the calendar occurs (1897 to 1904 has no February 29)
_LEAP_SPAN = 8
#: how many candidate instants are built at most (past it: cut, and said)
MAX_CANDIDATES = 50_000


@dataclass(frozen=True, slots=True)
class MemberUses:
    """What the conditions tell apart in one member: number bounds, string globs."""

    bounds: tuple[int | float, ...] = ()
    globs: tuple[Glob, ...] = ()


@dataclass(frozen=True, slots=True)
class ClockDomain:
    """The time objects to try; ``note`` says what is not exact (None: exact)."""

    values: tuple[dict[str, Any], ...]
    note: str | None = None


def now_values(uses: Mapping[str, MemberUses]) -> ClockDomain:
    """One ``context.now`` object per combination of the member classes ``uses`` tell apart
    that some candidate instant reaches (see the module docstring)."""
    key = tuple(sorted((m, u.bounds, u.globs) for m, u in uses.items()))
    return _now_values(key)


@lru_cache(maxsize=256)
def _now_values(key: tuple[tuple[str, tuple[Any, ...], tuple[Glob, ...]], ...]) -> ClockDomain:
    uses = {m: MemberUses(b, g) for m, b, g in key}
    notes: list[str] = []
    read = set(uses)
    if read & {"timestamp", "iso"}:
        stamps = sorted(set(uses.get("timestamp", MemberUses()).bounds))
        close = any(b - a < 8 * 86400 for a, b in itertools.pairwise(stamps))
        if read & {"year", "month", "day", "date"} or (
            read & {"hour", "minute", "weekday"} and (close or "iso" in read)
        ):
            notes.append(
                "the time read both as a timestamp and as calendar fields: combinations "
                "are tried around each bound (the week after it), not everywhere"
            )
    if "weekday" in read and read & {"year", "month", "day", "date"}:
        notes.append(
            "the weekday read with the date: combinations are tried over seven years "
            "that have each date named, not everywhere"
        )
    for member in ("iso", "date"):
        if any(g.text is None for g in uses.get(member, MemberUses()).globs):
            notes.append(
                f"a test of context.now.{member} other than equality: only the times "
                "named are tried"
            )
    zones = _zones(uses)
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    made = 0
    for instant, zone_name in _candidates(uses, zones):
        made += 1
        if made > MAX_CANDIDATES:
            notes.append(f"more than {MAX_CANDIDATES} candidate times: the rest were not tried")
            break
        try:
            value = now_value(instant, zone_name)
        except (ClockError, OverflowError, ValueError, OSError):
            continue
        vector = tuple(_class(m, u, value[m]) for m, u in sorted(uses.items()))
        seen.setdefault(vector, value)
    return ClockDomain(tuple(seen.values()), "; ".join(notes) or None)


def _class(member: str, uses: MemberUses, value: Any) -> Any:
    """Which class of ``member``'s values ``value`` is in (what its uses tell apart)."""
    if member in NUMERIC:
        points = sorted(set(uses.bounds))
        below = sum(1 for p in points if p < value)
        return (below, value in points)
    return tuple(g.matches(value) for g in uses.globs)


def _texts(uses: Mapping[str, MemberUses], member: str, valid: Any) -> list[str]:
    found = uses.get(member)
    if found is None:
        return []
    return [g.text for g in found.globs if g.text is not None and valid(g.text)]


@lru_cache(maxsize=1)
def _known_zones() -> tuple[str, ...]:
    """Every zone name a host can decide in (``[policy] time_zone``), sorted."""
    return tuple(sorted(available_timezones() | {"UTC"}))


def _zones(uses: Mapping[str, MemberUses]) -> list[str]:
    """The zones candidates are read in: UTC, every zone named, one zone of each class
    of zone names the tests of ``context.now.zone`` tell apart (``!= "UTC"`` and
    ``startswith(context.now.zone, "Europe/")`` hold in zones no test names), and
    for each ``iso`` named, a zone whose offset spells it at its instant (an ``iso``
    ending ``+01:00`` is no UTC time)."""
    out = dict.fromkeys(["UTC", *_texts(uses, "zone", _valid_zone)])
    globs = uses.get("zone", MemberUses()).globs
    if globs:
        reached = {tuple(g.matches(name) for g in globs) for name in out}
        for name in _known_zones():
            vector = tuple(g.matches(name) for g in globs)
            if vector not in reached:
                reached.add(vector)
                out[name] = None
    for text in _texts(uses, "iso", bool):
        try:
            point = datetime.fromisoformat(expand(text)["iso"])
        except (ClockError, ValueError, OverflowError):
            continue
        offset = point.utcoffset()
        if any(point.astimezone(zone(name)).utcoffset() == offset for name in out):
            continue
        for name in _known_zones():
            try:
                if point.astimezone(zone(name)).utcoffset() == offset:
                    out[name] = None
                    break
            except (ClockError, OverflowError, ValueError):
                continue
    return list(out)


def _valid_zone(name: str) -> bool:
    try:
        zone(name)
    except ClockError:
        return False
    return True


def _int_reps(bounds: Iterable[int | float], lo: int, hi: int, default: int) -> list[int]:
    """One integer in ``[lo, hi]`` per class the bounds make (at each bound, between two,
    below the first, above the last)."""
    points = sorted({p for p in bounds if isinstance(p, int | float)})
    if not points:
        return [default]
    out: list[int] = [int(p) for p in points if p == int(p) and lo <= p <= hi]
    edges = [float("-inf"), *points, float("inf")]
    for a, b in itertools.pairwise(edges):
        n = lo if a == float("-inf") else max(lo, math.floor(a) + 1)
        if n <= hi and n < b:
            out.append(n)
    return sorted(set(out)) or [default]


def _int_classes(bounds: Iterable[int | float], lo: int, hi: int, default: int) -> list[list[int]]:
    """The integers of ``[lo, hi]`` grouped by the class the bounds put them in (each
    bound alone, those between two), each class in increasing order; ``[[default]]``
    when there is no bound. ``_int_reps`` is the first of each."""
    points = sorted({p for p in bounds if isinstance(p, int | float)})
    if not points:
        return [[default]]
    classes: dict[tuple[int, bool], list[int]] = {}
    for n in range(lo, hi + 1):
        classes.setdefault((sum(1 for p in points if p < n), n in points), []).append(n)
    return list(classes.values())


def _dates(uses: Mapping[str, MemberUses], zones: Sequence[str]) -> list[date]:
    """The days candidates are built on."""
    base: list[date] = []
    for member in ("timestamp",):
        for b in uses.get(member, MemberUses()).bounds:
            for zone_name in zones:
                for shift in (-86400, 0, 86400):
                    try:
                        base.append(datetime.fromtimestamp(b + shift, zone(zone_name)).date())
                    except (OverflowError, ValueError, OSError):
                        continue
    for text in _texts(uses, "iso", bool):
        try:
            base.append(datetime.fromisoformat(expand(text)["iso"]).date())
        except (ClockError, ValueError):
            continue
    for text in _texts(uses, "date", bool):
        try:
            day = date.fromisoformat(text)
        except ValueError:
            continue
        base += [day - timedelta(days=1), day, day + timedelta(days=1)]
    years = _int_reps(uses.get("year", MemberUses()).bounds, *NUMERIC["year"], _BASE.year)
    months = _int_classes(uses.get("month", MemberUses()).bounds, *NUMERIC["month"], _BASE.month)
    days = _int_classes(uses.get("day", MemberUses()).bounds, *NUMERIC["day"], _BASE.day)
    weekday = "weekday" in uses
    for y, in_months, in_days in itertools.product(years, months, days):
        # one day some year has per class of month and class of day: the first of each
        # class may not make one (February 31: March 31 does, for 'month > 1 and
        # month < 4 and day == 31'), and 2000 is a leap year
        pick = next(
            ((m, d) for m in in_months for d in in_days if d <= calendar.monthrange(2000, m)[1]),
            None,
        )
        if pick is None:  # no year has such a day
            continue
        m, d = pick
        # the same day over years: every weekday; a day only some years have (February
        # 29) in the next years that have it (a leap year comes within eight years)
        wanted = 7 if weekday else 1
        for k in range(_LEAP_SPAN * wanted):
            if not wanted:
                break
            try:
                base.append(date(y + k, m, d))
            except ValueError:
                continue
            wanted -= 1
    if not base:
        base.append(_BASE)
    out: dict[date, None] = {}
    for day in base:
        for k in range(7):  # the week from it: every weekday
            try:
                out.setdefault(day + timedelta(days=k), None)
            except OverflowError:
                continue
    return list(out)


def _candidates(
    uses: Mapping[str, MemberUses], zones: Sequence[str]
) -> Iterable[tuple[datetime, str]]:
    """Candidate instants (each with the zone its members are read in)."""
    hours = _int_reps(uses.get("hour", MemberUses()).bounds, *NUMERIC["hour"], 12)
    minutes = _int_reps(uses.get("minute", MemberUses()).bounds, *NUMERIC["minute"], 0)
    days = _dates(uses, zones)
    points: list[datetime] = []
    stamps = sorted(set(uses.get("timestamp", MemberUses()).bounds))
    for b in stamps:
        for shift in (-1, 0, 1):
            points.append(_utc(b + shift))
    for a, b in itertools.pairwise(stamps):
        points.append(_utc((a + b) / 2))
    for text in _texts(uses, "iso", bool):
        try:
            points.append(datetime.fromisoformat(expand(text)["iso"]))
        except (ClockError, ValueError):
            continue
    for zone_name in zones:
        tz = zone(zone_name)
        for point in points:
            yield point, zone_name
        for day, h, mi in itertools.product(days, hours, minutes):
            yield datetime(day.year, day.month, day.day, h, mi, tzinfo=tz), zone_name


def _utc(stamp: float) -> datetime:
    try:
        return datetime.fromtimestamp(stamp, UTC)
    except (OverflowError, ValueError, OSError):
        return datetime(1970, 1, 1, tzinfo=UTC)


__all__ = ["CALENDAR", "NUMERIC", "TEXTUAL", "WEEKDAYS", "ClockDomain", "MemberUses", "now_values"]

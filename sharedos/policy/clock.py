"""``context.now``: the time of a call, as the host's clock gives it, in a named time zone.

A policy reads the time only through ``context.now``, an object the host
supplies with every call (``Kernel`` does, from its clock and its
``time_zone``)::

    {"timestamp": 1796292900,            # seconds since 1970-01-01T00:00:00Z
     "iso": "2026-12-03T11:15:00+01:00", "zone": "Europe/Paris",
     "date": "2026-12-03", "year": 2026, "month": 12, "day": 3,
     "hour": 11, "minute": 15, "weekday": "thu"}   # mon tue wed thu fri sat sun

so ``context.now.hour >= 9 and context.now.weekday in ["mon", "tue"]`` and
``context.now.timestamp < 1798761600`` compare as written. A context written
by hand (a ``test`` block, ``explain``, ``eval``) may give ``now`` as an
ISO-8601 time with an offset, optionally naming its zone
(``"2026-12-07T09:30:00+01:00[Europe/Paris]"``), or as a timestamp; it is
expanded to the same object (``expand``). Nothing here reads the clock but
``current``.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sharedos.errors import PolicyLanguageError

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: the members of ``context.now``
FIELDS = (
    "timestamp",
    "iso",
    "zone",
    "date",
    "year",
    "month",
    "day",
    "hour",
    "minute",
    "weekday",
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_ZONED_RE = re.compile(r"^(?P<time>[^\[\]]+?)(?:\[(?P<zone>[A-Za-z0-9_+\-/]+)\])?$")


class ClockError(PolicyLanguageError, ValueError):
    """A time or time zone that cannot be read."""


def zone(name: str) -> tzinfo:
    """The time zone called ``name`` (IANA: ``UTC``, ``Europe/Paris``); raise ``ClockError``."""
    if name == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ClockError(f"unknown time zone {name!r}") from exc


def now_value(instant: datetime, zone_name: str | None = None) -> dict[str, Any]:
    """The ``context.now`` object of an aware ``instant``, in zone ``zone_name``
    (default: the instant's own offset)."""
    if instant.tzinfo is None:
        raise ClockError("a time needs an offset or a zone (naive times are ambiguous)")
    tz = zone(zone_name) if zone_name is not None else None
    try:
        local = instant.astimezone(tz) if tz is not None else instant
    except (OverflowError, ValueError) as exc:  # the instant is outside year 1 to 9999 there
        raise ClockError(
            f"{instant.isoformat()} in {zone_name} is not in a year 1 to 9999"
        ) from exc
    name = zone_name if zone_name is not None else _offset_name(local)
    return {
        # whole seconds since the epoch, rounded down as the other members are: int() of
        # the float rounded toward zero, so 1969-12-31T23:59:59.5Z was timestamp 0
        "timestamp": (local - _EPOCH) // timedelta(seconds=1),
        "iso": local.isoformat(timespec="seconds"),
        "zone": name,
        "date": local.date().isoformat(),
        "year": local.year,
        "month": local.month,
        "day": local.day,
        "hour": local.hour,
        "minute": local.minute,
        "weekday": WEEKDAYS[local.weekday()],
    }


def current(zone_name: str = "UTC", clock: Any = time.time) -> dict[str, Any]:
    """``context.now`` for this moment of ``clock`` (seconds since the epoch) in ``zone_name``."""
    return now_value(datetime.fromtimestamp(float(clock()), UTC), zone_name)


def expand(value: Any) -> dict[str, Any]:
    """A hand-written ``now`` as the object the host gives: an ISO-8601 time with an offset
    (``Z`` for UTC), optionally ``[Zone/Name]``, or a timestamp (UTC). Raise ``ClockError``."""
    if type(value) is int or type(value) is float:
        if value - value != 0:
            raise ClockError("now is not a finite timestamp")
        try:
            return now_value(datetime.fromtimestamp(value, UTC), "UTC")
        except (OverflowError, OSError, ValueError) as exc:
            raise ClockError(f"now {value!r} is not a timestamp of a year 1 to 9999") from exc
    if type(value) is not str:
        raise ClockError(
            'now is written as an ISO-8601 time ("2026-12-07T09:30:00+01:00[Europe/Paris]") '
            "or a timestamp"
        )
    m = _ZONED_RE.match(value.strip())
    if m is None:
        raise ClockError(f"cannot read {value!r} as a time")
    text = m.group("time").replace("Z", "+00:00").replace("z", "+00:00")
    try:
        instant = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ClockError(f"cannot read {value!r} as an ISO-8601 time") from exc
    if instant.tzinfo is None:
        raise ClockError(f"{value!r} has no offset (write Z for UTC, or +01:00)")
    return now_value(instant, m.group("zone"))


def _offset_name(local: datetime) -> str:
    """The zone name of a time given by its offset alone: ``UTC``, or the offset as ISO
    8601 writes it (``+05:30``, ``-00:30``, ``+05:45:30`` when it has seconds)."""
    offset = local.utcoffset()
    if not offset:
        return "UTC"
    sign = "-" if offset < timedelta(0) else "+"
    offset = abs(offset)
    hours, rest = divmod(offset, timedelta(hours=1))
    minutes, rest = divmod(rest, timedelta(minutes=1))
    text = f"{sign}{hours:02d}:{minutes:02d}"
    if rest:
        text += f":{rest.seconds:02d}"
        if rest.microseconds:
            text += f".{rest.microseconds:06d}"
    return text

"""Option types shared by the commands: a number of seconds that is a real deadline."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    _ParamType = click.ParamType[float, Any]
else:  # click before 8.2 has no type parameters on ParamType
    _ParamType = click.ParamType

__all__ = ["Seconds"]


class Seconds(_ParamType):
    """A duration in seconds: finite, above ``low`` (or at it, with ``low_open=False``) and at
    most ``high``.

    ``click.FloatRange`` lets ``nan`` through (every comparison with it is false) and ``inf``
    when there is no upper bound: a deadline of either never fires. A deadline of 0 or less
    cannot be met by anything, and would be reported as whatever failed first.
    """

    name = "seconds"

    def __init__(
        self, low: float = 0.0, high: float | None = None, *, low_open: bool = True
    ) -> None:
        self.low, self.high, self.low_open = low, high, low_open

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        above = seconds > self.low if self.low_open else seconds >= self.low
        if not above or (self.high is not None and seconds > self.high):
            self.fail(f"{value!r}: give {self.describe()}", param, ctx)
        return seconds

    def describe(self) -> str:
        """The range in words, for the error."""
        low = f"more than {self.low:g}" if self.low_open else f"at least {self.low:g}"
        return low + (
            f" and at most {self.high:g} seconds" if self.high is not None else " seconds"
        )

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "SECONDS"

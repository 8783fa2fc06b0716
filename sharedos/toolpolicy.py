"""ToolPolicy: which tool classes a run had (ADR 0014, "Three tool classes").

The compiler produces ``ToolPolicy`` objects from ``toolpolicy`` blocks, and a
host may build one in Python; both paths go through the same validators, so a
strict policy with an ``external_direct`` entry, or with no named
``harness_local`` tool, is rejected either way.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache

from pydantic import ConfigDict, field_validator, model_validator

from sharedos.copies import ValidatedCopies
from sharedos.names import TOOL_NAME_RE

#: A managed-set pattern: dot-separated segments of tool-name characters, where
#: a whole segment may be ``*`` (exactly one segment) or a final ``**`` (any
#: number of further segments, at least one).
TOOL_PATTERN_RE = re.compile(
    r"^(?:[A-Za-z0-9_\-]+|\*)(?:\.(?:[A-Za-z0-9_\-]+|\*))*(?:\.\*\*)?$|^\*\*$"
)


class RunMode(StrEnum):
    """``strict``: the managed catalogue is the only way to have an effect, besides named local tools."""

    STRICT = "strict"
    OPEN = "open"


@lru_cache(maxsize=1024)
def _managed_regexes(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    # Keyed by the patterns themselves (not cached on the instance), so a
    # model_copy(update={"managed": ...}) can never answer for the old set.
    return tuple(_pattern_regex(p) for p in patterns)


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    for seg in pattern.split("."):
        if seg == "**":
            parts.append(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")
        elif seg == "*":
            parts.append(r"[A-Za-z0-9_\-]+")
        else:
            parts.append(re.escape(seg))
    return re.compile(r"\.".join(parts))


class ToolPolicy(ValidatedCopies):
    """A run policy: the managed tool set and the declared local/external surface.

    ``model_copy(update=...)`` is validated (``ValidatedCopies``): a copy cannot
    make a strict run list external_direct tools its claim denies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    mode: RunMode
    managed: tuple[str, ...] = ()
    harness_local: tuple[str, ...] = ()
    external_direct: tuple[str, ...] = ()

    @field_validator("managed")
    @classmethod
    def _managed_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if not TOOL_PATTERN_RE.fullmatch(pattern) or len(pattern) > 128:
                raise ValueError(
                    f"managed pattern {pattern!r} is not a tool name or tool-name pattern "
                    "(segments of [A-Za-z0-9_-] separated by '.', a segment may be '*', "
                    "a final segment may be '**')"
                )
        return value

    @field_validator("harness_local", "external_direct")
    @classmethod
    def _tool_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not TOOL_NAME_RE.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a valid tool name (1-128 chars of [A-Za-z0-9_.-])"
                )
        return value

    @model_validator(mode="after")
    def _strict_claims(self) -> ToolPolicy:
        if self.mode is RunMode.STRICT:
            if self.external_direct:
                raise ValueError(
                    f"toolpolicy {self.name!r} is strict but lists external_direct tools "
                    f"{list(self.external_direct)}: a strict run claims the managed catalogue "
                    "and its named local tools are the only way to have an effect"
                )
            if not self.harness_local:
                raise ValueError(
                    f"toolpolicy {self.name!r} is strict but names no harness_local tools: "
                    "a run claiming an empty local surface is misdeclaring itself"
                )
        return self

    def is_managed(self, tool: str) -> bool:
        """True when ``tool`` is in this run's managed set."""
        return any(rx.fullmatch(tool) for rx in _managed_regexes(self.managed))

    def strict_claim(self) -> str:
        """One paragraph saying what this run's refusal results do and do not cover."""
        if self.mode is RunMode.STRICT:
            local = ", ".join(self.harness_local)
            return (
                f"Strict run '{self.name}': the managed catalogue ({', '.join(self.managed)}) "
                f"is authorized call by call by SharedOS. The harness also had its own named "
                f"local tools ({local}), which SharedOS does not authorize; effects made through "
                "them are outside what these refusals prove. No external_direct tools were declared."
            )
        ext = ", ".join(self.external_direct) or "none declared"
        local = ", ".join(self.harness_local) or "none declared"
        return (
            f"Open run '{self.name}': SharedOS authorizes only the managed catalogue "
            f"({', '.join(self.managed)}). Harness-local tools ({local}) and external_direct "
            f"tools ({ext}) were not authorized by SharedOS, so 'the kernel refused every "
            "violation' says little about what the harness could do by other means."
        )

"""What a run policy's ``harness_local`` names mean for a CLI's own tools.

A strict run policy names the harness's own tools it keeps (ADR 0014:
``harness_local "patch", "shell.bounded"``). SharedOS confines the CLI in an
OS sandbox whatever it names (docs/confinement.md); in addition each adapter
narrows its CLI's own tool selection to the *kinds* named here, where the CLI
lets it (Claude Code ``--tools``, Pi ``--tools``; Codex and dsh keep their
own tool set but run in their own sandbox mode inside SharedOS's):

============  =====================================================  =========
kind          names that select it                                   meaning
============  =====================================================  =========
``shell``     ``shell``, ``shell.bounded``, ``bash``, ``exec``       a shell: inside the sandbox, so bounded by it
``edit``      ``patch``, ``edit``, ``write``, ``apply_patch``        edit/write files (the turn's work directory)
``read``      ``read``, ``search``, ``grep``, ``glob``, ``ls``       read/search files the sandbox shows
``web``       ``web``, ``web.fetch``, ``web.search``                 the web (only with ``[confinement] network``)
============  =====================================================  =========

A name outside this table selects no CLI tool (it is still recorded).
"""

from __future__ import annotations

from collections.abc import Iterable

#: harness_local name → kind of CLI tool it keeps
LOCAL_KINDS: dict[str, str] = {
    "shell": "shell",
    "shell.bounded": "shell",
    "bash": "shell",
    "exec": "shell",
    "patch": "edit",
    "edit": "edit",
    "write": "edit",
    "apply_patch": "edit",
    "read": "read",
    "search": "read",
    "grep": "read",
    "glob": "read",
    "ls": "read",
    "web": "web",
    "web.fetch": "web",
    "web.search": "web",
}


def local_tool_kinds(names: Iterable[str]) -> frozenset[str]:
    """The kinds of CLI tool ``names`` (a run policy's ``harness_local``) keep."""
    return frozenset(LOCAL_KINDS[n] for n in names if n in LOCAL_KINDS)

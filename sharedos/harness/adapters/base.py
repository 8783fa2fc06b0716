"""The ``HarnessAdapter`` protocol: everything SharedOS knows about one harness CLI.

One module per harness under ``sharedos.harness.adapters`` implements it (as
``sharedos.harness.shapes`` does for wire shapes); the registry in
``__init__`` maps a host-configuration ``kind`` to its adapter. The runtime,
the recipes, the output readers, the correlation and the conformance columns
ask the adapter instead of testing ``kind ==`` themselves.

The values passed in (``TurnInputs``) and returned (``Launch``,
``HarnessOutput``) are plain dataclasses: they are built once per turn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from sharedos.errors import HarnessError
from sharedos.harness.hostconfig import HarnessConfig
from sharedos.harness.outputs import HarnessOutput
from sharedos.identity import McpSupport

#: The env var carrying the turn's bearer token to harnesses that read it from the
#: environment (Codex, Pi, dsh): the token never goes on a command line.
TOKEN_ENV = "SHAREDOS_BRIDGE_TOKEN"
#: The env var carrying the scripted model's dummy API key.
MODEL_KEY_ENV = "SHAREDOS_MODEL_KEY"
#: The dummy key every harness presents to the scripted model (it checks none).
SCRIPTED_MODEL_KEY = "sharedos-scripted-model-no-key"


#: SharedOS's bound on one call when the bridge does not say (``RuntimeHost``'s default
#: handler timeout)
DEFAULT_ANSWER_WITHIN_S = 30.0
#: what a client's own tool-call timeout allows past SharedOS's bound on the call's handler:
#: the evidence writes around it, a large frame waiting its turn to be classified, the relay
CLIENT_TIMEOUT_MARGIN_S = 30.0


class HarnessUnavailable(HarnessError, RuntimeError):
    """The harness cannot run on this machine; ``str()`` says why (shown in reports)."""


@dataclass
class BridgeEndpoint:
    """What the harness connects to: an HTTP URL + token, or a stdio command."""

    transport: str
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    command: list[str] | None = None
    stdio_env: dict[str, str] = field(default_factory=dict, repr=False)
    #: how long SharedOS may run one call's handler (the host's handler timeout: under
    #: ``sharedos run`` an upstream's ``call_s`` plus its ping and 5 s); None: the default
    answer_within_s: float | None = None

    def client_timeout_s(self) -> int:
        """Whole seconds the harness's MCP client waits for one call before it gives up.

        Past SharedOS's own bound with room to spare, so the answer SharedOS recorded
        (``upstream_timeout``, the result of a slow upstream) is what the model sees. A
        client timeout that fires first shows the model its own "timed out" while the call
        runs on and may succeed (measured: Pi's 60 s against an upstream's default 60 s).
        """
        within = DEFAULT_ANSWER_WITHIN_S if self.answer_within_s is None else self.answer_within_s
        return math.ceil(within + CLIENT_TIMEOUT_MARGIN_S)


@dataclass
class Launch:
    """A fully prepared harness process for one turn."""

    argv: list[str]
    env: dict[str, str] = field(repr=False)
    cwd: Path
    files: list[Path] = field(default_factory=list)
    secret_values: tuple[str, ...] = field(default=(), repr=False)
    #: the prompt's own arguments, put last, after the host file's ``args``: ``--`` and
    #: the prompt (``task_argv``), so that no prompt is ever read as one of the CLI's flags
    task: list[str] = field(default_factory=list, repr=False)


@dataclass
class TurnInputs:
    """What an adapter's ``prepare`` gets for one turn.

    ``bridge`` is ``None`` for the live column (no SharedOS catalogue at all);
    ``model_url`` is the scripted model's base URL when ``cfg.provider`` is
    ``scripted``; ``env`` is the minimal base environment (fresh HOME), which
    the adapter extends; ``argv`` is the CLI's argv prefix. ``strict`` is the
    run policy's mode (never a sandbox-bypass flag then), ``confined`` whether
    SharedOS runs the CLI in its sandbox, ``local_tools`` the run policy's
    ``harness_local`` names (``local_tool_kinds`` reads them).
    """

    cfg: HarnessConfig
    bridge: BridgeEndpoint | None
    turn_dir: Path
    work: Path
    prompt: str
    model_url: str | None
    env: dict[str, str] = field(repr=False)
    argv: list[str]
    strict: bool = False
    confined: bool = False
    local_tools: tuple[str, ...] = ()


class HarnessAdapter(Protocol):
    """One harness CLI: how to find it, launch it for a turn, and read what it printed."""

    #: the host-configuration ``kind``
    kind: ClassVar[str]
    #: short human label for report headers
    label: ClassVar[str]
    #: how the harness reaches MCP (its own client, or an extension)
    mcp_support: ClassVar[McpSupport]
    #: the extension's name when the MCP client is not the harness's own
    mcp_extension: ClassVar[str | None]
    #: the harness kind whose CLI the live column runs for this one (pi-adapter → pi)
    live_kind: ClassVar[str]
    #: the ``[harness.ID.vendor]`` keys this adapter reads, and the type of each (any other
    #: key is refused where it is written: a misspelt one would be ignored without a word)
    vendor_keys: ClassVar[Mapping[str, type]]
    #: keys of the harness's own correlation id in a ``tools/call``'s ``_meta`` (or ``()``)
    correlation_keys: ClassVar[tuple[str, ...]]
    #: how its MCP client answers a call to a name it did not offer (measured)
    client_route: ClassVar[str]

    def default_command(self) -> tuple[str, ...]:
        """argv prefix of the pinned CLI installed by ``scripts/install-tools.sh``."""
        ...

    def check_command(self, command: tuple[str, ...]) -> None:
        """Raise ``HarnessUnavailable`` with a useful reason when the CLI is not runnable."""
        ...

    def version_env(self, environ: Mapping[str, str], scratch: Path) -> dict[str, str]:
        """The environment ``<cli> --version`` needs (``scratch`` is a private temp dir)."""
        ...

    def prepare(self, inputs: TurnInputs) -> Launch:
        """Write the harness's own configuration for this turn and return how to launch it."""
        ...

    def parse_output(self, stdout: str) -> HarnessOutput:
        """Read the harness's stdout (its event stream); never raises."""
        ...

    def turn_notes(self, output: HarnessOutput) -> list[str]:
        """Notes for the column about this turn that only this harness can give."""
        ...


def write_private(path: Path, text: str) -> Path:
    """Create ``path`` with mode 0600 (it may hold the turn token or a provider key)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def task_argv(prompt: str) -> list[str]:
    """The prompt as the CLI's positional task: after ``--``, which ends its options.

    A prompt that starts with ``-`` (``--version``, ``-x is wrong``, ``--model=…``) would
    otherwise be parsed as a flag of the CLI (measured: Claude Code 2.1.332 printed its
    version, Codex 0.171.0 too, dsh its help), and never reach the model. All five
    pinned CLIs end their options at ``--``.

    A prompt of just ``-`` is still read as "the prompt is on stdin" after ``--``
    (measured: Codex 0.171.0 "No prompt provided via stdin.", dsh 0.2.1-rc.2 "a task
    is required", exit 1, no model request; stdin is closed): it is given as `` -``.
    """
    return ["--", " -" if prompt == "-" else prompt]


def check_paths(kind: str, parts: tuple[str, ...]) -> None:
    """``HarnessUnavailable`` when one of ``parts`` is a path that does not exist."""
    for part in parts:
        if "/" in part and not Path(part).exists():
            raise HarnessUnavailable(
                f"{kind}: {part} not found (run `make tools` / scripts/install-tools.sh, "
                "or set command in the host configuration)"
            )

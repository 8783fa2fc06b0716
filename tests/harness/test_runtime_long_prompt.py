"""A prompt too long for one command line is said plainly, as a harness that cannot start.

The prompt is an argument of the CLI, and Linux execs no argument longer than
128 KiB (``MAX_ARG_STRLEN``): a long prompt, or a plan whose arguments (a large
``files.write`` content) are written into the prompt, made the exec fail with
``E2BIG``, which escaped the runtime as a bare ``OSError``: ``sharedos run``
printed a traceback naming its own Python supervisor and exited 1 ("the host
configuration ... could not be used"). It is a ``HarnessUnavailable`` now
(``sharedos run`` exits 4), saying what was too long, never its text.

The CLI is a stand-in script: the system refuses the exec before any CLI runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.harness.hostconfig import HarnessConfig
from sharedos.harness.runtime import create_mcp_harness_runtime
from sharedos.harness.tools import HarnessUnavailable
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.kernel.context import AccessContext
from sharedos.policy import compile_source
from sharedos.testing.scripted_model import ScriptedAttempt

pytestmark = pytest.mark.anyio


def _stand_in(tmp_path: Path) -> Path:
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n", encoding="utf-8")
    cli.chmod(0o755)
    return cli


@pytest.mark.parametrize("via", ["prompt", "plan"])
async def test_a_prompt_too_long_for_a_command_line_is_a_harness_that_cannot_start(
    tmp_path: Path, via: str
) -> None:
    cfg = HarnessConfig(id="claude-code", kind="claude-code", command=(str(_stand_in(tmp_path)),))
    runtime = create_mcp_harness_runtime(cfg)
    policy = compile_source("toolpolicy run {\n  mode open\n}\n", "run.sos")
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    big = "A" * 200_000
    plan = [ScriptedAttempt("w", "files.write", {"path": "/p", "content": big})]
    try:
        host = RuntimeHost(Kernel(policy, ToolRegistry()), store)
        with pytest.raises(HarnessUnavailable) as caught:
            await runtime.run_turn(
                host,
                AccessContext(principal="alice"),
                policy.tool_policies["run"],
                plan=plan if via == "plan" else [],
                prompt=big if via == "prompt" else None,
                workdir=tmp_path / "turns",
                transport="http",
                timeout_s=30,
            )
    finally:
        store.close()
    message = str(caught.value)
    assert "too long" in message and "E2BIG" in message, message
    assert big[:100] not in message
    # nothing ran: the turn's directory (and the file holding its bearer token) went
    assert not list((tmp_path / "turns").iterdir())

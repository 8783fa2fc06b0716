"""The prompt reaches the model as the prompt, whatever it starts with.

Every pinned CLI takes the prompt as a positional argument and parses a leading
``-`` as one of its own options: ``--version`` as the prompt printed the CLI's
version and ran no turn (Claude Code, Codex, Pi), dsh printed its help, and
``-x is wrong`` was an "unknown option". Pi also reads a leading ``@`` as a file
to attach, and Codex and dsh a prompt of just ``-`` as "read it from stdin". The quick check is in ``test_recipes.py``; this one drives the real
CLIs (stress: a turn of each).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.harness.runtime import create_mcp_harness_runtime
from sharedos.harness.tools import HarnessUnavailable
from tests.harness.turns import run_open_turn

pytestmark = [pytest.mark.anyio, pytest.mark.harness, pytest.mark.stress]

HARNESSES = ("claude-code", "codex", "pi", "pi-adapter", "dsh")


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize(
    "prompt", ["--version: reply with the word done", "@notes.md reply with the word done", "-"]
)
async def test_a_prompt_that_looks_like_a_flag_reaches_the_model(
    tmp_path: Path, harness: str, prompt: str
) -> None:
    try:
        runtime = create_mcp_harness_runtime(harness)
        runtime.version()
    except HarnessUnavailable as exc:
        pytest.skip(str(exc))
    result = await run_open_turn(
        runtime, tmp_path, workdir=tmp_path / "turns", timeout_s=120, prompt=prompt
    )
    log = result.turn_dir / "model-requests.jsonl"
    assert result.model_requests >= 1, (result.process.stdout[-500:], result.notes)
    assert prompt in log.read_text(encoding="utf-8")

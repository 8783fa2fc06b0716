"""README.md's Python examples do what the text beside them says, pasted as they are."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sharedos.harness.hostconfig import parse_host_config

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _broker_example() -> str:
    start = README.index("Brokering an upstream MCP server next to the built-in tools")
    return README[start : README.index("```\n", README.index("```python", start) + 10)]


def test_the_broker_example_publishes_what_the_upstream_lists() -> None:
    """The example's comment says git.git_log is authorized and forwarded; with the
    default `pinning = "required"` and no pin file every tool was held back instead
    ("0 of 12 tools published")."""
    example = _broker_example()
    call = re.search(r"parse_host_config\((.*)\)\n", example)
    assert call is not None
    text, source = ast.literal_eval(f"({call.group(1)})")
    config = parse_host_config(text, source)
    assert config.upstream["git"].pinning == "off"


def test_the_broker_example_names_the_demo_step_that_does_it() -> None:
    stated = re.search(r"what step (\d+) of\s+`make demo` does", _broker_example())
    assert stated is not None
    demo = (REPO / "sharedos" / "cli" / "demo.py").read_text(encoding="utf-8")
    steps = dict(re.findall(r'_step\((\d+), "([^"]+)"', demo))
    assert steps[stated.group(1)].startswith("A brokered upstream"), steps

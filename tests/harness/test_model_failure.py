"""A turn whose model call failed is a failed turn, though the CLI exited 0.

Pi 1.6.0 in ``--mode json`` exits 0 when its model call fails (measured with
a provider answering 401): the only sign is the last assistant message's
``stopReason: "error"`` and ``errorMessage`` in ``agent_end``. ``sharedos run``
then exited 0, printed Pi's whole event stream on stdout as "the answer", and
said nothing of the error. The turn is now failed (``HarnessTurnResult.failed``,
``sharedos run`` exit 3) with a note quoting the harness's error, and no event
stream is printed as an answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sharedos.harness.adapters.pi import PiAdapter
from sharedos.harness.hostconfig import HarnessConfig
from sharedos.harness.runtime import create_mcp_harness_runtime
from tests.harness.turns import run_open_turn
from tests.upstream.conftest import PY

pytestmark = pytest.mark.anyio

SHAREDOS = str(Path(PY).parent / "sharedos")
ERROR = '401: {"type":"authentication_error","message":"invalid x-api-key"}'
#: what Pi 1.6.0 printed, trimmed to the events that matter (measured)
PI_STREAM = [
    {"type": "session", "version": 3, "id": "s", "cwd": "/w"},
    {"type": "agent_start"},
    {
        "type": "agent_end",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [],
                "stopReason": "error",
                "errorMessage": ERROR,
            },
        ],
        "willRetry": False,
    },
    {"type": "agent_settled", "aborted": False},
]


def test_pi_s_failed_model_call_is_read_as_a_failed_turn() -> None:
    out = PiAdapter().parse_output("\n".join(json.dumps(e) for e in PI_STREAM) + "\n")
    assert out.error == ERROR and not out.final_text


async def test_a_turn_pi_says_failed_is_failed_though_it_exited_0(tmp_path: Path) -> None:
    """The stand-in prints what Pi printed and exits 0, as Pi does."""
    stream = tmp_path / "stream.jsonl"
    stream.write_text("\n".join(json.dumps(e) for e in PI_STREAM) + "\n", encoding="utf-8")
    cli = tmp_path / "pi"
    cli.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo 1.6.0; exit 0; }}\ncat {stream}\n',
        encoding="utf-8",
    )
    cli.chmod(0o755)
    runtime = create_mcp_harness_runtime(HarnessConfig(id="pi", kind="pi", command=(str(cli),)))
    result = await run_open_turn(runtime, tmp_path, workdir=tmp_path / "turns", timeout_s=30)
    assert result.process.returncode == 0
    assert result.failed
    assert any(ERROR in n for n in result.notes), result.notes
    assert result.diagnostics()["harnessOutput"]["error"] == ERROR


class _Refusing(BaseHTTPRequestHandler):
    """A provider that refuses the key: 401 to every request."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"type":"authentication_error","message":"invalid x-api-key"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def refusing_provider() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.harness("pi")
@pytest.mark.stress
def test_sharedos_run_of_pi_whose_provider_refuses_exits_3(
    tmp_path: Path, refusing_provider: int
) -> None:
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.pi]\nprovider = "host"\ndeclared_model = "m"\n'
        'args = ["--provider", "x", "--model", "m"]\n'
        '[harness.pi.vendor.models]\nproviders = { x = { baseUrl = "http://127.0.0.1:'
        f'{refusing_provider}/v1", api = "openai-completions", apiKey = "k", '
        'models = [{ id = "m" }] } }\n',
        encoding="utf-8",
    )
    rules = tmp_path / "rules.sos"
    rules.write_text("toolpolicy run {\n mode open\n}\n", encoding="utf-8")
    proc = subprocess.run(
        [
            SHAREDOS,
            "run",
            "--host-config",
            str(host),
            "--harness",
            "pi",
            "--rules",
            str(rules),
            "--policy",
            "run",
            "--principal",
            "bob",
            "--evidence",
            str(tmp_path / "evidence.sqlite"),
            "--no-stream",
            "hi",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=dict(os.environ),
        cwd=tmp_path,
    )
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    assert "invalid x-api-key" in proc.stderr
    assert '"type":"agent_end"' not in proc.stdout  # no event stream as the answer

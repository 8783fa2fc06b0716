"""A subprocess that runs one policy text at a time through the public policy API and CLI.

Protocol: one JSON object per line on stdin, ``{"b64": <the input's bytes,
base64>}``; in reply, one JSON line per stage as soon as it ends (so a watcher
can bound each stage), on the original stdout::

    {"stage": "api", "result": "ok" | "policy_error" | "crash", "detail": str, "s": float,
     "cpu": float}
    {"stage": "check", "result": <exit code>, "traceback": bool, "detail": str, "s": float,
     "cpu": float}
    {"stage": "fmt", ...same as check}

``api`` is ``compile_source(text)`` on the input decoded as UTF-8 (with
surrogate escapes, as a JSON string could carry). ``check`` and ``fmt`` are
``sharedos-policy check FILE`` and ``sharedos-policy fmt --check FILE`` on
the raw bytes written to a file. Running in a separate process means a hang
can be killed and a crash of the interpreter itself is seen. ``s`` is the
stage's wall time, ``cpu`` the CPU time this process spent on it (what the
watcher bounds: it does not grow with the machine's load).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _stage_cli(args: list[str]) -> tuple[int, str, float, float]:
    from click.testing import CliRunner

    from sharedos.cli.policy import main

    t0, c0 = time.perf_counter(), time.process_time()
    res = CliRunner().invoke(main, args, catch_exceptions=True)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = res.output or ""  # stdout and stderr, interleaved
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        out += "".join(traceback.format_exception(res.exception))
    code = res.exit_code if isinstance(res.exit_code, int) else -1
    return code, out, elapsed, cpu


def _selftest(data: bytes) -> None:
    """Under ``SOS_FUZZ_SELFTEST=1``, inputs that prove the watcher sees a hang and a crash."""
    if os.environ.get("SOS_FUZZ_SELFTEST") != "1":
        return
    if data.startswith(b"#!selftest:hang"):
        time.sleep(600)  # the watcher kills it long before
    if data.startswith(b"#!selftest:raise"):
        raise RuntimeError("selftest")
    if data.startswith(b"#!selftest:exit"):
        os._exit(70)


def run_one(data: bytes, workdir: Path) -> Iterator[dict[str, Any]]:
    """Every stage on one input, one reply per stage."""
    from sharedos.policy import PolicyError, compile_source

    text = data.decode("utf-8", "surrogateescape")
    reply: dict[str, Any] = {"stage": "api", "detail": ""}
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        _selftest(data)
        compile_source(text, "fuzz.sos")
        reply["result"] = "ok"
    except PolicyError as exc:
        reply["result"] = "policy_error"
        if not exc.diagnostics:
            reply["result"] = "crash"
            reply["detail"] = "PolicyError without diagnostics"
    except BaseException as exc:  # the finding: anything else escaped
        reply["result"] = "crash"
        reply["detail"] = "".join(traceback.format_exception(exc))[-3000:]
    reply["s"] = time.perf_counter() - t0
    reply["cpu"] = time.process_time() - c0
    yield reply
    path = workdir / "fuzz.sos"
    path.write_bytes(data)
    for stage, args in (("check", ["check", str(path)]), ("fmt", ["fmt", "--check", str(path)])):
        code, out, elapsed, cpu = _stage_cli(args)
        tb = "Traceback (most recent call last)" in out
        yield {
            "stage": stage,
            "result": code,
            "traceback": tb,
            "detail": out[-3000:] if tb or code not in (0, 1) else "",
            "s": elapsed,
            "cpu": cpu,
        }


def main() -> None:
    """Serve inputs until stdin closes."""
    proto = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    sys.stdout = sys.stderr  # nothing but replies on the protocol stream
    with tempfile.TemporaryDirectory(prefix="sos-fuzz-") as tmp:
        for line in sys.stdin:
            data = base64.b64decode(json.loads(line)["b64"])
            for reply in run_one(data, Path(tmp)):
                proto.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()

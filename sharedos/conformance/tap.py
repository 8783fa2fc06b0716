"""A stdio tap in front of a brokered upstream: the upstream's side of a conformance run.

``python -m sharedos.conformance.tap LOG -- COMMAND [ARGS...]`` starts COMMAND,
relays its stdin and stdout unchanged, byte for byte, and appends every line
the client (SharedOS's broker) sends it to LOG, before passing the line on.
Reference servers such as mcp-server-git keep no log of what reached them;
with the tap, "a denied call never reaches the upstream" is read from the
upstream's own input rather than from SharedOS's evidence: a request that is
not in LOG never reached the server.

``read_tool_calls(LOG)`` returns the ``tools/call`` requests in it. The tap
exits with the upstream's status once the upstream exits (it does when its
stdin closes, i.e. when the broker closes the session).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True)
class TappedCall:
    """One ``tools/call`` request as the upstream received it."""

    name: str
    arguments: dict[str, Any]


def read_tool_calls(log: Path) -> list[TappedCall]:
    """Every ``tools/call`` request in a tap log, in the order they reached the upstream.

    A line that is not a JSON-RPC request object is skipped (it was relayed all the
    same, and the upstream answered it as it saw fit); a missing log means nothing
    was received.
    """
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    calls: list[TappedCall] = []
    for line in text.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            continue
        params = message.get("params")
        if not isinstance(params, dict):
            continue
        arguments = params.get("arguments")
        calls.append(
            TappedCall(
                name=str(params.get("name")),
                arguments=dict(arguments) if isinstance(arguments, dict) else {},
            )
        )
    return calls


def _relay_in(source: IO[bytes], child: IO[bytes], log_path: str) -> None:
    with open(log_path, "ab", buffering=0) as log:
        for line in source:
            log.write(line if line.endswith(b"\n") else line + b"\n")
            try:
                child.write(line)
                child.flush()
            except OSError:
                break
    with contextlib.suppress(OSError):
        child.close()


def main(argv: list[str] | None = None) -> int:
    """Run the tap (see the module docstring); 2 on a usage error."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m sharedos.conformance.tap LOG -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    log_path, command = args[0], args[2:]
    try:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        print(f"tap: cannot start {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    assert child.stdin is not None and child.stdout is not None
    threading.Thread(
        target=_relay_in, args=(sys.stdin.buffer, child.stdin, log_path), daemon=True
    ).start()
    out = sys.stdout.buffer
    source = child.stdout.fileno()
    while chunk := os.read(source, 65536):
        out.write(chunk)
        out.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())

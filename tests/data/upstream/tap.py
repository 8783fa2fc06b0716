"""A stdio tap: run an MCP server and log every line the client sends it.

``python tap.py LOG -- COMMAND [ARGS...]`` starts COMMAND, relays stdin to it
and its stdout back unchanged, and appends each client->server line to LOG
as it passes. The upstream's side of the story, for servers that keep no log
of their own: what never appears in LOG never reached the server.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print("usage: tap.py LOG -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    log_path, argv = sys.argv[1], sys.argv[3:]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None

    def upstream() -> None:
        with open(log_path, "ab", buffering=0) as log:
            for line in sys.stdin.buffer:
                log.write(line)
                try:
                    child.stdin.write(line)  # type: ignore[union-attr]
                    child.stdin.flush()  # type: ignore[union-attr]
                except OSError:
                    break
        with contextlib.suppress(OSError):
            child.stdin.close()  # type: ignore[union-attr]

    threading.Thread(target=upstream, daemon=True).start()
    out = sys.stdout.buffer
    for line in child.stdout:
        out.write(line)
        out.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())

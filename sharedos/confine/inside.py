"""The two small programs SharedOS runs *inside* a harness sandbox (standard library only).

This file is bound read-only into the sandbox and run as ``python -I -S
inside.py MODE ...``; it imports nothing from SharedOS (the package is not
visible in the sandbox) and must start fast (``-I -S``: no site, no user
paths; about 15 ms here).

``init --fd N --ports P1,P2 -- ARGV...``
    The sandbox's first program. It binds ``127.0.0.1:P`` for every allowed
    port in the sandbox's own network namespace (the port numbers are the
    host's, so every URL the harness was given stays valid), hands the
    listening sockets to SharedOS over the inherited Unix socket ``N``
    (``SCM_RIGHTS``), closes its own copies and ``exec``\\ s the harness. The
    host then accepts connections on those sockets itself (the bridge serves
    them directly; any other port is relayed to the host's loopback), so no
    forwarding process runs in the sandbox and a call costs no extra hop.
    Nothing else on the host's loopback is reachable: the sandbox has no
    other route out.

``connect SOCKET``
    The stdio MCP server command a confined harness launches. It connects to
    the host's Unix socket ``SOCKET`` (bound read-only into the sandbox),
    passes its own stdin, stdout and stderr to SharedOS (``SCM_RIGHTS``),
    which runs the real stdio bridge *outside* the sandbox on those very
    pipes (the bridge needs the evidence store and the managed roots, which
    the sandbox must not see), then waits and exits with the bridge's status.
    If the harness kills it, the host sees the socket close and ends that
    bridge.
"""

from __future__ import annotations

import array
import os
import socket
import sys

#: exit status when the sandbox's set-up failed (the harness never ran)
SETUP_FAILED = 125


def _send_fds(sock: socket.socket, payload: bytes, fds: list[int]) -> None:
    sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])


def init(argv: list[str]) -> int:
    """Bind the allowed loopback ports, hand them to the host, exec the harness."""
    fd, ports, command = -1, [], []
    i = 0
    while i < len(argv):
        if argv[i] == "--fd":
            fd = int(argv[i + 1])
            i += 2
        elif argv[i] == "--ports":
            ports = [int(p) for p in argv[i + 1].split(",") if p]
            i += 2
        elif argv[i] == "--":
            command = argv[i + 1 :]
            break
        else:
            sys.stderr.write(f"sharedos sandbox init: unknown argument {argv[i]!r}\n")
            return SETUP_FAILED
    if fd < 0 or not command:
        sys.stderr.write("sharedos sandbox init: usage: init --fd N --ports P,.. -- ARGV\n")
        return SETUP_FAILED
    channel = socket.socket(fileno=fd)
    listeners: list[socket.socket] = []
    try:
        for port in ports:
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            lsock.bind(("127.0.0.1", port))
            lsock.listen(128)
            listeners.append(lsock)
        _send_fds(
            channel, b"ok " + ",".join(map(str, ports)).encode(), [s.fileno() for s in listeners]
        )
    except OSError as exc:
        message = f"error binding the sandbox's loopback ports: {exc}"
        try:  # noqa: SIM105 - no contextlib: this runs at every sandbox start
            channel.sendall(message.encode())
        except OSError:
            pass
        sys.stderr.write(f"sharedos sandbox init: {message}\n")
        return SETUP_FAILED
    for lsock in listeners:
        lsock.close()  # the host holds them now; nothing in the sandbox can accept on them
    channel.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"sharedos sandbox init: cannot run {command[0]}: {exc.strerror}\n")
        return 127
    return 127  # pragma: no cover - execvp does not return


def connect(argv: list[str]) -> int:
    """Hand this process's stdio to the host's stdio bridge; exit with the bridge's status."""
    if len(argv) != 1:
        sys.stderr.write("sharedos sandbox connect: usage: connect SOCKET\n")
        return SETUP_FAILED
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(argv[0])
        _send_fds(sock, b"stdio", [0, 1, 2])
    except OSError as exc:
        sys.stderr.write(f"sharedos sandbox connect: cannot reach the bridge: {exc}\n")
        return SETUP_FAILED
    # The bridge outside now owns these pipes; the harness must see EOF when it exits,
    # so this process keeps no copy of them.
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(devnull, target)
    os.close(devnull)
    answer = b""
    while True:
        try:
            chunk = sock.recv(64)
        except OSError:
            break
        if not chunk:
            break
        answer += chunk
    text = answer.decode("ascii", "replace")
    if text.startswith("exit "):
        try:
            return int(text.split()[1]) & 0xFF
        except (IndexError, ValueError):
            return 1
    return 1


def main(argv: list[str]) -> int:
    """Dispatch ``init`` or ``connect``."""
    if argv and argv[0] == "init":
        return init(argv[1:])
    if argv and argv[0] == "connect":
        return connect(argv[1:])
    sys.stderr.write("sharedos sandbox: usage: inside.py init|connect ...\n")
    return SETUP_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

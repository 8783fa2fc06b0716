"""The stdio door: a confined harness's stdio MCP server runs outside its sandbox.

The stdio bridge needs what the sandbox must not show (the evidence store,
the policy sources, the managed roots), so it cannot run inside. The harness
is configured to launch ``inside.py connect SOCKET`` as its MCP server
instead; that connector hands its own stdin, stdout and stderr to this door
over the Unix socket ``SOCKET`` (``SCM_RIGHTS``), and the door runs the real
bridge command on those very pipes, under ``supervise.py`` (so it dies with
the run). The harness and the bridge then talk over the harness's own pipes
with no process in between. When the bridge exits the door tells the
connector its status; when the connector goes away (the harness killed its
MCP server) the door ends that bridge.

The socket lives in a private host directory (0700, under ``private_base()``,
which no sandbox shows) bound read-only into the harness's sandbox; at most
``max_sessions`` bridges run at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sharedos.confine.leftovers import Claim, claim, discard_empty

logger = logging.getLogger(__name__)

#: where the door's directory appears inside the sandbox
SANDBOX_DOOR_DIR = "/run/sharedos/door"
SOCKET_NAME = "stdio.sock"
#: name prefixes of the private directories a run makes under ``private_base()``
DOOR_PREFIX = "sharedos-door-"
STDIO_PREFIX = "sharedos-stdio-"


def private_base() -> Path:
    """``$TMPDIR/sharedos-UID`` (0700, this user's): where doors and stdio turn files live.

    It is SharedOS's own state: no sandbox may show it (``upstream.sandbox.decide``
    names it among the managed paths, so an upstream root holding the temporary
    directory gets it masked, and a root inside it is refused). Created here, so it
    exists when a view is checked; one that is not this user's private directory is
    refused rather than used.
    """
    return _private_dir(f"sharedos-{os.getuid()}")


def run_base() -> Path:
    """``$TMPDIR/sharedos-runs-UID`` (0700, this user's): where runs make their directories.

    A run's directory holds the harness's turn directory (its HOME: the CLI's
    transcript, every tool result of the turn, its settings). Made directly in the
    temporary directory, it was in the view of every upstream whose roots hold that
    directory (a scratch-space server with ``/tmp`` read-write), this run's
    included: an upstream's sandbox is planned before the run's directory exists,
    so no mask could cover it. Every upstream sandbox masks this base instead
    (``upstream.sandbox.decide``); a harness sees only its own turn directory in it.
    """
    return _private_dir(f"sharedos-runs-{os.getuid()}")


def private_dirs() -> tuple[str, ...]:
    """Where ``private_base`` and ``run_base`` are (made or not): every run's doors, stdio
    turn files and run directories, which a files root must not hold either."""
    tmp = Path(tempfile.gettempdir())
    return tuple(str(tmp / f"{n}-{os.getuid()}") for n in ("sharedos", "sharedos-runs"))


def _private_dir(name: str) -> Path:
    """``$TMPDIR/NAME``, created 0700; refused unless it is this user's private directory."""
    base = Path(tempfile.gettempdir()) / name
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OSError(f"{base} is not a private directory of this user: refusing to use it")
    return base


def supervise_script() -> str:
    """Path of ``supervise.py`` (run with ``python -I -S``)."""
    return str(Path(__file__).with_name("supervise.py"))


def supervised(
    command: Sequence[str],
    *,
    cleanup: Sequence[str] = (),
    python: str | None = None,
    grace_s: float | None = None,
) -> list[str]:
    """``command`` under ``supervise.py``: it and its descendants end when this process dies,
    and the ``cleanup`` files are removed then. ``grace_s``: how long leftover descendants
    get to exit after each step (``supervise.py --grace``; its default when None)."""
    extra = [a for path in cleanup for a in ("--cleanup", path)]
    if grace_s is not None:
        extra += ["--grace", str(grace_s)]
    return [
        python or sys.executable,
        "-I",
        "-S",
        supervise_script(),
        "--parent",
        str(os.getpid()),
        *extra,
        "--",
        *command,
    ]


class StdioDoor:
    """Runs the turn's stdio bridge for connectors in the sandbox (see the module docstring)."""

    def __init__(
        self,
        command: Sequence[str] = (),
        *,
        env: Mapping[str, str],
        max_sessions: int = 4,
        linger_s: float = 2.0,
    ) -> None:
        #: the real stdio bridge command (may be set after construction, before a connect)
        self.command = list(command)
        self.env = dict(env)
        self.max_sessions = max_sessions
        self.linger_s = linger_s
        self.directory = Path(tempfile.mkdtemp(prefix=DOOR_PREFIX, dir=private_base()))
        # a run killed outright leaves the directory: the next run removes it (leftovers)
        self._claim: Claim | None = None
        with contextlib.suppress(OSError):
            self._claim = claim(self.directory)
        self.path = self.directory / SOCKET_NAME
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(8)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._threads: list[threading.Thread] = []
        self.sessions = 0
        self._acceptor = threading.Thread(
            target=self._accept, name="sharedos-stdio-door", daemon=True
        )
        self._acceptor.start()

    @property
    def sandbox_socket(self) -> str:
        """The socket's path inside the sandbox."""
        return f"{SANDBOX_DOOR_DIR}/{SOCKET_NAME}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], 0.1)
            except (OSError, ValueError):
                return
            if not ready:
                continue
            try:
                conn, _ = self._listener.accept()
            except OSError as exc:
                if self._closed.is_set():
                    return
                # one failed accept (the host out of descriptors for a moment, a connector
                # that gave up at once) must not leave the door shut for the rest of the turn
                logger.warning("stdio door: accepting a connection failed (%s); retrying", exc)
                time.sleep(0.1)
                continue
            with self._lock:
                if self.sessions >= self.max_sessions or self._closed.is_set():
                    conn.close()
                    continue
                self.sessions += 1
            thread = threading.Thread(
                target=self._counted, args=(conn,), name="sharedos-stdio-session", daemon=True
            )
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()

    def _counted(self, conn: socket.socket) -> None:
        # the cap is on bridges at once: a session that ended, however, frees its place
        # (a harness may start its MCP server again: a reconnect, a sub-agent)
        try:
            self._session(conn)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self.sessions -= 1

    def _session(self, conn: socket.socket) -> None:
        # The bridge is started from this thread and waited for here: the supervisor's
        # parent-death signal follows the thread that forked it, which outlives the bridge.
        fds: list[int] = []
        proc: subprocess.Popen[bytes] | None = None
        try:
            conn.settimeout(10)
            _data, fds, _flags, _addr = socket.recv_fds(conn, 64, 3)
            if len(fds) != 3 or not self.command:
                return
            proc = subprocess.Popen(
                supervised(self.command),
                stdin=fds[0],
                stdout=fds[1],
                stderr=fds[2],
                env=self.env,
                close_fds=True,
                start_new_session=True,
            )
            with self._lock:
                self._procs = [p for p in self._procs if p.poll() is None]
                self._procs.append(proc)
        except OSError:
            return
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        conn.settimeout(None)
        while proc.poll() is None and not self._closed.is_set():
            ready, _, _ = select.select([conn], [], [], 0.05)
            if ready:
                try:
                    gone = conn.recv(1) == b""
                except OSError:
                    gone = True
                if gone:  # the connector died: the harness let go of this server
                    break
        if proc.poll() is None and not self._closed.is_set():
            # its stdin closes with the harness's last copy of the pipe: let it finish
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=self.linger_s)
        if proc.poll() is None:
            _end(proc)
        with contextlib.suppress(OSError):
            conn.sendall(f"exit {proc.returncode}\n".encode())
        conn.close()

    def close(self) -> None:
        """Stop accepting, end every bridge still running, remove the socket (idempotent)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                _end(proc)
        for thread in self._threads:
            thread.join(timeout=5)
        self._acceptor.join(timeout=5)
        with contextlib.suppress(OSError):
            self.path.unlink()
        discard_empty(self.directory, self._claim)


def _end(proc: subprocess.Popen[bytes], grace_s: float = 2.0) -> None:
    """SIGTERM the supervisor (it ends its tree), then SIGKILL if it lingers."""
    with contextlib.suppress(OSError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s + 3.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

"""A run's process supervisor, for processes that are not in a bubblewrap sandbox (stdlib only).

Run as ``python -I -S supervise.py --parent PID [--grace S] [--cleanup PATH]... -- ARGV...``.

A confined harness dies with its run through bubblewrap (``--die-with-parent``
and its own PID namespace). An unconfined one (an open run policy, or
``--unconfined``), and a stdio bridge SharedOS runs for a confined harness,
are started under this supervisor instead, so that no process of a run
outlives it, whatever kills the run:

- it is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every descendant
  that loses its parent (a daemonized helper, a double fork, a new session)
  is re-parented to it, not to PID 1, so it can always find and end them;
- it asks the kernel for ``SIGTERM`` when its parent dies
  (``PR_SET_PDEATHSIG``): a ``sharedos run`` killed with ``SIGKILL`` still
  has its whole tree ended, and its ``--cleanup`` files (the turn's token
  file) removed. It checks the parent is still ``PID`` after arming that,
  so a parent that died first is not missed;
- when the program exits, leftover descendants get ``--grace`` seconds to
  exit on their own (a stdio MCP server whose stdin just closed), then
  ``SIGTERM``, then ``SIGKILL``; on ``SIGTERM``/``SIGINT``/``SIGHUP`` the
  same happens at once. It exits with the program's status.
"""

from __future__ import annotations

# ``_signal``, not ``signal``: the latter imports ``enum`` (a few ms at every start)
import _signal as signal
import ctypes
import os
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: exit status when the supervisor could not start the program
SETUP_FAILED = 125


class _Stop(Exception):
    """Raised by the signal handler to leave the wait."""


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (read from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _has_children() -> bool:
    """True while any child lives (as a subreaper, every orphaned descendant is one)."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True  # a live child (pid 0), or one just reaped: look again via /proc


def end_tree(grace_s: float, *, wait_first: bool) -> None:
    """Let descendants exit (``wait_first``), then SIGTERM them, then SIGKILL what is left."""
    if not _has_children():
        return  # no child, so no descendant: nothing to scan /proc for
    me = os.getpid()
    steps = ((None, grace_s),) if wait_first else ()
    for sig, wait in (*steps, (signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if sig is not None:
            for pid in descendants(me):
                try:  # noqa: SIM105 - stdlib-only helper, kept import-light
                    os.kill(pid, sig)
                except OSError:
                    pass
        end = time.monotonic() + wait
        while time.monotonic() < end:
            _reap()
            if not descendants(me):
                return
            time.sleep(0.02)


def _cleanup(paths: list[str]) -> None:
    for path in paths:
        try:  # noqa: SIM105 - stdlib-only helper, kept import-light
            os.unlink(path)
        except OSError:
            pass


def main(argv: list[str]) -> int:
    """Parse the options, start the program, supervise it (see the module docstring)."""
    parent, grace, cleanup, command = -1, 2.0, [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            command = argv[i + 1 :]
            break
        if arg in ("--parent", "--grace", "--cleanup") and i + 1 < len(argv):
            value = argv[i + 1]
            if arg == "--parent":
                parent = int(value)
            elif arg == "--grace":
                grace = float(value)
            else:
                cleanup.append(value)
            i += 2
            continue
        sys.stderr.write(f"sharedos supervise: unknown argument {arg!r}\n")
        return SETUP_FAILED
    if not command:
        sys.stderr.write("sharedos supervise: usage: supervise.py --parent PID -- ARGV\n")
        return SETUP_FAILED
    stop: list[int] = []
    waiting = [False]

    def on_signal(signum: int, _frame: object) -> None:
        stop.append(signum)
        if waiting[0]:
            waiting[0] = False
            raise _Stop  # break out of waitpid (PEP 475 would retry it)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError as exc:
        sys.stderr.write(f"sharedos supervise: {exc}\n")
        return SETUP_FAILED
    if parent > 0 and os.getppid() != parent:
        _cleanup(cleanup)  # the run died before the supervisor was armed
        return SETUP_FAILED
    try:
        pid = os.fork()
    except OSError as exc:
        sys.stderr.write(f"sharedos supervise: cannot fork: {exc}\n")
        return SETUP_FAILED
    if pid == 0:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            sys.stderr.write(f"sharedos supervise: cannot run {command[0]}: {exc.strerror}\n")
        os._exit(127)
    # The program has its own stdin and stdout: let go of ours, so that the program
    # closing its stdout is an end of file for whoever reads it (an MCP server that
    # closed its stdout and stays alive is then seen as gone, not waited on forever).
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        if null > 2:
            os.close(null)
    except OSError:
        pass
    status = None
    waiting[0] = True
    try:
        while status is None and not stop:
            try:
                done, raw = os.waitpid(pid, 0)
            except ChildProcessError:
                break
            if done == pid:
                status = os.waitstatus_to_exitcode(raw)
    except _Stop:
        pass
    waiting[0] = False
    if stop:
        end_tree(grace, wait_first=False)
        _cleanup(cleanup)
        return 128 + stop[0]
    end_tree(grace, wait_first=True)
    _cleanup(cleanup)
    if status is None:
        return 1
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

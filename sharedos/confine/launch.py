"""Bind what was planned, not what a path leads to at start (stdlib only).

A sandbox's view is planned from paths (``view.ViewBuilder``): each bound path is the
real one, with no symbolic link on the way. ``bwrap --ro-bind PATH PATH`` resolves
``PATH`` again when it starts, following links — and between the plan and that start
(for an upstream, every later session of a pooled placement, hours on) another sandbox
with a read-write root above a root of this one could rename the directory away and put
a link to anywhere on the host in its place: the next start of this sandbox showed what
the link led to (the evidence store's directory, a key, another principal's files).

So every bound path reaches ``bwrap`` as a descriptor (``--ro-bind-fd FD PATH``,
``--bind-fd FD PATH``), opened component by component without following a link
(``open_nofollow``): a link anywhere on the way is refused, and bubblewrap binds the very
directory or file that was opened (it checks the mount's device and inode against the
descriptor's).

The harness's launch opens them in SharedOS's own process (``pass_fds``). An upstream's
is spawned by the MCP SDK, which passes no descriptor: it runs
``python -I -S launch.py --binds I,J,… [--read N=FILE]… -- bwrap …``, which opens the
paths at positions ``I, J, …`` of the ``bwrap`` command line, puts each descriptor in
its place, opens ``FILE`` read-only as descriptor ``N`` (the seccomp filter) and ``exec``s
``bwrap``; a link on the way exits 125 and nothing starts.

``--scope-abstract`` (a sandbox that shares the host's network: ``network = "host"``,
an upstream's ``network = true``): before ``exec``, a Landlock domain scoped to
abstract Unix sockets (``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET``, Landlock ABI 6), so
the sandbox cannot connect to an abstract socket a process outside it listens on.
Those sockets belong to the network namespace, not the filesystem: a sandbox sharing
the host's network reached every one of the host's (a session bus, a desktop's
display, any service listening on one) — measured, a listener the test started on the
host answered the harness's and an upstream's connection. The domain handles no file
or network access, so it changes nothing else (a CLI's own nested bubblewrap still
starts). A kernel without ABI 6 is left as is (``scope_abstract_sockets`` says so).
"""

from __future__ import annotations

import errno
import os
import stat
import sys

#: exit status when a bound path is refused (nothing started)
SETUP_FAILED = 125
#: Landlock: the ABI that scopes abstract Unix sockets, and that scope's bit
_ABSTRACT_ABI = 6
_SCOPE_ABSTRACT_UNIX_SOCKET = 1
_PR_SET_NO_NEW_PRIVS = 38
#: landlock_create_ruleset, landlock_restrict_self (the same number on every architecture)
_SYS_CREATE_RULESET = 444
_SYS_RESTRICT_SELF = 446


def landlock_version() -> int:
    """The kernel's Landlock ABI version, 0 where there is none."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return max(0, int(libc.syscall(_SYS_CREATE_RULESET, None, 0, 1)))
    except (OSError, AttributeError):
        return 0


def abstract_sockets_note(network: str) -> str | None:
    """What a sandbox on ``network`` leaves open that its record must say: the host's
    abstract Unix sockets, when it shares the host's network on a kernel without Landlock
    ABI 6 (Linux before 6.12), where ``scope_abstract_sockets`` cannot close them."""
    if network != "host" or landlock_version() >= _ABSTRACT_ABI:
        return None
    return "the host's abstract Unix sockets are reachable (no Landlock ABI 6 on this kernel)"


def scope_abstract_sockets() -> bool:
    """Confine this process (and whatever it ``exec``s) to abstract Unix sockets made
    inside its own Landlock domain; False when the kernel cannot (no Landlock ABI 6)."""
    import ctypes
    import struct

    if landlock_version() < _ABSTRACT_ABI:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    # struct landlock_ruleset_attr: handled_access_fs, handled_access_net, scoped
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", 0, 0, _SCOPE_ABSTRACT_UNIX_SOCKET))
    ruleset = int(libc.syscall(_SYS_CREATE_RULESET, attr, 24, 0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if int(libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return True


def open_nofollow(path: str) -> int:
    """An ``O_PATH`` descriptor of ``path`` (absolute), opened one component at a time
    without following any symbolic link; ``OSError`` (``ELOOP``) when one is on the way.

    Every ``OSError`` names the whole ``path`` (``filename``), and the component that
    failed when it is not the last: the message is all an operator gets of a sandbox that
    did not start (a root removed since the plan), and ``public`` alone says not which.
    """
    if not path.startswith("/"):
        raise OSError(errno.EINVAL, "not an absolute path", path)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    reached = ""
    try:
        for name in path.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                raise OSError(errno.EINVAL, "a '..' component", path)
            reached += "/" + name
            try:
                nxt = _open_step(name, fd)
            except OSError as exc:
                where = "" if reached == path.rstrip("/") else f" (at {reached})"
                raise OSError(exc.errno, f"{exc.strerror}{where}", path) from None
            os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(
                    errno.ELOOP,
                    f"{name!r} is a symbolic link (it was not when the sandbox was planned)",
                    path,
                )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_step(name: str, at: int) -> int:
    """``name`` in the directory ``at``, as ``O_PATH``, a link not followed.

    A directory is opened as one (``O_DIRECTORY``): that is what mounts an automount
    point not mounted yet (an autofs home or ``/net`` share after its idle timeout, any
    kernel automount). ``O_PATH`` alone stops on the trigger: the next component was not
    found (``No such file or directory``) and the sandbox refused to start, where
    ``bwrap --ro-bind PATH PATH`` (a plain lookup) had mounted it.
    """
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags | os.O_DIRECTORY, dir_fd=at)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        return os.open(name, flags, dir_fd=at)  # a file, a FIFO, a device — or a link


def open_binds(argv: list[str], slots: list[int] | tuple[int, ...]) -> list[int]:
    """Replace the path at each position ``slots`` of ``argv`` by an ``open_nofollow``
    descriptor of it (close-on-exec: the caller passes them on); the descriptors."""
    fds: list[int] = []
    try:
        for at in slots:
            fd = open_nofollow(argv[at])
            fds.append(fd)
            argv[at] = str(fd)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def main(args: list[str]) -> int:
    slots: list[int] = []
    reads: list[tuple[int, str]] = []
    scope = False
    try:
        while args and args[0] != "--":
            if args[0] == "--scope-abstract":
                scope, args = True, args[1:]
                continue
            if args[0] not in ("--binds", "--read"):
                raise ValueError(f"unknown option {args[0]}")
            if len(args) < 2:
                raise ValueError(f"{args[0]} needs a value")
            opt, value, args = args[0], args[1], args[2:]
            if opt == "--binds":
                slots += [int(s) for s in value.split(",") if s]
            else:
                number, _, name = value.partition("=")
                reads.append((int(number), name))
        command = args[1:]
        if not command:
            raise ValueError("no command")
        # a position outside the command (or its program, or counted from the end) would
        # be a traceback after some paths were opened, or replace an argument not planned
        # as a path; a descriptor 0-2 would replace the pipes the program talks over
        for at in slots:
            if not 0 < at < len(command):
                raise ValueError(f"--binds {at}: not a position of an argument of the command")
        for num, file in reads:
            if num < 3 or not file:
                raise ValueError(f"--read {num}={file}: a descriptor from 3 and a file")
    except (IndexError, ValueError) as exc:
        sys.stderr.write(f"sharedos launch: {exc}\n")
        return SETUP_FAILED
    try:
        for num, file in reads:
            fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
            if fd != num:
                os.dup2(fd, num)  # inheritable
                os.close(fd)
            else:
                os.set_inheritable(fd, True)
        for fd in open_binds(command, slots):
            os.set_inheritable(fd, True)
        if scope:
            scope_abstract_sockets()
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"sharedos launch: refused to start the sandbox: {where}{exc.strerror}\n")
        return SETUP_FAILED
    try:
        os.execv(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"sharedos launch: cannot run {command[0]}: {exc.strerror}\n")
    return 127


def launch_script() -> str:
    """Path of this file (run with ``python -I -S``)."""
    return os.path.abspath(__file__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The host's Unix sockets a sandbox would be shown: a read-only bind does not stop connect().

A pathname Unix socket is reached by its path, and ``connect`` needs no write access to
the mount it lies in: a read-only bind does not stop it. A sandbox runs as SharedOS's uid
mapped, so the socket's owner bits pass and ``SO_PEERCRED`` gives the server the host's
uid: a service that trusts its own user serves the sandbox as the host user. Measured
with real bubblewrap: a confined harness shown a directory holding a tmux server's socket
ran ``tmux -S SOCKET run-shell '...'``, and the command ran on the host, outside every
namespace; an ssh-agent signs with the operator's keys, an X server takes keystrokes,
rootless docker is the host.

So a path the operator shows a sandbox (``[confinement] readonly``; an upstream's
``roots`` and ``readonly``) may not hold a directory where the host's services make their
sockets (``socket_dirs``: the temporary directory, ``/run``, ``/var/run``, ``/dev/shm``,
``$XDG_RUNTIME_DIR``, ...), whose sockets come and go while a sandbox runs, nor hold a
socket when the sandbox is planned (each harness turn; an upstream's first session).
The sockets listening in this network namespace are found wherever they lie under the
path (``/proc/net/unix``), the others by a walk. What this leaves (docs/confinement.md):
a socket a host service makes later inside a narrower shown directory, and one bound in
another network namespace (a container's), moved out of the directory it was bound in,
bound by a relative name or through ``/proc/self/fd/N/`` (a long path), or reached through
another mount of its directory, in a directory the walk cannot list or does not reach
(``WALK_LIMIT`` entries a path): the kernel's list names none of these where it lies.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Iterable

from sharedos.confine.view import ManagedRootVisible, canonical

#: entries looked at under one shown path before the walk stops (tens of milliseconds)
WALK_LIMIT = 20_000

#: where the host's services conventionally make their sockets (tmux and ssh-agent in the
#: temporary directory, X11 in /tmp/.X11-unix, D-Bus, docker and systemd in /run, a
#: user's session services in $XDG_RUNTIME_DIR)
_SOCKET_DIRS = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm")


def socket_dirs() -> tuple[str, ...]:
    """The existing directories where the host's services make their sockets, canonical."""
    candidates = [*_SOCKET_DIRS, tempfile.gettempdir()]
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and os.path.isabs(runtime_dir):
        candidates.append(runtime_dir)
    found = (canonical(d) for d in candidates if os.path.isdir(d))
    return tuple(dict.fromkeys(found))


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _first_socket(top: str, hidden: tuple[str, ...], limit: int) -> str | None:
    """The first socket found under ``top`` (not following links, not entering ``hidden``
    directories), within ``limit`` entries; None when there is none within it."""
    if stat.S_ISSOCK(os.lstat(top).st_mode):
        return top
    todo = [top] if os.path.isdir(top) and not os.path.islink(top) else []
    seen = 0
    while todo and seen < limit:
        directory = todo.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # unreadable here: the sandbox, the same uid, cannot list it either
        for entry in entries:
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                if not any(_is_under(entry.path, h) for h in hidden):
                    todo.append(entry.path)
            elif not entry.is_file(follow_symlinks=False) and not entry.is_symlink():
                try:  # a socket, a FIFO or a device: only the rare ones are looked at
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISSOCK(mode):
                    return entry.path
    return None


#: the start of a record of ``/proc/net/unix``: ``%pK: %08X %08X %08X %04X %02X %5lu``
_RECORD = re.compile(
    r"[0-9a-fA-F]+: [0-9A-F]{8} [0-9A-F]{8} [0-9A-F]{8} [0-9A-F]{4} [0-9A-F]{2} +\d+"
)


def _bound_paths(text: str) -> list[str]:
    r"""The paths of ``/proc/net/unix`` (``text``), each whole.

    The kernel writes a path's bytes as they are, a line break too, and ends a record
    with ``\n`` alone: a line that does not start a record goes on the path before it
    (``str.splitlines`` also broke at a form feed, ``\x1c``-``\x1e`` or U+2028, and a
    socket in ``proj\nname/`` was listed as ``proj`` and a line of no record)."""
    records: list[str] = []
    for line in text.removesuffix("\n").split("\n")[1:]:
        if _RECORD.match(line) or not records:
            records.append(line)
        else:
            records[-1] += "\n" + line
    fields = (record.split(None, 7) for record in records)
    return [f[7] for f in fields if len(f) == 8]


def listening_sockets() -> list[str]:
    """The sockets processes of this network namespace are bound to, by the kernel's list
    (``/proc/net/unix``), canonical, each still a socket at its path; [] without procfs.

    The walk stops after ``WALK_LIMIT`` entries and cannot list a directory it may not
    read (one the sandbox may still traverse to a known name): a shown home whose
    ``.cache`` came first hid ``~/.ssh``'s ControlMaster socket. The kernel's list has
    every bound path of the host's services whatever the tree holds. It names the path a
    socket was bound to, not where its file is now: ``connect`` finds a listener by its
    file, under any name it was renamed or linked to, and OpenSSH binds its ControlMaster
    socket to ``PATH.RANDOM``, links ``PATH`` to it and unlinks the first. So where the
    bound path is no longer a socket, every socket in its directory counts.
    """
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="surrogateescape") as listing:
            text = listing.read()
    except OSError:
        return []  # no procfs: the walk is all there is
    # a path once: a listener's every accepted connection is listed with its path; a
    # datagram socket (journald's, systemd's notify) is bound, not listening, and
    # reached by a sendto() all the same
    bound = dict.fromkeys(_bound_paths(text))
    found: list[str] = []
    moved: dict[str, None] = {}  # directories of bound paths whose file went elsewhere
    for given in bound:
        if not given.startswith("/"):
            continue  # abstract (``@name``), or bound by a relative name
        try:
            path = canonical(given)
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append(path)
                continue
        except (OSError, ValueError):
            pass
        moved[os.path.dirname(given)] = None
    for directory in moved:
        try:
            entries = list(os.scandir(canonical(directory)))
        except (OSError, ValueError):
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                continue
            try:
                if not entry.is_symlink() and stat.S_ISSOCK(
                    entry.stat(follow_symlinks=False).st_mode
                ):
                    found.append(entry.path)
            except OSError:
                continue
    return list(dict.fromkeys(found))


def _listening(top: str, hidden: tuple[str, ...]) -> str | None:
    """A socket listened on under ``top`` (not under ``hidden``), or None."""
    for path in listening_sockets():
        if _is_under(path, top) and not any(_is_under(path, h) for h in hidden):
            return path
    return None


def socket_problem(
    given: str | os.PathLike[str],
    *,
    hidden: Iterable[str | os.PathLike[str]] = (),
    what: str | None = None,
) -> str | None:
    """Why ``given`` (a path shown to a sandbox) may not be shown for the host's sockets it
    holds (see the module docstring), or None (``hidden``: directories the view covers with
    a tmpfs of its own when the path holds them, not looked in then; ``what``: how the message names the path)."""
    given = os.fspath(given)
    what = given if what is None else what
    if not os.path.exists(given):
        return None  # the view reports a missing path itself
    path = canonical(given)
    for held in socket_dirs():
        if _is_under(held, path):
            return (
                f"{what} holds {held}, where the host's services make their "
                "Unix sockets (tmux, ssh-agent, X11, D-Bus, docker): a read-only bind "
                "does not stop a connect(), and the sandbox runs as this user, so it "
                "would be served as the host user by each; show a directory of its "
                "own instead (a sandbox has a private /tmp of its own)"
            )
    # only a private directory the path holds (or is) gets a tmpfs of the view's own: one
    # the path lies inside does not, and the path is shown as it is (a readonly path
    # inside the workdir), so it is looked in whole
    private = tuple(h for h in (canonical(h) for h in hidden) if _is_under(h, path))
    socket = _listening(path, private) or _first_socket(path, private, WALK_LIMIT)
    if socket is not None:
        return (
            f"{what} holds the Unix socket {socket}: a read-only bind does not "
            "stop a connect(), and the sandbox runs as this user, so the service behind "
            "it would serve the sandbox as the host user; move the socket out of that "
            "path, or show a narrower one"
        )
    return None


def refuse_host_sockets(
    paths: Iterable[str | os.PathLike[str]],
    *,
    hidden: Iterable[str | os.PathLike[str]] = (),
    what: str = "a path shown to the sandbox",
) -> None:
    """Raise ``ManagedRootVisible`` when one of ``paths`` (shown to a sandbox) holds a
    directory where the host's services make their sockets, or holds a socket now
    (``socket_problem``)."""
    hidden = list(hidden)
    for given in dict.fromkeys(os.fspath(p) for p in paths):
        problem = socket_problem(given, hidden=hidden, what=f"{what} {given}")
        if problem is not None:
            raise ManagedRootVisible(problem)

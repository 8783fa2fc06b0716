"""The ``bwrap`` command line for a ``SandboxView``.

Every sandbox SharedOS starts gets, besides its view:

- ``--unshare-all``: new mount, PID, network, IPC, UTS and cgroup namespaces
  (``--share-net`` only for a view whose network mode is ``host``);
- ``--unshare-user --uid 65534 --gid 65534``: its own user namespace, where
  it runs as ``nobody`` mapped onto the caller's uid (files it writes in its
  turn directory belong to the caller). Not uid 0: a CLI's own sandbox
  (Codex's bubblewrap) nests inside only when it can map its uid without
  mapping root (measured: as uid 0 without capabilities the nested map fails
  with EPERM);
- ``--cap-drop ALL``: bubblewrap run as root keeps every capability unless
  told otherwise (measured: ``CapEff 000001fffeffffff``); with it the sandbox
  has no capability at all, under ``no_new_privs``, so it cannot unmount the
  masks, mount, ``setns`` or read files its owner bits refuse;
- ``--die-with-parent``: the sandbox is killed when the process that
  started it dies, however it dies (with the PID namespace, every process
  in it goes too);
- ``--new-session``: no controlling terminal to inject input into;
- a fresh ``/proc`` (its own processes only) and a minimal ``/dev``;
- ``--seccomp FD`` (``seccomp.keyring_filter``, when the caller passes ``seccomp_fd``:
  every sandbox SharedOS starts does): no access to the kernel's keyrings, which no
  namespace confines (the session keyring of the process that started the sandbox,
  and every key it reaches, was readable inside);
- every bound path by descriptor (``bind_slots``, ``launch.py``): what was planned is
  what is bound, never what a link put in its place since then leads to.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from sharedos.confine.view import SandboxView

#: the uid (and gid) processes have inside a sandbox: ``nobody``
SANDBOX_UID = 65534


def _depth(path: str) -> tuple[int, str]:
    return (path.rstrip("/").count("/"), path)


def isolation_options(*, share_net: bool = False) -> list[str]:
    """The namespaces, identity, capabilities, ``/proc`` and ``/dev`` of every sandbox.

    ``detect.find_bubblewrap`` starts its trial sandbox with these very options: a
    machine that refuses one of them (user namespaces disabled, a container that
    forbids mounting ``proc``) is found before a run starts, not at its first launch.
    """
    return [
        "--unshare-all",
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        *(["--share-net"] if share_net else []),
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]


def bwrap_argv(
    bwrap: str,
    view: SandboxView,
    command: Sequence[str],
    *,
    chdir: str | None = None,
    data: Sequence[tuple[int, str]] = (),
    options: Sequence[str] = (),
    seccomp_fd: int | None = None,
    bind_slots: list[int] | None = None,
) -> list[str]:
    """``bwrap ... -- command`` for ``view``.

    ``data`` is (fd, path) pairs: the content of ``fd`` appears read-only at
    ``path`` (``--ro-bind-data``) and is never written to the host's disk.
    The view's ``helpers`` (SharedOS's own, under ``/run/sharedos``) are bound
    read-only at their sandbox paths. ``options`` go last, before ``--``.
    ``seccomp_fd``: a descriptor the process inherits, holding the seccomp filter
    (``seccomp.keyring_filter``); bubblewrap reads it and installs it last.
    ``bind_slots``: when given, the view's paths are bound by descriptor
    (``--ro-bind-fd``/``--bind-fd``): the path stands in the descriptor's place and its
    position is appended to ``bind_slots``, for ``launch.open_binds`` to open it without
    following a link (a path replaced by one since the plan is refused, not followed).
    Every sandbox SharedOS starts is bound so.
    """
    argv = [bwrap, *isolation_options(share_net=view.network == "host")]
    # shallowest first, a tmpfs before a bind of the same depth: a private tmpfs inside a
    # bound directory (``/tmp/sharedos-runs-0`` in a shown ``/tmp``) must cover that bind,
    # not be covered by it, and what is bound inside the tmpfs must come after it
    mounts = [(p, 0, "--tmpfs") for p in view.tmpfs]
    mounts += [(p, 1, "--ro-bind") for p in view.readonly]
    mounts += [(p, 1, "--bind") for p in view.writable]
    for path, _order, flag in sorted(mounts, key=lambda m: (*_depth(m[0]), m[1])):
        if flag == "--tmpfs":
            argv += [flag, path]
        elif bind_slots is not None:
            argv += [f"{flag}-fd", path, path]
            bind_slots.append(len(argv) - 2)
        else:
            argv += [flag, path, path]
    for link, target in view.symlinks:
        argv += ["--symlink", target, link]
    for src, dest in view.helpers:
        argv += ["--ro-bind", src, dest]
    for path in sorted(view.masked, key=_depth):
        if os.path.isdir(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    for fd, path in data:
        argv += ["--ro-bind-data", str(fd), path]
    if chdir is not None:
        argv += ["--chdir", chdir]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += [*options, "--", *command]
    return argv

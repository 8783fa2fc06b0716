"""A stdio upstream in a sandbox of its own: only its declared roots, no network by default.

``plan_upstream(...)`` builds the view of one stdio upstream: the system
read-only, what its program needs to run (``programs.program_paths``, plus
the operator's ``readonly``; a ``.js``/``.mjs``/``.cjs``/``.py`` argument is
the script its interpreter runs and is shown with its installation), and its
declared roots, each read-only or read-write — nothing else. A symbolic link inside a root that points outside
the roots therefore *dangles* inside the sandbox: the upstream cannot follow
it to a file the kernel never decided on. Its network is ``none`` unless the
operator opts in (``network = true``). SharedOS's own state (the evidence
store, the host file, keys, the policy sources) must not be visible: a view
that would show one is refused (``ManagedRootVisible``).

``UpstreamSandbox.wrap(command, args)`` is the ``bwrap`` command line that
runs it; the SDK's stdio client launches that instead of the program, and the
pipes pass through unchanged (no extra hop per message).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sharedos.confine.bwrap import bwrap_argv
from sharedos.confine.detect import Mechanism
from sharedos.confine.door import private_base
from sharedos.confine.launch import abstract_sockets_note, launch_script
from sharedos.confine.programs import import_dirs, program_paths, sharedos_installation
from sharedos.confine.seccomp import filter_file
from sharedos.confine.sockets import refuse_host_sockets
from sharedos.confine.view import ManagedRootVisible, SandboxView, ViewBuilder, canonical

#: the descriptor bwrap reads the seccomp filter from (the shell opens it: fds 0-2 are the
#: SDK's pipes, and it passes no other)
_SECCOMP_FD = 3
#: an argument ending so is the script its interpreter runs, shown read-only with its install
SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".py")


def script_args(args: Iterable[str], cwd: str | None = None) -> list[str]:
    """The scripts among an upstream's ``args`` (``SCRIPT_SUFFIXES``) that are files, each
    as the upstream's interpreter finds it: a relative one from the upstream's ``cwd``
    (None: the host's working directory, where the SDK starts it).

    Looked for from the host's own working directory, ``args = ["server.py"]`` with
    ``cwd = "/srv/mcp"`` named no file there, and nothing of the script was kept: a files
    root over ``/srv/mcp`` was served, and a ``files.write`` of ``/server.py`` was the
    server the host ran next, unconfined."""
    base = cwd or os.getcwd()
    found = [os.path.join(base, a) for a in args if a.endswith(SCRIPT_SUFFIXES)]
    return [os.path.abspath(a) for a in found if os.path.isfile(a)]


@dataclass(frozen=True)
class UpstreamSandbox:
    """The planned sandbox of one stdio upstream."""

    mechanism: Mechanism
    view: SandboxView
    cwd: str
    #: the declared roots, (path, ``ro``|``rw``)
    roots: tuple[tuple[str, str], ...] = ()

    def wrap(self, command: str, args: Sequence[str]) -> tuple[str, list[str]]:
        """(program, argv[1:]) that run ``command args`` inside the sandbox."""
        slots: list[int] = []
        argv = bwrap_argv(
            self.mechanism.path,
            self.view,
            [command, *args],
            chdir=self.cwd,
            # the upstream's HOME and TMPDIR: the sandbox's own /tmp (the host's HOME is
            # absent). Given to bwrap_argv, never spliced in at the first "--" found: a
            # path of the view (a link's target) can be "--" too, and bwrap then took the
            # next word for the program
            options=["--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"],
            seccomp_fd=_SECCOMP_FD,
            bind_slots=slots,
        )
        # The SDK's spawn passes no descriptor: launch.py opens, at each start, every bound
        # path without following a link (a root another sandbox replaced by a link since
        # this plan is refused, not followed) and the seccomp filter (no keyrings,
        # seccomp.py) from SharedOS's private directory (no sandbox shows it), then execs
        # bwrap with them
        return sys.executable, [
            "-I",
            "-S",
            launch_script(),
            "--binds",
            ",".join(str(at) for at in slots),
            "--read",
            f"{_SECCOMP_FD}={filter_file(private_base())}",
            # the host's network is shared: its abstract Unix sockets are not the sandbox's
            *(["--scope-abstract"] if self.view.network == "host" else []),
            "--",
            *argv,
        ]

    def describe(self) -> str:
        """``confined by bubblewrap 0.8.0, view sha256:…, network none, roots …`` (identity)."""
        roots = ", ".join(f"{p} {m}" for p, m in self.roots) or "none"
        note = abstract_sockets_note(self.view.network)
        return (
            f"confined by {self.mechanism.name} {self.mechanism.version}, view "
            f"{self.view.digest()}, network {self.view.network}, roots {roots}"
            + (f"; {note}" if note else "")
        )


def plan_upstream(
    mechanism: Mechanism,
    *,
    command: str,
    args: Sequence[str] = (),
    roots: Iterable[tuple[str, str]],
    readonly: Iterable[str] = (),
    network: bool = False,
    cwd: str | None = None,
    managed: Iterable[str | os.PathLike[str]] = (),
    path_env: str | None = None,
    never_writable: Iterable[str | os.PathLike[str]] = (),
    never_held: Iterable[str | os.PathLike[str]] = (),
) -> UpstreamSandbox:
    """The sandbox of a stdio upstream (see the module docstring).

    ``roots`` are (path, ``ro``|``rw``) pairs, already validated by the host
    file's checker (absolute, existing, canonical, no symbolic link).
    ``cwd`` must lie inside a root or the program's installation; by default
    the host's working directory when the view has it, else the first root.
    ``never_writable``: code the host runs besides SharedOS's own installation
    (``sharedos_installation``, always kept), which no root may make writable.
    ``never_held``: directories code is imported from besides the host's own
    (``import_dirs``, always kept; an unconfined upstream's ``PYTHONPATH``), which no
    read-write root may hold.
    """
    roots = list(roots)
    for path, _mode in roots:
        # the host file's checker saw no link on the way; the plan is made later (at the
        # upstream's first use), and a root replaced by a link since (another sandbox with
        # a read-write root above it) would be followed to wherever it leads
        if canonical(path) != os.path.abspath(path):
            raise ManagedRootVisible(
                f"root {path} is now reached through a symbolic link (to {canonical(path)}): "
                "a root is shown at its own path only; name its real path"
            )
    readonly = list(readonly)
    # a socket of the host's in a root would serve the upstream as the host user
    refuse_host_sockets(
        [*readonly, *(path for path, _mode in roots)], what="an upstream's root or readonly path"
    )
    builder = ViewBuilder().system(network=network)
    for path in program_paths(command, path_env):
        builder.readonly(path)
    # a script the interpreter runs (``node server.js``, ``python tap.py``, from its cwd)
    # is part of the program; other arguments (paths it serves) must be declared as roots
    for script in script_args(args, cwd):
        for path in program_paths(script, path_env):
            builder.readonly(path)
    for path in readonly:
        builder.readonly(path)
    for path, mode in roots:
        if mode == "rw":
            builder.writable(path)
        else:
            builder.readonly(path)
    view = builder.build(
        managed=managed,
        network="host" if network else "none",
        never_writable=(*sharedos_installation(), *never_writable),
        # what the host's Python imports at its next start: no read-write root may hold it
        never_held=(*import_dirs(), *never_held),
    )
    # the host's working directory when the sandbox has it (a relative script argument
    # then still resolves), else the first root
    here = os.getcwd()
    where = cwd or (here if view.shows(here) else roots[0][0] if roots else "/")
    return UpstreamSandbox(
        mechanism=mechanism, view=view, cwd=where, roots=tuple((p, m) for p, m in roots)
    )

"""One confined harness launch: view, ``bwrap`` command line, loopback handoff, stdio door.

The harness runtime uses it in four steps::

    sandbox = HarnessSandbox.plan(mechanism, readonly=..., writable=[turn_dir],
                                  managed=..., network="loopback", ports=[bridge, model])
    argv = sandbox.argv(launch.argv, cwd=launch.cwd, private={path: content})
    proc = await run_process(argv, pass_fds=sandbox.pass_fds, on_spawn=sandbox.spawned, ...)
    # meanwhile: await sandbox.serve({bridge_port: bridge.serve_socket, ...})
    await sandbox.close()

``plan`` raises ``ManagedRootVisible`` when the view would show a managed root.
``private`` files (those holding the turn's token) are given to the sandbox
as data (``--ro-bind-data``): inside, they are read-only files on the
sandbox's own memory; on the host's disk the file is left empty, so a run
killed with ``SIGKILL`` leaves no token behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from sharedos.confine.bwrap import bwrap_argv
from sharedos.confine.detect import Mechanism
from sharedos.confine.door import SANDBOX_DOOR_DIR, StdioDoor, run_base
from sharedos.confine.launch import abstract_sockets_note, launch_script, open_binds
from sharedos.confine.ports import NetnsHandoff, PortHandoff, ServeFn, can_enter_namespaces
from sharedos.confine.programs import sharedos_installation
from sharedos.confine.seccomp import filter_fd
from sharedos.confine.sockets import refuse_host_sockets
from sharedos.confine.view import (
    ManagedRootVisible,
    NetworkMode,
    SandboxView,
    ViewBuilder,
    canonical,
)
from sharedos.identity import Confinement, ConfinementState

#: where SharedOS's own helpers appear inside a sandbox
SANDBOX_HELPER_DIR = "/run/sharedos"
INSIDE_SCRIPT = f"{SANDBOX_HELPER_DIR}/inside.py"


def sandbox_python() -> tuple[str, str]:
    """(interpreter, installation prefix) of the Python that runs the in-sandbox helper."""
    exe = canonical(getattr(sys, "_base_executable", None) or sys.executable)
    return exe, canonical(sys.base_prefix)


def inside_script() -> str:
    """Path of ``inside.py`` on the host."""
    return str(Path(__file__).with_name("inside.py"))


@dataclass
class HarnessSandbox:
    """A planned sandbox for one harness process (see the module docstring)."""

    mechanism: Mechanism
    view: SandboxView
    python: str
    door: StdioDoor | None = None
    handoff: PortHandoff | None = None
    _memfds: list[int] = field(default_factory=list)

    @classmethod
    def plan(
        cls,
        mechanism: Mechanism,
        *,
        readonly: Iterable[str | os.PathLike[str]],
        writable: Iterable[str | os.PathLike[str]],
        managed: Iterable[str | os.PathLike[str]],
        network: NetworkMode = "loopback",
        ports: Sequence[int] = (),
        placeholders: Mapping[str, str] | None = None,
        door: StdioDoor | None = None,
        private: Iterable[str | os.PathLike[str]] = (),
        declared: Iterable[str | os.PathLike[str]] = (),
    ) -> HarnessSandbox:
        """The view for a harness: the system, ``readonly``, ``writable``, SharedOS's Python.

        ``private``: directories that hold other turns' directories beside this one's (the
        ``workdir`` its turn directory was made in): a path that shows one shows only this
        turn's own there, as for the runs' base. ``declared``: the ``readonly`` paths the
        operator chose (``[confinement] readonly``), which may hold no socket of the host's
        (``sockets.refuse_host_sockets``)."""
        private = [run_base(), *private]
        refuse_host_sockets(declared, hidden=private, what="a [confinement] readonly path")
        python, prefix = sandbox_python()
        builder = ViewBuilder().system(network=network == "host")
        builder.readonly(prefix)
        for path in readonly:
            builder.readonly(path)
        for path in writable:
            builder.writable(path)
        for path, label in (placeholders or {}).items():
            builder.placeholder(path, label)
        helpers = [(inside_script(), INSIDE_SCRIPT)]
        if door is not None:
            helpers.append((str(door.directory), SANDBOX_DOOR_DIR))
        view = builder.build(
            managed=managed,
            network=network,
            ports=ports,
            helpers=helpers,
            never_writable=sharedos_installation(),
            # every run's turn directory lies there: a path that shows it (a readonly
            # path holding the temporary directory) shows only this turn's own
            private=private,
        )
        return cls(mechanism=mechanism, view=view, python=python, door=door)

    def with_helper(self, host_path: str, sandbox_path: str) -> None:
        """Also bind ``host_path`` read-only at ``sandbox_path`` (before ``argv``)."""
        self.view = replace(self.view, helpers=(*self.view.helpers, (host_path, sandbox_path)))

    def with_ports(self, ports: Sequence[int]) -> None:
        """Set the allowed loopback ports once they are known (they are not in the digest)."""
        self.view = replace(self.view, ports=tuple(sorted(set(ports))))

    def connector(self) -> list[str]:
        """The stdio MCP server command the harness launches inside (needs a ``door``)."""
        assert self.door is not None
        return [self.python, "-I", "-S", INSIDE_SCRIPT, "connect", self.door.sandbox_socket]

    def argv(
        self,
        command: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        private: Mapping[str, bytes] | None = None,
    ) -> list[str]:
        """``bwrap … -- [inside.py init …] command``; call once per launch."""
        data: list[tuple[int, str]] = []
        for path, content in (private or {}).items():
            fd = os.memfd_create("sharedos-private", 0)
            os.write(fd, content)
            os.lseek(fd, 0, os.SEEK_SET)
            self._memfds.append(fd)
            data.append((fd, path))
        inner = list(command)
        options: list[str] = []
        if self.view.network == "loopback" and self.view.ports and can_enter_namespaces():
            # the host binds the listeners in the sandbox itself: no program runs before
            # the harness (ports.NetnsHandoff)
            netns = NetnsHandoff(self.view.ports)
            self.handoff = netns
            options = netns.bwrap_options()
        elif self.view.network == "loopback" and self.view.ports:
            self.handoff = PortHandoff(self.view.ports)
            ports = ",".join(str(p) for p in self.view.ports)
            inner = [
                self.python,
                "-I",
                "-S",
                INSIDE_SCRIPT,
                "init",
                "--fd",
                str(self.handoff.child_fd),
                "--ports",
                ports,
                "--",
                *inner,
            ]
        # the kernel's keyrings are no sandbox's (seccomp.py): passed like the data files
        seccomp = filter_fd()
        self._memfds.append(seccomp)
        slots: list[int] = []
        argv = bwrap_argv(
            self.mechanism.path,
            self.view,
            inner,
            chdir=str(cwd),
            data=data,
            options=options,
            seccomp_fd=seccomp,
            bind_slots=slots,
        )
        # each bound path as the descriptor of what is there now, reached without a link
        # (launch.py): one replaced by a link since the plan is refused, not followed
        try:
            self._memfds += open_binds(argv, slots)
        except OSError as exc:
            raise ManagedRootVisible(
                f"sandbox path {exc.filename} cannot be bound: {exc.strerror}"
            ) from None
        if self.view.network == "host":
            # the host's network is shared, its abstract Unix sockets with it (a session
            # bus, a display, any service on one): launch.py scopes them out (Landlock)
            # and execs bwrap, which inherits the descriptors above
            argv = [sys.executable, "-I", "-S", launch_script(), "--scope-abstract", "--", *argv]
        return argv

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """Descriptors the sandbox process must inherit."""
        fds = list(self._memfds)
        if self.handoff is not None:
            fds.extend(self.handoff.child_fds)
        return tuple(fds)

    def spawned(self) -> None:
        """Close the host's copies of what the sandbox inherited (call right after spawning)."""
        if self.handoff is not None:
            self.handoff.spawned()
        for fd in self._memfds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._memfds.clear()

    async def serve(self, servers: Mapping[int, ServeFn], timeout_s: float = 30.0) -> None:
        """Receive the sandbox's loopback listeners and serve them (nothing to do without ports)."""
        if self.handoff is not None:
            await self.handoff.serve(servers, timeout_s)

    async def close(self) -> None:
        """Close the handoff and the door (idempotent)."""
        if self.handoff is not None:
            await self.handoff.close()
        if self.door is not None:
            # joins its threads (a bridge may take a moment to end): off the event loop
            await asyncio.to_thread(self.door.close)
        self.spawned()

    def record(self, upstreams: Mapping[str, str] | None = None) -> Confinement:
        """The ``Confinement`` stamped on SystemIdentity for this sandbox."""
        return Confinement(
            state=ConfinementState.CONFINED,
            mechanism=self.mechanism.name,
            version=self.mechanism.version,
            view_digest=self.view.digest(),
            network=self.view.network,
            note=abstract_sockets_note(self.view.network),
            upstreams=dict(upstreams) if upstreams else None,
        )


def private_files(
    paths: Iterable[Path], secrets: Sequence[str], *, keep: bool = False
) -> dict[str, bytes]:
    """The launch files holding one of ``secrets``, with their content.

    Unless ``keep``, each is left empty on disk: its content then reaches the
    sandbox only as data (``HarnessSandbox.argv(private=...)``).
    """
    out: dict[str, bytes] = {}
    for path in paths:
        try:
            content = path.read_bytes()
        except OSError:
            continue
        text = content.decode("utf-8", "replace")
        if any(s and s in text for s in secrets):
            out[str(path)] = content
            if not keep:
                path.write_bytes(b"")  # the mount point stays; the token never stays on disk
    return out

"""One turn of a probe harness in the real sandbox, for the escape tests: a shell script
stands in for the harness CLI and prints what it could reach; the real runtime confines it
under a strict run policy, on a conformance environment's host."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from pathlib import Path
from typing import Any

from sharedos.conformance.environment import ConformanceEnv
from sharedos.harness.hostconfig import HostConfig, parse_host_config
from sharedos.toolpolicy import RunMode, ToolPolicy


def probe_policy(mode: RunMode = RunMode.STRICT) -> ToolPolicy:
    """The probe's run policy: the files tools managed, the bounded shell its own."""
    return ToolPolicy(
        name="probe", mode=mode, managed=("files.*",), harness_local=("shell.bounded",)
    )


def probe_host(tmp_path: Path, readonly: str | Path, script: str) -> HostConfig:
    """A host file showing ``readonly`` to its harnesses (``[confinement] readonly``), with
    one harness ``probe`` that answers ``--version`` as a CLI does and otherwise runs the
    ``/bin/sh`` ``script`` (written inside a TOML string: its quotes escaped)."""
    return parse_host_config(
        f'[confinement]\nreadonly = ["{readonly}"]\n\n'
        f'[harness.probe]\nkind = "claude-code"\ncommand = ["/bin/sh", "-c", '
        f'"[ \\"$1\\" = --version ] && echo \'probe 1.0.0\' && exit 0; {script}", "probe"]\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )


def run_probe_turn(
    runtime: Any,
    env: ConformanceEnv,
    name: str,
    *,
    workdir: Path,
    mode: RunMode = RunMode.STRICT,
    transport: str = "http",
    timeout_s: float = 60,
    managed_roots: list[str] | None = None,
    **kwargs: Any,
) -> Any:
    """``runtime.run_turn`` for alice on ``env``'s host, turn ``probe-<name>-<pid>``, with
    an empty plan under ``probe_policy(mode)``; its result. ``managed_roots`` defaults to
    the environment's; ``kwargs`` go to ``run_turn``."""
    return asyncio.run(
        runtime.run_turn(
            env.host,
            env.context("alice", f"probe-{name}-{os.getpid()}"),
            probe_policy(mode),
            plan=[],
            workdir=workdir,
            transport=transport,
            timeout_s=timeout_s,
            managed_roots=env.managed_roots() if managed_roots is None else managed_roots,
            **kwargs,
        )
    )


class CountingListener:
    """A listening ``sock`` (bound by the caller) whose connections a thread accepts and
    counts (``accepted``), closing each: a host service a sandbox must not reach."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        """Stop accepting and close the socket."""
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

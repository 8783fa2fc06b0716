"""OS confinement: the kernel is the only door (issue 22, docs/confinement.md).

Under a strict run policy the harness CLI and every stdio upstream run in a
bubblewrap sandbox: an allow-list view of the filesystem (the system
read-only, the harness's own turn directory read-write, no managed resource
root), no capability, their own PID namespace (nothing outlives the run),
and a network that reaches only the bridge and the model endpoint (or, for an
upstream, nothing unless the operator allows it).

Public API (stable; the harness runtime and the upstream connection use it):

- ``find_bubblewrap() -> Mechanism`` / ``ConfinementUnavailable``;
  ``landlock_abi()`` (informational);
- ``ViewBuilder`` → ``SandboxView`` (``digest()``, ``describe()``) /
  ``ManagedRootVisible``; ``canonical(path)``;
- ``bwrap_argv(bwrap, view, command, chdir=, data=)``;
- ``HarnessSandbox.plan(...)`` / ``.argv()`` / ``.pass_fds`` /
  ``.spawned()`` / ``.serve()`` / ``.close()`` / ``.record()`` — one confined
  harness launch; ``private_files(paths, secrets)``;
- ``PortHandoff``, ``relay_to_loopback`` (the sandbox's loopback);
  ``StdioDoor`` (a confined harness's stdio bridge, run outside);
- ``supervised(command, cleanup=)`` — an unconfined process that still dies
  with the run (``supervise.py``: child subreaper + parent-death signal);
- ``upstream_sandbox_argv(...)`` — a stdio upstream in its own sandbox.

This package is in the bottom layer: it imports only ``sharedos.errors`` and
``sharedos.identity``.
"""

from __future__ import annotations

from sharedos.confine.bwrap import bwrap_argv
from sharedos.confine.detect import (
    ConfinementUnavailable,
    Mechanism,
    find_bubblewrap,
    landlock_abi,
)
from sharedos.confine.door import StdioDoor, supervised
from sharedos.confine.ports import PortHandoff, SandboxSetupFailed, relay_to_loopback
from sharedos.confine.sandbox import HarnessSandbox, private_files, sandbox_python
from sharedos.confine.view import (
    ManagedRootVisible,
    NetworkMode,
    SandboxView,
    ViewBuilder,
    canonical,
)

__all__ = [
    "ConfinementUnavailable",
    "HarnessSandbox",
    "ManagedRootVisible",
    "Mechanism",
    "NetworkMode",
    "PortHandoff",
    "SandboxSetupFailed",
    "SandboxView",
    "StdioDoor",
    "ViewBuilder",
    "bwrap_argv",
    "canonical",
    "find_bubblewrap",
    "landlock_abi",
    "private_files",
    "relay_to_loopback",
    "sandbox_python",
    "supervised",
]

"""How the broker runs each stdio upstream: in its own sandbox, or plainly not.

``UpstreamConfinementPolicy`` is what the host asks for (``sharedos run``
derives it from the run policy): ``required`` under a strict run policy (not
``--unconfined``), with the managed paths no upstream may see (SharedOS's own
state: the evidence store, the host file and pins, keys, policy sources).
``decide(config, policy)`` says, per upstream:

- a stdio upstream with declared ``roots`` (``[]`` declares that it needs no
  files) on a machine with bubblewrap runs
  in its own sandbox (``sharedos.confine.upstream``): only its roots, the
  system and its own program; no network unless ``network = true``;
- a stdio upstream that cannot be confined (no roots declared, no
  bubblewrap, or a view that would show a managed path) is **left out** of a
  strict turn, with that reason, so the run fails closed; otherwise it runs
  unconfined under SharedOS's supervisor (it still dies with the run), and
  the turn's identity says so;
- an HTTP upstream is not a process SharedOS starts: it is recorded as such.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from sharedos.confine import ConfinementUnavailable, ManagedRootVisible, find_bubblewrap, supervised
from sharedos.confine.door import private_base, run_base
from sharedos.confine.programs import code_paths, upstream_environ, upstream_import_dirs
from sharedos.confine.upstream import UpstreamSandbox, plan_upstream, script_args
from sharedos.upstream.config import UpstreamConfig

#: (command, args) → (command, args) actually started
Wrap = Callable[[str, list[str]], tuple[str, list[str]]]


@dataclass(frozen=True)
class UpstreamConfinementPolicy:
    """What the host requires of stdio upstreams (see the module docstring)."""

    #: a strict run policy (not --unconfined): an upstream that cannot be confined is left out
    required: bool = False
    #: paths no upstream sandbox may show
    managed: tuple[str, ...] = ()
    #: code the host runs itself besides SharedOS's own installation (the harness CLI the
    #: host file names: ``CLI --version`` runs unconfined), which no sandbox may write; the
    #: broker adds every stdio upstream's program (``upstream_programs``)
    never_writable: tuple[str, ...] = ()
    #: directories an unconfined upstream imports code from by name (``cli.run.host_imports``:
    #: its ``PYTHONPATH``, the cwd of ``python -m``), which no read-write root may hold; a
    #: root inside one is kept, as one inside the host's own import directories is
    never_held: tuple[str, ...] = ()


@dataclass(frozen=True)
class UpstreamPlacement:
    """One upstream's decision: how to start it, how the identity records it, or why not."""

    wrap: Wrap | None
    record: str
    refusal: str | None = None
    sandbox: UpstreamSandbox | None = None


#: how long an unconfined upstream's leftover descendants get after each step of the
#: supervisor's shutdown (wait, SIGTERM, then SIGKILL). The SDK SIGKILLs the supervisor's
#: process group 2 s after its SIGTERM (and 2 s after closing stdin): with the supervisor's
#: own 2 s grace, it was killed before its SIGKILL step, and a descendant in a session of
#: its own that ignores SIGTERM outlived the session and the run.
UPSTREAM_GRACE_S = 0.5


def upstream_programs(
    upstreams: Iterable[UpstreamConfig], environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The programs of every stdio upstream, as ``code_paths`` finds them: its command
    and a script its interpreter runs (``SCRIPT_SUFFIXES``), with their installations
    and, for a bare name, the ``PATH`` directories it is looked up in.

    Code SharedOS starts, which no sandbox may write: an upstream whose read-write root
    held another's program (a home-directory file server beside a server installed
    under that home) rewrote it, and the other ran that code at its next start, in its
    sandbox, with its roots, its network and a principal's credentials
    (``tests/confine/test_escape_upstream_programs.py``)."""
    path_env = (environ if environ is not None else os.environ).get("PATH")
    found: list[str] = []
    for config in upstreams:
        if config.transport != "stdio" or config.command is None:
            continue
        found += code_paths(config.command, path_env)
        for script in script_args(config.args, config.cwd):
            found += code_paths(script, path_env)
    return tuple(dict.fromkeys(found))


def upstream_imports(upstreams: Iterable[UpstreamConfig]) -> tuple[str, ...]:
    """Where every unconfined stdio upstream (one declaring no roots) loads code from by
    name, beyond its program (``programs.upstream_import_dirs``): its ``env``'s
    ``PYTHONPATH``, ``NODE_PATH`` and ``LD_LIBRARY_PATH``, the files its ``NODE_OPTIONS``
    and ``LD_PRELOAD`` preload, its ``BASH_ENV``, the
    working directory of ``python -m SERVER`` and the user site-packages of a Python
    outside a virtualenv (``~/.local/lib/python3.11/site-packages``: its ``.pth`` files
    run at every start). What is written there runs as the host at
    that upstream's next start: no files root (``cli.run.host_imports``) and no ``rw``
    root (the broker's ``never_held``) may hold them; a root inside one is served, as one
    inside the host's own ``import_dirs`` is."""
    found: list[str] = []
    for config in upstreams:
        if config.transport != "stdio" or config.command is None or config.roots is not None:
            continue
        environ = upstream_environ(config.env)
        found += upstream_import_dirs(config.command, config.args, environ, config.cwd)
    return tuple(dict.fromkeys(found))


def _supervise(command: str, args: list[str]) -> tuple[str, list[str]]:
    argv = supervised([command, *args], grace_s=UPSTREAM_GRACE_S)
    return argv[0], argv[1:]


def decide(
    config: UpstreamConfig,
    policy: UpstreamConfinementPolicy,
    environ: Mapping[str, str] | None = None,
) -> UpstreamPlacement:
    """How ``config``'s upstream runs under ``policy`` (never raises)."""
    if config.transport != "stdio" or config.command is None:
        return UpstreamPlacement(None, "not a process SharedOS starts (streamable HTTP)")
    unconfined = "not confined: "
    why: str
    if config.roots is None:
        why = "it declares no roots in the host file"
    else:
        try:
            mechanism = find_bubblewrap()
            path_env = (environ if environ is not None else os.environ).get("PATH")
            sandbox = plan_upstream(
                mechanism,
                command=config.command,
                args=config.args,
                roots=[(r.path, r.mode) for r in config.roots],
                readonly=config.readonly,
                network=config.network,
                cwd=config.cwd,
                # the harness's doors, stdio turn files and run directories (its
                # transcript, its settings) too: never an upstream's
                managed=(*policy.managed, str(private_base()), str(run_base())),
                never_writable=policy.never_writable,
                never_held=policy.never_held,
                path_env=path_env,
            )
        except ManagedRootVisible as exc:
            # a view that shows SharedOS's own state is refused whatever the run policy
            return UpstreamPlacement(
                None,
                unconfined + str(exc),
                refusal=f"upstream {config.id!r} cannot be confined: {exc}",
            )
        except (ConfinementUnavailable, OSError) as exc:
            # OSError: the private bases cannot be made (another user's in their place)
            why = str(exc)
        else:
            return UpstreamPlacement(sandbox.wrap, sandbox.describe(), sandbox=sandbox)
    if policy.required:
        return UpstreamPlacement(
            None,
            unconfined + why,
            refusal=(
                f"upstream {config.id!r} cannot be confined ({why}), and this run policy is "
                "strict: its tools are left out of the turn (declare its roots, or run with "
                "--unconfined)"
            ),
        )
    return UpstreamPlacement(_supervise, unconfined + why)

"""Which confinement mechanism this machine offers, and its version.

``find_bubblewrap()`` returns the ``bwrap`` program SharedOS uses, after
checking it really starts a sandbox here (a container may forbid the
namespaces it needs); ``ConfinementUnavailable`` says why not, in one
sentence an operator can act on. ``landlock_abi()`` reports the kernel's
Landlock ABI, the documented alternative (docs/confinement.md), which SharedOS
does not use: it filters paths but cannot hide them, and cannot limit
connections by destination.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass

from sharedos.confine.bwrap import isolation_options
from sharedos.confine.seccomp import filter_fd
from sharedos.errors import ConfinementError

#: the environment variable naming another ``bwrap`` program (tests, unusual installs)
BWRAP_ENV = "SHAREDOS_BWRAP"
MECHANISM = "bubblewrap"
#: where a system's own ``bwrap`` lives, preferred to ``PATH`` (see ``find_bubblewrap``)
SYSTEM_BWRAP = ("/usr/bin/bwrap", "/bin/bwrap")
#: the program the trial sandbox runs (see ``_probe``)
SYSTEM_TRUE = ("/usr/bin/true", "/bin/true")


class ConfinementUnavailable(ConfinementError, RuntimeError):
    """No sandbox can be set up on this machine; ``str()`` says why and what to do."""


@dataclass(frozen=True)
class Mechanism:
    """A usable sandbox program: its name (``bubblewrap``), path and version."""

    name: str
    path: str
    version: str


def find_bubblewrap(path: str | None = None) -> Mechanism:
    """The ``bwrap`` to use, checked to start a sandbox here; ``ConfinementUnavailable`` otherwise.

    ``path`` (or ``$SHAREDOS_BWRAP``) names the program. The default is the system's
    (``SYSTEM_BWRAP``, where the Debian package puts it) and only when there is none,
    ``bwrap`` on ``PATH``: a directory early on ``PATH`` (``~/.local/bin``, ``~/bin``) may
    be writable by an upstream a strict run gave a read-write root there, and a ``bwrap``
    planted in it would be the sandbox of every later strict run.
    """
    if not sys.platform.startswith("linux"):
        raise ConfinementUnavailable(
            f"harness confinement needs Linux (bubblewrap); this is {sys.platform}"
        )
    wanted = path or os.environ.get(BWRAP_ENV) or "bwrap"
    found = bubblewrap_program(path)
    if found is None:
        raise ConfinementUnavailable(
            f"bubblewrap ({wanted}) is not installed: install the Debian package `bubblewrap` "
            "(scripts/ensure-system-deps.sh does)"
        )
    return _probe(os.path.realpath(found))


def bubblewrap_program(path: str | None = None) -> str | None:
    """The ``bwrap`` program ``find_bubblewrap`` would take (unchecked), or None: ``path``,
    else ``$SHAREDOS_BWRAP``, found as ``PATH`` finds it; else the system's, else ``bwrap``
    on ``PATH``. The host runs it itself, outside any sandbox: it is code no sandbox and
    no files root may hold (``cli.run.host_programs``)."""
    wanted = path or os.environ.get(BWRAP_ENV)
    if wanted:
        return shutil.which(wanted)
    system = [p for p in SYSTEM_BWRAP if os.access(p, os.X_OK) and os.path.isfile(p)]
    return system[0] if system else shutil.which("bwrap")


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str) -> Mechanism:
    # Cached per program path for the life of the process: it describes the machine,
    # not a turn, and costs a sandbox start.
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfinementUnavailable(f"{bwrap} --version failed: {exc}") from None
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", out.stdout or out.stderr)
    if out.returncode != 0 or match is None:
        raise ConfinementUnavailable(f"{bwrap} --version printed nothing usable")
    # the system's ``true``, never one found on ``PATH``: the trial shows the whole host
    # read-only (``--ro-bind / /``), and a ``true`` an upstream planted early on ``PATH``
    # (``~/.local/bin``, a ``rw`` root over the home) ran there, read what it liked and
    # printed it into this refusal (or refused every strict run)
    true = next((p for p in SYSTEM_TRUE if os.path.isfile(p) and os.access(p, os.X_OK)), None)
    if true is None:
        raise ConfinementUnavailable(f"no system `true` ({' or '.join(SYSTEM_TRUE)}) to try")
    seccomp = filter_fd()
    # ``/`` by descriptor, as every sandbox binds its paths (launch.py): a bubblewrap
    # without ``--ro-bind-fd`` is found here, not at the first sandbox of a run
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    trial_argv = [
        bwrap,
        "--ro-bind-fd",
        str(root),
        "/",
        *isolation_options(),
        "--seccomp",
        str(seccomp),
    ]
    try:
        trial = subprocess.run(
            # the options every sandbox is started with: ``--unshare-all`` alone only
            # *tries* a user namespace, and as root passes where they are refused
            # (``user.max_user_namespaces = 0``), while every real sandbox then failed;
            # and its seccomp filter (a kernel without seccomp refuses it)
            [*trial_argv, "--", true],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            pass_fds=(seccomp, root),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfinementUnavailable(f"bubblewrap cannot start a sandbox here: {exc}") from None
    finally:
        os.close(seccomp)
        os.close(root)
    if trial.returncode != 0:
        why = (trial.stderr or "").strip().splitlines()
        raise ConfinementUnavailable(
            "bubblewrap cannot start a sandbox here (namespaces refused?): "
            + (why[-1] if why else f"exit {trial.returncode}")
        )
    return Mechanism(MECHANISM, bwrap, match.group(1))


def landlock_abi() -> int | None:
    """The kernel's Landlock ABI version, or ``None`` where Landlock is absent (informational)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
        abi = int(libc.syscall(444, None, 0, 1))
    except (OSError, AttributeError):
        return None
    return abi if abi > 0 else None

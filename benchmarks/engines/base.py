"""What every engine adapter of the peer benchmark provides.

An adapter translates an engine-neutral ``Workload`` into the engine's native
policy text (``native``), builds the engine's decision object from that text
(``load``: this is what "load/compile ms" times), translates each request into
the engine's native request (``translate``, done *before* timing, so a peer is
timed on its own call only: its best case), and exposes the native call
(``call``) plus how to read a bool from its answer (``allowed``).

The runner times ``call(*args, **kwargs)`` for each translated request, so
every engine pays the same harness overhead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from benchmarks.workload import Request, Workload

Native = tuple[tuple[Any, ...], dict[str, Any]]


class Unsupported(Exception):
    """The engine's language cannot express this workload exactly (``native`` raises it);
    the runner reports the engine as not run on it, with the reason."""


class Engine(Protocol):
    """One policy engine under test."""

    name: str
    #: the library and version (recorded in the report)
    version: str

    def native(self, wl: Workload) -> dict[str, str]:
        """The native policy files for ``wl`` (name -> text); not timed."""
        ...

    def load(self, files: dict[str, str], wl: Workload) -> None:
        """Parse/compile the native policy (timed as load/compile)."""
        ...

    def prepare(self) -> bool:
        """Optional warm-up the engine offers after loading; True when it did something."""
        ...

    def translate(self, req: Request) -> Native:
        """The native (args, kwargs) of ``call`` for one request; not timed."""
        ...

    @property
    def call(self) -> Callable[..., Any]:
        """The native decision call."""
        ...

    def allowed(self, answer: Any) -> bool:
        """Read allow/deny from what ``call`` returned."""
        ...


def available() -> dict[str, Callable[[], Engine]]:
    """Engine factories by name; a peer whose library is not importable is left out."""
    from benchmarks.engines import sharedos_engine

    out: dict[str, Callable[[], Engine]] = {
        "sharedos": sharedos_engine.SharedOSEngine,
    }
    from benchmarks.engines.reference import ReferenceAdapter

    out["reference"] = ReferenceAdapter
    try:
        from benchmarks.engines.cedar import CedarEngine

        out["cedar"] = CedarEngine
    except ImportError:
        pass
    try:
        from benchmarks.engines.casbin_engine import CasbinEngine

        out["casbin"] = CasbinEngine
    except ImportError:
        pass
    try:
        from benchmarks.engines.rego import RegoEngine

        out["rego"] = RegoEngine
    except ImportError:
        pass
    return out


ALL_ENGINES = ("sharedos", "reference", "cedar", "casbin", "rego")
PEERS = ("cedar", "casbin", "rego")

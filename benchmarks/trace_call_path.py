"""Trace one allowed and one denied ``files.read`` through ``RuntimeHost.invoke_tool``.

Run: .venv/bin/python -m benchmarks.trace_call_path [--show] [--json PATH]

Counts, for one call after a warm-up call (so caches are as in steady state),
on every thread the call runs on (the caller's, the evidence writer's when a
commit goes through it, and the handler lane's thread that runs the sync
``files.read`` handler: every thread started after the script starts reports
to the tracer):

- *module entries*: calls that enter a ``sharedos`` module from another module
  (or from outside the package): a call from ``kernel.runtime`` into
  ``evidence.record`` is one, a call from ``kernel.runtime`` to another
  function of ``kernel.runtime`` is none. This is issue 25's "enters sharedos
  modules" (its trace saw 82 for an allowed call before the wave; this script
  saw 83 at the start of issue 25's work).
- *crossings*: calls from a frame of one ``sharedos`` package into a frame of
  another (``kernel`` → ``evidence``). Packages are the second component of the
  module name (``kernel``, ``evidence``, ``tools``, …); every bottom-layer
  module (``names``, ``outcomes``, ``canonical``, ``redaction``, …: the first
  layer of ``tests/test_layers.py``) counts as one package ``core``. *Back*:
  how many of those calls enter a package the call had already been in.
  Returns are not counted: a call and its return are one step down and back.
- *function entries*: every Python function call whose code is in a
  ``sharedos`` module (comprehensions and generator expressions excluded:
  they are loops, not calls), whichever module called it.
- *package changes*: every change of the package in control (that of the
  innermost ``sharedos`` frame), on calls *and* returns: the strictest reading.

Issue 25's targets: an allowed and a denied call each cross between packages
at most 14 times and enter sharedos modules at most 40 times.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

#: the bottom layer (tests/test_layers.py's first layer): one package, "core"
_BOTTOM = {
    "names",
    "outcomes",
    "toolpolicy",
    "context",
    "resources",
    "identity",
    "errors",
    "_shipped",
    "compat",
    "confine",
    "pathwalk",
    "canonical",
    "redaction",
    "tomlpos",
}

RULES = """
namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/public/**"
forbid * on "/private/**"
"""


def package_of(module: str) -> str | None:
    """``sharedos.kernel.runtime`` → ``kernel``; bottom-layer modules → ``core``; else None."""
    if module != "sharedos" and not module.startswith("sharedos."):
        return None
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in _BOTTOM:
        return "core"
    return parts[1]


def _sharedos_module(frame: FrameType | None) -> str | None:
    """The module of the innermost ``sharedos`` frame at or below ``frame``."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if package_of(module) is not None:
            return str(module)
        frame = frame.f_back
    return None


class Tracer:
    """A profile hook (``sys.setprofile``) counting what the module docstring describes."""

    def __init__(self) -> None:
        self.function_entries = 0
        self.module_entries = 0
        self.modules: Counter[str] = Counter()
        self.crossings = 0
        self.crossings_back = 0
        self.changes = 0
        self.entered: set[str] = set()
        self.current: dict[int, str | None] = {}
        self.path: list[str] = []
        self.entries: list[str] = []
        self.on = False
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event not in ("call", "return"):
            return
        with self._lock:
            self._event(frame, event)

    def _event(self, frame: FrameType, event: str) -> None:
        thread = threading.get_ident()
        if event == "call":
            module = str(frame.f_globals.get("__name__", ""))
            pkg = package_of(module)
            if pkg is not None and not frame.f_code.co_name.startswith("<"):
                self.function_entries += 1
                caller = _sharedos_module(frame.f_back)
                if caller != module:
                    self.module_entries += 1
                    self.modules[module] += 1
                    self.entries.append(
                        f"{(caller or '(outside)').removeprefix('sharedos.')} -> "
                        f"{module.removeprefix('sharedos.')}.{frame.f_code.co_name}"
                    )
                caller_pkg = package_of(caller) if caller is not None else None
                if caller_pkg is not None and caller_pkg != pkg:
                    self.crossings += 1
                    back = pkg in self.entered
                    self.crossings_back += back
                    self.path.append(
                        f"{caller_pkg}->{pkg} {frame.f_code.co_name}"
                        f" ({module.removeprefix('sharedos.')}){' (back)' if back else ''}"
                    )
                if caller_pkg is not None:
                    self.entered.add(caller_pkg)
                self.entered.add(pkg)
            now = _sharedos_module(frame)
        else:
            now = _sharedos_module(frame.f_back)
        now_pkg = package_of(now) if now is not None else None
        before = self.current.get(thread)
        if now_pkg is not None and before is not None and now_pkg != before:
            self.changes += 1
        if now_pkg is not None:
            self.current[thread] = now_pkg

    def figures(self) -> dict[str, int]:
        """The counts, by name."""
        return {
            "module_entries": self.module_entries,
            "crossings": self.crossings,
            "crossings_back": self.crossings_back,
            "function_entries": self.function_entries,
            "modules": len(self.modules),
            "package_changes": self.changes,
        }


def build(root: Path) -> tuple[RuntimeHost, AccessContext, ToolPolicy]:
    """A host with the built-in files tools over ``root`` and a SQLite store."""
    (root / "sandbox" / "public").mkdir(parents=True)
    (root / "sandbox" / "private").mkdir(parents=True)
    (root / "sandbox" / "public" / "a.txt").write_text("public\n")
    (root / "sandbox" / "private" / "a.txt").write_text("private\n")
    registry = ToolRegistry()
    register_files_tools(registry, str(root / "sandbox"))
    policy = compile_source(RULES, "trace.sos")
    host = RuntimeHost(Kernel(policy, registry), SqliteEvidenceStore(str(root / "ev.sqlite")))
    run = ToolPolicy(
        name="trace", mode=RunMode.STRICT, managed=("files.read",), harness_local=("patch",)
    )
    return host, AccessContext(principal="alice", turn_id="trace-turn"), run


#: the tracer the profile hook of every thread forwards to (None: not tracing)
_ACTIVE: list[Tracer | None] = [None]


def _dispatch(frame: FrameType, event: str, arg: Any) -> None:
    tracer = _ACTIVE[0]
    if tracer is not None:
        tracer(frame, event, arg)


async def traced(host: RuntimeHost, ctx: AccessContext, run: ToolPolicy, path: str) -> Tracer:
    """One call to files.read(path), traced (after an untraced warm-up of the same call)."""
    await host.invoke_tool(ToolCall(tool="files.read", arguments={"path": path}), ctx, run)
    tracer = Tracer()
    tracer.on = True
    _ACTIVE[0] = tracer
    try:
        await host.invoke_tool(ToolCall(tool="files.read", arguments={"path": path}), ctx, run)
    finally:
        _ACTIVE[0] = None
        tracer.on = False
    return tracer


def main() -> None:
    """Print the figures for an allowed and a denied call."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print every crossing")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    out: dict[str, dict[str, int]] = {}
    # every thread started from here on (the handler lane's, the evidence writer's)
    # reports to the active tracer, and so does this one
    threading.setprofile(_dispatch)
    sys.setprofile(_dispatch)
    with tempfile.TemporaryDirectory() as tmp:
        host, ctx, run = build(Path(tmp))
        for label, path in (("allowed", "/public/a.txt"), ("denied", "/private/a.txt")):
            t = anyio.run(traced, host, ctx, run, path)
            f = out[label] = t.figures()
            print(
                f"{label:8} module entries {f['module_entries']:3} (target <= 40)  "
                f"crossings {f['crossings']:3} (target <= 14), {f['crossings_back']:2} back  |  "
                f"function entries {f['function_entries']:4} in {f['modules']:2} modules, "
                f"package changes (calls and returns) {f['package_changes']:3}"
            )
            if args.show:
                print("  crossings:")
                for step in t.path:
                    print("   ", step)
                print("  module entries:")
                for step in t.entries:
                    print("   ", step)
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

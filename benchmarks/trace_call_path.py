"""Trace one allowed and one denied ``files.read`` through ``RuntimeHost.invoke_tool``.

Run: .venv/bin/python -m benchmarks.trace_call_path [--show]

Counts, for one call after a warm-up call (so caches are as in steady state):

- *entries*: Python function calls whose code lives in a ``sharedos`` module
  (every ``call`` event the profiler sees for such a frame, generators resumed
  included);
- *modules*: how many distinct ``sharedos`` modules those entries touched;
- *calls into another package*: calls from a frame of one ``sharedos``
  package (``kernel``, ``evidence``, …; the bottom-layer modules count as one
  package ``core``) into a frame of another;
- *changes of package*: every change of the package in control (that of the
  innermost ``sharedos`` frame), on calls and on returns, and how many of
  them go back to a package already left (the back-and-forth issue 25 asks
  to remove).

Only the thread that calls ``invoke_tool`` is traced, plus the evidence
writer thread when the commit goes through it (``threading.setprofile``).
Issue 25's target: an allowed and a denied call each cross between packages
at most 14 times and enter sharedos modules at most 40 times.
"""

from __future__ import annotations

import argparse
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

_BOTTOM = {
    "names",
    "outcomes",
    "toolpolicy",
    "context",
    "resources",
    "identity",
    "errors",
    "compat",
    "_shipped",
}

RULES = """
namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/public/**"
forbid * on "/private/**"
"""


def package_of(module: str) -> str | None:
    """``sharedos.kernel.runtime`` → ``kernel``; bottom-layer modules → ``core``."""
    if module != "sharedos" and not module.startswith("sharedos."):
        return None
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in _BOTTOM:
        return "core"
    return parts[1]


class Tracer:
    """A ``sys.setprofile`` hook that counts sharedos entries and package crossings.

    The package "in control" is that of the innermost ``sharedos`` frame; a
    crossing is any change of it, on a call or on a return. Comprehension and
    generator-expression frames are not counted as entries (they are loops,
    not calls).
    """

    def __init__(self) -> None:
        self.entries = 0
        self.modules: Counter[str] = Counter()
        self.crossings = 0
        self.call_crossings = 0
        self.returns = 0
        self.seen: set[str] = set()
        self.current: str | None = None
        self.path: list[str] = []
        self.on = False

    def _innermost(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            pkg = package_of(frame.f_globals.get("__name__", ""))
            if pkg is not None:
                return pkg
            frame = frame.f_back
        return None

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event not in ("call", "return"):
            return
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            pkg = package_of(module)
            if pkg is not None and not frame.f_code.co_name.startswith("<"):
                self.entries += 1
                self.modules[module] += 1
                caller = self._innermost(frame.f_back)
                if caller is not None and caller != pkg:
                    self.call_crossings += 1
            now = self._innermost(frame)
        else:
            now = self._innermost(frame.f_back)
        if now is None or now == self.current:
            return
        if self.current is not None:
            self.crossings += 1
            if now in self.seen:
                self.returns += 1
            self.path.append(f"{self.current}->{now} ({event} {frame.f_code.co_name})")
        self.seen.add(self.current or now)
        self.seen.add(now)
        self.current = now


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


async def traced(host: RuntimeHost, ctx: AccessContext, run: ToolPolicy, path: str) -> Tracer:
    """One call to files.read(path), traced (after an untraced warm-up of the same call)."""
    await host.invoke_tool(ToolCall(tool="files.read", arguments={"path": path}), ctx, run)
    tracer = Tracer()
    sys.setprofile(tracer)
    threading.setprofile(tracer)
    tracer.on = True
    try:
        await host.invoke_tool(ToolCall(tool="files.read", arguments={"path": path}), ctx, run)
    finally:
        tracer.on = False
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return tracer


def main() -> None:
    """Print the figures for an allowed and a denied call."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print every crossing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        host, ctx, run = build(Path(tmp))
        for label, path in (("allowed", "/public/a.txt"), ("denied", "/private/a.txt")):
            t = anyio.run(traced, host, ctx, run, path)
            print(
                f"{label:8} entries {t.entries:4}  modules {len(t.modules):3}  "
                f"calls into another package {t.call_crossings:3}  "
                f"changes of package (calls and returns) {t.crossings:3}, "
                f"{t.returns:3} of them back to a package already left"
            )
            if args.show:
                for step in t.path:
                    print("   ", step)
                for module, n in t.modules.most_common():
                    print(f"    {n:4} {module}")


if __name__ == "__main__":
    main()

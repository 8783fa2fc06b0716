"""Shadow mode's cost per call: what ``[policy] shadow`` adds to every decided call.

Run: .venv/bin/python benchmarks/bench_shadow.py [--rounds N]

The enforced policy is the shipped rules and run policies; the candidate is
the same with one permit added (everyone may write to /srv/git/**, the
widening change of docs/policy-language.md). Over a fixed mix of calls of the
shipped tools (files, fs, git, github, memory; allowed and denied; three
principals), it measures per call, interleaved in rounds so load hits both
alike:

* ``decide``: the enforced ``PolicySet.decide`` the kernel makes (step 5);
* ``shadow``: ``ShadowDecider.decide``, the whole of what the kernel adds for
  a shadow policy (the candidate's decision and the row's JSON object);
* ``invoke_tool`` with and without a shadow policy (a real SQLite store, an
  echo handler), whose difference is the shadow's cost on the real path.

Target (issue 29): the shadow's cost per call <= 10 % of the decide p50.
Figures are printed as measured on this machine; nothing is adjusted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.kernel.shadow import ShadowDecider
from sharedos.policy import compile_paths, compile_sources
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import RunMode, ToolPolicy

WIDENING = '\n@id("git-everyone-writes")\npermit write on "/srv/git/**"\n'

CONTEXTS = (
    AccessContext(principal="alice", tenant="acme", roles=("maintainer",), turn_id="t-alice"),
    AccessContext(principal="bob", tenant="acme", turn_id="t-bob"),
    AccessContext(principal="carol", tenant="acme", roles=("admin",), turn_id="t-carol"),
)
CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("files.read", {"path": "/public/a.txt"}),
    ("files.read", {"path": "/private/a.txt"}),
    ("files.write", {"path": "/home/alice/notes.md", "content": "x"}),
    ("fs.read_text_file", {"path": "/srv/projects/app/README.md"}),
    ("fs.write_file", {"path": "/srv/projects/app/a.txt", "content": "x"}),
    ("git.git_status", {"repo_path": "/srv/git/app"}),
    ("git.git_commit", {"repo_path": "/srv/git/app", "message": "m"}),
    ("git.git_add", {"repo_path": "/srv/git/security/keys", "files": ["a"]}),
    ("github.get_issue", {"owner": "sharedos", "repo": "core", "issue_number": 1}),
    ("github.create_issue", {"owner": "sharedos", "repo": "core", "title": "t"}),
    ("memory.read_graph", {}),
)


def policies() -> tuple[Any, Any]:
    """(enforced, candidate): the shipped rules, and the same plus one widening permit."""
    paths = [shipped_dir("rules"), shipped_dir("policy")]
    enforced = compile_paths(paths)
    sources = []
    for directory in paths:
        for path in sorted(Path(directory).glob("*.sos")):
            text = path.read_text(encoding="utf-8")
            if path.name == "git.sos":
                text += WIDENING
            sources.append((f"{Path(directory).name}/{path.name}", text))
    candidate = compile_sources(sources)
    assert candidate.bundle_hash != enforced.bundle_hash
    return enforced, candidate


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def distinct(args: dict[str, Any], n: int) -> dict[str, Any]:
    """``args`` with its path-like values one level deeper, named by ``n``: another
    canonical resource under the same patterns, so no decision is a repeat."""
    return {
        k: f"{v}/n{n}" if k in ("path", "repo_path") and isinstance(v, str) else v
        for k, v in args.items()
    }


def measure_decide(
    enforced: Any, shadow: ShadowDecider, rounds: int, *, fresh: bool = False
) -> dict[str, list[float]]:
    """Per-call ns of the enforced decide and of the shadow step, interleaved. ``fresh``:
    every round calls other resources (no decision repeats an earlier one)."""
    out: dict[str, list[float]] = {"decide": [], "shadow": []}
    clock = time.perf_counter_ns
    for r in range(rounds):
        requests = [
            (tool, distinct(args, r) if fresh else args, ctx, ctx.policy_input, ctx.cache_key)
            for ctx in CONTEXTS
            for tool, args in CALLS
            if tool in enforced.requirements
        ]
        for tool, args, ctx, pinput, key in requests:
            t0 = clock()
            decision = enforced.decide(tool, args, pinput, context_key=key)
            t1 = clock()
            shadow.decide(tool, args, ctx, decision)
            t2 = clock()
            out["decide"].append(t1 - t0)
            out["shadow"].append(t2 - t1)
    return out


async def echo(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text("ok")


def registry_for(policy: Any) -> ToolRegistry:
    """Every tool the mix calls, with an echo handler and an open schema."""
    reg = ToolRegistry()
    for tool in sorted({t for t, _ in CALLS}):
        reg.register(
            ToolDefinition(
                name=tool,
                description=f"{tool} (benchmark echo).",
                input_schema={"type": "object"},
                handler=echo,
            )
        )
    return reg


async def measure_invoke(enforced: Any, candidate: Any, rounds: int) -> dict[str, list[float]]:
    """Per-call ns of invoke_tool with and without a shadow policy, interleaved."""
    run = ToolPolicy(name="bench", mode=RunMode.OPEN, managed=("*",))
    out: dict[str, list[float]] = {"invoke": [], "invoke+shadow": []}
    with tempfile.TemporaryDirectory() as tmp:
        registry = registry_for(enforced)
        with (
            SqliteEvidenceStore(Path(tmp) / "plain.db") as plain_store,
            SqliteEvidenceStore(Path(tmp) / "shadow.db") as shadow_store,
        ):
            plain = RuntimeHost(Kernel(enforced, registry), plain_store)
            shadowed = RuntimeHost(
                Kernel(enforced, registry),
                shadow_store,
                shadow=ShadowDecider(candidate, enforced=enforced),
            )
            calls = [(ctx, tool, args) for ctx in CONTEXTS for tool, args in CALLS]
            clock = time.perf_counter_ns
            for r in range(rounds):
                # alternate which host goes first, so neither always gets the warm cache
                hosts = [("invoke", plain), ("invoke+shadow", shadowed)]
                if r % 2:
                    hosts.reverse()
                for ctx, tool, args in calls:
                    for name, host in hosts:
                        t0 = clock()
                        await host.invoke_tool(ToolCall(tool=tool, arguments=args), ctx, run)
                        out[name].append(clock() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000, help="decide rounds (default 3000)")
    parser.add_argument(
        "--invoke-rounds", type=int, default=60, help="invoke_tool rounds (default 60)"
    )
    opts = parser.parse_args()
    enforced, candidate = policies()
    shadow = ShadowDecider(candidate, enforced=enforced)
    every = ShadowDecider(candidate)  # no shortcut: the candidate decides every call
    load = os.getloadavg()[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"load average (1 min) at start: {load:.2f}")
    print(
        f"enforced: shipped rules + run policies ({len(enforced.requirements)} tools); "
        "candidate: + one permit (git-everyone-writes)"
    )
    measure_decide(enforced, shadow, 50)  # warm-up: caches, first-pass specialisation
    measure_decide(enforced, every, 50)
    times = measure_decide(enforced, shadow, opts.rounds)
    times["shadow, every call decided"] = measure_decide(enforced, every, opts.rounds)["shadow"]
    decide50, shadow50 = pct(times["decide"], 0.5), pct(times["shadow"], 0.5)
    changed = sorted({t for t, _ in CALLS if shadow._sameness(t) is None})
    print(f"tools of the mix the change touches (decided again): {', '.join(changed)}")
    print(f"\n{len(times['decide'])} calls of the mix, repeated (the policy's caches answer):")
    for name in ("decide", "shadow", "shadow, every call decided"):
        v = times[name]
        print(
            f"  {name:<28} p50 {pct(v, 0.5) / 1000:8.2f} us   p90 {pct(v, 0.9) / 1000:8.2f} us   "
            f"p99 {pct(v, 0.99) / 1000:8.2f} us   mean {statistics.fmean(v) / 1000:8.2f} us"
        )
    clock = time.perf_counter_ns
    empty: list[float] = []
    for _ in range(len(times["decide"])):
        t0 = clock()
        empty.append(clock() - t0)
    print(
        f"  (each figure includes the timer's own cost: p50 {pct(empty, 0.5) / 1000:.2f} us; "
        "not subtracted)"
    )
    ratio = 100.0 * shadow50 / decide50
    verdict = "met" if ratio <= 10.0 else "NOT met"
    print(
        f"  shadow cost per call: {shadow50 / 1000:.2f} us p50 = {ratio:.1f} % of the decide "
        f"p50 (target <= 10 %: {verdict})"
    )
    fresh = measure_decide(enforced, shadow, opts.rounds // 3, fresh=True)
    fresh["shadow, every call decided"] = measure_decide(
        enforced, every, opts.rounds // 3, fresh=True
    )["shadow"]
    fresh_decide = pct(fresh["decide"], 0.5)
    print(f"\n{len(fresh['decide'])} calls, every one of another resource (no repeats):")
    for name in ("decide", "shadow", "shadow, every call decided"):
        v = fresh[name]
        print(
            f"  {name:<28} p50 {pct(v, 0.5) / 1000:8.2f} us   p90 {pct(v, 0.9) / 1000:8.2f} us   "
            f"p99 {pct(v, 0.99) / 1000:8.2f} us   mean {statistics.fmean(v) / 1000:8.2f} us"
        )
    ratio = 100.0 * pct(fresh["shadow"], 0.5) / fresh_decide
    print(
        f"  shadow cost per call: {pct(fresh['shadow'], 0.5) / 1000:.2f} us p50 = {ratio:.1f} % "
        f"of the decide p50 (target <= 10 %: {'met' if ratio <= 10.0 else 'NOT met'})"
    )
    inv = anyio.run(measure_invoke, enforced, candidate, opts.invoke_rounds)
    p_plain, p_shadow = pct(inv["invoke"], 0.5), pct(inv["invoke+shadow"], 0.5)
    print(f"\ninvoke_tool (SQLite store, echo handler), {len(inv['invoke'])} calls each:")
    print(f"  without a shadow policy  p50 {p_plain / 1000:8.1f} us")
    print(f"  with a shadow policy     p50 {p_shadow / 1000:8.1f} us")
    print(
        f"  difference               p50 {(p_shadow - p_plain) / 1000:+8.1f} us "
        f"({100.0 * (p_shadow - p_plain) / p_plain:+.1f} % of invoke_tool)"
    )
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Path tricks through the real kernel: a planted secret never appears, forbidden files never change.

Every call goes through ``RuntimeHost.invoke_tool`` with the shipped rules
(``rules/files.sos``), the real files tools over a sandbox holding planted
links (``tests/adversarial/tricks.py``), and a real SQLite evidence store. After
the run, the planted-secret grep (``planted.py``) searches every result, the
evidence export and raw database, and captured output; the forbidden trees
(``/private``, another user's home, a directory outside the root) must be
byte-identical; text written by the corpus may exist only where the caller
may write.

Quick mode (``make test``): the deterministic corpus for two principals, and a
short race against a thread swapping links. Long mode (``make stress``):
generated paths composed from the same tokens, and a long race.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.outcomes import Outcome
from sharedos.policy import compile_paths
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.adversarial.planted import SecretScan
from tests.adversarial.tricks import (
    BOB_AREAS,
    CAROL_AREAS,
    MARK,
    TOKENS,
    TRICKS,
    Arena,
    Swapper,
    calls_for,
    corpus,
)
from tests.conftest import Figures

pytestmark = pytest.mark.anyio
RUN = ToolPolicy(name="files", mode=RunMode.OPEN, managed=("files.*",))
BOB = AccessContext(principal="bob", turn_id="bob-turn")
#: bob's calls whose arguments hold a lone surrogate go to their own turn: see
#: test_the_evidence_export_survives_a_lone_surrogate_argument
BOB_ODD = AccessContext(principal="bob", turn_id="bob-odd-turn")
CAROL = AccessContext(principal="carol", roles=("editor",), turn_id="carol-turn")
CAROL_ODD = AccessContext(principal="carol", roles=("editor",), turn_id="carol-odd-turn")
ODD = {BOB.turn_id: BOB_ODD, CAROL.turn_id: CAROL_ODD}
#: where each principal's writes may land (relative to the root)
WRITABLE = {"bob": ("home/bob/",), "carol": ("shared/", "home/carol/")}
SEARCH_PATTERNS = ("../private/*", "*/../*", "**", "*keys*", "/private/*", "*/hl_keys", "hdir/*")


class Run:
    """One arena, one real host, and the bookkeeping every check needs."""

    def __init__(self, base: Path) -> None:
        self.arena = Arena(base)
        registry = ToolRegistry()
        register_files_tools(registry, self.arena.root)
        kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
        self.db = base / "evidence.db"
        self.store = SqliteEvidenceStore(self.db)
        self.host = RuntimeHost(kernel, self.store)
        self.scan = SecretScan(*self.arena.secrets)
        self.calls = 0
        self.outcomes: dict[str, int] = {}
        self.host_paths = (str(base), str(self.arena.root))

    async def call(self, ctx: AccessContext, tool: str, args: dict[str, Any]) -> None:
        """Invoke, then check the result at once (no secret, no host path, a real outcome)."""
        self.arena.plant()
        self.calls += 1
        result = await self.host.invoke_tool(ToolCall(tool=tool, arguments=args), ctx, RUN)
        self.outcomes[str(result.outcome)] = self.outcomes.get(str(result.outcome), 0) + 1
        assert result.outcome in (Outcome.SUCCEEDED, Outcome.DENIED, Outcome.FAILED)
        wire = json.dumps(result.to_mcp(), ensure_ascii=False, default=repr)
        where = f"{ctx.principal} {tool} {_short(args)}"
        if self.scan.json_value(f"result of {where}", result.to_mcp()):
            self.scan.assert_clean()  # fail at the first leak, with its place
        for host_path in self.host_paths:
            assert host_path not in wire, f"host path in the result of {where}: {wire[:500]}"
        if tool == "files.search" and result.structured and "matches" in result.structured:
            # an oracle: no file holding the secret is ever named by a content search
            assert result.structured["matches"] == [], where

    def finish(self, capfd: pytest.CaptureFixture[str]) -> str:
        """The checks over everything the run left behind; returns its figures line."""
        changed = self.arena.snapshot() != self.arena.frozen
        created = [n for n in ("created.txt",) if (self.arena.root / "private" / n).exists()]
        written = self.arena.files_containing(MARK)
        allowed = tuple(p for ps in WRITABLE.values() for p in ps)
        outside = [w for w in written if not w.startswith(allowed)]
        counts = self.store.counts()
        turns = {r.turn_id for r in self.store.query()}
        self.store.close()
        # the host path is a secret too: errors name canonical paths only
        host = SecretScan(str(self.arena.root))
        for scan in (self.scan, host):
            for turn in sorted(turns - {c.turn_id for c in ODD.values()}):
                scan.evidence(self.db, turn=turn)  # the export, and the raw db/WAL bytes
            scan.file(self.db)
            scan.file(f"{self.db}-wal")
        self.scan.captured(capfd)
        bypasses = int(changed) + len(created) + len(outside)
        figures = (
            f"{self.calls} calls, recorded {counts.total}, outcomes {self.outcomes}, "
            f"bypasses {bypasses}, leaked secrets {len(self.scan.findings)}, "
            f"host paths leaked {len(host.findings)}"
        )
        assert not changed, "a forbidden file or tree changed"
        assert created == [], created
        assert outside == [], written
        assert counts.total == self.calls, (counts, self.calls)  # every attempt is recorded
        host.assert_clean()
        self.scan.assert_clean()
        return figures


def _turn_for(ctx: AccessContext, path: str) -> AccessContext:
    """The principal's odd turn for a path holding a lone surrogate, else ``ctx``."""
    return ODD[ctx.turn_id] if _has_surrogate(path) else ctx


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _short(args: dict[str, Any]) -> str:
    text = repr(args)
    return text if len(text) < 160 else text[:157] + "..."


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Run(tmp_path)


async def test_the_corpus_never_leaks_a_secret_or_changes_a_forbidden_file(
    run: Run, capfd: pytest.CaptureFixture[str]
) -> None:
    paths = corpus()
    carol_paths = [p for p in paths if not p.startswith(BOB_AREAS[1]) and not _has_surrogate(p)]
    t0 = time.perf_counter()
    for path in paths:
        ctx = _turn_for(BOB, path)
        for tool, args in calls_for(path, run.arena):
            await run.call(ctx, tool, args)
    for path in carol_paths[::3]:
        for tool, args in calls_for(path, run.arena):
            await run.call(CAROL, tool, args)
    for area in {*BOB_AREAS, *CAROL_AREAS}:
        for pattern in SEARCH_PATTERNS:
            args = {"root": area, "pattern": pattern, "text": run.arena.fragment}
            await run.call(CAROL if area == "/shared" else BOB, "files.search", args)
    elapsed = time.perf_counter() - t0
    figures = run.finish(capfd)
    # the corpus exercised every kind of answer, not only refusals
    assert run.outcomes.get("succeeded", 0) > 50, run.outcomes
    assert run.outcomes.get("denied", 0) > 500, run.outcomes
    assert run.outcomes.get("failed", 0) > 200, run.outcomes
    print(f"path-trick corpus in {elapsed:.1f} s: {figures}")


async def test_links_swapped_during_calls_never_leak_or_change_a_forbidden_file(
    run: Run, capfd: pytest.CaptureFixture[str]
) -> None:
    await _race(run, rounds=60)
    run.finish(capfd)


async def _race(run: Run, rounds: int) -> None:
    targets = [
        f"{area}/swap{suffix}"
        for area in BOB_AREAS
        for suffix in ("", "/keys.txt", "/", "/sub/deep.txt")
    ]
    with Swapper(run.arena, BOB_AREAS) as swapper:
        for _ in range(rounds):
            for path in targets:
                for tool, args in calls_for(path, run.arena):
                    await run.call(BOB, tool, args)
            await run.call(BOB, "files.list", {"path": "/home/bob"})
            await run.call(BOB, "files.search", {"root": "/", "pattern": "*", "text": "x"})
    assert swapper.swaps > rounds  # the race really ran


# -- long mode -----------------------------------------------------------------------
_segment = st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4).map("".join)
_path = st.builds(
    lambda lead, segs, sep: lead + sep.join(segs),
    st.sampled_from(["/", "", "//", "\\", "/public/docs/", "/home/bob/", "/shared/"]),
    st.lists(_segment, min_size=0, max_size=8),
    st.sampled_from(["/", "/", "/", "\\", "\uff0f", "%2f"]),
)


@pytest.mark.stress
async def test_generated_paths_never_leak_a_secret_or_change_a_forbidden_file(
    run: Run, capfd: pytest.CaptureFixture[str], stress_figures: Figures
) -> None:
    generated: list[str] = []

    @settings(
        max_examples=4000,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(_path)
    def collect(path: str) -> None:
        generated.append(path)

    collect()
    for path in generated:
        for ctx in (BOB, CAROL):
            for tool, args in calls_for(path, run.arena):
                await run.call(_turn_for(ctx, path), tool, args)
    figures = run.finish(capfd)
    stress_figures.add(f"generated path tricks: {len(generated)} paths, {figures}")


@pytest.mark.stress
async def test_a_long_race_never_leaks_or_changes_a_forbidden_file(
    run: Run, capfd: pytest.CaptureFixture[str], stress_figures: Figures
) -> None:
    await _race(run, rounds=1500)
    stress_figures.add(f"link-swap race: {run.finish(capfd)}")


async def test_the_evidence_export_survives_a_lone_surrogate_argument(run: Run) -> None:
    # (a low surrogate such as "\udcc0" is written out as a raw invalid UTF-8 byte instead)
    await run.call(BOB_ODD, "files.read", {"path": "/public/docs/\ud800"})
    run.store.close()
    run.scan.evidence(run.db, turn=BOB_ODD.turn_id)


def test_the_corpus_covers_the_trick_families() -> None:
    paths = corpus()
    joined = "\n".join(paths)
    for needle in ("%2e", "\uff0f", "\u2024", "\x00", "\\", "\udcc0", "/..", "a" * 256, *TRICKS):
        assert needle in joined, needle
    assert any(p.endswith("/") for p in paths) and any(p.endswith(".") for p in paths)

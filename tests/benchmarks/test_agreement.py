"""A small instance of the peer benchmark's agreement check (issue 14).

Every engine must give the same decision on every request of both seeded
workloads; the full-size check is `make bench`. cedarpy and pycasbin are in
the dev extra; regopy (the `bench` extra) is used when importable.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.engines.base import Unsupported, available  # noqa: E402
from benchmarks.peers import disagreements  # noqa: E402
from benchmarks.workload import WORKLOADS, Request, build  # noqa: E402

ENGINES = ["sharedos", "reference", "cedar", "casbin"]
try:
    import regopy  # noqa: F401

    ENGINES.append("rego")
except ImportError:
    pass


def answers(engine_name: str, workload: str, n_rules: int, n_requests: int) -> list[bool] | None:
    """Load the engine's native translation of the workload and decide every request
    (None: the engine's language cannot express the workload; the runner says so too)."""
    wl = build(workload, n_rules, n_requests)
    engine = available()[engine_name]()
    try:
        files = engine.native(wl)
    except Unsupported:
        return None
    engine.load(files, wl)
    out = []
    for req in wl.requests:
        args, kwargs = engine.translate(req)
        out.append(engine.allowed(engine.call(*args, **kwargs)))
    return out


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("n_rules", [10, 60])
def test_every_engine_decides_every_request_alike(workload: str, n_rules: int) -> None:
    wl = build(workload, n_rules, 120)
    expected = [r.shape.startswith("allow:") for r in wl.requests]
    for engine in ENGINES:
        got = answers(engine, workload, n_rules, 120)
        if got is None:
            assert engine not in ("sharedos", "reference"), f"{engine} must run every workload"
            continue
        wrong = [
            (wl.requests[i].tool, wl.requests[i].args, wl.requests[i].context["principal"], g)
            for i, (g, e) in enumerate(zip(got, expected, strict=True))
            if g != e
        ]
        assert not wrong, f"{engine} disagrees on {len(wrong)} requests, e.g. {wrong[:3]}"


@pytest.mark.parametrize("workload", WORKLOADS)
def test_workload_is_balanced_canonical_and_seeded(workload: str) -> None:
    wl = build(workload, 100, 200)
    allows = sum(r.shape.startswith("allow:") for r in wl.requests)
    assert allows == 100 and len(wl.requests) == 200
    if workload != "random":  # the random workload sends odd paths and more on purpose
        assert sum(r.near_miss for r in wl.requests) >= 40  # denies are mostly near misses
        for r in wl.requests:
            p = r.args["path"]
            assert p.startswith("/") and "//" not in p and "/." not in p and not p.endswith("/")
    again = build(workload, 100, 200)
    assert [(r.tool, r.args, r.context) for r in again.requests] == [
        (r.tool, r.args, r.context) for r in wl.requests
    ]
    assert wl.n_rules == 100


def test_runner_reports_a_disagreement_with_the_request_and_every_answer() -> None:
    wl = build("acl", 10, 40)
    good = "".join("1" if r.shape.startswith("allow:") else "0" for r in wl.requests)
    flipped = ("0" if good[3] == "1" else "1") + good[4:]
    bad = good[:3] + flipped
    base = {"workload": "acl", "rules": 10, "requests": 40, "rep": 0, "unstable": []}
    runs = [
        {**base, "engine": "sharedos", "answers": good},
        {**base, "engine": "cedar", "answers": bad},
    ]
    problems = disagreements(runs, seed=14)
    assert len(problems) == 1
    assert "request 3" in problems[0]
    assert wl.requests[3].args["path"] in problems[0]
    assert "sharedos#1=" in problems[0] and "cedar#1=" in problems[0]


# principals the workloads never send: unsafe ones (a permit's {context.principal}
# matches nothing, a forbid's matches any one segment), and safe ones holding
# characters that some peer languages read as glob syntax
ODD_PRINCIPALS = ["", "*", "a*", "a/b", "..", "e\u0301", "a,b", "[u]", "{x}", "a?", "\\x"]


def test_every_engine_treats_odd_principals_as_sharedos_does() -> None:
    wl = build("interp", 10, 40)
    ctx0 = wl.requests[0].context
    roles = sorted({f"team{i}" for i in range(4)} | {f"team{i}-editor" for i in range(4)})
    requests = []
    for p in ODD_PRINCIPALS:
        ctx = {**ctx0, "principal": p, "roles": roles}
        seg = "u1" if p in ("", "..", "a/b", "e\u0301") else p  # paths stay canonical
        for path in (
            f"/users/{seg}/d.txt",
            f"/teams/team0/{seg}/d.txt",
            f"/teams/team0/{seg}/quarantine/d.txt",
            "/teams/team0/shared/quarantine/d.txt",
            f"/teams/team0/{seg}/keep/d.txt",
        ):
            for tool in ("docs.read", "docs.write", "docs.delete"):
                args = {"path": path, "mode": "create", "size": 100}
                requests.append(Request(tool, args, ctx, f"odd:{p!r}", "odd"))
    expected = None
    for name in ENGINES:
        engine = available()[name]()
        engine.load(engine.native(wl), wl)
        got = []
        for req in requests:
            a, k = engine.translate(req)
            got.append(engine.allowed(engine.call(*a, **k)))
        if expected is None:
            expected = got
            continue
        wrong = [
            (r.tool, r.args["path"], r.context["principal"], g)
            for r, g, e in zip(requests, got, expected, strict=True)
            if g != e
        ]
        assert not wrong, f"{name} disagrees with sharedos on {len(wrong)}, e.g. {wrong[:4]}"

"""Policy text from the grammar and from mutated real files never breaks the policy toolchain.

Every input runs in a separate worker process (``policyfuzz.Worker``) through
the public ``compile_source`` API and the real ``sharedos-policy check`` and
``sharedos-policy fmt --check`` commands. Each must end in one of the
documented ways — a result or ``PolicyError`` (with diagnostics); exit 0 or 1
— within 2 s per stage: no other exception, no exit 3 (internal error), no
traceback, no hang (the worker is killed and the input reported).

An input that breaks something is saved under ``reports/policy-fuzz-found/``;
copy it to ``tests/data/adversarial/policy/`` (gzip it if large) and, while the
policy package still fails on it, add an entry to ``known.toml`` there: it is
then replayed as ``xfail(strict=True)`` and turns into a failure the day it is
fixed, so the entry gets removed.

Quick mode runs in ``make test`` (about 30 s); long mode is ``make stress``.
"""

from __future__ import annotations

import gzip
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.adversarial.policyfuzz import (
    EXTREMES,
    REGRESSIONS,
    Worker,
    grammar_texts,
    judge,
    mutated_inputs,
    save_found,
    seed_files,
)
from tests.conftest import Figures, stress_selected

KNOWN: dict[str, dict[str, str]] = tomllib.loads(
    (REGRESSIONS / "known.toml").read_text(encoding="utf-8")
)


@pytest.fixture(scope="module")
def worker(request: pytest.FixtureRequest, stress_figures: Figures) -> Iterator[Worker]:
    w = Worker()
    yield w
    w.close()
    if stress_selected(request.config):
        stress_figures.add(
            f"policy fuzz: {w.served} inputs through compile_source, check and fmt --check, "
            "every one handled (no traceback, no hang, no internal error)"
        )


def assert_handled(worker: Worker, data: bytes, what: str) -> None:
    problem = judge(worker, data)
    if problem is not None:
        saved = save_found(data)
        raise AssertionError(
            f"{what}: {problem[:3000]}\n  input ({len(data)} bytes) saved to {saved}"
        )


def _fuzz_settings(n: int) -> Any:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,  # found inputs are kept as files, not in a local cache
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_the_watcher_reports_a_hang_a_crash_and_a_dead_worker() -> None:
    # the self-test's hang never ends, so a short bound finds it as surely as the real one
    w = Worker(selftest=True, hang_s=3.0)
    try:
        assert judge(w, b"namespace ok\n") is None
        crash = judge(w, b"#!selftest:raise\n")
        assert crash is not None and "compile_source raised" in crash and "RuntimeError" in crash
        hang = judge(w, b"#!selftest:hang\n")
        assert hang is not None and hang.startswith("hang: api gave no answer")
        dead = judge(w, b"#!selftest:exit\n")
        assert dead is not None and "worker died" in dead
        assert judge(w, b"namespace again\n") is None  # a fresh worker took over
    finally:
        w.close()


def test_the_seed_files_are_found() -> None:
    seeds = seed_files()
    assert len(seeds) >= 10 and any(p.parent.name == "rules" for p in seeds)


@pytest.mark.parametrize(("name", "data"), EXTREMES, ids=[n for n, _ in EXTREMES])
def test_deep_long_and_odd_inputs_are_handled(worker: Worker, name: str, data: bytes) -> None:
    assert_handled(worker, data, name)


@_fuzz_settings(150)
@given(grammar_texts())
def test_programs_from_the_grammar_are_handled(worker: Worker, data: bytes) -> None:
    assert_handled(worker, data, "a program drawn from grammar/sharedos.lark")


@_fuzz_settings(150)
@given(mutated_inputs())
def test_mutated_policy_files_are_handled(worker: Worker, data: bytes) -> None:
    assert_handled(worker, data, "a mutated .sos file")


def _regressions() -> list[Any]:
    params = []
    for path in sorted(REGRESSIONS.iterdir()):
        if not (path.name.endswith(".sos") or path.name.endswith(".sos.gz")):
            continue
        marks = []
        if path.name in KNOWN:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[path.name]["reason"]))
        params.append(pytest.param(path, marks=marks, id=path.name))
    return params


@pytest.mark.parametrize("path", _regressions())
def test_kept_inputs_are_handled(worker: Worker, path: Path) -> None:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    assert_handled(worker, data, path.name)


def test_every_known_failure_has_its_file() -> None:
    names = {p.name for p in REGRESSIONS.iterdir()}
    assert set(KNOWN) <= names


@pytest.mark.stress
@_fuzz_settings(4000)
@given(grammar_texts())
def test_many_programs_from_the_grammar_are_handled(worker: Worker, data: bytes) -> None:
    assert_handled(worker, data, "a program drawn from grammar/sharedos.lark")


@pytest.mark.stress
@_fuzz_settings(4000)
@given(mutated_inputs(max_ops=12))
def test_many_mutated_policy_files_are_handled(worker: Worker, data: bytes) -> None:
    assert_handled(worker, data, "a mutated .sos file")

"""HarnessDriver against the real kernel and SQLite evidence store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sharedos.conformance.environment import ConformanceEnv, build_environment
from sharedos.conformance.manifest import load_manifest
from sharedos.harness.driver import DriverError, HarnessDriver, PlannedCall, ScriptedModel
from sharedos.harness.shapes import SHAPE_NAMES, get_shape
from sharedos.harness.shapes.neutral import Call, Turn, dumps
from sharedos.outcomes import Outcome, ReasonCode


@pytest.fixture
def env(tmp_path: Path) -> Iterator[ConformanceEnv]:
    e = build_environment(load_manifest(), tmp_path)
    yield e
    e.close()


def _turn(env: ConformanceEnv, turn_id: str) -> tuple[object, object, object]:
    ctx = env.context("alice", turn_id)
    policy = env.tool_policy("conformance")
    return ctx, policy, env.catalog(ctx, policy)


@pytest.mark.anyio
@pytest.mark.parametrize("shape_name", SHAPE_NAMES)
async def test_driver_runs_the_loop_and_the_model_sees_the_kernels_answers(
    env: ConformanceEnv, shape_name: str
) -> None:
    shape = get_shape(shape_name)
    ctx, policy, catalog = _turn(env, f"t-{shape_name}")
    plan = [
        PlannedCall("a", "c_a", "files.read", {"path": "/public/a.txt"}),
        PlannedCall("b", "c_b", "files.read", {"path": "/private/a.txt"}),
        PlannedCall("c", "c_c", "files.list", {"path": "/home/alice"}),
        PlannedCall("d", "c_d", "files.read", {"path": 1}),
    ]
    model = ScriptedModel(shape, plan, "scripted", batch=3)
    driver = HarnessDriver(
        shape, env.host, declared_model="scripted", identity={"column": "scripted"}
    )
    turn = await driver.run_turn(model, ctx, policy, catalog, "go")  # type: ignore[arg-type]
    assert turn.steps == 3  # 3 calls, 1 call, then the final answer
    assert turn.final_text.startswith("Done")
    assert model.offered == set(catalog.names)  # type: ignore[attr-defined]
    outcomes = {ex.call.call_id: ex.result.outcome for ex in turn.exchanges}
    assert outcomes == {
        "c_a": Outcome.SUCCEEDED,
        "c_b": Outcome.DENIED,
        "c_c": Outcome.SUCCEEDED,
        "c_d": Outcome.FAILED,
    }
    # what the model decoded from the wire is exactly what the kernel returned
    for ex in turn.exchanges:
        seen = model.seen[ex.call.call_id]
        assert list(seen.content) == ex.result.content
        if shape.carries_error_flag:
            assert seen.is_error is ex.result.is_error
        else:
            assert seen.is_error is None
    assert "public file a" in model.seen["c_a"].content[0]["text"]
    records = env.evidence.query(turn_id=f"t-{shape_name}")
    assert [r.call_id for r in records] == ["c_a", "c_b", "c_c", "c_d"]
    assert all(r.identity == {"column": "scripted"} for r in records)


@pytest.mark.anyio
async def test_a_guessed_alias_reaches_the_kernel_unchanged(env: ConformanceEnv) -> None:
    """A model on the Responses wire calling ``files_read`` (not an escape) is refused as that name."""
    shape = get_shape("responses")
    ctx, policy, catalog = _turn(env, "t-guess")

    class GuessingModel:
        def __init__(self) -> None:
            self.calls = 0

        def respond(self, request_text: str) -> str:
            self.calls += 1
            if self.calls == 1:
                wire = shape.turn_wire(
                    Turn((Call("g1", "x", {"path": "/public/a.txt"}),)), model="m", seq=1
                )
                wire["output"][0]["name"] = "files_read"  # what a harness-style alias looks like
                return dumps(wire)
            return dumps(shape.turn_wire(Turn((), "ok"), model="m", seq=2))

    driver = HarnessDriver(shape, env.host, declared_model="m")
    turn = await driver.run_turn(GuessingModel(), ctx, policy, catalog, "go")  # type: ignore[arg-type]
    (ex,) = turn.exchanges
    assert ex.call.name == "files_read"
    assert ex.result.outcome is Outcome.DENIED and ex.result.reason is ReasonCode.TOOL_UNAVAILABLE
    (rec,) = env.evidence.query(turn_id="t-guess")
    assert rec.tool == "files_read"


@pytest.mark.anyio
async def test_a_model_that_never_stops_is_cut_off(env: ConformanceEnv) -> None:
    shape = get_shape("anthropic")
    ctx, policy, catalog = _turn(env, "t-loop")

    class Looping:
        n = 0

        def respond(self, request_text: str) -> str:
            self.n += 1
            return dumps(
                shape.turn_wire(
                    Turn((Call(f"l{self.n}", "files.read", {"path": "/public/a.txt"}),)),
                    model="m",
                    seq=self.n,
                )
            )

    driver = HarnessDriver(shape, env.host, declared_model="m", max_steps=5)
    with pytest.raises(DriverError, match="still calling tools after 5 steps"):
        await driver.run_turn(Looping(), ctx, policy, catalog, "go")  # type: ignore[arg-type]
    assert len(env.evidence.query(turn_id="t-loop")) == 5  # every attempt was still recorded

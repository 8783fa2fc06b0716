"""Round-trip properties of the four vendor wire shapes: nothing lost, nothing renamed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.harness.shapes import SHAPE_NAMES, ShapeError, get_shape
from sharedos.harness.shapes.neutral import Call, Result, ToolSpec, Turn, dumps
from sharedos.harness.shapes.wirenames import WIRE_NAME_RE, raw_from_wire, wire_name
from sharedos.names import portable_tool_name

# Every ToolNameSchema-legal name: 1-128 chars of [A-Za-z0-9_.-]
legal_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-",
    min_size=1,
    max_size=128,
)
# Anything a model might emit as a tool name (including malformed ones)
any_names = st.text(min_size=1, max_size=220).filter(lambda s: "\x00" not in s)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=10), json_values, max_size=4)
call_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=40)
schemas = st.fixed_dictionaries(
    {"type": st.just("object")},
    optional={
        "properties": st.dictionaries(
            st.text(min_size=1, max_size=8), st.just({"type": "string"}), max_size=3
        ),
        "additionalProperties": st.booleans(),
    },
)
text_blocks = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=40))
image_blocks = st.builds(
    lambda d, m: {"type": "image", "data": d, "mimeType": m},
    st.text(alphabet="ABCDEFabcdef0123456789+/=", min_size=1, max_size=20),
    st.sampled_from(["image/png", "image/jpeg"]),
)
contents = st.lists(text_blocks | image_blocks, min_size=1, max_size=3)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def over_wire(value: Any) -> Any:
    """What the other side receives: serialised to JSON text and parsed back."""
    return json.loads(dumps(value))


@given(legal_names)
@SETTINGS
def test_wire_name_equals_portable_name_for_every_legal_name(name: str) -> None:
    assert wire_name(name) == portable_tool_name(name)
    assert raw_from_wire(wire_name(name)) == name


@given(any_names)
@SETTINGS
def test_wire_name_carries_any_string_and_reverses_exactly(name: str) -> None:
    wire = wire_name(name)
    assert WIRE_NAME_RE.fullmatch(wire)
    assert raw_from_wire(wire) == name


@given(any_names, any_names)
@SETTINGS
def test_wire_name_is_injective(a: str, b: str) -> None:
    if a != b:
        assert wire_name(a) != wire_name(b)


def test_malformed_wire_names_are_not_decoded() -> None:
    # a model guessing a harness-style alias: not an escape, so it reaches the kernel as-is
    assert raw_from_wire("files_read") is None
    assert raw_from_wire("files_u00002e") is None  # '.' must be written _d, not escaped
    assert raw_from_wire("files read") is None
    assert raw_from_wire("a_u000020b") == "a b"


@pytest.mark.parametrize("shape_name", SHAPE_NAMES)
@given(data=st.data())
@SETTINGS
def test_catalogue_round_trips(shape_name: str, data: st.DataObject) -> None:
    shape = get_shape(shape_name)
    names = data.draw(st.lists(legal_names, min_size=1, max_size=6, unique=True))
    specs = [ToolSpec(n, data.draw(st.text(max_size=30)), data.draw(schemas)) for n in names]
    if shape_name == "anthropic" and any(len(wire_name(n)) > 128 for n in names):
        # Anthropic's 1-128 rule on tool definitions: refused loudly, never truncated
        with pytest.raises(ShapeError, match="limit is 128"):
            shape.tools_wire(specs)
        return
    wire = over_wire(shape.tools_wire(specs))
    assert shape.tools_from_wire(wire) == specs
    if shape_name in ("responses", "anthropic"):
        assert all(re.fullmatch(r"^[a-zA-Z0-9_-]+$", t["name"]) for t in wire)


@pytest.mark.parametrize("shape_name", SHAPE_NAMES)
@given(data=st.data())
@SETTINGS
def test_calls_round_trip_with_raw_names(shape_name: str, data: st.DataObject) -> None:
    shape = get_shape(shape_name)
    ids = data.draw(st.lists(call_ids, min_size=1, max_size=4, unique=True))
    calls = tuple(Call(i, data.draw(any_names), data.draw(arguments)) for i in ids)
    wire = over_wire(shape.turn_wire(Turn(calls), model="m", seq=1))
    assert shape.turn_from_wire(wire).calls == calls


@pytest.mark.parametrize("shape_name", SHAPE_NAMES)
@given(data=st.data())
@SETTINGS
def test_results_round_trip(shape_name: str, data: st.DataObject) -> None:
    shape = get_shape(shape_name)
    ids = data.draw(st.lists(call_ids, min_size=1, max_size=4, unique=True))
    flag = None if not shape.carries_error_flag else True
    results = [
        Result(i, tuple(data.draw(contents)), None if flag is None else data.draw(st.booleans()))
        for i in ids
    ]
    names = {i: data.draw(any_names) for i in ids}
    wire = over_wire(shape.results_wire(results, names))
    assert shape.results_from_wire(wire) == results


@pytest.mark.parametrize("shape_name", SHAPE_NAMES)
def test_final_text_round_trips(shape_name: str) -> None:
    shape = get_shape(shape_name)
    wire = over_wire(shape.turn_wire(Turn((), "all done"), model="m", seq=3))
    turn = shape.turn_from_wire(wire)
    assert turn.calls == () and turn.text == "all done"


def test_responses_wire_is_the_real_shape() -> None:
    shape = get_shape("responses")
    tools = shape.tools_wire([ToolSpec("files.read", "Read", {"type": "object"})])
    assert tools == [
        {
            "type": "function",
            "name": "files_dread",
            "description": "Read",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    resp = shape.turn_wire(Turn((Call("call_1", "files.read", {"path": "/a"}),)), model="m", seq=1)
    item = resp["output"][0]
    assert item == {
        "type": "function_call",
        "id": "fc_0001_00",
        "call_id": "call_1",
        "name": "files_dread",
        "arguments": '{"path":"/a"}',
        "status": "completed",
    }
    out = shape.results_wire([Result("call_1", ({"type": "text", "text": "no"},), None)], {})
    assert out == [{"type": "function_call_output", "call_id": "call_1", "output": "no"}]


def test_anthropic_wire_is_the_real_shape() -> None:
    shape = get_shape("anthropic")
    tools = shape.tools_wire([ToolSpec("files.read", "Read", {"type": "object"})])
    assert tools == [
        {"name": "files_dread", "description": "Read", "input_schema": {"type": "object"}}
    ]
    msg = shape.turn_wire(Turn((Call("toolu_1", "files.read", {"path": "/a"}),)), model="m", seq=1)
    assert msg["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "files_dread", "input": {"path": "/a"}}
    ]
    assert msg["stop_reason"] == "tool_use"
    out = shape.results_wire([Result("toolu_1", ({"type": "text", "text": "denied"},), True)], {})
    assert out == [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "denied"}],
                    "is_error": True,
                }
            ],
        }
    ]


def test_pi_wire_is_the_real_shape() -> None:
    shape = get_shape("pi")
    msg = shape.turn_wire(Turn((Call("tc1", "files.read", {"path": "/a"}),)), model="m", seq=1)
    assert msg["role"] == "assistant" and msg["stopReason"] == "toolUse"
    assert msg["content"] == [
        {"type": "toolCall", "id": "tc1", "name": "files.read", "arguments": {"path": "/a"}}
    ]
    (res,) = shape.results_wire(
        [Result("tc1", ({"type": "text", "text": "no"},), True)], {"tc1": "files.read"}
    )
    assert {k: res[k] for k in ("role", "toolCallId", "toolName", "content", "isError")} == {
        "role": "toolResult",
        "toolCallId": "tc1",
        "toolName": "files.read",
        "content": [{"type": "text", "text": "no"}],
        "isError": True,
    }
    assert isinstance(res["timestamp"], int)


DSH_FRAMES = Path(__file__).resolve().parents[1] / "data" / "harness" / "dsh"


def recorded_dsh_frames() -> list[dict[str, Any]]:
    """tool/call and tool/result events from a real dsh 0.2.1-rc.2 session log."""
    path = DSH_FRAMES / "session-tool-frames-0.2.1-rc.2.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_dsh_reads_and_writes_its_real_recorded_frames_exactly() -> None:
    """The recorded frames validate field for field (extra fields refused) and the shape
    writes frames of exactly the same structure for the same call and result."""
    frames = recorded_dsh_frames()
    calls = [f for f in frames if f["type"] == "tool/call"]
    results = [f for f in frames if f["type"] == "tool/result"]
    assert (
        calls
        and results
        and {r["data"]["message"]["isError"] for r in results}
        == {
            False,
            True,
        }
    )
    from sharedos.harness.shapes import dsh

    for frame in calls:
        assert dsh.ToolCallEvent.model_validate(frame).model_dump(mode="json") == frame
    for frame in results:
        parsed = dsh.ToolResultEvent.model_validate(frame)
        assert parsed.model_dump(mode="json", exclude_none=True) == frame
    shape = get_shape("dsh")
    for call_frame, result_frame in zip(calls, results, strict=True):
        # harness side reads the real call; the model side writes it back identically
        turn = shape.turn_from_wire({"events": [call_frame]})
        (call,) = turn.calls
        assert call.call_id == call_frame["data"]["callId"]
        assert call.arguments == json.loads(call_frame["data"]["arguments"])
        written = shape.turn_wire(
            Turn((Call(call.call_id, call.name, call.arguments),)),
            model="m",
            seq=call_frame["data"]["step"],
        )["events"][0]
        for key in ("seq", "time"):
            written[key] = call_frame[key]
        written["data"]["turn"] = call_frame["data"]["turn"]
        # names: dsh's hashed MCP name is not a SharedOS escape, so it reaches the kernel
        # unchanged and is written back escaped (module doc: the one deliberate difference)
        assert call.name == call_frame["data"]["name"]
        assert written["data"]["name"] == wire_name(call.name)
        written["data"]["name"] = call_frame["data"]["name"]
        assert written == call_frame
        # the result dsh recorded reads back as the neutral result, and is written the same
        (res,) = shape.results_from_wire([result_frame])
        message = result_frame["data"]["message"]
        assert (res.call_id, list(res.content), res.is_error) == (
            message["toolCallId"],
            message["content"],
            message["isError"],
        )
        again = shape.result_event(res, seq=result_frame["seq"], now=result_frame["time"])
        again["data"]["message"]["id"] = message["id"]
        assert again == result_frame


def test_dsh_rejects_frames_that_differ_from_its_own() -> None:
    (call, *_) = recorded_dsh_frames()
    shape = get_shape("dsh")
    for broken, needle in (
        ({**call, "data": {**call["data"], "arguments": {"path": "/a"}}}, "arguments"),
        ({**call, "extra": 1}, "extra"),
        ({**call, "data": {**call["data"], "arguments": '"x"'}}, "JSON object"),
    ):
        with pytest.raises(ShapeError, match=needle):
            shape.turn_from_wire({"events": [broken]})


@pytest.mark.parametrize(
    ("shape_name", "bad", "needle"),
    [
        (
            "responses",
            [{"type": "function", "name": "files.read", "parameters": {}}],
            "tools[0].name",
        ),
        ("anthropic", [{"name": "a b", "input_schema": {}}], "tools[0].name"),
        ("pi", [{"name": "", "description": "", "parameters": {}}], "tools[0].name"),
        ("dsh", [{"name": "x"}], "tools[0].parameters"),
    ],
)
def test_bad_wire_json_is_a_clear_shape_error(shape_name: str, bad: Any, needle: str) -> None:
    with pytest.raises(ShapeError, match=re.escape(needle)):
        get_shape(shape_name).tools_from_wire(bad)


def test_responses_arguments_must_be_a_json_object() -> None:
    shape = get_shape("responses")
    wire = shape.turn_wire(Turn((Call("c", "files.read", {}),)), model="m", seq=1)
    wire["output"][0]["arguments"] = "{not json"
    with pytest.raises(ShapeError, match="not JSON"):
        shape.turn_from_wire(wire)

"""``context.now``: the host's clock per call, a named time zone, deterministic in tests,
and never frozen by a per-context cache."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import PolicyError, compile_source
from sharedos.policy.clock import ClockError, expand
from sharedos.policy.context import complete_context

OFFICE = (
    "namespace files\n"
    "requirement files.write { action write; resource path(args.path) }\n"
    "requirement files.read  { action read;  resource path(args.path) }\n"
    "condition office_hours = context.now.hour >= 9 and context.now.hour < 18\n"
    'condition weekday = context.now.weekday in ["mon", "tue", "wed", "thu", "fri"]\n'
    'permit write on "/work/**" when office_hours and weekday\n'
    'permit read on "/**"\n'
    'forbid read on "/freeze/**" when context.now.timestamp >= 1798761600\n'  # 2027-01-01Z
    'test "monday morning in Paris" {\n'
    '  context { principal: "a", now: "2026-12-07T09:30:00+01:00[Europe/Paris]" }\n'
    '  call files.write { path: "/work/x" }\n'
    "  expect allow\n"
    "}\n"
    'test "the same instant is night in Los Angeles" {\n'
    '  context { principal: "a", now: "2026-12-07T09:30:00+01:00[America/Los_Angeles]" }\n'
    '  call files.write { path: "/work/x" }\n'
    "  expect deny no_matching_permit\n"
    "}\n"
    'test "saturday" {\n'
    '  context { principal: "a", now: "2026-12-05T10:00:00Z" }\n'
    '  call files.write { path: "/work/x" }\n'
    "  expect deny\n"
    "}\n"
    'test "frozen from 2027" {\n'
    '  context { principal: "a", now: 1798761600 }\n'
    '  call files.read { path: "/freeze/a" }\n'
    "  expect deny forbidden\n"
    "}\n"
)


def test_expand_reads_iso_times_with_a_zone_and_timestamps() -> None:
    paris = expand("2026-12-07T09:30:00+01:00[Europe/Paris]")
    assert (paris["hour"], paris["weekday"], paris["zone"]) == (9, "mon", "Europe/Paris")
    tokyo = expand("2026-12-07T08:30:00Z[Asia/Tokyo]")
    assert (tokyo["hour"], tokyo["date"], tokyo["weekday"]) == (17, "2026-12-07", "mon")
    assert expand(1798761600)["iso"] == "2027-01-01T00:00:00+00:00"
    assert expand("2026-12-07T09:30:00+05:30")["zone"] == "+05:30"
    for bad in (
        "2026-12-07T09:30:00",
        "noon",
        "2026-12-07T09:30:00Z[Mars/Base]",
        True,
        float("nan"),
    ):
        with pytest.raises(ClockError):
            expand(bad)


def test_test_blocks_set_the_time_and_decide_deterministically(tmp_path: Path) -> None:
    (tmp_path / "p.sos").write_text(OFFICE)
    result = CliRunner().invoke(main, ["test", str(tmp_path / "p.sos")])
    assert result.exit_code == 0, result.output
    assert "4 tests: 4 passed, 0 failed" in result.output
    # check: context.now is part of the context the kernel passes (no SOS501)
    check = CliRunner().invoke(main, ["check", "--strict", str(tmp_path / "p.sos")])
    assert check.exit_code == 0, check.output


def test_without_now_a_condition_on_the_time_fails_closed() -> None:
    policy = compile_source(OFFICE, "t.sos")
    ctx = complete_context({"principal": "a"})
    assert "now" not in ctx  # a test never reads the machine's clock
    assert not policy.decide("files.write", {"path": "/work/x"}, ctx).allowed
    assert policy.decide("files.read", {"path": "/freeze/a"}, ctx).reason.value == "forbidden"


def test_a_per_context_cache_does_not_freeze_the_time() -> None:
    policy = compile_source(OFFICE, "t.sos")
    assert policy.reads_clock
    base = {"principal": "a", "tenant": "default", "roles": [], "attributes": {}}
    key = json.dumps(base, sort_keys=True)  # the same context key every call
    for when, allowed in (
        ("2026-12-07T10:00:00Z", True),
        ("2026-12-07T23:00:00Z", False),
        ("2026-12-08T10:00:00Z", True),
        ("2026-12-12T10:00:00Z", False),
    ):
        ctx = {**base, "now": expand(when)}
        got = policy.decide("files.write", {"path": "/work/x"}, ctx, context_key=key)
        assert got.allowed is allowed, when
    # listing cannot know the time of a later call: the tool is listed whenever
    # some time could allow it, and each call is decided at its own time
    assert policy.could_permit("files.write", base, context_key=key)
    night = {**base, "now": expand("2026-12-07T23:00:00Z")}
    assert policy.could_permit("files.write", night, context_key=key)


def test_a_policy_that_does_not_read_the_time_does_not_ask_for_it() -> None:
    policy = compile_source(OFFICE.split("condition")[0] + 'permit read on "/**"\n', "t.sos")
    assert not policy.reads_clock


def test_a_pattern_cannot_interpolate_the_time() -> None:
    text = OFFICE.split("condition")[0] + 'permit read on "/days/{context.now.weekday}/**"\n'
    with pytest.raises(PolicyError) as info:
        compile_source(text, "t.sos")
    assert [d.code for d in info.value.diagnostics] == ["SOS207"]


def test_a_test_with_an_unreadable_time_is_warned_about(tmp_path: Path) -> None:
    text = OFFICE.replace('now: "2026-12-05T10:00:00Z"', 'now: "saturday"')
    (tmp_path / "p.sos").write_text(text)
    result = CliRunner().invoke(main, ["check", str(tmp_path / "p.sos")])
    assert "warning[SOS502]" in result.output and "context.now" in result.output


def test_eval_and_explain_read_now_or_take_this_moment(tmp_path: Path) -> None:
    (tmp_path / "p.sos").write_text(OFFICE)
    lines = [
        {
            "tool": "files.write",
            "args": {"path": "/work/x"},
            "context": {"now": "2026-12-07T10:00:00Z"},
        },
        {
            "tool": "files.write",
            "args": {"path": "/work/x"},
            "context": {"now": "2026-12-07T22:00:00Z"},
        },
        {"tool": "files.write", "args": {"path": "/work/x"}, "context": {"now": "teatime"}},
        {"tool": "files.read", "args": {"path": "/a"}},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines) + "\n"
    result = CliRunner().invoke(main, ["eval", str(tmp_path / "p.sos")], input=stdin)
    out = [json.loads(x) for x in result.stdout.splitlines()]
    assert [o.get("effect") for o in out] == ["allow", "deny", None, "allow"]
    assert out[2]["error"]["code"] == "invalid_request"
    explained = CliRunner().invoke(
        main,
        [
            "explain",
            str(tmp_path / "p.sos"),
            "--tool",
            "files.write",
            "--args",
            '{"path": "/work/x"}',
            "--format",
            "json",
        ],
    )
    assert explained.exit_code == 0, explained.output
    now = json.loads(explained.stdout)["context"]["now"]
    assert now["zone"] == "UTC" and abs(now["timestamp"] - datetime.now(UTC).timestamp()) < 600


@pytest.mark.anyio
async def test_the_kernel_supplies_now_per_call_from_its_clock(tmp_path: Path) -> None:
    from sharedos.catalog import ToolDefinition, ToolRegistry
    from sharedos.evidence import SqliteEvidenceStore
    from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
    from sharedos.kernel.handlers import HandlerContext, HandlerResult
    from sharedos.toolpolicy import RunMode, ToolPolicy

    async def handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        return HandlerResult.text("ok")

    tool = ToolDefinition(
        name="files.write",
        description="write",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
        handler=handler,
    )
    moments = iter(
        [
            datetime(2026, 12, 7, 8, 30, tzinfo=UTC).timestamp(),  # 09:30 in Paris, Monday
            datetime(2026, 12, 7, 17, 30, tzinfo=UTC).timestamp(),  # 18:30 in Paris
            datetime(2026, 12, 8, 8, 0, tzinfo=UTC).timestamp(),  # Tuesday 09:00 in Paris
        ]
    )
    policy = compile_source(OFFICE, "t.sos")
    kernel = Kernel(
        policy, ToolRegistry([tool]), time_zone="Europe/Paris", clock=lambda: next(moments)
    )
    host = RuntimeHost(kernel, SqliteEvidenceStore(tmp_path / "e.db"))
    alice = AccessContext(principal="alice")
    run = ToolPolicy(name="r", mode=RunMode.OPEN, managed=("files.*",))
    outcomes = []
    for i in range(3):
        call = ToolCall(call_id=f"c{i}", tool="files.write", arguments={"path": "/work/x"})
        outcomes.append(str((await host.invoke_tool(call, alice, run)).outcome))
    assert outcomes == ["succeeded", "denied", "succeeded"]
    with pytest.raises(ValueError, match="unknown time zone"):
        Kernel(policy, ToolRegistry([tool]), time_zone="Mars/Base")


# Rules whose time tests exclude each other: no time of the week lets a call
# through, so listing must not offer the tool (the time is unknown at listing
# "like the arguments", and tests of one argument are weighed jointly).
NEVER_AT_ANY_TIME = [
    'permit read on "/**" when context.now.weekday == "mon"\n'
    'forbid read on "/**" unless context.now.weekday == "tue"\n',
    'permit read on "/**" when context.now.weekday == "mon"\n'
    'forbid read on "/**" when context.now.weekday != "tue"\n',
    'permit read on "/**" when context.now.hour == 9\n'
    'forbid read on "/**" unless context.now.hour in [10, 11]\n',
    'permit read on "/**" when context.now.weekday in ["sat", "sun"]\n'
    'forbid read on "/**" when context.now.weekday not in ["mon"]\n',
    'permit read on "/**" when context.now.hour == 9 unless context.now.hour != 10\n',
]
SOMETIMES = [
    'permit read on "/**" when context.now.weekday == "mon"\n'
    'forbid read on "/**" unless context.now.weekday in ["mon", "tue"]\n',
    'permit read on "/**" when context.now.hour == 9\n'
    'forbid read on "/**" when context.now.weekday == "mon"\n',
    'permit read on "/**" when context.now.weekday != "mon"\n'
    'forbid read on "/**" when context.now.weekday == "tue"\n',
]


@pytest.mark.parametrize("rules", NEVER_AT_ANY_TIME + SOMETIMES)
def test_listing_weighs_the_time_jointly(rules: str) -> None:
    header = OFFICE.split("condition")[0]
    policy = compile_source(header + rules, "t.sos")
    base = {"principal": "a", "roles": [], "tenant": "t", "attributes": {}}
    week = [
        {**base, "now": expand(1796601600 + 3600 * h)}  # Mon 2026-12-07 00:00Z + h hours
        for h in range(7 * 24)
    ]
    some = any(policy.decide("files.read", {"path": "/x"}, ctx).allowed for ctx in week)
    assert some is (rules in SOMETIMES)
    assert policy.could_permit("files.read", base) is some


@pytest.mark.parametrize(
    "now",
    [
        "0001-01-01T00:00:00+01:00[UTC]",  # 0000-12-31T23:00 in UTC
        "9999-12-31T23:59:59-01:00[UTC]",  # 10000-01-01T00:59:59 in UTC
        "9999-12-31T23:30:00+00:00[Pacific/Kiritimati]",
    ],
)
def test_a_time_its_zone_puts_outside_year_1_to_9999_is_unreadable(
    tmp_path: Path, now: str
) -> None:
    """Converting to the named zone can leave datetime's range: that is a time that cannot
    be read (ClockError), so eval answers invalid_request and explain a usage error, as
    for any unreadable now, never an internal error (exit 3)."""
    with pytest.raises(ClockError, match="year 1 to 9999"):
        expand(now)
    with pytest.raises(ClockError, match="unknown time zone"):  # not taken for one
        expand(now.split("[")[0] + "[Mars/Base]")
    (tmp_path / "p.sos").write_text(OFFICE)
    line = {"tool": "files.read", "args": {"path": "/a"}, "context": {"now": now}}
    result = CliRunner().invoke(main, ["eval", str(tmp_path / "p.sos")], input=json.dumps(line))
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["error"]["code"] == "invalid_request"
    explained = CliRunner().invoke(
        main,
        ["explain", str(tmp_path / "p.sos"), "--tool", "files.read", "--args", '{"path": "/a"}',
         "--context", json.dumps({"now": now})],
    )  # fmt: skip
    assert explained.exit_code == 2, explained.output
    assert "year 1 to 9999" in explained.output
    # a test block with that time is warned about, as any unreadable time is
    (tmp_path / "p.sos").write_text(OFFICE.replace('now: "2026-12-05T10:00:00Z"', f'now: "{now}"'))
    checked = CliRunner().invoke(main, ["check", str(tmp_path / "p.sos")])
    assert checked.exit_code == 0, checked.output
    assert "warning[SOS502]" in checked.output and "year 1 to 9999" in checked.output


@pytest.mark.parametrize("now", ["1969-12-31T23:59:59.5Z", -0.5, "1969-12-31T23:59:59.999-00:00"])
def test_the_timestamp_rounds_down_as_the_other_members_do(now: Any) -> None:
    """Half a second before 1970 is 1969-12-31 23:59:59 in every member, timestamp -1
    included (int() of the float rounded it toward zero: 0, 1970-01-01T00:00:00Z, so a
    forbid 'when context.now.timestamp < 0' did not see a time before it)."""
    value = expand(now)
    assert (value["date"], value["hour"], value["minute"]) == ("1969-12-31", 23, 59)
    assert value["timestamp"] == -1
    text = OFFICE.replace("timestamp >= 1798761600", "timestamp < 0")
    policy = compile_source(text, "p.sos")
    decided = policy.decide("files.read", {"path": "/freeze/a"}, {"now": value})
    assert decided.reason.value == "forbidden"


@pytest.mark.parametrize(
    ("now", "zone"),
    [
        ("2026-12-07T09:30:00+05:45:30", "+05:45:30"),
        ("2026-12-07T09:30:00-01:00:01.5", "-01:00:01.500000"),
        ("2026-12-07T09:30:00-00:30", "-00:30"),
        ("2026-12-07T09:30:00+00:00", "UTC"),
    ],
)
def test_a_time_given_by_its_offset_is_in_that_offset(now: str, zone: str) -> None:
    """An offset with seconds (ISO 8601 and Python allow one) was named "UTC", while
    hour and minute were read in the offset: 'context.now.zone == "UTC"' held for a
    time five hours and three quarters away from it."""
    value = expand(now)
    assert value["zone"] == zone
    assert value["iso"].endswith(zone if zone != "UTC" else "+00:00")

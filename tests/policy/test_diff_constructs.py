"""``diff`` on the language constructs of issue 23: ``has``, ``path()`` in conditions,
``lower`` as a caseless key, equality that keeps ``true`` and ``1`` apart at any depth,
and the clock ``context.now``.

Each case is a change the analysis must find (or rule out) exactly: the ones marked
"was" were reported "no change" (exit 0) before the analysis learned the construct.
Every counterexample is decided again by fresh compiles (``assert_real``).
"""

from __future__ import annotations

from typing import Any

import pytest

from sharedos.policy.analysis.clock_values import MemberUses, now_values
from sharedos.policy.analysis.strings import Glob, representatives
from sharedos.policy.clock import FIELDS, WEEKDAYS
from sharedos.policy.text import fold
from tests.policy.test_diff import assert_real, diff_texts

HEAD = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"


def diff(old_rule: str, new_rule: str) -> Any:
    old, new = HEAD + old_rule + "\n", HEAD + new_rule + "\n"
    report = diff_texts(old, new, max_examples=0)
    assert assert_real(old, new, report) == sum(len(g.examples) for g in report.groups)
    return report


def kinds(report: Any) -> set[str]:
    return {g.kind for g in report.groups}


def examples(report: Any) -> list[Any]:
    return [c for g in report.groups for c in g.examples]


# ---------------------------------------------------------------------------- has


def test_a_presence_test_is_tried_with_the_argument_missing_and_present() -> None:
    # was: "no change" (the argument was never passed, so `has` was never true)
    report = diff('permit read on "/a/**"', 'permit read on "/a/**" unless has args.x')
    assert report.verdict == "changed" and report.complete
    assert kinds(report) == {"narrowed"}
    assert all("x" in c.request.args for c in examples(report))


def test_two_presence_tests_on_different_arguments_differ_both_ways() -> None:
    # was: "no change"
    report = diff(
        'permit read on "/a/**" when has args.x', 'permit read on "/a/**" when has args.y'
    )
    assert report.complete and kinds(report) == {"widened", "narrowed"}


def test_a_presence_test_of_the_resource_argument_is_no_gap() -> None:
    # a rule's condition is evaluated only when the resource resolved: `has args.path`
    # is true there, and no spelling of it needs trying
    report = diff(
        'permit read on "/a/**"', 'permit read on "/a/**" when has args.path and has args.x'
    )
    assert report.complete and kinds(report) == {"narrowed"}


def test_a_guarded_read_is_found_where_the_guard_holds() -> None:
    old = 'forbid read on "/**" when has args.branch and args.branch == "main"'
    report = diff('permit read on "/**"\n' + old, 'permit read on "/**"')
    assert report.complete and kinds(report) == {"widened"}
    assert all(c.request.args.get("branch") == "main" for c in examples(report))


# ---------------------------------------------------------------------- path()


def test_a_prefix_of_a_canonical_argument_is_tried_with_a_path_under_it() -> None:
    # was: "no change" (the shortest raw string "/a/" starting with "/a/" is the
    # path "/a", which does not)
    report = diff(
        'permit read on "/a/**" when startswith(path(args.dst), "/a/")',
        'permit read on "/a/**" when startswith(path(args.dst), "/a/") and args.z == 1',
    )
    assert report.complete and kinds(report) == {"narrowed"}
    assert all(c.request.args["dst"].startswith("/a/") for c in examples(report))


def test_a_segment_of_a_canonical_argument_is_analysed() -> None:
    # was: an incomplete analysis ("equality between these operands is not analysed")
    report = diff(
        'permit read on "/a/**" when segment(path(args.dst), 2) == "b"',
        'permit read on "/a/**" when segment(path(args.dst), 2) in ["b", "c"]',
    )
    assert report.complete and kinds(report) == {"widened"}
    assert {c.request.args["dst"].split("/")[2] for c in examples(report)} == {"c"}


def test_a_canonical_argument_also_read_as_written_is_a_gap() -> None:
    report = diff(
        'permit read on "/a/**" when startswith(path(args.dst), "/a/")',
        'permit read on "/a/**" when startswith(path(args.dst), "/a/") and args.dst != "/a/x"',
    )
    assert not report.complete
    assert any("path()" in gap.why for gap in report.gaps)


# ----------------------------------------------------------------------- lower


def test_lower_is_the_caseless_key_fullwidth_and_sharp_s_included() -> None:
    glob = Glob.literal("ss", fold=True)
    assert glob.matches("ß") and glob.matches("SS") and glob.matches("ＳＳ")
    assert not glob.matches("s")
    kelvin = Glob.literal("k", fold=True)
    assert kelvin.matches("\u212a")  # the Kelvin sign
    found = representatives([Glob.literal("private", fold=True), Glob.prefix("P")])
    # every representative's answers are the real lower()'s
    for text, vector in found.found:
        assert vector == (fold(text) == "private", text.startswith("P"))
    assert {v for _, v in found.found} == {
        (True, True),
        (True, False),
        (False, True),
        (False, False),
    }


def test_a_change_from_a_caseless_test_to_an_exact_one_is_narrowed() -> None:
    report = diff(
        'permit read on "/a/**" when lower(args.n) == "admin"',
        'permit read on "/a/**" when args.n == "admin"',
    )
    assert report.complete and kinds(report) == {"narrowed"}
    for change in examples(report):
        assert change.request.args["n"] != "admin" and fold(change.request.args["n"]) == "admin"


def test_lower_beside_a_wildcard_test_as_written_is_a_gap() -> None:
    report = diff(
        'permit read on "/a/**" when lower(args.n) == "ab"',
        'permit read on "/a/**" when lower(args.n) == "ab" and startswith(args.n, "a")',
    )
    assert kinds(report) == {"narrowed"} and not report.complete


# -------------------------------------------------------------- strict equality


def test_true_and_1_stay_apart_inside_lists() -> None:
    # was: "no change" ([1] was dropped as a duplicate of [true], Python's == says so)
    report = diff(
        'permit read on "/a/**" when args.x == [1] or args.x == [true]',
        'permit read on "/a/**" when args.x == [true]',
    )
    assert report.complete and kinds(report) == {"narrowed"}
    assert [c.request.args["x"] for c in examples(report)] == [[1]]


def test_objects_compared_with_the_context_are_found_equal_and_unequal() -> None:
    report = diff(
        'permit read on "/a/**" when args.o == context.attributes.o',
        'permit read on "/a/**"',
    )
    assert report.complete and kinds(report) == {"widened"}


# ----------------------------------------------------------------------- clock


def _valid_now(now: Any) -> None:
    assert set(now) == set(FIELDS)
    assert 0 <= now["hour"] <= 23 and 0 <= now["minute"] <= 59
    assert now["weekday"] in WEEKDAYS


def test_every_witness_time_is_a_complete_time_there_is() -> None:
    report = diff(
        'permit read on "/a/**"',
        'permit read on "/a/**" when context.now.hour >= 9 and context.now.hour < 18 '
        'and context.now.weekday in ["mon", "tue", "wed", "thu", "fri"]',
    )
    assert report.complete and kinds(report) == {"narrowed"}
    seen = set()
    for change in examples(report):
        now = change.request.context["now"]
        _valid_now(now)
        seen.add((now["hour"] >= 9 and now["hour"] < 18, now["weekday"] in ("sat", "sun")))
    # outside office hours on a weekday, and any time at the weekend
    assert seen == {(False, False), (True, True), (False, True)}


def test_a_moved_cutoff_is_found_to_the_second() -> None:
    report = diff(
        'permit read on "/a/**" when context.now.timestamp < 1798761600',
        'permit read on "/a/**" when context.now.timestamp < 1798765200',
    )
    assert report.complete and kinds(report) == {"widened"}
    for change in examples(report):
        _valid_now(change.request.context["now"])
        assert 1798761600 <= change.request.context["now"]["timestamp"] < 1798765200


def test_clock_classes_are_every_combination_of_hour_and_weekday() -> None:
    domain = now_values(
        {
            "hour": MemberUses((9, 18)),
            "weekday": MemberUses((), (Glob.literal("sat"), Glob.literal("sun"))),
        }
    )
    assert domain.note is None
    classes = {
        (sum(v["hour"] > b for b in (9, 18)), v["hour"] in (9, 18), v["weekday"])
        for v in domain.values
    }
    # below 9, at 9, between, at 18, above 18; on Saturday, on Sunday, on another day
    assert len({(a, b) for a, b, _ in classes}) == 5
    assert len({w if w in ("sat", "sun") else "other" for *_, w in classes}) == 3
    assert len(classes) == 5 * 3 == len(domain.values)


@pytest.mark.parametrize(
    "condition",
    [
        # each was "no change" (exit 0 under --kind widened): only UTC and the zones
        # named were tried, so a host in any other zone was never a witness
        'context.now.zone != "UTC"',
        'startswith(context.now.zone, "Europe/")',
        'not (context.now.zone in ["UTC", "Etc/UTC"])',
        # an iso named with an offset no zone named spells (UTC spells +00:00)
        'context.now.iso == "2026-11-02T03:05:00+01:00"',
    ],
)
def test_a_zone_no_test_names_is_tried(condition: str) -> None:
    report = diff('permit read on "/a/**"', f'permit read on "/a/**" unless {condition}')
    assert report.verdict == "changed" and report.complete
    assert kinds(report) == {"narrowed"}
    for change in examples(report):
        _valid_now(change.request.context["now"])


def test_zones_are_tried_once_per_class_the_tests_tell_apart() -> None:
    tests = (Glob.literal("UTC"), Glob.prefix("Europe/"), Glob.literal("Europe/Paris"))
    domain = now_values({"zone": MemberUses((), tests)})
    assert domain.note is None
    classes = [tuple(g.matches(v["zone"]) for g in tests) for v in domain.values]
    # UTC, Paris, another European zone, a zone elsewhere: each once
    assert sorted(classes) == sorted(
        [(True, False, False), (False, True, True), (False, True, False), (False, False, False)]
    )


# --------------------------------------------- a context hole against a template


@pytest.mark.parametrize(
    ("template", "added", "changed"),
    [
        # each was "no change" (exit 0 under --kind widened) while the new permit
        # allows calls: the context values tried came from the rules' patterns only
        # ('org-a', 'zz'), never from the template's fixed text
        ("org-{args.owner}/x/{args.repo}", "{context.principal}/x/*", True),  # org-...
        ("org-{args.owner}/x/{args.repo}", "*/{context.principal}/*", True),  # x
        ("a/{args.owner}/b", "{context.principal}/**", True),  # a
        ("pre{args.owner}", "{context.principal}", True),  # pre...
        ("{args.owner}.git/{args.repo}", "org-{context.principal}/**", True),  # org-a.git
        # never: 'x' is not 'p' + anything
        ("org-{args.owner}/x/{args.repo}", "*/p{context.principal}/*", False),
    ],
)
def test_a_hole_is_tried_with_the_values_a_templates_own_segments_need(
    template: str, added: str, changed: bool
) -> None:
    old = (
        "namespace gh\n"
        f'requirement gh.t {{ action admin; resource "{template}" }}\n'
        'permit admin on "org-a/**"\n'
        'permit admin on "zz/**"\n'
    )
    new = old + f'permit admin on "{added}"\n'
    report = diff_texts(old, new, max_examples=0)
    assert assert_real(old, new, report) == sum(len(g.examples) for g in report.groups)
    assert report.complete
    if changed:
        assert report.verdict == "changed" and kinds(report) == {"widened"}
    else:
        assert report.verdict == "unchanged"


@pytest.mark.parametrize(
    "condition",
    [
        # each was "no change" (exit 0): the year tried (2026) has no February 29
        "context.now.month == 2 and context.now.day == 29",
        "context.now.day == 29 and context.now.month == 2 and context.now.hour == 3",
        'context.now.month == 2 and context.now.day == 29 and context.now.weekday == "thu"',
    ],
)
def test_a_leap_day_is_tried(condition: str) -> None:
    report = diff('permit read on "/a/**"', f'permit read on "/a/**" unless {condition}')
    assert report.verdict == "changed" and kinds(report) == {"narrowed"}
    for change in examples(report):
        now = change.request.context["now"]
        _valid_now(now)
        assert (now["month"], now["day"]) == (2, 29)  # a narrowed call is on that day
        assert now["weekday"] == "thu" or "weekday" not in condition


@pytest.mark.parametrize(
    "condition",
    [
        # each was "no change" (exit 0): years were tried from 1971 to 9998 only, while
        # the clock writes (and a test or a replayed context holds) years 1 to 9999
        "context.now.year <= 1970",
        "context.now.year == 9999 and context.now.month == 12",
        "context.now.year < 1000",
    ],
)
def test_every_year_the_clock_writes_is_tried(condition: str) -> None:
    report = diff('permit read on "/a/**"', f'permit read on "/a/**" unless {condition}')
    assert report.verdict == "changed" and kinds(report) == {"narrowed"}
    for change in examples(report):
        _valid_now(change.request.context["now"])


@pytest.mark.parametrize(
    ("condition", "day"),
    [
        # was "no change" (exit 0): the months between 1 and 4 were tried as February
        # alone, which has no 31st; March 31 is one
        ("context.now.day == 31 and context.now.month > 1 and context.now.month < 4", (3, 31)),
        ("context.now.day >= 30 and context.now.month >= 2 and context.now.month <= 3", (3, 30)),
    ],
)
def test_a_day_only_some_months_of_a_class_have_is_tried(
    condition: str, day: tuple[int, int]
) -> None:
    report = diff('permit read on "/a/**"', f'permit read on "/a/**" unless {condition}')
    assert report.verdict == "changed" and kinds(report) == {"narrowed"}
    for change in examples(report):
        now = change.request.context["now"]
        _valid_now(now)
        assert now["month"] == day[0] and now["day"] >= day[1]


def test_a_day_no_month_of_its_class_has_changes_nothing() -> None:
    report = diff('permit read on "/a/**"', 'permit read on "/a/**" unless '
                  "context.now.day > 29 and context.now.month == 2")  # fmt: skip
    assert report.verdict != "changed"

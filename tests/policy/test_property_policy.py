"""Property tests: arbitrary text never crashes the toolchain; formatting is a
meaning-preserving fixed point.

Example counts stay modest (the whole suite must run in minutes on 2 cores).
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharedos.policy import PolicyError, compile_source
from sharedos.policy.checker import check
from sharedos.policy.formatter import format_source
from sharedos.policy.lints import lint
from sharedos.policy.parser import parse_source
from tests.budget import examples

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "policy_cli"
SEEDS = [
    p.read_text(encoding="utf-8")
    for p in sorted((REPO / "rules").glob("*.sos"))
    + sorted((REPO / "policy").glob("*.sos"))
    + [DATA / "messy.sos", DATA / "lint.sos", DATA / "good" / "files.sos"]
]

SETTINGS = settings(
    max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

TOKENS = [
    "namespace", "requirement", "permit", "forbid", "toolpolicy", "test", "on", "when",
    "unless", "action", "resource", "mode", "managed", "harness_local", "external_direct",
    "context", "call", "expect", "allow", "deny", "and", "or", "not", "in", "==", "!=",
    "{", "}", "(", ")", "[", "]", ",", ";", ":", "@id(\"x\")", "*", "**", '"/a/**"', '"',
    "#", "\n", " ", "path(args.p)", "context.roles", "args.x", "1.5", "-3", "true",
    "\\", "\x00", "é", "{context.principal}",
]  # fmt: skip


def toolchain_never_raises(text: str) -> None:
    """Parse, check, lint and format: every stage returns diagnostics, none raises."""
    parsed = parse_source(text, "fuzz.sos")
    check([parsed.file])
    lint([parsed.file])
    result = format_source(text, "fuzz.sos")
    if result.text is not None:
        again = format_source(result.text, "fuzz.sos")
        assert again.text == result.text  # idempotent
    try:
        compile_source(text, "fuzz.sos")
    except PolicyError as exc:
        assert exc.diagnostics  # an error always comes with at least one diagnostic


@SETTINGS
@given(st.text(max_size=400))
def test_random_text_never_raises(text: str) -> None:
    toolchain_never_raises(text)


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_random_token_soup_never_raises(text: str) -> None:
    toolchain_never_raises(text)


@st.composite
def mutated_seed(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i, min(len(text), i + 40)))
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "replace"]))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + draw(st.text(max_size=5)) + text[j:]
    return text


@SETTINGS
@given(mutated_seed())
def test_mutated_policies_never_raise(text: str) -> None:
    toolchain_never_raises(text)
    # a mutant that still compiles must format to the same decisions
    try:
        before = decisions(text, SEED_CALLS)
    except PolicyError:
        return
    result = format_source(text, "gen.sos")
    formatted = result.text
    if formatted is None:
        # A repeated toolpolicy clause is refused (and does not compile); a key
        # written twice in a test object compiles with warning SOS511, and fmt
        # refuses it rather than drop one of the two values.
        duplicate = any(t.duplicate_keys for t in parse_source(text).file.tests)
        assert duplicate and "writes a key twice" in result.diagnostics[0].message
        return
    assert _strip_auto_ids(decisions(formatted, SEED_CALLS)) == _strip_auto_ids(before)


# ----------------------------------------------------- generated valid policies

NAMES = st.sampled_from(["alpha", "beta", "gamma", "x1", "under_score"])
SEGMENT = st.sampled_from(["public", "private", "home", "a", "b", "docs", "x.y"])
ACTIONS = ["read", "write", "list"]


@st.composite
def pattern(draw: st.DrawFn) -> str:
    segs = draw(
        st.lists(
            st.one_of(SEGMENT, st.just("*"), st.just("{context.principal}"), st.just("pre*")),
            min_size=0,
            max_size=3,
        )
    )
    if draw(st.booleans()):
        segs.append("**")
    return "/" + "/".join(segs) if segs else "/**"


def atom(draw: st.DrawFn) -> str:
    return draw(
        st.sampled_from(
            [
                '"admin" in context.roles',
                '"editor" in context.roles',
                'context.principal == "alice"',
                'context.principal != "bob"',
                'startswith(resource, "/public")',
                'action == "read"',
                "args.flag == true",
                "args.n == 3",
                'endswith(resource, ".txt")',
                'context.tenant in ["a", "default"]',
                # issue 13's constructs
                "args.n < 4",
                "args.n >= 3",
                'contains(context.principal, "li")',
                'lower(context.principal) == "alice"',
                'segment(resource, 1) == "public"',
                'segment(resource, -1) != "x"',
                'any_in(["admin", "x"], context.roles)',
                "all_in([], context.roles)",
                'startswith(resource, "/home/" + context.principal)',
                "is_staff",
                "is_staff and args.n <= 3",
                # issue 23's constructs
                "has args.n and args.n < 4",
                "not has args.flag",
                "has context.attributes.team",
                'segment(path(args.path), 1) == "public"',
                'lower(context.principal) == "alice"',
            ]
        )
    )


@st.composite
def condition(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 2 or draw(st.booleans()):
        return atom(draw)
    left = draw(condition(depth + 1))
    right = draw(condition(depth + 1))
    shape = draw(st.sampled_from(["and", "or", "not", "paren"]))
    if shape == "not":
        return f"not ({left})"
    if shape == "paren":
        return f"({left}) and ({right})"
    return f"{left} {shape} {right}"


def ws(draw: st.DrawFn) -> str:
    return draw(st.sampled_from([" ", "  ", "\n", " \n  ", "\t"]))


@st.composite
def valid_policy(draw: st.DrawFn) -> str:
    parts = ["namespace files", "requirement files.read { action read; resource path(args.path) }"]
    parts.append('condition is_staff = "admin" in context.roles or "editor" in context.roles')
    parts.append("requirement files.write {action write\n resource path(args.path)}")
    parts.append("requirement files.list { action list; resource path(args.root) }")
    for i in range(draw(st.integers(0, 6))):
        effect = draw(st.sampled_from(["permit", "forbid"]))
        acts = draw(
            st.one_of(
                st.just("*"),
                st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=3, unique=True).map(
                    ", ".join
                ),
            )
        )
        text = f'{effect}{ws(draw)}{acts} on "{draw(pattern())}"'
        clauses = draw(st.sampled_from([(), ("when",), ("unless",), ("when", "unless")]))
        for kw in clauses:
            cond = draw(condition())
            if draw(st.booleans()):  # a comment inside the rule, beside an operand
                cond = cond.replace(" and ", "  # inner\n  and ", 1)
            text += f"{ws(draw)}{kw} {cond}"
        if draw(st.booleans()):
            text = f'@id("r{i}"){ws(draw)}' + text
        if draw(st.booleans()):
            text = f'@description("rule {i}: \\u202e escaped"){ws(draw)}' + text
        if draw(st.booleans()):
            text += "  # trailing " + draw(NAMES)
        parts.append(text)
        if draw(st.booleans()):
            parts.append("# own-line comment " + draw(NAMES))
        if draw(st.booleans()):
            parts.append("")
    if draw(st.booleans()):
        parts.append(
            'toolpolicy run-open { mode open\n managed files.*  # the files tools\n harness_local "patch" }'
        )
    if draw(st.booleans()):
        parts.append(
            'test "t1" {\n  # who\n  context { principal: "alice", roles: ["admin"] }\n'
            '  call files.read { path: "/public/a" }  # what\n  expect '
            + draw(st.sampled_from(["allow", "deny"]))
            + "\n}"
        )
    if draw(st.booleans()):
        parts.append(
            'test "t2" {\n  skip "later"\n  context {\n    principal: "bob",  # who\n'
            '    roles: []\n  }\n  call files.write { path: "/a" }\n  expect deny\n}'
        )
    return "\n".join(parts) + draw(st.sampled_from(["", "\n", "\n\n"]))


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("files.read", {"path": "/public/a.txt"}),
    ("files.read", {"path": "/private/x"}),
    ("files.read", {"path": "/home/alice/notes.txt"}),
    ("files.write", {"path": "/a/b/c", "flag": True, "n": 3}),
    ("files.write", {"path": "/public/../private/x"}),
    ("files.list", {"root": "/docs"}),
    ("files.list", {"root": "/x.y/pre-fix/z"}),
    ("files.read", {"path": "/../escape"}),
    ("files.nope", {}),
]
CONTEXTS = [
    {"principal": "alice", "tenant": "default", "roles": ["admin"], "attributes": {}},
    {"principal": "bob", "tenant": "acme", "roles": ["editor"], "attributes": {}},
    {"principal": "a", "roles": []},
]


SEED_CALLS: list[tuple[str, dict[str, Any]]] = [
    *CALLS,
    ("files.search", {"root": "/public/docs", "query": "q"}),
    ("files.delete", {"path": "/shared/plan.md"}),
    ("github.search", {"owner": "sharedos", "repo": "sharedos", "query": "q"}),
    ("github.get_issue", {"owner": "sharedos", "repo": "security", "number": 7}),
    ("github.create_issue", {"owner": "python", "repo": "cpython", "title": "x"}),
]


def decisions(
    text: str, calls: list[tuple[str, dict[str, Any]]] | None = None
) -> list[tuple[Any, ...]]:
    policy = compile_source(text, "gen.sos")
    out = []
    for tool, args in calls or CALLS:
        for ctx in CONTEXTS:
            d = policy.decide(tool, args, ctx)
            out.append((d.effect, d.reason, d.resource, tuple(r.id for r in d.rule_ids)))
        out.append((tool, policy.could_permit(tool, CONTEXTS[0])))
    return out


@SETTINGS
@given(valid_policy())
def test_valid_policies_format_to_a_fixed_point_with_the_same_decisions(text: str) -> None:
    parsed = parse_source(text, "gen.sos")
    assert not parsed.diagnostics, [d.render() for d in parsed.diagnostics]
    first = format_source(text, "gen.sos")
    assert first.text is not None, [d.render() for d in first.diagnostics]
    second = format_source(first.text, "gen.sos")
    assert second.text == first.text
    comments = [c.text.strip() for c in parsed.file.comments]
    assert [c.text.strip() for c in parse_source(first.text).file.comments] == comments
    try:
        expected = decisions(text)
    except PolicyError:
        # the generator can produce checker errors (e.g. a '*' forbid with a
        # type error); then the formatted file must fail the same way
        try:
            compile_source(first.text, "gen.sos")
        except PolicyError:
            return
        raise AssertionError("formatting turned an invalid policy into a valid one") from None
    # Rule ids that are file:line move when formatting changes lines; compare
    # explicit ids exactly and auto ids by presence.
    got = decisions(first.text)
    assert _strip_auto_ids(got) == _strip_auto_ids(expected)


@SETTINGS
@given(valid_policy())
def test_the_fast_path_builds_what_lark_builds_for_valid_programs(text: str) -> None:
    from sharedos.policy import parser

    fast = parse_source(text, "gen.sos")
    parser._FAST_ENABLED = False
    try:
        slow = parse_source(text, "gen.sos")
    finally:
        parser._FAST_ENABLED = True
    assert fast == slow


@SETTINGS
@given(valid_policy(), st.sampled_from([None, 30, 60]))
def test_formatting_with_crlf_and_a_line_width_is_a_fixed_point(
    text: str, width: int | None
) -> None:
    crlf = text.replace("\n", "\r\n")
    first = format_source(crlf, "gen.sos", width=width)
    assert first.text is not None, [d.render() for d in first.diagnostics]
    assert "\r\n" in first.text and first.text.count("\r\n") == first.text.count("\n")
    assert format_source(first.text, "gen.sos", width=width).text == first.text
    plain = format_source(text, "gen.sos", width=width).text
    assert plain == first.text.replace("\r\n", "\n")


def _strip_auto_ids(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    out = []
    for row in rows:
        if len(row) == 4:
            ids = tuple("<auto>" if i.startswith("gen.sos:") else i for i in row[3])
            out.append((*row[:3], ids))
        else:
            out.append(row)
    return out


def test_printable_alphabet_is_covered() -> None:
    # a sanity check that the fuzz alphabet reaches every printable ASCII character
    toolchain_never_raises(string.printable)


# ------------------------------------------------------------- CLI under fuzz

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated_seed(), st.text(max_size=200)))
def test_check_command_never_tracebacks(text: str) -> None:
    import tempfile

    from click.testing import CliRunner

    from sharedos.cli.policy import main

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.sos"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=30).filter(lambda s: "\n" not in s and "\r" not in s),
            st.just('{"tool": "files.read\u2028x", "args": {"path": "/a\u2029"}}'),
            st.just('{"\\u0085": null}'),
            st.builds(
                lambda tool, args, ctx: json.dumps({"tool": tool, "args": args, "context": ctx}),
                st.sampled_from(["files.read", "files.write", "x", ""]) | st.text(max_size=8),
                JSON_VALUES,
                JSON_VALUES,
            ),
            JSON_VALUES.map(json.dumps),
        ),
        max_size=8,
    )
)
def test_eval_answers_every_line_and_never_tracebacks(lines: list[str]) -> None:
    from click.testing import CliRunner

    from sharedos.cli.policy import main

    stdin = "\n".join(lines) + "\n"
    result = CliRunner().invoke(main, ["eval", str(DATA / "good")], input=stdin)
    assert result.exit_code in (0, 1), result.output
    # str.splitlines also splits on U+2028 etc.: output must survive it
    outputs = [json.loads(o) for o in result.stdout.splitlines()]
    # one answer per non-blank input line, in order
    expected = [i for i, line in enumerate(stdin.split("\n")[:-1], start=1) if line.strip()]
    assert [o["line"] for o in outputs] == expected
    for o in outputs:
        assert ("error" in o) != ("effect" in o)

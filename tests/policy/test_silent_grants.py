"""Issue 23: constructs that read one way and decided another. Each test failed before its fix.

Written against the public API (``compile_source``, ``decide``, the CLI, bundles),
so each reads as what an operator would see.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sharedos.cli.policy import main
from sharedos.policy import BundleError, PolicyError, compile_source, load_bundle

FILES = (
    "namespace files\n"
    "requirement files.read  { action read;  resource path(args.path) }\n"
    "requirement files.write { action write; resource path(args.path) }\n"
)
CTX = {"principal": "bob", "roles": []}


def _decide(text: str, tool: str, args: dict[str, Any], ctx: dict[str, Any] | None = None) -> str:
    d = compile_source(text, "t.sos").decide(tool, args, ctx or CTX)
    return f"{d.effect.value} {d.reason.value}"


# ------------------------------------------------------------ non-finite numbers

SIZE_LIMIT = FILES + (
    'permit write on "/up/**"\n'
    'forbid write on "/up/**" when args.size > 1048576\n'
    'permit read on "/n/**" when not (args.n > 10)\n'
    'permit read on "/m/**" when args.n != 5\n'
    'permit read on "/k/**" when args.n in [1, 2]\n'
    'permit read on "/o/**" when args.o == context.attributes.o\n'
)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_never_passes_a_comparison(bad: float) -> None:
    # a forbid on a size bound applies (its condition errors: fail closed) ...
    assert _decide(SIZE_LIMIT, "files.write", {"path": "/up/x", "size": bad}) == "deny forbidden"
    # ... and a permit written as a negation, an inequality or a membership does not
    for path in ("/n/x", "/m/x", "/k/x"):
        got = _decide(SIZE_LIMIT, "files.read", {"path": path, "n": bad})
        assert got == "deny no_matching_permit", path
    ctx = {**CTX, "attributes": {"o": {"deep": [bad]}}}
    got = _decide(SIZE_LIMIT, "files.read", {"path": "/o/x", "o": {"deep": [bad]}}, ctx)
    assert got == "deny no_matching_permit"
    # finite values still decide as written
    assert _decide(SIZE_LIMIT, "files.write", {"path": "/up/x", "size": 10.5}) == "allow allowed"
    assert _decide(SIZE_LIMIT, "files.read", {"path": "/n/x", "n": 3.0}) == "allow allowed"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1E400"])
def test_eval_refuses_a_non_finite_number_as_invalid_json(number: str, tmp_path: Path) -> None:
    (tmp_path / "p.sos").write_text(SIZE_LIMIT)
    line = '{"tool": "files.write", "args": {"path": "/up/x", "size": NUMBER}}'.replace(
        "NUMBER", number
    )
    ok = '{"tool": "files.write", "args": {"path": "/up/x", "size": 1}}'
    result = CliRunner().invoke(main, ["eval", str(tmp_path / "p.sos")], input=f"{line}\n{ok}\n")
    assert result.exit_code == 1
    first, second = (json.loads(x) for x in result.stdout.splitlines())
    assert first["error"]["code"] == "invalid_json" and "refused" in first["error"]["message"]
    assert second["effect"] == "allow"


@pytest.mark.parametrize("where", ["--args", "--context"])
def test_explain_refuses_a_non_finite_number_inline_or_in_a_file(
    where: str, tmp_path: Path
) -> None:
    (tmp_path / "p.sos").write_text(SIZE_LIMIT)
    value = '{"path": "/up/x", "size": NaN}' if where == "--args" else '{"attributes": {"n": NaN}}'
    (tmp_path / "v.json").write_text(value)
    for given in (value, f"@{tmp_path / 'v.json'}"):
        result = CliRunner().invoke(
            main, ["explain", str(tmp_path / "p.sos"), "--tool", "files.write", where, given]
        )
        assert result.exit_code == 2, result.output
        assert "NaN is not a JSON number" in result.output


def test_catalog_and_context_schema_files_refuse_non_finite_numbers(tmp_path: Path) -> None:
    (tmp_path / "p.sos").write_text(SIZE_LIMIT)
    (tmp_path / "cat.json").write_text(
        '[{"name": "files.read", "inputSchema": {"maximum": 1e999}}]'
    )
    result = CliRunner().invoke(
        main, ["check", str(tmp_path / "p.sos"), "--catalog", str(tmp_path / "cat.json")]
    )
    assert result.exit_code == 2 and "too large for a 64-bit float" in result.output


def test_a_test_block_cannot_hold_a_non_finite_number() -> None:
    for value in ("NaN", "Infinity", "1e999"):
        text = (
            SIZE_LIMIT
            + f'test "t" {{ call files.write {{ path: "/up/x", size: {value} }} expect deny }}\n'
        )
        with pytest.raises(PolicyError) as info:
            compile_source(text, "t.sos")
        assert {d.code for d in info.value.diagnostics} & {"SOS101", "SOS102", "SOS105"}


def _retamper(path: Path, old: str, new: str) -> None:
    """Edit a bundle's program text and fix its hash (what an attacker without a key can do)."""
    import hashlib

    text = path.read_text()
    mark = ',"program":'
    head, program = text[: text.index(mark)], text[text.index(mark) + len(mark) : -1]
    assert old in program
    program = program.replace(old, new)
    doc = json.loads(head + "}")
    doc["bundle_hash"] = hashlib.sha256(program.encode()).hexdigest()
    envelope = json.dumps(doc, separators=(",", ":"))
    path.write_text(envelope[:-1] + mark + program + "}")


def test_a_bundle_holding_a_non_finite_number_is_refused_or_fails_closed(tmp_path: Path) -> None:
    from sharedos.policy.policyset import canonical_program

    policy = compile_source(SIZE_LIMIT, "t.sos")
    path = tmp_path / "b.json"
    policy.save_bundle(path)
    assert load_bundle(path).decide("files.write", {"path": "/up/x", "size": 1}, CTX).allowed
    # a NaN in the program itself: not JSON, the load is refused
    _retamper(path, '"reads_turn_id":false', '"reads_turn_id":NaN')
    with pytest.raises(BundleError, match="not a JSON number"):
        load_bundle(path)
    # a NaN inside a packed condition: that condition cannot be read, so the
    # forbid applies (fail closed) instead of comparing false
    policy.save_bundle(path)
    _retamper(path, "1048576", "NaN")
    tampered = load_bundle(path)
    d = tampered.decide("files.write", {"path": "/up/x", "size": 1}, CTX)
    assert (d.effect.value, d.reason.value) == ("deny", "forbidden")
    # and a compile can never write one
    program = dict(policy.program)
    program["sources"] = {"x": math.nan}
    with pytest.raises(ValueError):
        canonical_program(program)


def test_a_host_context_cannot_carry_a_non_finite_number() -> None:
    from pydantic import ValidationError

    from sharedos.context import AccessContext

    for bad in (math.nan, math.inf):
        with pytest.raises(ValidationError, match="non-finite"):
            AccessContext(principal="p", attributes={"quota": {"left": [bad]}})
    assert AccessContext(principal="p", attributes={"quota": 1.5}).attributes == {"quota": 1.5}


# ------------------------------------------------------- objects: true is not 1

OBJECTS = FILES + (
    'permit read on "/o/**" when args.opts == context.attributes.expected\n'
    'forbid read on "/o/**" when args.opts != context.attributes.expected and '
    "context.attributes.strict == true\n"
    'permit read on "/m/**" when args.item in context.attributes.allowed\n'
)


@pytest.mark.parametrize(
    ("given", "expected", "equal"),
    [
        ({"admin": True}, {"admin": 1}, False),
        ({"admin": 1}, {"admin": True}, False),
        ({"a": {"b": [False]}}, {"a": {"b": [0]}}, False),
        ({"a": [{"x": True}]}, {"a": [{"x": 1.0}]}, False),
        ({"a": 1}, {"a": 1.0}, True),  # numbers are numbers
        ({"a": [1, {"b": "c"}]}, {"a": [1, {"b": "c"}]}, True),
        ({"a": 1}, {"a": 1, "b": None}, False),
        ({}, [], False),
    ],
)
def test_objects_keep_booleans_and_numbers_apart_at_any_depth(
    given: Any, expected: Any, equal: bool
) -> None:
    ctx = {**CTX, "attributes": {"expected": expected, "strict": False}}
    got = _decide(OBJECTS, "files.read", {"path": "/o/x", "opts": given}, ctx)
    assert got == ("allow allowed" if equal else "deny no_matching_permit")
    strict = {**CTX, "attributes": {"expected": expected, "strict": True}}
    got = _decide(OBJECTS, "files.read", {"path": "/o/x", "opts": given}, strict)
    assert got == ("allow allowed" if equal else "deny forbidden")


def test_membership_of_an_object_keeps_true_and_1_apart() -> None:
    ctx = {**CTX, "attributes": {"allowed": [{"ro": 1}, [0]]}}
    assert (
        _decide(OBJECTS, "files.read", {"path": "/m/x", "item": {"ro": True}}, ctx)
        == "deny no_matching_permit"
    )
    assert _decide(OBJECTS, "files.read", {"path": "/m/x", "item": [False]}, ctx) == (
        "deny no_matching_permit"
    )
    assert _decide(OBJECTS, "files.read", {"path": "/m/x", "item": {"ro": 1}}, ctx) == (
        "allow allowed"
    )


# ------------------------------------------------------------ segment positions


@pytest.mark.parametrize("position", ["1.0", "2e0", "-1.0", "0"])
def test_a_segment_position_that_is_not_a_nonzero_integer_is_a_check_time_type_error(
    position: str,
) -> None:
    text = FILES + f'permit read on "/**" when segment(resource, {position}) == "public"\n'
    with pytest.raises(PolicyError) as info:
        compile_source(text, "t.sos")
    (diag,) = info.value.diagnostics
    assert diag.code == "SOS204" and (diag.line, diag.col) == (4, 45)


def test_an_out_of_range_segment_is_an_error_that_fails_closed() -> None:
    text = FILES + (
        'permit read on "/**" when segment(resource, 3) == "x"\n'
        'forbid read on "/**" when segment(resource, -3) == "nothing-matches-this"\n'
        'permit write on "/**" when segment(resource, 1) == "w"\n'
    )
    policy = compile_source(text, "t.sos")
    # /a/b has two segments: position 3 and -3 do not exist
    read = policy.decide("files.read", {"path": "/a/b"}, CTX)
    assert (read.effect.value, read.reason.value) == ("deny", "forbidden")
    assert policy.decide("files.read", {"path": "/a/b/x"}, CTX).allowed
    # the root has no segment at all
    assert not policy.decide("files.write", {"path": "/"}, CTX).allowed
    assert policy.decide("files.write", {"path": "/w/z"}, CTX).allowed


# ------------------------------------------------- presence tests: has args.x

BRANCHES = (
    "namespace files\n"
    "requirement files.write  { action write; resource path(args.path) }\n"
    "requirement files.commit { action write; resource path(args.repo) }\n"
    'permit write on "/srv/**"\n'
    'forbid write on "/srv/repos/**" when has args.branch_name and args.branch_name == "main"\n'
    'permit write on "/opt/**" when not has args.force\n'
)


def test_a_presence_test_lets_a_forbid_read_an_argument_only_some_tools_carry() -> None:
    policy = compile_source(BRANCHES, "t.sos")
    # the tool without the argument is decided, not forbidden by an error
    assert policy.decide("files.commit", {"repo": "/srv/repos/a"}, CTX).allowed
    got = policy.decide("files.write", {"path": "/srv/repos/a", "branch_name": "main"}, CTX)
    assert got.reason.value == "forbidden"
    assert policy.decide("files.write", {"path": "/srv/repos/a", "branch_name": "dev"}, CTX).allowed
    # present with any value, null included; absent is false, never an error
    assert policy.decide("files.write", {"path": "/opt/x"}, CTX).allowed
    assert not policy.decide("files.write", {"path": "/opt/x", "force": None}, CTX).allowed
    # listing reasons with it: a call without 'force' can be allowed
    assert policy.could_permit("files.write", CTX)


def test_has_on_the_context_and_nested_attributes() -> None:
    text = FILES + (
        'permit read on "/t/**" when has context.attributes.team.lead\n'
        'forbid read on "/t/**" when has context.attributes.frozen\n'
    )
    policy = compile_source(text, "t.sos")
    lead = {**CTX, "attributes": {"team": {"lead": False}}}
    assert policy.decide("files.read", {"path": "/t/a"}, lead).allowed
    assert not policy.decide(
        "files.read", {"path": "/t/a"}, {**CTX, "attributes": {"team": 1}}
    ).allowed
    frozen = {**CTX, "attributes": {"team": {"lead": 1}, "frozen": 0}}
    assert policy.decide("files.read", {"path": "/t/a"}, frozen).reason.value == "forbidden"
    assert policy.could_permit("files.read", lead)
    assert not policy.could_permit("files.read", frozen)  # the forbid covers it, certainly


@pytest.mark.parametrize(
    ("condition", "code"),
    [
        ("has args", "SOS204"),
        ("has resource", "SOS204"),
        ("has user.x", "SOS203"),
        ('has "x"', "SOS101"),
        ("has args.x == true", "SOS101"),
    ],
)
def test_a_presence_test_names_an_attribute(condition: str, code: str) -> None:
    with pytest.raises(PolicyError) as info:
        compile_source(FILES + f'permit read on "/a" when {condition}\n', "t.sos")
    assert code in {d.code for d in info.value.diagnostics}


def test_fmt_round_trips_presence_tests() -> None:
    from sharedos.policy.formatter import format_source

    text = FILES + (
        'permit read on "/a" when (has args.x) and not has args.y or has context.attributes.z\n'
        'permit read on "/b" when not (has args.x and args.x == 1)\n'
    )
    out = format_source(text, "t.sos").text
    assert out is not None
    assert "when has args.x and not has args.y or has context.attributes.z" in out
    assert "when not (has args.x and args.x == 1)" in out
    assert format_source(out, "t.sos").text == out


def test_explain_shows_the_presence_test() -> None:
    policy = compile_source(BRANCHES, "t.sos")
    text = policy.explain("files.commit", {"repo": "/srv/repos/a"}, CTX).render()
    assert "has args.branch_name  => false" in text
    assert 'args.branch_name == "main"  => not evaluated' in text


# -------------------------------- conditions on the raw argument (canonical form)

RAW = FILES + (
    'permit read on "/**" when segment(args.path, 1) == "public"\n'
    'permit write on "/**" when startswith(args.path, "/scratch/")\n'
)


def test_a_condition_on_the_raw_argument_is_warned_about_with_a_fix() -> None:
    from sharedos.policy.lints import lint
    from sharedos.policy.parser import parse_source

    found = [d for d in lint([parse_source(RAW, "t.sos").file]) if d.code == "SOS512"]
    assert [(d.line, d.col) for d in found] == [(4, 35), (5, 39)]
    assert all("path(args.path)" in d.hint and "`resource`" in d.hint for d in found)
    fixed = RAW.replace("segment(args.path", "segment(resource").replace(
        "startswith(args.path", "startswith(path(args.path)"
    )
    assert not [d for d in lint([parse_source(fixed, "t.sos").file]) if d.code == "SOS512"]


def test_the_canonical_form_in_a_condition_closes_the_traversal() -> None:
    raw = compile_source(RAW, "t.sos")
    # the trap, as written: the raw argument reads 'public'
    assert raw.decide("files.read", {"path": "/public/../private/x"}, CTX).allowed
    fixed = compile_source(
        RAW.replace("segment(args.path", "segment(path(args.path)").replace(
            "startswith(args.path", "startswith(path(args.path)"
        ),
        "t.sos",
    )
    assert not fixed.decide("files.read", {"path": "/public/../private/x"}, CTX).allowed
    assert fixed.decide("files.read", {"path": "/public/./a"}, CTX).allowed
    assert not fixed.decide("files.write", {"path": "/scratch/../etc/passwd"}, CTX).allowed
    assert fixed.decide("files.write", {"path": "/scratch//a"}, CTX).allowed


# ----------------------------------------------------------------------- Unicode

UNICODE = (
    "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    'requirement files.user { action read; resource "/users/{args.name}" }\n'
    'permit read on "/**"\n'
    'forbid read on "/café/**"\n'
    'forbid read on "/users/Kate"\n'
    'forbid read on "/x/**" when lower(args.label) == "private"\n'
)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("files.read", {"path": "/cafe\u0301/menu"}),  # NFD
        ("files.read", {"path": "/ok/cafe\u0301"}),
        ("files.user", {"name": "\u212aate"}),  # Kelvin sign, NFC is 'K'
        ("files.user", {"name": "Ka\u0300te"}),
    ],
)
def test_a_resource_not_in_nfc_is_refused_as_invalid_input(tool: str, args: dict[str, Any]) -> None:
    d = compile_source(UNICODE, "t.sos").decide(tool, args, CTX)
    assert (d.effect.value, d.reason.value) == ("deny", "unresolvable_resource")
    assert "normalization form C" in d.detail


COMPOSED = (
    "namespace gh\n"
    'requirement gh.pair { action read; resource "{args.owner}{args.repo}/x" }\n'
    'requirement gh.pre { action read; resource "cafe{args.tail}" }\n'
    'requirement gh.get { action read; resource "{args.owner}/{args.repo}" }\n'
    'permit read on "**"\n'
    'forbid read on "café/**"\n'
    'forbid read on "café*"\n'
)


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        # each hole is NFC on its own ('\u0301' alone is), but it composes with the
        # text before it: the resource would be the NFD spelling of 'café'
        ("gh.pair", {"owner": "cafe", "repo": "\u0301"}),
        ("gh.pre", {"tail": "\u0301"}),
        ("gh.pre", {"tail": "\u0301s"}),
    ],
)
def test_holes_that_compose_into_a_resource_not_in_nfc_are_refused(
    tool: str, args: dict[str, Any]
) -> None:
    d = compile_source(COMPOSED, "t.sos").decide(tool, args, CTX)
    assert (d.effect.value, d.reason.value) == ("deny", "unresolvable_resource")
    assert "normalization form C" in d.detail


@pytest.mark.parametrize(
    "args",
    [
        {"owner": "caf\udcc3\udca9", "repo": "x"},  # 'é' as surrogate-escaped bytes
        {"owner": "a", "repo": "\ud800"},
        {"owner": "\udfff", "repo": "b"},
    ],
)
def test_a_lone_surrogate_in_a_template_hole_is_refused_as_in_a_path(args: dict[str, Any]) -> None:
    """A path with a lone surrogate is unresolvable (it is not text: an OS maps it to raw
    bytes); a template hole was not held to that rule, so the same bytes reached the
    rules through a template, as a name no pattern spells."""
    policy = compile_source(COMPOSED, "t.sos")
    d = policy.decide("gh.get", args, CTX)
    assert (d.effect.value, d.reason.value) == ("deny", "unresolvable_resource")
    assert "lone surrogate" in d.detail
    assert policy.decide("gh.get", {"owner": "a", "repo": "b"}, CTX).allowed


def test_holes_in_nfc_still_resolve() -> None:
    policy = compile_source(COMPOSED, "t.sos")
    assert policy.decide("gh.pair", {"owner": "caf", "repo": "é"}, CTX).reason.value == "forbidden"
    assert policy.decide("gh.pre", {"tail": "s"}, CTX).allowed
    # a combining mark after '/' composes with nothing: NFC, resolved as it is
    assert policy.decide("gh.get", {"owner": "a", "repo": "\u0301"}, CTX).allowed


def test_the_nfc_spelling_meets_its_forbid() -> None:
    policy = compile_source(UNICODE, "t.sos")
    assert policy.decide("files.read", {"path": "/café/menu"}, CTX).reason.value == "forbidden"
    assert policy.decide("files.user", {"name": "Kate"}, CTX).reason.value == "forbidden"
    assert policy.decide("files.read", {"path": "/Ωμέγα/x"}, CTX).allowed


@pytest.mark.parametrize(
    "label",
    [
        "PRIVATE",
        "Private",
        "PR\u0130VATE",
        "pr\u0131vate",
        "\uff30\uff32\uff29\uff36\uff21\uff34\uff25",
        "privatE",
    ],
)
def test_lower_is_a_caseless_key_no_spelling_slips_past(label: str) -> None:
    d = compile_source(UNICODE, "t.sos").decide("files.read", {"path": "/x/1", "label": label}, CTX)
    assert d.reason.value == "forbidden", label


def test_lower_is_defined_precisely() -> None:
    from sharedos.policy.functions import FUNCTIONS

    lower = FUNCTIONS["lower"].impl
    assert lower("\u212aate") == "kate"
    assert lower("Stra\u00dfe") == "strasse"
    assert lower("\ufb01le") == "file"
    assert lower("CAFE\u0301") == "caf\u00e9"  # normalized too
    assert lower("ΣΑΣ") == lower("σας")


def test_a_pattern_not_in_nfc_is_an_error() -> None:
    with pytest.raises(PolicyError) as info:
        compile_source(UNICODE.replace('"/café/**"', '"/cafe\u0301/**"'), "t.sos")
    (diag,) = info.value.diagnostics
    assert diag.code == "SOS207" and "NFC" in diag.message and (diag.line, diag.col) == (5, 21)
    with pytest.raises(PolicyError):
        compile_source(UNICODE.replace('"/users/Kate"', '"/users/\u212aate"'), "t.sos")


def test_a_context_value_not_in_nfc_never_widens_a_match() -> None:
    text = FILES + (
        'permit read on "/**"\n'
        'forbid read on "/home/{context.principal}/secret/**"\n'
        'permit write on "/home/{context.principal}/**"\n'
    )
    policy = compile_source(text, "t.sos")
    nfd = {**CTX, "principal": "jose\u0301"}
    # the forbid's segment matches any one segment, the permit matches nothing
    assert policy.decide("files.read", {"path": "/home/eve/secret/a"}, nfd).reason.value == (
        "forbidden"
    )
    assert not policy.decide("files.write", {"path": "/home/josé/a"}, nfd).allowed


def test_literals_that_cannot_match_what_they_read_as_are_warned_about() -> None:
    from sharedos.policy.lints import lint
    from sharedos.policy.parser import parse_source

    text = FILES + (
        'forbid read on "/priv\u0430te/**"\n'  # a Cyrillic a
        'forbid read on "/\uff50\uff52\uff49\uff56\uff41\uff54\uff45/**"\n'  # fullwidth
        'forbid read on "/\u0440\u0430\u0443/**"\n'  # all Cyrillic, looks like 'pay'
        'permit read on "/a/**" when lower(args.role) == "Admin"\n'
        'permit read on "/b/**" when args.n == "cafe\u0301"\n'
        'permit read on "/ok/caf\u00e9/Москва/**" when lower(args.x) in ["caf\u00e9"]\n'
    )
    found = [d for d in lint([parse_source(text, "t.sos").file]) if d.code == "SOS513"]
    assert [d.line for d in found] == [4, 5, 6, 7, 8]
    assert "mixes scripts" in found[0].message and "CYRILLIC SMALL LETTER A" in found[0].message
    assert "reads as 'private'" in found[1].message
    assert "look like the ASCII 'pay'" in found[2].message
    assert "never holds" in found[3].message and found[3].hint == "compare with 'admin'"
    assert "not in Unicode NFC" in found[4].message


def test_a_substring_test_of_lower_with_an_upper_case_literal_is_warned_about() -> None:
    # lower(...) holds no 'P': the forbid reads as refusing .PEM files and never applies
    from sharedos.policy.lints import lint
    from sharedos.policy.parser import parse_source

    text = FILES + (
        'permit read on "/**"\n'
        'forbid read on "/**" when endswith(lower(resource), ".PEM")\n'
        'forbid read on "/**" when contains(lower(args.path), "Secret")\n'
        'require approval by role "ops" for read on "/**" when startswith(lower(resource), "/Ops/")\n'
        'forbid read on "/**" when endswith(lower(resource), ".key")\n'  # lower-case: holds
    )
    assert _decide(text, "files.read", {"path": "/a/id.PEM"}) == "allow allowed"
    found = [d for d in lint([parse_source(text, "t.sos").file]) if d.code == "SOS513"]
    assert [(d.line, d.col) for d in found] == [(5, 53), (6, 54), (7, 83)]
    assert "endswith(lower(...), '.PEM') is always false" in found[0].message
    assert found[0].hint == "compare with '.pem'"
    assert "never holds 'S'" in found[1].message and found[2].hint == "compare with '/ops/'"


# ------------------------------------------------------------ surrogate escapes


def test_a_utf16_pair_escape_is_the_character_json_reads_so_its_forbid_applies() -> None:
    # JSON reads "\ud83d\ude00" as the one character U+1F600; so must the policy,
    # or the forbid compares two lone surrogates with it and never applies.
    text = FILES + 'permit read on "/**"\nforbid read on "/**" when args.tag == "\\ud83d\\ude00"\n'
    args = json.loads('{"path": "/a", "tag": "\\ud83d\\ude00"}')
    assert args["tag"] == "\U0001f600"
    assert _decide(text, "files.read", args) == "deny forbidden"
    pattern = FILES + 'permit read on "/\\ud83d\\ude00/**"\n'
    assert _decide(pattern, "files.read", {"path": "/\U0001f600/x"}) == "allow allowed"


@pytest.mark.parametrize(
    ("literal", "col"),
    [
        ('"\\ud800"', 40),  # a high surrogate alone
        ('"x\\udc00"', 41),  # a low surrogate alone
        ('"\\ude00\\ud83d"', 40),  # a pair in the wrong order
        ('"\\U0000d800"', 40),  # a surrogate through the long escape
    ],
)
def test_a_lone_surrogate_escape_is_an_error_at_its_place(literal: str, col: int) -> None:
    text = FILES + f'permit read on "/**" when args.tag == {literal}\n'
    with pytest.raises(PolicyError) as err:
        compile_source(text, "t.sos")
    [diag] = [d for d in err.value.diagnostics if d.severity == "error"]
    assert (diag.code, diag.line, diag.col) == ("SOS104", 4, col), diag.render()
    assert "lone surrogate" in diag.message


def test_test_with_a_lone_surrogate_in_its_name_is_a_diagnostic_not_an_internal_error(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "p.sos"
    policy.write_text(
        FILES + 'permit read on "/**"\n'
        'test "t\\ud800" { call files.read { path: "/a" } expect allow }\n'
    )
    result = CliRunner().invoke(main, ["test", str(policy)])
    assert result.exit_code == 4, result.output
    assert "SOS104" in result.output and "SOS900" not in result.output

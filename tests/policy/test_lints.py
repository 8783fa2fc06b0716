"""Lints: each one fires on the case it is for, stays silent on its near miss."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharedos.policy import compile_source
from sharedos.policy.lints import LintOptions, lint
from sharedos.policy.parser import parse_source
from sharedos.policy.schemas import SchemaError, catalog_from_json, schema_from_json

HEAD = (
    "namespace files\n"
    "requirement files.read  { action read;  resource path(args.path) }\n"
    "requirement files.write { action write; resource path(args.path) }\n"
    "namespace gh\n"
    'requirement gh.get { action read; resource "{args.owner}/{args.repo}" }\n'
    "namespace files\n"
)


def codes(body: str, options: LintOptions | None = None) -> list[str]:
    parsed = parse_source(HEAD + body, "l.sos")
    assert not parsed.diagnostics, [d.render() for d in parsed.diagnostics]
    return [d.code for d in lint([parsed.file], options)]


def messages(body: str, options: LintOptions | None = None) -> list[str]:
    parsed = parse_source(HEAD + body, "l.sos")
    return [d.message for d in lint([parsed.file], options)]


# -- SOS501 / SOS502: context attributes


def test_unknown_context_attribute_in_condition_pattern_and_test() -> None:
    assert codes('permit read on "/a/**" when "x" in context.role\n') == ["SOS501"]
    assert codes('permit read on "/home/{context.principle}/**"\n') == ["SOS501"]
    assert codes(
        'test "t" { context { principal: "a", rolez: [] } call files.read { path: "/a" } expect deny }\n'
    ) == ["SOS501"]
    # the near misses: real attributes, and anything under the open 'attributes'
    assert codes('permit read on "/a/**" when "x" in context.roles\n') == []
    assert (
        codes('permit read on "/h/{context.principal}/**" when context.attributes.team == "r"\n')
        == []
    )


def test_suggestions_for_misspelled_names() -> None:
    assert messages('permit read on "/a/**" when "x" in context.role\n') == [
        "unknown context attribute context.role (did you mean context.roles?)"
    ]
    parsed = parse_source(
        HEAD + 'test "t" { call files.read { pth: "/a" } expect deny }\n', "l.sos"
    )
    found = lint([parsed.file], LintOptions(catalog=CATALOG))
    assert [d.hint for d in found if d.code == "SOS505"] == [
        "files.read declares: path (did you mean 'path'?)"
    ]


def test_wrong_type_uses() -> None:
    assert codes('permit read on "/a/**" when context.roles == "admin"\n') == ["SOS502"]
    assert codes('permit read on "/a/**" when context.principal.name == "x"\n') == ["SOS502"]
    assert codes(
        'test "t" { context { principal: 7 } call files.read { path: "/a" } expect deny }\n'
    ) == ["SOS502"]
    assert codes('permit read on "/a/**" when context.principal == "admin"\n') == []


def test_a_time_member_compared_with_a_value_the_host_never_writes() -> None:
    # The host writes the weekday as "sat": a forbid on "Sat" never applied, and
    # check said nothing, so weekend writes the rule reads as refusing were allowed.
    parsed = parse_source(
        HEAD + 'forbid write on "/a/**" when context.now.weekday in ["Sat", "sun"]\n', "l.sos"
    )
    found = [d for d in lint([parsed.file]) if d.code == "SOS502"]
    assert [(d.line, d.col, d.hint) for d in found] == [(7, 54, 'did you mean "sat"?')]
    assert 'never the string "Sat"' in found[0].message
    for always in (
        'forbid write on "/a/**" when context.now.weekday == "saturday"\n',
        'forbid write on "/a/**" when context.now.hour >= 24\n',
        'forbid write on "/a/**" when 23 < context.now.hour\n',
        'forbid write on "/a/**" when context.now.month != 0\n',
        'permit write on "/a/**" when context.now.minute <= 59\n',
    ):
        assert codes(always) == ["SOS502"], always
    assert (
        codes(
            'permit write on "/a/**" when context.now.hour >= 9 and context.now.hour < 18'
            ' and context.now.weekday in ["mon", "fri"] and context.now.day == 31\n'
        )
        == []
    )


def test_custom_context_schema_json_schema_and_shorthand() -> None:
    schema = schema_from_json(
        {
            "type": "object",
            "properties": {"user": {"type": "object", "properties": {"id": {"type": "string"}}}},
            "additionalProperties": False,
        }
    )
    opts = LintOptions(context_schema=schema, context_schema_name="custom")
    assert codes('permit read on "/a/**" when context.user.id == "1"\n', opts) == []
    assert codes('permit read on "/a/**" when context.user.name == "1"\n', opts) == ["SOS501"]
    assert codes('permit read on "/a/**" when context.principal == "1"\n', opts) == ["SOS501"]
    short = schema_from_json({"team": "string", "level": "int", "meta": {"x": "any"}})
    opts = LintOptions(context_schema=short)
    assert codes('permit read on "/a/**" when context.level == "high"\n', opts) == ["SOS502"]
    assert (
        codes('permit read on "/a/**" when context.meta.x == 1 and context.team == "r"\n', opts)
        == []
    )
    with pytest.raises(SchemaError):
        schema_from_json({"team": "colour"})
    with pytest.raises(SchemaError):
        schema_from_json([1, 2])


def test_a_custom_context_schema_still_knows_the_time_the_kernel_adds() -> None:
    # the kernel adds context.now to the context of every policy that reads it, so a
    # schema of the host's own attributes checks its members as the default one does
    for schema in (
        schema_from_json({"type": "object", "properties": {"principal": {"type": "string"}}}),
        schema_from_json({"principal": "string"}),
    ):
        opts = LintOptions(context_schema=schema, context_schema_name="custom")
        assert codes('forbid read on "/a/**" when context.now.hour >= 20\n', opts) == []
        assert codes('forbid read on "/a/**" when context.now.weekday == "Sun"\n', opts) == [
            "SOS502"
        ]
        assert codes('forbid read on "/a/**" when context.now.wekday == "sun"\n', opts) == [
            "SOS501"
        ]
    # a schema that declares now is taken as written
    own = schema_from_json({"now": {"tick": "int"}})
    opts = LintOptions(context_schema=own)
    assert codes('forbid read on "/a/**" when context.now.tick >= 20\n', opts) == []


# -- SOS503: shadowed permits


@pytest.mark.parametrize(
    ("body", "shadowed"),
    [
        ('permit read on "/p/x/**"\nforbid * on "/p/**"\n', True),
        ('permit read, write on "/p/*"\nforbid read, write on "/p/**"\n', True),
        ('permit * on "/p/x"\nforbid * on "/**"\n', True),
        ('permit read on "/home/{context.principal}/**"\nforbid read on "/home/*/**"\n', True),
        # near misses: the forbid is conditional, narrower in actions or in pattern
        ('permit read on "/p/x/**"\nforbid * on "/p/**" when "a" in context.roles\n', False),
        ('permit read, write on "/p/**"\nforbid read on "/p/**"\n', False),
        ('permit read on "/p/**"\nforbid read on "/p/x/**"\n', False),
        ('permit read on "/p/*"\nforbid read on "/p/a"\n', False),
        ('permit read on "/home/{context.principal}/**"\nforbid read on "/home/alice/**"\n', False),
    ],
)
def test_shadowed_permit(body: str, shadowed: bool) -> None:
    assert ("SOS503" in codes(body)) is shadowed


def test_shadowing_is_namespace_scoped() -> None:
    body = 'permit read on "/p/**"\nnamespace gh\nforbid * on "**"\n'
    assert "SOS503" not in codes(body)


# -- SOS504: rules that never match


def test_rule_that_never_matches_its_resources() -> None:
    assert codes('namespace gh\npermit read on "/abs/*"\n') == ["SOS504"]
    assert codes('namespace gh\npermit read on "a/b/c"\n') == ["SOS504"]  # repos are owner/repo
    assert codes('permit read on "relative/**"\n') == ["SOS504"]  # paths are absolute
    assert codes('namespace gh\npermit read on "sharedos/*"\n') == []


ORG = (
    "namespace org\n"
    'requirement org.admin { action admin; resource "org-{args.owner}/x/{args.repo}" }\n'
    'permit admin on "**"\n'
)


@pytest.mark.parametrize(
    "rule",
    [
        # each matches org-a/x/v7 for some principal (and, as a forbid, for a missing one)
        'forbid admin on "*/{context.principal}/**"',
        'forbid admin on "{context.principal}/**/v7"',
        'permit admin on "{context.principal}/x/*"',
        'permit admin on "org-{context.principal}/*/*"',
    ],
)
def test_a_hole_beside_a_templates_fixed_text_can_match(rule: str) -> None:
    """A context hole is some value, not a placeholder no resource spells: a rule that
    matches, and a forbid that really forbids (decided below), is never told to
    "never match" (SOS504), nor its permit shadowed by an unrelated forbid (SOS503)."""
    body = ORG + rule + '\nforbid admin on "org-zzz/**"\n'
    assert codes(body) == []
    if rule.startswith("permit"):  # a forbid that does cover it still shadows it (and "**")
        assert codes(ORG + rule + '\nforbid admin on "*/*/*"\n') == ["SOS503", "SOS503"]
    if rule.startswith("forbid"):
        policy = compile_source(HEAD + body, "l.sos")
        args = {"owner": "a", "repo": "v7"}
        for ctx in ({"principal": "x"}, {"principal": "org-a"}, {}):
            decision = policy.decide("org.admin", args, {"roles": [], **ctx})
            if ctx.get("principal") == ("x" if "*/{" in rule else "org-a") or not ctx:
                assert decision.reason.value == "forbidden"


# -- SOS505 / SOS506: catalogue


CATALOG = catalog_from_json(
    {
        "tools": [
            {
                "name": "files.read",
                "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
            {
                "name": "files.write",
                "inputSchema": {"type": "object", "properties": {"path": {}, "mode": {}}},
            },
            {
                "name": "gh.get",
                "inputSchema": {"type": "object", "properties": {"owner": {}, "repo": {}}},
            },
        ]
    }
)


def test_arguments_checked_against_the_catalogue() -> None:
    opts = LintOptions(catalog=CATALOG)
    assert codes('permit read on "/a/**" when args.mode == "r"\n', opts) == ["SOS505"]
    assert codes('permit write on "/a/**" when args.mode == "r"\n', opts) == []
    # '*' governs read and write: files.write declares 'mode' but files.read does
    # not, so for files.read the condition errors (issue 23: SOS505 sees it) ...
    assert codes('permit * on "/a/**" when args.mode == "r"\n', opts) == ["SOS505"]
    found = messages('forbid * on "/a/**" when args.mode == "r"\n', opts)
    assert any(
        "files.read does not declare (files.write does)" in m
        and "the forbid applies to every call of theirs" in m
        for m in found
    ), found
    # ... unless a presence test guards the read
    for guarded in (
        'permit * on "/a/**" when has args.mode and args.mode == "r"\n',
        'forbid * on "/a/**" when not has args.mode or args.mode == "r"\n',
        'forbid * on "/a/**" unless has args.mode and args.mode != "r"\n',
    ):
        assert codes(guarded, opts) == [], guarded
    # a presence test that does not guard the read leaves the warning
    assert codes('permit * on "/a/**" when has args.mode or args.mode == "r"\n', opts) == ["SOS505"]
    assert codes('test "t" { call files.read { path: "/a", modee: 1 } expect deny }\n', opts) == [
        "SOS505"
    ]


def test_an_argument_compared_with_a_value_its_input_schema_rules_out() -> None:
    # The kernel validates arguments against the tool's inputSchema before any
    # rule: a boolean 'force' never equals the string "true", so this forbid
    # never applied to a forced push, and check --catalog said nothing.
    cat = catalog_from_json(
        [
            {
                "name": "files.write",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "force": {"type": "boolean"},
                        "mode": {"type": "string", "enum": ["append", "replace"]},
                        "retries": {"type": "integer", "minimum": 0, "maximum": 3},
                        "note": {},
                    },
                },
            },
            {
                "name": "files.read",
                "inputSchema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "note": {"type": "integer"}},
                },
            },
            {"name": "gh.get", "inputSchema": {"properties": {"owner": {}, "repo": {}}}},
        ]
    )
    opts = LintOptions(catalog=cat)
    for never in (
        'forbid write on "/a/**" when args.force == "true"\n',
        'forbid write on "/a/**" when args.mode == "Replace"\n',
        'forbid write on "/a/**" when args.mode in ["replace", "overwrite"]\n',
        'forbid write on "/a/**" when args.retries > 3\n',
    ):
        assert codes(never, opts) == ["SOS502"], never
    parsed = parse_source(HEAD + 'forbid write on "/a/**" when args.mode == "Replace"\n', "l.sos")
    [found] = lint([parsed.file], opts)
    assert found.hint == 'did you mean "replace"?'
    for fine in (
        'forbid write on "/a/**" when args.force == true\n',
        'forbid write on "/a/**" when args.mode in ["replace", "append"]\n',
        'forbid write on "/a/**" when args.retries >= 3\n',
        # one tool the rule governs may hold it: the comparison can decide
        'forbid * on "/a/**" when has args.note and args.note == 1\n',
    ):
        assert codes(fine, opts) == [], fine


def test_a_context_schema_lists_the_values_an_attribute_takes() -> None:
    schema = schema_from_json(
        {
            "type": "object",
            "properties": {
                "attributes": {
                    "type": "object",
                    "properties": {"tier": {"enum": ["gold", "silver"]}},
                    "additionalProperties": False,
                }
            },
        }
    )
    opts = LintOptions(context_schema=schema)
    assert codes('forbid read on "/a/**" when context.attributes.tier != "Gold"\n', opts) == [
        "SOS502"
    ]
    assert codes('forbid read on "/a/**" when context.attributes.tier != "gold"\n', opts) == []


def test_a_value_no_element_of_a_list_attribute_can_be_is_warned_about() -> None:
    # `forbid ... when "contractr" in context.roles`: a role the schema does not list
    # is never held, so the forbid never applies (a silent grant); the same for an
    # argument's list elements (`inputSchema` items), through `in` and any_in/all_in
    schema = schema_from_json(
        {
            "type": "object",
            "properties": {
                "roles": {"type": "array", "items": {"enum": ["admin", "contractor"]}},
            },
        }
    )
    opts = LintOptions(context_schema=schema)
    for body in (
        'forbid read on "/a/**" when "contractr" in context.roles\n',
        'forbid read on "/a/**" unless "admn" in context.roles\n',
        'forbid read on "/a/**" when "contractr" not in context.roles\n',
        'forbid read on "/a/**" when any_in(context.roles, ["contractr"])\n',
        'forbid read on "/a/**" when any_in(["contractr"], context.roles)\n',
        'forbid read on "/a/**" when all_in(["contractr"], context.roles)\n',
    ):
        assert codes(body, opts) == ["SOS502"], body
    typo = 'forbid read on "/a/**" when "contractr" in context.roles\n'
    assert 'did you mean "contractor"?' in [
        d.hint for d in lint([parse_source(HEAD + typo, "l.sos").file], opts)
    ]
    for fine in (
        'forbid read on "/a/**" when "contractor" in context.roles\n',
        'forbid read on "/a/**" when any_in(context.roles, ["admin", "contractor"])\n',
        'forbid read on "/a/**" when all_in(context.roles, ["admin", "x"])\n',
    ):
        assert codes(fine, opts) == [], fine
    # the kernel's roles are strings, with or without a schema
    assert codes('forbid read on "/a/**" when 1 in context.roles\n') == ["SOS502"]
    assert codes('forbid read on "/a/**" when "1" in context.roles\n') == []
    cat = catalog_from_json(
        [
            {
                "name": "files.write",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "flags": {"type": "array", "items": {"enum": ["force", "recursive"]}},
                    },
                },
            }
        ]
    )
    opts = LintOptions(
        catalog={**cat, **catalog_from_json([{"name": "files.read"}, {"name": "gh.get"}])}
    )
    assert codes('forbid write on "/a/**" when "forse" in args.flags\n', opts) == ["SOS502"]
    assert codes('forbid write on "/a/**" when "force" in args.flags\n', opts) == []


def test_requirement_argument_and_missing_tool() -> None:
    cat = catalog_from_json(
        [{"name": "files.read", "inputSchema": {"type": "object", "properties": {"p": {}}}}]
    )
    found = messages("", LintOptions(catalog=cat))
    assert any("reads args.path" in m and "does not declare" in m for m in found)
    assert any("no tool 'files.write'" in m for m in found)
    assert any("no tool 'gh.get'" in m for m in found)


def test_open_input_schema_declares_everything() -> None:
    cat = catalog_from_json(
        [
            {"name": "files.read", "inputSchema": {"type": "object"}},
            {
                "name": "files.write",
                "inputSchema": {
                    "type": "object",
                    "properties": {"path": {}},
                    "additionalProperties": True,
                },
            },
            {"name": "gh.get"},
        ]
    )
    assert codes('permit * on "/a/**" when args.anything == 1\n', LintOptions(catalog=cat)) == []


def test_catalogue_file_shape_errors() -> None:
    for bad in ({"tools": "x"}, [{"inputSchema": {}}], "tools", [1]):
        with pytest.raises(SchemaError):
            catalog_from_json(bad)


# -- soundness: a permit the lint calls shadowed never allows anything

SEGS = ["p", "x", "home", "alice", "y.txt"]


@settings(max_examples=150, deadline=None)
@given(
    permit=st.lists(
        st.sampled_from([*SEGS, "*", "**", "{context.principal}"]), min_size=1, max_size=3
    ),
    forbid=st.lists(
        st.sampled_from([*SEGS, "*", "**", "{context.principal}"]), min_size=1, max_size=3
    ),
    resources=st.lists(st.lists(st.sampled_from(SEGS), max_size=4), min_size=20, max_size=20),
)
def test_shadow_lint_is_sound(
    permit: list[str], forbid: list[str], resources: list[list[str]]
) -> None:
    pat_p = "/" + "/".join(permit)
    pat_f = "/" + "/".join(forbid)
    if pat_p.count("**") > 1 or pat_f.count("**") > 1:
        return
    body = f'permit read on "{pat_p}"\nforbid read on "{pat_f}"\n'
    text = HEAD + body
    try:
        policy = compile_source(text, "l.sos")
    except Exception:
        return
    if "SOS503" not in codes(body):
        return
    ctx: dict[str, Any] = {"principal": "alice", "roles": []}
    for segs in resources:
        decision = policy.decide("files.read", {"path": "/" + "/".join(segs)}, ctx)
        assert decision.effect.value == "deny", (pat_p, pat_f, segs)


def test_a_test_denied_before_any_rule_is_warned_about() -> None:
    # 'pth' for 'path': the call names no resource and is denied before any rule is
    # weighed, so the test "passed" with the forbid it was written for, or without it.
    body = (
        'permit read on "/**"\n'
        'forbid read on "/private/**"\n'
        "toolpolicy ro { mode open; managed files.write }\n"
        'test "a" { call files.read { pth: "/private/x" } expect deny }\n'
        'test "b" { call files.read { path: "private/x" } expect deny }\n'
        'test "c" { call gh.get { owner: "o", repo: ".." } expect deny }\n'
        'test "d" { policy ro; call files.read { path: "/private/x" } expect deny }\n'
    )
    parsed = parse_source(HEAD + body, "l.sos")
    found = [d for d in lint([parsed.file]) if d.code == "SOS517"]
    assert [(d.line, d.col) for d in found] == [(10, 12), (11, 12), (12, 12), (13, 23)]
    assert "unresolvable_resource" in found[0].message and "args.path" in found[0].message
    assert "not_in_run_policy" in found[3].message
    # a test that names the reason, one that reaches the rules, or a skipped one
    for fine in (
        'test "a" { call files.read { pth: "/p" } expect deny unresolvable_resource }\n',
        'test "a" { call files.read { path: "/private/x" } expect deny }\n',
        'test "a" { skip; call files.read { pth: "/p" } expect deny }\n',
        'test "a" { call files.read { pth: "/p" } expect allow }\n',
        'test "a" { call files.nope { pth: "/p" } expect deny }\n',
    ):
        parsed = parse_source(HEAD + fine, "l.sos")
        assert [d.code for d in lint([parsed.file]) if d.code == "SOS517"] == [], fine


def test_a_forbid_that_misses_some_tools_it_reads_as_covering() -> None:
    # '*' governs gh.get and gh.put; the pattern meets gh.get's resource only, so a
    # write to repos/sharedos/security was allowed by the permit, and check said nothing.
    text = (
        "namespace gh\n"
        'requirement gh.get { action read; resource "{args.owner}/{args.repo}" }\n'
        'requirement gh.put { action write; resource "repos/{args.owner}/{args.repo}" }\n'
        'permit * on "**"\n'
        'forbid * on "sharedos/security"\n'
        'require approval by role "m" for * on "*/release"\n'
        'forbid read on "sharedos/private"\n'
        'forbid write on "**/frozen"\n'  # a near miss: it meets every resource shape
        'permit * on "sharedos/*"\n'
    )
    parsed = parse_source(text, "l.sos")
    found = [d for d in lint([parsed.file]) if d.code == "SOS504"]
    assert [(d.line, d.col) for d in found] == [(5, 13), (6, 39)]
    assert "gh.put" in found[0].message and "never forbidden" in found[0].message
    assert "never need an approval" in found[1].message


def test_action_compared_with_an_action_the_condition_never_sees() -> None:
    # 'wirte': the forbid never applied, and every write under /p was allowed
    for never in (
        'forbid * on "/p/**" when action == "wirte"\n',
        'forbid * on "/p/**" when action in ["write", "delte"]\n',
        'forbid read on "/p/**" when action == "write"\n',  # the rule sees reads only
        'forbid * on "/p/**" unless action != "Write"\n',
        'condition writes = action == "writes"\n',
    ):
        assert codes(never) == ["SOS502"], never
    parsed = parse_source(HEAD + 'forbid * on "/p/**" when action == "wirte"\n', "l.sos")
    assert [d.hint for d in lint([parsed.file])] == ['did you mean "write"?']
    for fine in (
        'forbid * on "/p/**" when action == "write"\n',
        'forbid read, write on "/p/**" when action in ["write"]\n',
        'condition writes = action == "write"\n',
    ):
        assert codes(fine) == [], fine


def test_a_literal_no_canonical_resource_spells() -> None:
    # A canonical path has no trailing '/', is absolute and has no '..': each of
    # these forbids never applied, and check said nothing.
    for never, col in (
        ('forbid * on "/**" when resource == "/private/"\n', 36),
        ('forbid * on "/**" when startswith(resource, "private/")\n', 45),
        ('forbid * on "/**" when segment(resource, 1) == "a/b"\n', 48),
        ('forbid * on "/**" when resource in ["/x", "/a/../b"]\n', 43),
        ('forbid * on "/**" when startswith(path(args.path), "/a//b")\n', 52),
        ('forbid * on "/**" unless resource != "/p/"\n', 38),
    ):
        parsed = parse_source(HEAD + never, "l.sos")
        found = [(d.code, d.col) for d in lint([parsed.file]) if d.code == "SOS513"]
        assert found == [("SOS513", col)], never
    for fine in (
        'forbid * on "/**" when resource == "/private"\n',
        'forbid * on "/**" when startswith(resource, "/private/")\n',
        'forbid * on "/**" when startswith(resource, "/pri")\n',
        'forbid * on "/**" when segment(resource, 1) == "a"\n',
        # a template resource is relative: no path rule applies to it
        'namespace gh\nforbid * on "**" when resource == "sharedos/security"\n',
    ):
        assert [c for c in codes(fine) if c == "SOS513"] == [], fine


def test_a_piece_no_canonical_resource_holds_or_ends_with() -> None:
    # the decision sees the path after its '..' is resolved: a traversal guard written
    # on the resource never applied, and check said nothing
    for never, col in (
        ('forbid * on "/**" when contains(resource, "/../")\n', 43),
        ('forbid * on "/**" when contains(path(args.path), "//")\n', 50),
        ('forbid * on "/**" when contains(resource, "a/./b")\n', 43),
        ('forbid * on "/**" when endswith(resource, "/..")\n', 43),
        ('forbid * on "/**" when endswith(resource, ".ssh/")\n', 43),
        ('forbid * on "/**" unless not endswith(resource, "x/.")\n', 49),
    ):
        parsed = parse_source(HEAD + never, "l.sos")
        found = [(d.code, d.col) for d in lint([parsed.file]) if d.code == "SOS513"]
        assert found == [("SOS513", col)], never
    for fine in (
        'forbid * on "/**" when contains(resource, "..")\n',  # /a..b
        'forbid * on "/**" when contains(resource, "/..")\n',  # /..b
        'forbid * on "/**" when contains(resource, "../")\n',  # /a../b
        'forbid * on "/**" when contains(resource, "/.ssh/")\n',
        'forbid * on "/**" when endswith(resource, "..")\n',  # /a..
        'forbid * on "/**" when endswith(resource, "/")\n',  # the root
        'forbid * on "/**" when endswith(resource, "/.env")\n',
        # a template resource is relative: no path rule applies to it
        'namespace gh\nforbid * on "**" when contains(resource, "//")\n',
    ):
        assert [c for c in codes(fine) if c == "SOS513"] == [], fine


def test_a_test_of_the_resource_its_own_pattern_decides() -> None:
    # under "/srv/prod/**" segment 2 is always "prod": a forbid counting the segments
    # from the pattern's second never applied, and check said nothing
    policy = compile_source(
        HEAD + 'permit write on "/**"\n'
        'forbid write on "/srv/prod/**" when segment(resource, 2) == "secrets"\n',
        "l.sos",
    )
    assert policy.decide("files.write", {"path": "/srv/prod/secrets/k"}, {"principal": "a"}).allowed
    for never, hint in (
        ('forbid * on "/srv/prod/**" when segment(resource, 2) == "secrets"\n', None),
        (
            'forbid * on "/srv/prod/**" when segment(resource, 1) in ["prod"]\n',
            "segment(resource, 2)",
        ),
        (
            'permit * on "/srv/prod/**" unless segment(resource, 1) != "prod"\n',
            "segment(resource, 2)",
        ),
        ('forbid * on "/g/**" when resource == "/h/x"\n', None),
        ('forbid * on "/i/**" when startswith(resource, "/ix")\n', None),
        ('forbid * on "/a/b" when segment(resource, 2) in ["c", "d"]\n', None),
    ):
        found = [d for d in lint([parse_source(HEAD + never, "l.sos").file]) if d.code == "SOS508"]
        assert len(found) == 1, never
        assert found[0].line == 7 and "under the pattern" in found[0].message, never
        assert hint is None or hint in (found[0].hint or ""), never
    for fine in (
        'forbid * on "/srv/prod/**" when segment(resource, 3) == "secrets"\n',
        'forbid * on "/srv/*/x/**" when segment(resource, 2) == "prod"\n',
        'forbid * on "/srv/{context.principal}/**" when segment(resource, 2) == "a"\n',
        'forbid * on "/srv/prod/**" when segment(resource, -1) == "k"\n',
        'forbid * on "/g/**" when resource in ["/g", "/g/a"]\n',
        'forbid * on "/i/**" when startswith(resource, "/i")\n',
        'forbid * on "/i/**" when startswith(resource, "/i/k/")\n',
    ):
        assert "SOS508" not in codes(fine), fine


def test_a_segment_the_pattern_fixes_past_a_hole_or_from_its_end() -> None:
    # segment 3 of "/home/{context.principal}/secret/**" is always "secret", and the
    # last of "/srv/**/keys" always "keys": only the leading literal run was read, so
    # a forbid counting past the hole, or from the end, never applied, with no diagnostic
    policy = compile_source(
        HEAD + 'permit read on "/**"\n'
        'forbid read on "/home/{context.principal}/secret/**" when segment(resource, 3) == "ssh"\n',
        "l.sos",
    )
    assert policy.decide("files.read", {"path": "/home/a/secret/ssh/k"}, {"principal": "a"}).allowed
    for never, hint in (
        (
            'forbid * on "/home/{context.principal}/secret/**" when segment(resource, 3) == "ssh"\n',
            None,
        ),
        ('forbid * on "/home/*/secret/**" when segment(resource, 3) in ["keys", "ssh"]\n', None),
        ('forbid * on "/srv/**/keys" when segment(resource, -1) == "prod"\n', None),
        (
            'permit * on "/srv/**/a/b" unless segment(resource, -2) != "b"\n',
            "segment(resource, -1)",
        ),
        ('forbid * on "/srv/prod" when segment(resource, -1) == "srv"\n', "segment(resource, 1)"),
    ):
        found = [d for d in lint([parse_source(HEAD + never, "l.sos").file]) if d.code == "SOS508"]
        assert len(found) == 1, never
        assert found[0].line == 7 and "under the pattern" in found[0].message, never
        assert hint is None or hint in (found[0].hint or ""), never
    for fine in (
        'forbid * on "/home/{context.principal}/secret/**" when segment(resource, 3) == "secret"\n',
        'forbid * on "/home/{context.principal}/secret/**" when segment(resource, 2) == "a"\n',
        'forbid * on "/home/*/secret/**" when segment(resource, 4) == "ssh"\n',
        'forbid * on "/srv/**/keys" when segment(resource, -2) == "prod"\n',
        'forbid * on "/srv/**/keys/**" when segment(resource, -1) == "k"\n',
        'forbid * on "/srv/*/keys" when segment(resource, -2) == "prod"\n',
        'forbid * on "/*/keys/**" when resource == "/a/keys"\n',
        'forbid * on "/*/keys/**" when startswith(resource, "/a/")\n',
    ):
        assert "SOS508" not in codes(fine), fine


def test_a_literal_on_the_other_side_of_a_templates_slash() -> None:
    # "{args.owner}/{args.repo}" is relative: a forbid written for "/sharedos/security"
    # never applied to the repository
    for never in (
        'namespace gh\nforbid * on "**" when resource == "/sharedos/security"\n',
        'namespace gh\nforbid * on "**" when startswith(resource, "/sharedos/")\n',
    ):
        parsed = parse_source(HEAD + never, "l.sos")
        found = [d for d in lint([parsed.file]) if d.code == "SOS513"]
        assert len(found) == 1 and "relative template" in found[0].message, never
    assert "SOS513" not in codes('namespace gh\nforbid * on "**" when startswith(resource, "sh")\n')


@pytest.mark.parametrize(
    ("pattern", "col"),
    [
        ('"/keys/id_??"', 11),  # '?' is one character in OPA's glob.match, a shell, gitignore
        ('"/data/[abc]/**"', 8),  # a character class
        ('"/data/\\\\*"', 8),  # Cedar's escaped star: here '\' is text, '*' a wildcard
        ('"/home/{context.principal}/report?.pdf"', 34),
    ],
)
def test_glob_syntax_the_language_does_not_have_is_warned_about(pattern: str, col: int) -> None:
    # each is literal text, so a forbid written with it protects a name nobody uses
    found = [
        d
        for d in lint([parse_source(HEAD + f"forbid read on {pattern}\n", "l.sos").file])
        if d.code == "SOS513"
    ]
    assert [(d.line, d.col - len("forbid read on ")) for d in found] == [(7, col)], found
    assert "only wildcards are '*'" in (found[0].hint or "")


def test_patterns_without_foreign_glob_syntax_are_not_warned_about() -> None:
    for pattern in ('"/data/a]b[c"', '"/home/{context.principal}/**"', '"/d/*.txt"'):
        assert codes(f"forbid read on {pattern}\n") == [], pattern


@pytest.mark.parametrize(
    ("condition", "always"),
    [
        ("context.principal in []", "false"),  # a deny list left empty: the forbid is dead
        ('args.mode == "x" or context.principal in []', "false"),
        ("context.principal not in []", "true"),
        ("any_in(context.roles, [])", "false"),
        ("any_in([], context.roles)", "false"),
        ("all_in([], context.roles)", "true"),
    ],
)
def test_a_test_of_an_empty_list_is_constant(condition: str, always: str) -> None:
    found = messages(f'forbid read on "/a/**" when {condition}\n')
    assert found == [
        f"the when condition of forbid l.sos:7: this test is always {always} "
        "(an empty list holds nothing)"
    ], found


def test_an_empty_list_in_a_named_condition_is_reported_where_it_is_written() -> None:
    body = (
        "condition blocked = context.principal in []\n"
        'forbid read on "/a/**" when blocked\n'
        'forbid write on "/b/**" when blocked\n'
    )
    assert messages(body) == [
        "condition blocked: this test is always false (an empty list holds nothing)"
    ]
    # a list with something in it, and all_in over the attribute, are not constant
    for fine in ('context.principal in ["mallory"]', "all_in(context.roles, [])"):
        assert codes(f'forbid read on "/a/**" when {fine}\n') == [], fine
    # a condition constant as a whole is reported once, as such
    assert codes('forbid read on "/a/**" when "a" in []\n') == ["SOS508"]


@pytest.mark.parametrize(
    "rule",
    [
        # when W unless U applies when W holds and U does not: with U = W, never
        'forbid read on "/a/**" when "admin" in context.roles unless "admin" in context.roles\n',
        'forbid read on "/a/**" when context.tenant == "x" unless "x" == context.tenant\n',
        'forbid read on "/a/**" when context.tenant == "x" unless context.tenant != "y"\n',
        'forbid read on "/a/**" when "a" in context.roles unless "b" in context.roles'
        ' or "a" in context.roles\n',
        # '!=' and 'not in' are the negations of '==' and 'in'
        'forbid read on "/a/**" when context.tenant == "x" and context.tenant != "x"\n',
        'forbid read on "/a/**" unless "a" in context.roles or "a" not in context.roles\n',
    ],
)
def test_a_forbid_whose_conditions_contradict_each_other_is_constant(rule: str) -> None:
    assert codes(rule) == ["SOS508"], rule


@pytest.mark.parametrize(
    "rule",
    [
        # 'in' a list of literals restricts an attribute to its values, as '==' does
        'forbid read on "/a/**" when context.tenant == "a" and context.tenant in ["b", "c"]\n',
        'forbid read on "/a/**" when context.tenant in ["a"] and context.tenant in ["b", "c"]\n',
        # 'not in' negates 'in' whatever the order of the list
        'forbid read on "/a/**" when context.tenant in ["a", "b"]'
        ' and context.tenant not in ["b", "a"]\n',
        'forbid read on "/a/**" when context.tenant == "a" and context.tenant not in ["a", "c"]\n',
        'forbid read on "/a/**" when context.tenant == "a" unless context.tenant in ["a", "b"]\n',
        'forbid read on "/a/**" when context.tenant in ["a"] unless context.tenant == "a"\n',
    ],
)
def test_a_forbid_whose_list_tests_contradict_each_other_is_constant(rule: str) -> None:
    assert codes(rule) == ["SOS508"], rule
    for fine in (
        'forbid read on "/a/**" when context.tenant in ["a", "b"] and context.tenant != "a"\n',
        'forbid read on "/a/**" when context.tenant == "a" unless context.tenant in ["b"]\n',
        'forbid read on "/a/**" when context.tenant in ["a", "b"] and context.tenant in ["b"]\n',
        'forbid read on "/a/**" when context.tenant in ["a", args.t] and context.tenant == "b"\n',
    ):
        assert codes(fine) == [], fine


def test_when_and_unless_that_can_both_hold_are_not_reported() -> None:
    body = 'condition admin = "admin" in context.roles\n'
    for fine in (
        'forbid read on "/a/**" when "a" in context.roles unless "b" in context.roles\n',
        'forbid read on "/a/**" when context.tenant == "x" unless context.tenant == "y"\n',
        'forbid read on "/a/**" when context.tenant != "x" unless context.tenant == "y"\n',
        'forbid read on "/a/**" when admin unless "b" in context.roles\n',
    ):
        assert codes(body + fine) == [], fine
    # a named condition is seen through
    assert codes(body + 'forbid read on "/a/**" when admin unless admin\n') == ["SOS508"]


@pytest.mark.parametrize(
    "rule",
    [
        # each grants /publicity and /public-old too, read as granting under /public
        'permit read on "/**" when startswith(resource, "/public")\n',
        'permit read on "/**" when startswith(path(args.path), "/public")\n',
        'forbid read on "/**" unless startswith(resource, "/public")\n',
        'forbid read on "/**" when not startswith(resource, "/public")\n',
        'permit read on "/**" unless not startswith(resource, "/public")\n',
        'namespace gh\npermit read on "*/*" when startswith(resource, "sharedos")\n',
    ],
)
def test_a_prefix_test_that_grants_sibling_names_is_warned_about(rule: str) -> None:
    found = [d for d in lint([parse_source(HEAD + rule, "l.sos").file]) if d.code == "SOS513"]
    assert len(found) == 1 and "also holds for" in found[0].message, rule
    assert "/**" in (found[0].hint or "")


def test_a_prefix_test_that_only_narrows_or_ends_a_name_prefix_is_not_warned_about() -> None:
    for fine in (
        'permit read on "/**" when startswith(resource, "/public/")\n',
        'permit read on "/**" when startswith(resource, "/tmp/build-")\n',
        # holding narrows: a forbid applies more, a permit less
        'forbid read on "/**" when startswith(resource, "/private")\n',
        'permit read on "/**" when not startswith(resource, "/private")\n',
        'permit read on "/**" unless startswith(resource, "/private")\n',
    ):
        assert "SOS513" not in codes(fine), fine


@pytest.mark.parametrize(
    ("condition", "verdict"),
    [
        # the night forbid written with 'and': no hour is both, so it never applies
        ("context.now.hour >= 22 and context.now.hour < 6", "can never hold"),
        ("args.size > 100 and args.size < 50", "can never hold"),
        ("args.n > 5 and args.n <= 5", "can never hold"),
        ("not (args.n < 5) and args.n < 3", "can never hold"),
        ("10 < args.n and args.n < 10", "can never hold"),
        ("args.n == 3 and args.n > 4", "can never hold"),
        # office hours written with 'or': every hour is one or the other
        ("context.now.hour >= 9 or context.now.hour < 18", "always holds"),
        ("args.n < 5 or args.n >= 5", "always holds"),
    ],
)
def test_number_bounds_no_number_meets_together_are_constant(condition: str, verdict: str) -> None:
    found = messages(f'forbid read on "/a/**" when {condition}\n')
    assert len(found) == 1 and verdict in found[0], found


def test_number_bounds_some_number_meets_are_not_reported() -> None:
    for fine in (
        "context.now.hour >= 22 or context.now.hour < 6",
        "context.now.hour >= 9 and context.now.hour < 18",
        "args.n >= 5 and args.n <= 5",
        "args.n < 5 or args.n > 5",
        "args.n == 1 and args.n == 1.0",  # one number
        "args.a > 5 and args.b < 3",
    ):
        assert codes(f'forbid read on "/a/**" when {fine}\n') == [], fine
    # across when and unless: when W unless U is W and not U
    body = 'forbid read on "/a/**" when context.now.hour >= 22 unless context.now.hour >= 6\n'
    assert codes(body) == ["SOS508"]


def test_a_string_its_schema_pattern_rules_out_is_warned_about() -> None:
    # context.now.date is always YYYY-MM-DD: a holiday freeze written "2026-1-1"
    # never applies; so does a custom schema's pattern
    for never in (
        'forbid read on "/a/**" when context.now.date == "2026-1-1"\n',
        'forbid read on "/a/**" when context.now.date in ["2026-12-25", "2026-1-1"]\n',
        'forbid read on "/a/**" when context.now.iso == "2026-12-25T10:00:00Z"\n',
    ):
        found = [d for d in lint([parse_source(HEAD + never, "l.sos").file])]
        assert [d.code for d in found] == ["SOS502"], never
        assert "matches" in (found[0].hint or ""), found[0].hint
    for fine in (
        'forbid read on "/a/**" when context.now.date == "2026-01-01"\n',
        'forbid read on "/a/**" when context.now.iso == "2026-12-25T10:00:00+00:00"\n',
        'forbid read on "/a/**" when context.now.iso == "2026-12-25T10:00:00+05:30"\n',
    ):
        assert codes(fine) == [], fine
    schema = schema_from_json(
        {"type": "object", "properties": {"tenant": {"type": "string", "pattern": "^t-[0-9]+$"}}}
    )
    opts = LintOptions(context_schema=schema)
    assert codes('forbid read on "/a/**" when context.tenant == "t1"\n', opts) == ["SOS502"]
    assert codes('forbid read on "/a/**" when context.tenant == "t-1"\n', opts) == []


def test_a_date_the_calendar_does_not_have_is_warned_about() -> None:
    # the clock writes only days that exist: a freeze on "2026-02-29" (2026 is not a
    # leap year), "2026-04-31" or "2026-13-01" has the right shape and never applies;
    # nor does one on a year past 9999
    for never in (
        'forbid read on "/a/**" when context.now.date == "2026-02-29"\n',
        'forbid read on "/a/**" when context.now.date in ["2026-12-25", "2026-04-31"]\n',
        'forbid read on "/a/**" when context.now.date == "2026-13-01"\n',
        'forbid read on "/a/**" when context.now.date == "0000-01-01"\n',
        'forbid read on "/a/**" when context.now.iso == "2026-02-30T10:00:00+00:00"\n',
        'forbid read on "/a/**" when context.now.iso == "2026-12-25T24:00:00+00:00"\n',
        'forbid read on "/a/**" when context.now.year == 10000\n',
    ):
        found = [d for d in lint([parse_source(HEAD + never, "l.sos").file])]
        assert [d.code for d in found] == ["SOS502"], never
        if "year" not in never:
            assert "calendar" in found[0].message and "exists" in (found[0].hint or "")
    for fine in (
        'forbid read on "/a/**" when context.now.date == "2024-02-29"\n',
        'forbid read on "/a/**" when context.now.date in ["2000-02-29", "2026-04-30"]\n',
        'forbid read on "/a/**" when context.now.iso == "2028-02-29T23:59:59-10:00"\n',
        'forbid read on "/a/**" when context.now.year >= 2027\n',
    ):
        assert codes(fine) == [], fine


def test_a_test_context_value_the_host_never_passes_is_warned_about() -> None:
    # "contractors cannot read the secrets" tested with a misspelt role tests a caller
    # who does not exist: the test passes whatever the contractor rules say
    schema = schema_from_json(
        {
            "type": "object",
            "properties": {
                "principal": {"type": "string"},
                "tenant": {"enum": ["acme", "globex"]},
                "roles": {"type": "array", "items": {"enum": ["admin", "contractor"]}},
            },
        }
    )
    opts = LintOptions(context_schema=schema)

    def test_codes(context: str, o: LintOptions | None = None) -> list[str]:
        body = (
            f'test "t" {{ context {{ {context} }} call files.read {{ path: "/a" }} expect deny }}\n'
        )
        return codes(body, o)

    assert test_codes('principal: "a", roles: ["contractr"]', opts) == ["SOS502"]
    assert test_codes('principal: "a", tenant: "acm"', opts) == ["SOS502"]
    assert test_codes('principal: "a", roles: ["contractor"], tenant: "acme"', opts) == []
    # the kernel's roles are strings, its hours 0 to 23
    assert test_codes('principal: "a", roles: ["admin", 3]') == ["SOS502"]
    assert test_codes('principal: "a", now: { hour: 25 }') == ["SOS502"]


@pytest.mark.parametrize(
    ("rule", "col"),
    [
        ('forbid read on "/private /**"\n', 2),
        ('forbid read on "/data/ secret"\n', 7),
        ('namespace gh\nforbid read on "sharedos /*"\n', 1),
    ],
)
def test_a_pattern_segment_padded_with_spaces_is_warned_about(rule: str, col: int) -> None:
    # it reads as the name and matches only the padded spelling: the forbid is dead
    parsed = parse_source(HEAD + rule, "l.sos")
    found = [d for d in lint([parsed.file]) if d.code == "SOS513"]
    assert [d.col - len('forbid read on "') for d in found] == [col], found
    assert "white space" in found[0].message


def test_a_space_inside_a_pattern_segment_is_a_name() -> None:
    assert codes('forbid read on "/data/My Documents/**"\n') == []

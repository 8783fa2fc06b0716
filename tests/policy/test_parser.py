"""Each construct of the language parses into the typed AST."""

from __future__ import annotations

import random

import pytest

from sharedos.policy import ast, parse_source

SOURCE = """# leading comment
namespace files
requirement files.read { action read; resource path(args.path) }   # trailing
requirement github.search { action search; resource "{args.owner}/{args.repo}" }
requirement test_simple_text { action run resource args.name }

@id("public")
permit read, search on "/public/**"
permit * on "/shared/**" when "editor" in context.roles and not (action == "x" or startswith(resource, "/a"))
forbid * on "/private/**"
  unless "admin" in context.roles

toolpolicy ci-strict {
  mode strict
  managed files.*, github.search
  harness_local "patch", "shell.bounded"
}

namespace other
test "reads public" {
  context { principal: "alice", roles: ["a", "b"], n: -1.5, ok: true, none: null, nested: { k: [1, 2] } }
  call files.read { path: "/public/a.txt", "odd key": "v" }
  expect deny forbidden
}
"""


def test_constructs() -> None:
    result = parse_source(SOURCE, "f.sos")
    assert result.diagnostics == ()
    f = result.file
    kinds = [type(s).__name__ for s in f.statements]
    assert kinds == [
        "NamespaceDecl",
        "Requirement",
        "Requirement",
        "Requirement",
        "Rule",
        "Rule",
        "Rule",
        "ToolPolicyDecl",
        "NamespaceDecl",
        "TestBlock",
    ]
    r1, r2, r3 = f.requirements
    assert (r1.tool, r1.namespace, r1.action) == ("files.read", "files", "read")
    assert isinstance(r1.resource, ast.PathResource) and r1.resource.arg.dotted == "args.path"
    assert isinstance(r2.resource, ast.TemplateResource)
    assert [p if isinstance(p, str) else p.dotted for p in r2.resource.parts] == [
        "args.owner",
        "/",
        "args.repo",
    ]
    assert isinstance(r3.resource, ast.TemplateResource) and r3.tool == "test_simple_text"

    public, shared, private = f.rules
    assert public.explicit_id == "public" and public.rule_id == "public"
    assert public.actions == ("read", "search") and public.conditions == ()
    assert public.span.line == 8  # the rule keyword, not the annotation
    assert shared.actions == ("*",) and shared.when is not None and shared.unless is None
    assert shared.rule_id == "f.sos:9"
    cond = shared.when
    assert isinstance(cond, ast.BoolOp) and cond.op == "and"
    left, right = cond.operands
    assert isinstance(left, ast.Compare) and left.op == "in"
    assert isinstance(right, ast.Not)
    assert private.when is None and private.unless is not None and private.effect == "forbid"
    assert private.span.line == 10

    (tp,) = f.tool_policies
    assert tp.name == "ci-strict" and tp.mode == "strict"
    assert [e.value for e in tp.managed or ()] == ["files.*", "github.search"]
    assert [(e.value, e.quoted) for e in tp.harness_local or ()] == [
        ("patch", True),
        ("shell.bounded", True),
    ]
    assert tp.external_direct is None

    (test,) = f.tests
    assert test.namespace == "other"
    assert test.context == {
        "principal": "alice",
        "roles": ["a", "b"],
        "n": -1.5,
        "ok": True,
        "none": None,
        "nested": {"k": [1, 2]},
    }
    assert test.tool == "files.read"
    assert test.args == {"path": "/public/a.txt", "odd key": "v"}
    assert (test.expect_effect, test.expect_reason) == ("deny", "forbidden")


def test_comments_are_kept_with_positions() -> None:
    f = parse_source(SOURCE, "f.sos").file
    assert [(c.text, c.span.line, c.own_line) for c in f.comments] == [
        (" leading comment", 1, True),
        (" trailing", 3, False),
    ]


def test_hash_inside_a_string_is_not_a_comment() -> None:
    f = parse_source('namespace n\npermit a on "/x#y" # real\n', "f.sos").file
    assert f.rules[0].pattern.raw == "/x#y"
    assert [c.text for c in f.comments] == [" real"]


def test_string_escapes() -> None:
    f = parse_source('namespace n\npermit a on "/q\\"uote/\\u00e9\\\\"\n', "f.sos").file
    assert f.rules[0].pattern.raw == '/q"uote/\u00e9\\'


def test_semicolons_and_newlines_are_optional() -> None:
    one_line = 'namespace n; requirement n.t { action a resource path(args.p) }; permit a on "/x";'
    f = parse_source(one_line, "f.sos").file
    assert [type(s).__name__ for s in f.statements] == ["NamespaceDecl", "Requirement", "Rule"]


def test_default_namespace_before_any_namespace_statement() -> None:
    f = parse_source(
        'requirement t { action a; resource path(args.p) }\npermit a on "/x"\n', "f.sos"
    ).file
    assert f.requirements[0].namespace == ast.DEFAULT_NAMESPACE
    assert f.rules[0].namespace == ast.DEFAULT_NAMESPACE


def test_parse_never_raises_on_garbage() -> None:
    for text in ["", "\x00\x01", "{{{{", "permit", '"', "@", "test {", "((((((((", "namespace 1"]:
        result = parse_source(text, "g.sos")
        assert all(d.line >= 1 and d.col >= 1 for d in result.diagnostics)


def test_deeply_nested_expression_is_a_diagnostic_not_a_crash() -> None:
    text = 'namespace n\npermit a on "/x" when ' + "(" * 3000 + "true" + ")" * 3000 + "\n"
    result = parse_source(text, "deep.sos")
    # either parsed or reported; never an exception
    assert result.file is not None


# ------------------------------------------- fast path for one-line rules
#
# Large policies build their simple one-line rules without Lark
# (``parser._parse_fast``). Whatever the text, the result must be exactly what
# the Lark path gives: same statements, spans, comments and diagnostics.


def _filler(n: int = 80) -> str:
    lines = ["namespace files"]
    for i in range(n):
        lines.append(
            (
                f'permit read, list on "/p{i}/**" when "r{i}" in context.roles',
                f'forbid write on "/p{i}/rel/**" unless "rel" in context.roles or context.n == -1.5e3',
                f'permit * on "/p{i}/shared/*" when context.tenant == "t" and context.x != 3',
                f'permit read on "/p{i}/docs/*.md"',
                f'require approval by role "r{i}", group "g" for write on "/p{i}/rel/**" when context.n == {i}',
            )[i % 5]
        )
    return "\n".join(lines) + "\n"


_TRICKY = [
    # a condition continued on the next line
    'permit read on "/a" when "x" in context.roles\n  and context.tenant == "t"\n',
    # an annotation on the line above
    '@id("named")\npermit read on "/a"\n',
    '@id("named") permit read on "/a"\n',
    # an incomplete rule followed by a fast-looking line (invalid)
    'permit read on "/a" when\npermit read on "/b"\nnamespace == "x"\n',
    # a fast-looking line inside a block (invalid)
    'test "t" {\npermit read on "/a"\n}\n',
    # namespaces change between fast lines
    'namespace other\npermit read on "/o"\nnamespace third\npermit write on "/t"\n',
    # keywords as action names, spacing variants, adjacency, CRLF, tabs, comments
    'permit on on "/x"\r\npermit read,write on"/y" # c\r\n\tforbid * on "/z"   ;\n',
    'permit read on "/a" when context.x=="a" and 1 != context.n\n',
    'permit read on "/a" when context.n == 01\n',
    'permit read on "/a" when not context.x == "a"\n',
    'permit read on "/a" when context.x not in context.y\n',
    'permit read on "/a" when "x" in context.roles or "y" in context.roles and context.t == "u"\n',
    'permit read on "/a" when context.f\n',
    'permit read on "/a" when context.f(1) == true\n',
    'permit read on "/a\\n" when context.x == "\\u0041"\n',
    'permit read on "/a" when context.x == "a\\q"\n',
    'permit read on "/a" when test == "x"\ntest "t" { call files.read { path: "/a" } expect allow }\n',
    'permit read.x on "/a"\n',
    'permit read on "/a" when and == "x"\n',
    'permit read on "/a" unless\n',
    "permit read on \"/a\" when context.x == 'a'\n",
    'permit read on "/a" when context.x == "a" forbid read on "/b"\n',
    'requirement files.read { action read; resource path(args.path) }\npermit read on "/r"\n',
    '\n\n;\n;permit read on "/x"\n',
    # one-line requirements
    "requirement files.x { resource path(args.path); action read }\n",
    'requirement "q.tool" {action read resource args.x};\n',
    "requirement files.x { action read }\n",
    "requirement files.x { action read; action write; resource args.x }\n",
    "requirement files.x { action read; resource lower(args.x) }\n",
    'requirement files.x { action read; resource "{args.a}/{bad hole}" }\n',
    'requirement files.x { action read; resource "/a/{args.b}" } ;\n',
    'requirement files.x-y { action read; resource "{args.a}" }\n',
    "requirement test { ; action on ;; resource context.x }\n",
    # annotations
    '@id("a")\n\n# c\npermit read on "/x"\n',
    '@id("a") @x("b")\npermit read on "/x"\n',
    '@id("a")\nrequirement files.y { action read; resource args.x }\n',
    '@id("a")\n@id("b") permit read on "/x"\n',
    '@ id ( "a" ) permit read on "/x"\n',
    '@id("a")\npermit read on "/x" when context.a == "\\n"\n',
    '@id("a")\n',
    '@id("a") ; permit read on "/x"\n',
    '@id("a");\npermit read on "/x"\n',
    # presence tests (issue 23)
    'permit read on "/a" when has args.x and args.x == "y"\n',
    'forbid * on "/a" unless has context.attributes.team or has args.b\n',
    'permit read on "/a" when has\n',
    'permit read on "/a" when has "x"\n',
    'permit read on "/a" when has args.x == true\n',
    'permit read on "/a" when not has args.x\n',
    'permit read on "/a" when hasargs.x\n',
    # approval rules (issue 28)
    'require approval by role "maintainer" for delete on "/srv/git/**"\n',
    'require approval by role "m", group "release" for read, write on "/a" when args.x == "y"\n',
    '@id("ap") require approval by group "g" for * on "/a/{context.principal}/**" unless has args.f\n',
    '@id("ap")\nrequire approval by role "m" for read on "/a"\n',
    'require approval by role "m" for read on "/a" when "x" in context.roles\n  and context.t == "u"\n',
    'require approval by "m" for read on "/a"\n',
    'require approval by role "m" on "/a"\n',
    'require approval by role "m\\n" for read on "/a"\n',
    'require approval by role "m" group "g" for read on "/a"\n',
    'require approval by role "m", for read on "/a"\n',
    'require approval for read on "/a"\n',
    'requireapproval by role "m" for read on "/a"\n',
    'require approval by user "m" for read on "/a"\n',
    'require approval by role "m" for for on "/a"\n',
    'permit by, for, role on "/a"\n',
    'test "t" { call files.read { path: "/a" } approver { principal: "m", roles: ["x"] } expect approval }\n',
    # keywords glued to what follows
    'permitread on "/x"\n',
    "namespacefoo\n",
    'permit read on "/x" when "a" incontext.roles\n',
    'permit read on"/x"when"a" in context.roles andtrue\n',
    # whole expressions on one line: parentheses (a bare token keeps its own columns,
    # a tree takes its parentheses), not, calls, lists, '+', true/false
    'permit read on "/a" when ((context.a or context.b)) and ("x")\n',
    'permit read on "/a" when ("x") == context.t unless (true)\n',
    'permit read on "/a" when not (context.a == 1 or not has args.b)\n',
    'permit read on "/a" when any_in(context.roles, ["a", "b",]) and f() == []\n',
    'permit read on "/a" when startswith(resource, "/t/" + context.tenant + "/")\n',
    'permit read on "/a" when args.x in [1, -2.5e3, true, null] or context.f(1, (2))\n',
    'permit read on "/a" when (context.a == 1) == true\n',
    'permit read on "/a" when f(1,) == 1\n',
    'permit read on "/a" when [1 2]\n',
    'permit read on "/a" when not.x == 1 or true.y\n',
    'permit read on "/a" when (((((((((((((((((((((((((((((((((((((((((((a)))))))))))))))))))))))))))))))))))))))))))\n',
]


def _both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    from sharedos.policy import parser

    fast = parse_source(text, "f.sos")
    monkeypatch.setattr(parser, "_FAST_ENABLED", False)
    slow = parse_source(text, "f.sos")
    monkeypatch.setattr(parser, "_FAST_ENABLED", True)
    return fast, slow


def test_fast_path_is_used_for_simple_lines_of_any_file() -> None:
    from sharedos.policy import parser

    assert parser._parse_fast(_filler(), "f.sos") is not None
    assert parser._parse_fast(_filler(3), "f.sos") is not None
    assert parser._parse_fast('test "t" { call x expect allow }\n', "f.sos") is None


def test_a_file_of_simple_lines_never_loads_the_lark_parser() -> None:
    # What keeps a small policy's cold compile in a fresh process to a few ms.
    import subprocess
    import sys

    code = (
        "from sharedos.policy import compile_source, grammar\n"
        "p = compile_source(open(0).read(), 'f.sos')\n"
        "assert p.decide('files.read', {'path': '/p0/x'}, {'roles': ['r0']}).allowed\n"
        "print(grammar.parser.cache_info().currsize)\n"
    )
    text = _filler(9).replace(
        "namespace files\n",
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'requirement files.list { action list; resource "{args.owner}/{args.repo}" }\n'
        "requirement files.write { action write; resource args.name }\n"
        '@id("first")\n',
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0"


@pytest.mark.parametrize("tricky", _TRICKY)
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_fast_path_gives_the_lark_result(
    tricky: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    filler = _filler()
    text = {
        "start": tricky + filler,
        "middle": filler + tricky + filler,
        "end": filler + tricky,
    }[where]
    fast, slow = _both(text, monkeypatch)
    assert fast == slow


def test_fast_path_gives_the_lark_result_for_shipped_and_generated_policies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    texts = [p.read_text(encoding="utf-8") for p in sorted(root.glob("rules/*.sos"))]
    texts += [p.read_text(encoding="utf-8") for p in sorted(root.glob("policy/*.sos"))]
    texts.append("\n".join(texts) + _filler())
    texts.append(SOURCE + _filler() + SOURCE.replace("namespace files", "namespace again"))
    for text in texts:
        fast, slow = _both(text, monkeypatch)
        assert fast == slow


def test_conditions_of_every_form_are_built_without_lark() -> None:
    # Parentheses, 'not', calls and lists once sent the whole rule to Lark: a
    # 10,000-rule policy of such conditions compiled 2-3x slower than one of flat
    # comparisons. Every line here is built by the fast path (counted, not timed).
    from sharedos.policy.fastpath import scan

    rules = [
        'permit read on "/a" when ("r1" in context.roles) and (context.tenant == "t")',
        'permit read on "/a" when not (has args.x and args.x == "y") unless ("g" in context.roles)',
        'permit read on "/a" when any_in(context.roles, ["a", "b", "c"]) or args.n >= 3',
        'permit read on "/a" when endswith(resource, ".md") and contains(lower(args.m), "x")',
        'forbid * on "/a" unless context.now.hour >= 8 and (context.now.weekday in ["sat", "sun"]) == false',
        'permit read on "/a" when startswith(resource, "/t/" + context.tenant + "/")',
        'permit read on "/a" when office_hours and ((args.size < 10) or (args.size > 99))',
    ]
    text = "namespace files\n" + "\n".join(rules) + "\n"
    found = scan(text, "f.sos")
    assert found.complete
    assert len(found.statements) == len(rules) + 1


def test_strings_with_escapes_are_built_without_lark(monkeypatch: pytest.MonkeyPatch) -> None:
    # A backslash anywhere on a line once sent it to Lark: 10,000 rules comparing
    # with "caf\u00e9" compiled at Lark's speed (~1.5x the time of the same rules
    # without the escape). Strings are decoded as the Lark path decodes them.
    from sharedos.policy.fastpath import scan

    rules = [
        'permit read on "/a" when context.tenant == "caf\\u00e9" or args.q == "say \\"hi\\""',
        'permit read on "C:\\\\data\\\\**" when startswith(args.p, "\\\\srv\\n") # \\ in a comment',
        '@id("esc\\u0041pe") forbid * on "/b" unless "\\U0001F600" in context.tags',
        'require approval by role "ops\\/lead" for read on "/c" when ["\\t", "x"] == args.l',
        'requirement "files\\u002eesc" { action read; resource "{args.a}\\/x" }',
    ]
    text = "namespace files\n" + "\n".join(rules) + "\n"
    found = scan(text, "f.sos")
    assert found.complete
    assert len(found.statements) == len(rules) + 1
    fast, slow = _both(text, monkeypatch)
    assert repr(fast) == repr(slow)
    # a bad escape is still the Lark path's diagnostic
    for bad in ['"\\q"', '"\\ud800"', '"\\U00110000"']:
        text = f'namespace files\npermit read on "/a" when args.x == {bad}\n'
        fast, slow = _both(text, monkeypatch)
        assert fast.diagnostics and repr(fast) == repr(slow)


def test_rules_whose_actions_are_keywords_are_built_without_lark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Where the grammar takes an action it takes only a name, so 'test', 'call',
    # 'policy' or 'on' are action names there (a CI tool's 'test' action); such a
    # rule once went to Lark whatever its condition.
    from sharedos.policy.fastpath import scan

    rules = [
        'permit test on "/ci/**" when "dev" in context.roles',
        'forbid call, skip, policy on "/a"',
        'require approval by role "m" for expect, mode on "/b" unless has args.x',
        'permit on on "/c"',
        'permit read, true, not on "/d"',
    ]
    text = "namespace ci\n" + "\n".join(rules) + "\n"
    found = scan(text, "f.sos")
    assert found.complete
    assert len(found.statements) == len(rules) + 1
    fast, slow = _both(text, monkeypatch)
    assert repr(fast) == repr(slow)


def _random_expr(rng: random.Random, depth: int) -> str:
    atoms = ['"a"', "1", "-2.5", "true", "false", "null", "context.roles", "args.x", "resource"]
    atoms += ["not", "in", "and", "has", "true.x", "context.in"]  # keywords where a value goes
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice(atoms)
    sub = lambda: _random_expr(rng, depth - 1)  # noqa: E731
    sp = rng.choice(("", " "))
    return rng.choice(
        (
            lambda: f"({sp}{sub()}{sp})",
            lambda: f"{sub()} and {sub()}",
            lambda: f"{sub()} or {sub()} or {sub()}",
            lambda: f"not {sub()}",
            lambda: f"has {rng.choice(atoms)}",
            lambda: f"{sub()}{sp}{rng.choice(['==', '<=', ' in ', ' not in '])}{sp}{sub()}",
            lambda: (
                f"{rng.choice(['lower', 'f', 'context.f'])}({', '.join(sub() for _ in range(rng.randrange(3)))})"
            ),
            lambda: (
                "["
                + ", ".join(sub() for _ in range(rng.randrange(3)))
                + rng.choice(["", ","])
                + "]"
            ),
            lambda: f"{sub()}{sp}+{sp}{sub()}",
            lambda: f"{sub()}{rng.choice([')', '(', ']', ','])}",
        )
    )()


def test_fast_path_gives_the_lark_result_for_random_conditions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(27)
    for _ in range(100):
        lines = [
            f'@id("x{j}") permit read on "/a/{j}" {rng.choice(["when", "unless"])} '
            f"{_random_expr(rng, rng.randrange(1, 5))}"
            for j in range(3)
        ]
        text = "namespace n\n" + "\n".join(lines) + '\npermit read on "/b"\n'
        fast, slow = _both(text, monkeypatch)
        assert fast == slow, lines


def test_a_deep_condition_parsed_from_a_deep_stack_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fast path reads a condition by recursive descent, ~8 Python frames per
    # level of nesting (Lark's tree for the same line is a few levels deep). Called
    # with most of the recursion limit already used, it raised RecursionError out of
    # parse_source, which never raises; the Lark path built the rule.
    import sys

    text = (
        'permit read on "/a" when '
        + "(" * 40
        + 'x == 1 or not [f(g("y"))] == []'
        + ")" * 40
        + '\npermit read on "/b"\n'
    )

    def depth() -> int:
        frame, n = sys._getframe(), 0
        while frame is not None:
            frame, n = frame.f_back, n + 1
        return n

    def at(spare: int) -> object:
        if depth() < sys.getrecursionlimit() - spare:
            return at(spare)
        return parse_source(text, "deep.sos")

    from sharedos.policy import parser

    monkeypatch.setattr(parser, "_FAST_ENABLED", False)
    slow = at(150)
    monkeypatch.setattr(parser, "_FAST_ENABLED", True)
    assert at(150) == slow

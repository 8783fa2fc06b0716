"""Seeded differential: the one-line fast path (``fastpath``) against the Lark parser.

Rule lines are generated from the grammar's expression language (every
operator, precedence and associativity, chained comparisons the grammar
forbids, '+' on strings and numbers, escapes and raw Unicode in strings,
numbers valid and not, words that are keywords or nearly, comments, tabs, CRLF,
trailing blanks, long lines, nesting at and past the fast path's depth cutoff)
and mixed with statements only Lark builds (tests, named conditions, multi-line
rules, tool policies). For each text the two parses must agree exactly: the
AST with every span (``repr``: ``True`` and ``1`` are equal but not alike),
the diagnostics ``sharedos-policy check`` prints (code, position, message),
and for a policy that compiles, its rules (ids) and decisions.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from sharedos.policy import compile_source
from sharedos.policy.diagnostics import PolicyError
from sharedos.policy.fastpath import _MAX_DEPTH
from sharedos.policy.loader import parse_and_check
from sharedos.policy.parser import parse_source

_HEADER = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"

_ATOMS = [
    # values the rules can read
    '"a"',
    '"é ü"',
    '"x y"',
    '""',
    '"#"',
    '"\\""',
    '"\\\\"',
    '"\\u00e9"',
    '"\\n"',
    '"/p/"',
    "1",
    "0",
    "-0",
    "-0.0",
    "1e3",
    "1E+3",
    "-2.5e-3",
    "true",
    "false",
    "args.x",
    "args.n",
    "context.roles",
    "context.tenant",
    "resource",
    "action",
    "context.in",
    "args.not",
    "args.true",
    # words that are keywords, or nearly
    "True",
    "true1",
    "not_",
    "in_",
    "null",
    "in",
    "and",
    "has",
    "on",
    "test",
    "true.x",
    "not.x",
    "action.x",
    # numbers the grammar does not read as one
    ".5",
    "1.",
    "0x10",
    "1_000",
    "01",
    "-x",
    "99999999999999999999",
    "1e999",
]
_OPS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in"]
_CALLS = ["lower", "startswith", "any_in", "f", "context.f", "true", "in"]


def _ws(rng: random.Random) -> str:
    return rng.choice(["", " ", " ", "  ", "\t", " \t "])


def _expr(rng: random.Random, depth: int) -> str:
    if depth <= 0 or rng.random() < 0.2:
        return rng.choice(_ATOMS)
    sub: Callable[[], str] = lambda: _expr(rng, depth - 1)  # noqa: E731
    w: Callable[[], str] = lambda: _ws(rng)  # noqa: E731
    forms: list[Callable[[], str]] = [
        lambda: f"({w()}{sub()}{w()})",
        lambda: f"{sub()} and {sub()}",
        lambda: f"{sub()} or {sub()} or {sub()}",
        lambda: f"{sub()} or {sub()} and {sub()}",
        lambda: f"not {sub()}",
        lambda: f"not {sub()} == {sub()}",
        lambda: f"not not {sub()}",
        lambda: f"has {rng.choice(_ATOMS)}",
        lambda: f"{sub()}{w()}{rng.choice(_OPS)}{w() or ' '}{sub()}",
        lambda: f"{sub()}{w()}+{w()}{sub()}",
        lambda: f"{sub()} + {sub()} + {sub()} == {sub()} + {sub()}",
        lambda: (
            f"{rng.choice(_CALLS)}{w()}({w()}"
            + f",{w()}".join(sub() for _ in range(rng.randrange(4)))
            + rng.choice(["", "", ","])
            + ")"
        ),
        lambda: (
            f"[{w()}"
            + f",{w()}".join(sub() for _ in range(rng.randrange(4)))
            + rng.choice(["", ","])
            + f"{w()}]"
        ),
        lambda: f"({sub()}) {rng.choice(['and', 'or', '+', '==', 'in'])} ({sub()})",
        lambda: f"{sub()} == {sub()} == {sub()}",  # the grammar has no chains
        lambda: f"{sub()} < {sub()} < {sub()}",
        lambda: f"{sub()}{rng.choice([')', '(', ']', ',', '+', '-', 'not', ';', '}', '='])}",
    ]
    return rng.choice(forms)()


def _typed(rng: random.Random, kind: str, depth: int) -> str:
    """A well-typed expression of ``kind`` (b: boolean, s: string, n: number, l: list),
    for policies that compile."""
    w: Callable[[], str] = lambda: _ws(rng)  # noqa: E731
    t: Callable[[str], str] = lambda k: _typed(rng, k, depth - 1)  # noqa: E731
    leaves = {
        "b": ["true", "false", "has args.x", "has context.tenant"],
        "s": ['"a"', '"é ü"', '"\\u00e9"', '"a\\"b"', "args.x", "context.tenant", "resource"],
        "n": ["1", "-0", "1e3", "-2.5e-3", "args.n"],
        "l": ["context.roles", "[]"],
    }
    if depth <= 0 or rng.random() < 0.25:
        return rng.choice(leaves[kind])
    forms: dict[str, list[Callable[[], str]]] = {
        "b": [
            lambda: f"{t('s')}{w()}{rng.choice(['==', '!='])}{w()}{t('s')}",
            lambda: f"{t('n')}{w()}{rng.choice(['<', '<=', '>', '>=', '=='])}{w()}{t('n')}",
            lambda: f"{t('s')} {rng.choice(['in', 'not in'])} {t('l')}",
            lambda: f"not {t('b')}",
            lambda: f"not {t('s')} == {t('s')}",
            lambda: f"{t('b')} and {t('b')}",
            lambda: f"{t('b')} or {t('b')} and {t('b')}",
            lambda: f"({w()}{t('b')}{w()})",
            lambda: f"({t('b')}) == {rng.choice(['true', 'false', '(true)'])}",
            lambda: f"startswith({t('s')},{w()}{t('s')})",
            lambda: f"any_in({t('l')}, {t('l')})",
        ],
        "s": [
            lambda: f"{t('s')}{w()}+{w()}{t('s')}",
            lambda: f"lower({t('s')})",
            lambda: f"(({t('s')}))",
        ],
        "n": [lambda: f"({t('n')})"],
        "l": [lambda: "[" + ", ".join(t("s") for _ in range(rng.randrange(4))) + "]"],
    }
    return rng.choice(forms[kind])()


def _nested(rng: random.Random) -> str:
    """A condition nested just below, at or past the fast path's cutoff."""
    n = _MAX_DEPTH + rng.randrange(-2, 3)
    opens = [rng.choice(["(", "not (", "[", "f("]) for _ in range(n)]
    closes = {"(": ")", "not (": ")", "[": "]", "f(": ")"}
    return "".join(opens) + "args.x" + "".join(closes[o] for o in reversed(opens))


def _rule(rng: random.Random, j: int, clean: bool) -> str:
    heads = ["permit read", "forbid *", 'require approval by role "m" for read']
    head = rng.choice(
        heads if clean else [*heads, "permit read, write", "permit on", "forbid test, call"]
    )

    def cond(depth: int) -> str:
        if clean:
            return _typed(rng, "b", depth)
        return _nested(rng) if rng.random() < 0.05 else _expr(rng, depth)

    tail = ""
    if rng.random() < 0.85:
        tail += f" {rng.choice(['when', 'unless'])}{_ws(rng) or ' '}{cond(rng.randrange(1, 5))}"
    if rng.random() < 0.2:
        tail += f" unless {cond(rng.randrange(1, 3))}"
    if rng.random() < 0.03:
        tail += " and " + " or ".join(f'"{k}" in context.roles' for k in range(300))
    end = rng.choice(["", "", " ", "\t", " # c", '#c "x" \\', ";", " ;", "  "])
    if clean:
        end = end.replace(";", "")
    annotation = rng.choice(["", "", f'@id("r{j}") ', f'@id("r{j}")\n'])
    return f'{annotation}{head} on "/a/{j}/**"{tail}{end}'


_LARK_ONLY = [
    'test "t" { call files.read { path: "/a/0/x" } expect allow }',
    'test "t2" {\n  context { roles: ["a"] }\n  call files.read { path: "/a/1/y" }\n  expect deny\n}',
    'condition editor = "editor" in context.roles',
    'permit read on "/m/**"\n  when "x" in context.roles',
    "toolpolicy ci { mode strict }",
    "namespace other",
    "# a comment line",
    "",
]


def _text(rng: random.Random, clean: bool) -> str:
    lines = [_rule(rng, j, clean) for j in range(rng.randrange(1, 5))]
    for _ in range(rng.randrange(3)):
        lark_only = _LARK_ONLY[:4] + _LARK_ONLY[6:] if clean else _LARK_ONLY
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(lark_only))
    sep = "\r\n" if rng.random() < 0.2 else "\n"
    text = _HEADER + "\n".join(lines) + '\npermit read on "/b/**"\n'
    return text.replace("\n", sep)


def _parse_both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    from sharedos.policy import parser

    fast = repr(parse_source(text, "f.sos"))
    monkeypatch.setattr(parser, "_FAST_ENABLED", False)
    slow = repr(parse_source(text, "f.sos"))
    monkeypatch.setattr(parser, "_FAST_ENABLED", True)
    return fast, slow


def _outcome(text: str) -> object:
    """What ``check`` prints and, for a policy that compiles, its rules and decisions."""
    _files, diagnostics, _ = parse_and_check([("f.sos", text)])
    shown = [(d.code, d.line, d.col, d.end_col, d.message) for d in diagnostics]
    try:
        policy = compile_source(text, "f.sos")
    except PolicyError as exc:
        return shown, str(exc)
    calls = [
        ({"path": "/a/0/x"}, {"roles": ["a"], "tenant": "t"}),
        ({"path": "/a/1/y", "x": "a", "n": 1}, {"roles": [], "tenant": "é ü"}),
        ({"path": "/b/z"}, {}),
    ]
    decisions = [
        (d.effect, d.reason, [str(r) for r in d.rule_ids], d.detail)
        for args, context in calls
        for d in [policy.decide("files.read", args, context)]
    ]
    return shown, [str(r) for r in policy.rules], decisions


def _outcome_both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    from sharedos.policy import parser

    fast = _outcome(text)
    monkeypatch.setattr(parser, "_FAST_ENABLED", False)
    slow = _outcome(text)
    monkeypatch.setattr(parser, "_FAST_ENABLED", True)
    return fast, slow


def _differential(seed: int, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    for i in range(count):
        clean = i % 8 == 0  # compiling costs more than parsing: a sample, mostly valid
        text = _text(rng, clean)
        fast, slow = _parse_both(text, monkeypatch)
        assert fast == slow, text
        if clean:
            fast_outcome, slow_outcome = _outcome_both(text, monkeypatch)
            assert fast_outcome == slow_outcome, text


def test_fast_path_agrees_with_lark_on_generated_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    _differential(1207, 60, monkeypatch)


@pytest.mark.stress
def test_fast_path_agrees_with_lark_on_generated_rules_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for seed in range(20):
        _differential(seed, 500, monkeypatch)

"""Never a traceback: mutated policy text either compiles or raises PolicyError,
and whatever compiles decides, lists and explains any input without raising."""

from __future__ import annotations

import random
from pathlib import Path

from sharedos.policy import Decision, PolicyError, PolicySet, compile_source

CALL_ARGS: list[object] = [
    {"path": "/public/a"},
    {"path": "/private/../private/x", "root": "/shared"},
    {"path": "/../x"},
    {"owner": "sharedos", "repo": "security", "number": 1},
    {"owner": "..", "repo": ""},
    {},
    None,
    [],
    "junk",
    {"path": {"nested": True}},
]
CONTEXTS: list[object] = [
    {"principal": "bob", "tenant": "acme", "roles": ["admin", "editor"]},
    {"principal": "x/..", "roles": "admin"},
    {},
    None,
    {"principal": None, "roles": [None, 1, {"a": 1}]},
]


def _exercise(policy: PolicySet) -> None:
    tools = [*policy.requirements, "nope", ""]
    for tool in tools:
        for ctx in CONTEXTS:
            policy.could_permit(tool, ctx)  # type: ignore[arg-type]
            for args in CALL_ARGS:
                d = policy.decide(tool, args, ctx)  # type: ignore[arg-type]
                assert isinstance(d, Decision)
        policy.explain(tool, CALL_ARGS[0], CONTEXTS[0])  # type: ignore[arg-type]


def test_mutated_shipped_files_never_raise_anything_but_policy_error(repo_root: Path) -> None:
    base = "\n".join(
        p.read_text()
        for p in sorted((repo_root / "rules").glob("*.sos"))
        + sorted((repo_root / "policy").glob("*.sos"))
    )
    lines = base.splitlines()
    rng = random.Random(11)
    pieces = [
        '"',
        "{",
        "}",
        "(",
        ")",
        "*",
        "**",
        "/",
        "..",
        "\x00",
        "when",
        "not",
        "in",
        '@id("x")',
        "\\",
        "#",
    ]
    compiled = errors = 0
    for _ in range(120):
        mutated = list(lines)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(mutated))
            op = rng.random()
            if op < 0.3:
                del mutated[i]
            elif op < 0.6:
                mutated.insert(i, rng.choice(mutated))
            else:
                line = mutated[i]
                pos = rng.randint(0, len(line))
                mutated[i] = line[:pos] + rng.choice(pieces) + line[pos + rng.randint(0, 3) :]
        text = "\n".join(mutated)
        try:
            policy = compile_source(text, "m.sos")
        except PolicyError as exc:
            errors += 1
            assert exc.diagnostics
            for d in exc.diagnostics:
                assert d.line >= 1 and d.col >= 1 and d.code and d.hint
                d.render()
            continue
        compiled += 1
        _exercise(policy)
    assert compiled and errors

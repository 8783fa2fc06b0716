"""Named conditions that use others several times over: resolved once each.

``condition c1 = c0 and c0``, ``c2 = c1 and c1``, ... reaches ``c0`` by 2**n
paths; a faulty ``c0`` under such a chain was resolved, and reported, once per
path (2**n diagnostics, and a check that never finished).
"""

from __future__ import annotations

from sharedos.policy.loader import parse_and_check

HEAD = """namespace f
requirement f.read { action read; resource path(args.path) }
"""


def doubling(levels: int, c0: str = '"r" in context.roles') -> str:
    """c0, then c1 = c0 and c0, ... c<levels>: c<k> reaches c0 by 2**k paths."""
    lines = [f"condition c0 = {c0}"]
    lines += [f"condition c{i} = c{i - 1} and c{i - 1}" for i in range(1, levels + 1)]
    return HEAD + "\n".join(lines) + "\n"


def codes(text: str) -> list[str]:
    _, diagnostics, _ = parse_and_check([("p.sos", text)])
    return [d.code for d in diagnostics if d.severity == "error"]


def test_a_faulty_condition_under_a_doubling_chain_is_reported_once() -> None:
    # before: c0's cycle was found (and reported) once per path to it, 2**12 times
    text = doubling(12, c0='c0 and "r" in context.roles')
    assert codes(text) == ["SOS215"]
    mutual = HEAD + "condition a = b\ncondition b = a\ncondition x = a and a and b\n"
    _, diagnostics, _ = parse_and_check([("p.sos", mutual)])
    assert [(d.code, d.message) for d in diagnostics] == [
        ("SOS215", "condition a refers to itself (a -> b -> a)"),
        ("SOS215", "condition b refers to itself (b -> a -> b)"),
    ]

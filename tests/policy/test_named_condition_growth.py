"""Named conditions are expanded where they are used: the expansion is bounded (SOS217).

``condition c1 = c0 and c0``, ``c2 = c1 and c1``, ... doubles with every line.
Unbounded, sixteen such lines took the compiler a second and every decision
13 ms, twenty took minutes, and ``sharedos-policy check`` never finished; a
faulty ``c0`` under such a chain was resolved, and reported, once per path to
it (2**n diagnostics).
"""

from __future__ import annotations

import pytest

from sharedos.policy import PolicyError, compile_source
from sharedos.policy.checker import MAX_EXPANDED_NODES
from sharedos.policy.loader import parse_and_check

HEAD = """namespace f
requirement f.read { action read; resource path(args.path) }
"""


def doubling(levels: int, c0: str = '"r" in context.roles') -> str:
    """c0, then c1 = c0 and c0, ... c<levels>: c<k> expands to 2**(k+2) - 1 nodes."""
    lines = [f"condition c0 = {c0}"]
    lines += [f"condition c{i} = c{i - 1} and c{i - 1}" for i in range(1, levels + 1)]
    return HEAD + "\n".join(lines) + "\n"


def codes(text: str) -> list[str]:
    _, diagnostics, _ = parse_and_check([("p.sos", text)])
    return [d.code for d in diagnostics if d.severity == "error"]


def test_a_condition_within_the_bound_compiles_and_decides_as_written() -> None:
    assert MAX_EXPANDED_NODES >= 2 ** (11 + 2) - 1
    policy = compile_source(doubling(11) + 'permit read on "/p/**" when c11\n', "p.sos")
    ctx = {"principal": "u", "roles": ["r"]}
    assert policy.decide("f.read", {"path": "/p/a"}, ctx).allowed
    assert not policy.decide("f.read", {"path": "/p/a"}, {"principal": "u", "roles": []}).allowed


def test_a_named_condition_that_grows_past_the_bound_is_refused_once() -> None:
    # c12 is the first past the bound; c13..c60 use it, and are not reported again
    assert codes(doubling(60) + 'permit read on "/p/**" when c60\n') == ["SOS217", "SOS203"]
    with pytest.raises(PolicyError) as err:
        compile_source(doubling(14), "p.sos")
    (diag,) = err.value.diagnostics
    assert diag.code == "SOS217" and "condition c12 expands to 16,383 nodes" in diag.message


def test_a_rule_condition_that_grows_past_the_bound_is_refused() -> None:
    text = doubling(10) + 'permit read on "/p/**" when c10 and c10 and c10\n'
    assert codes(text) == ["SOS217"]
    assert codes(doubling(10) + 'permit read on "/p/**" when c10 and c10\n') == []


def test_a_large_literal_list_counts_once() -> None:
    items = ", ".join(f'"v{i}"' for i in range(3 * MAX_EXPANDED_NODES))
    text = HEAD + f"condition listed = args.x in [{items}]\n"
    text += 'permit read on "/p/**" when listed or (listed and has args.y)\n'
    policy = compile_source(text, "p.sos")
    ctx = {"principal": "u", "roles": []}
    assert policy.decide("f.read", {"path": "/p/a", "x": "v29999"}, ctx).allowed
    assert not policy.decide("f.read", {"path": "/p/a", "x": "w"}, ctx).allowed


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

"""The indexed reference (``benchmarks/engines/reference.py``) decides as SharedOS does
on the inputs its docstring promises to handle "exactly as SharedOS does": paths that
are not canonical (a path not in Unicode NFC is unresolvable) and interpolated
principals (unsafe only when docs/policy-language.md, "Interpolation safety", says so).
"""

from __future__ import annotations

import pytest

from benchmarks.engines.reference import ReferenceEngine
from benchmarks.engines.sharedos_engine import policy_text
from benchmarks.workload import build
from sharedos.policy import compile_source
from sharedos.policy.policyset import PolicySet

Engines = tuple[ReferenceEngine, PolicySet]


@pytest.fixture(scope="module")
def engines() -> Engines:
    wl = build("acl", 10, 20)
    return ReferenceEngine.from_workload(wl), compile_source(policy_text(wl), "acl.sos")


PRINCIPALS = [
    "a\u00a0b",  # a no-break space: printable? no; unsafe? no (not a control character)
    "u\u200dx",  # a zero-width joiner (format character)
    "x\u2028y",  # a line separator
    "e\u0301",  # not NFC: unsafe
    "\u00e9",
    "bob",
]


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_interpolated_principal_is_safe_exactly_as_documented(
    engines: Engines, principal: str
) -> None:
    ref, policy = engines
    ctx = {"principal": principal, "tenant": "t1", "roles": [], "attributes": {}}
    for path in (f"/home/{principal}/n.md", "/home/bob/n.md", f"/private/{principal}"):
        for tool in ("files.read", "files.write"):
            want = policy.decide(tool, {"path": path}, ctx).effect.value == "allow"
            assert ref.decide(tool, {"path": path}, ctx) is want, (tool, path, principal)


@pytest.mark.parametrize(
    "path", ["/home/bob/cafe\u0301.md", "/home/bob/./cafe\u0301.md", "/home/bob/caf\u00e9.md"]
)
def test_a_path_not_in_nfc_is_unresolvable(engines: Engines, path: str) -> None:
    ref, policy = engines
    ctx = {"principal": "bob", "tenant": "t1", "roles": [], "attributes": {}}
    want = policy.decide("files.read", {"path": path}, ctx).effect.value == "allow"
    assert ref.decide("files.read", {"path": path}, ctx) is want

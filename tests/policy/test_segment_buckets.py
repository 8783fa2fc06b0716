"""Rules kept by a literal segment past a wildcard change no decision.

``/data/p1/*/v7/**`` has a ``*`` right after its literal prefix, so the index
cannot tell its rules apart by ``v7``; a group of such rules is kept by the
literal at that position (``evaluator._segment_buckets``). The decisions must
be exactly those of the same policy with the shortcut off, for resources of
every depth, with conditions, roles, forbids and copies of rules.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.budget import examples
from tests.policy.shortcuts import compile_without, decide_all, groups_using

HEADER = """namespace files
requirement files.read { action read; resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
"""
WORDS = ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "x", "a1", "ab", "v")


def test_a_family_past_a_wildcard_is_read_by_the_segment_there() -> None:
    source = HEADER + "".join(f'permit read on "/data/*/v{k}/**"\n' for k in range(10))
    keyed, plain = compile_without(source, "BUCKET_MIN")
    assert groups_using(keyed, 4) == 1 and groups_using(plain, 4) == 0
    d = keyed.decide("files.read", {"path": "/data/anyone/v7/f"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 7]
    calls = [
        ("files.read", {"path": path}, {})
        for path in ("/data/a/v7", "/data/a/v70/f", "/data/a", "/data", "/data/v7", "/d/a/v7")
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)
    assert not keyed.decide("files.read", {"path": "/data/a"}, {}).allowed  # too short


#: pattern templates ({w}: a word); most fix a segment past a wildcard, a hole or a ``**``
TEMPLATES = (
    "/data/*/{w}/**",
    "/data/*/{w}",
    "/data/*/*/{w}/**",
    "/data/a*/{w}/**",
    "/data/*/{w}/*.md",
    "/data/*/{w}/**/y",
    "/data/**/{w}",
    "/data/**/{w}/*",
    "/data/*/**/{w}/f.md",
    "/data/**/{w}/**",
    "/data/*/**/{w}/**/*",
    "/data/**/a*/{w}/**",
    "/data/*.{w}",
    "/data/{w}*",
    "/data/{w}*.md",
    "/data/*{w}*",
    "/data/{w}/**",
    "/data/{{context.principal}}/{w}/**",
    "/data/{{context.principal}}/{w}",
    "/data/u{{context.tenant}}/*/{w}/**",
    "/data/**",
    "/data/*",
    # a glob with a literal head or tail at a fixed position
    "/data/{w}*/**",
    "/data/*/{w}*/**",
    "/data/*/{w}*",
    "/data/**/*.{w}",
    "/data/**/{w}*/*",
    "/data/*x{w}/**",
    "/data/a{w}*b/**",
    "/data/*{w}*/**",  # only a middle: no key
)


@st.composite
def pattern(draw: Any, main: str) -> str:
    """A pattern of the policy's ``main`` template (mostly) or any other, with a word."""
    template = draw(st.sampled_from((main,) * len(TEMPLATES) + TEMPLATES))
    return template.format(w=draw(st.sampled_from(WORDS)))


@st.composite
def policy_source(draw: Any) -> str:
    main = draw(st.sampled_from(TEMPLATES))
    lines = [HEADER.rstrip("\n")]
    for effect in ("permit", "forbid"):
        low = 6 if effect == "permit" else 0
        for _ in range(draw(st.integers(min_value=low, max_value=14))):
            cond = draw(
                st.sampled_from(
                    (
                        "",
                        "",
                        "",
                        ' when "r1" in context.roles',
                        " when args.n > 1",
                        " unless has args.n",
                    )
                )
            )
            actions = draw(st.sampled_from(("read", "read", "read, write", "*")))
            lines.append(f'{effect} {actions} on "{draw(pattern(main))}"{cond}')
    order = draw(st.permutations(lines[1:]))
    return "\n".join([lines[0], *order]) + "\n"


@st.composite
def call(draw: Any) -> tuple[str, Any, Any]:
    names = (*WORDS, "y", "f.md", "data", "u1", "ux", "f.v1", "v1.md", ".x", "v1v2")
    segs = draw(st.lists(st.sampled_from(names), max_size=5))
    path = "/data/" + "/".join(segs) if draw(st.integers(0, 9)) else "/" + "/".join(segs)
    args: dict[str, Any] = {"path": path}
    if draw(st.booleans()):
        args["n"] = draw(st.sampled_from((0, 2, "x")))
    ctx: dict[str, Any] = {"roles": draw(st.sampled_from(([], ["r1"], None)))}
    for name in ("principal", "tenant"):
        if draw(st.integers(0, 3)):
            ctx[name] = draw(st.sampled_from((*WORDS, "1", "a/b", "..", "", 7)))
    return draw(st.sampled_from(("files.read", "files.write"))), args, ctx


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy_source(), st.lists(call(), min_size=1, max_size=20))
def test_segment_buckets_change_no_decision(source: str, calls: list[Any]) -> None:
    keyed, plain = compile_without(source, "BUCKET_MIN")
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_families_fixed_from_the_end_or_by_the_last_segment_are_read_by_it() -> None:
    source = HEADER + "".join(f'permit read on "/data/**/v{k}"\n' for k in range(8))
    source += "".join(f'permit read on "/docs/*.e{k}"\n' for k in range(8))
    source += "".join(f'permit read on "/logs/d{k}-*"\n' for k in range(8))
    source += "".join(f'permit read on "/srv/**/s{k}/**"\n' for k in range(8))
    keyed, plain = compile_without(source, "BUCKET_MIN")
    assert groups_using(keyed, 4) == 4 and groups_using(plain, 4) == 0
    d = keyed.decide("files.read", {"path": "/data/a/b/v3"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 3]
    d = keyed.decide("files.read", {"path": "/docs/notes.e5"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [12 + 5]
    d = keyed.decide("files.read", {"path": "/logs/d6-2026"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [20 + 6]
    d = keyed.decide("files.read", {"path": "/srv/a/s3/b/s5/c"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [28 + 3, 28 + 5]
    calls = [
        ("files.read", {"path": path}, {})
        for path in (
            "/data/v3",
            "/data",
            "/data/v3/x",
            "/docs/.e1",
            "/docs/x.e10",
            "/docs/a/x.e1",
            "/docs",
            "/logs/d1-",
            "/logs/d1",
            "/logs/d10-x",
            "/srv/s3",
            "/srv/s3/x",
            "/srv/a/s3/s3/s4/b",
            "/srv/s9/x",
        )
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_a_context_family_is_read_by_its_literal_past_the_hole() -> None:
    source = HEADER + "".join(
        f'permit read on "/home/{{context.principal}}/p{k}/**"\n' for k in range(8)
    )
    keyed, plain = compile_without(source, "BUCKET_MIN")
    assert groups_using(keyed, 4) == 1 and groups_using(plain, 4) == 0
    d = keyed.decide("files.read", {"path": "/home/alice/p3/x"}, {"principal": "alice"})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 3]
    calls = [
        ("files.read", {"path": path}, {"principal": who})
        for path in ("/home/alice/p3/x", "/home/bob/p3/x", "/home/alice/p9", "/home/alice")
        for who in ("alice", "bob", "a/b", "", None)
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)


def test_a_family_of_globs_is_read_by_the_head_or_tail_of_the_segment_there() -> None:
    source = HEADER + "".join(f'permit read on "/data/*/v{k}*/**"\n' for k in range(8))
    source += "".join(f'permit write on "/data/**/*.e{k}"\n' for k in range(8))
    keyed, plain = compile_without(source, "BUCKET_MIN")
    assert groups_using(keyed, 4) == 2 and groups_using(plain, 4) == 0
    d = keyed.decide("files.read", {"path": "/data/u/v7x/f"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [4 + 7]
    d = keyed.decide("files.write", {"path": "/data/a/b/c/f.e3"}, {})
    assert d.allowed and [r.line for r in d.rule_ids] == [12 + 3]
    calls = [
        (tool, {"path": path}, {})
        for tool in ("files.read", "files.write")
        for path in (
            "/data/u/v1",
            "/data/u/v10/x",
            "/data/v1",
            "/data/u",
            "/data/f.e1",
            "/data/.e1",
            "/data/x/e1",
            "/data/u/v1/f.e1",
            "/d/u/v1",
        )
    ]
    assert decide_all(keyed, calls) == decide_all(plain, calls)

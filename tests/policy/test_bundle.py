"""Bundles: round trip, identical decisions and hash, refusal of other compilers and junk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedos.policy import COMPILER_VERSION, BundleError, PolicySet, compile_paths, load_bundle

CALLS = [
    ("files.read", {"path": "/public/a"}, {"principal": "bob", "roles": []}),
    ("files.read", {"path": "/public/../private/a"}, {"principal": "bob", "roles": []}),
    ("files.read", {"path": "/private/a"}, {"principal": "dana", "roles": ["admin"]}),
    ("files.write", {"path": "/home/bob/x"}, {"principal": "bob", "roles": []}),
    ("files.write", {"path": "/home/bob/x"}, {"principal": "eve", "roles": []}),
    ("files.read", {"path": "/../x"}, {"principal": "bob", "roles": []}),
    (
        "github.search",
        {"owner": "sharedos", "repo": "security"},
        {"principal": "a", "tenant": "x", "roles": []},
    ),
    ("nope", {}, {"principal": "bob"}),
]


@pytest.fixture
def shipped(repo_root: Path):  # type: ignore[no-untyped-def]
    return compile_paths([repo_root / "rules", repo_root / "policy"])


def test_round_trip_gives_the_same_decisions_and_hash(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "policy.bundle.json"
    before = shipped.bundle_hash
    shipped.save_bundle(bundle)
    loaded = load_bundle(bundle)
    for tool, args, ctx in CALLS:  # using rules must not change the hash
        loaded.decide(tool, args, ctx)
        loaded.explain(tool, args, ctx)
    fresh = type(shipped)(shipped.program)  # recomputed, not the cached value
    assert loaded.bundle_hash == shipped.bundle_hash == before == fresh.bundle_hash
    assert len(loaded.bundle_hash) == 64
    for tool, args, ctx in CALLS:
        assert loaded.decide(tool, args, ctx) == shipped.decide(tool, args, ctx)
        assert loaded.could_permit(tool, ctx) == shipped.could_permit(tool, ctx)
    assert dict(loaded.requirements) == dict(shipped.requirements)
    assert dict(loaded.tool_policies) == dict(shipped.tool_policies)
    assert loaded.sources == shipped.sources
    assert loaded.tests == ()  # tests run from source, not from bundles
    doc = json.loads(bundle.read_text())
    assert doc["compiler_version"] == COMPILER_VERSION
    assert set(doc["program"]["sources"]) == {str(p) for p in shipped.sources}


def test_bundle_hash_is_deterministic(repo_root: Path) -> None:
    a = compile_paths([repo_root / "rules", repo_root / "policy"])
    b = compile_paths([repo_root / "policy", repo_root / "rules"])
    assert a.bundle_hash == b.bundle_hash


def test_bundle_hash_changes_with_the_policy(repo_root: Path, tmp_path: Path) -> None:
    src = (repo_root / "rules" / "files.sos").read_text()
    (tmp_path / "files.sos").write_text(src.replace('"/public/**"', '"/pub/**"'))
    changed = compile_paths([tmp_path])
    original = compile_paths([repo_root / "rules" / "files.sos"])
    assert changed.bundle_hash != original.bundle_hash


def _rewrite(path: Path, **changes: object) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def _tamper(path: Path, doc: dict, *, rehash: bool) -> None:  # type: ignore[type-arg]
    """Write an edited bundle; with ``rehash`` the attacker also fixes its hash."""
    from sharedos.policy.policyset import program_hash

    if rehash:
        doc["bundle_hash"] = program_hash(doc["program"])
    path.write_text(json.dumps(doc))


def test_other_compiler_version_is_refused(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    _rewrite(bundle, compiler_version="sharedos-policy-compiler/0 grammar/0")
    with pytest.raises(
        BundleError, match=r"compiled by 'sharedos-policy-compiler/0 grammar/0'.*recompile"
    ):
        load_bundle(bundle)


def test_a_bundle_from_a_python_with_other_unicode_tables_is_refused(
    shipped: PolicySet, tmp_path: Path
) -> None:
    """``lower()`` and the normalization checks read the running Python's Unicode database,
    so one program decides differently under another one (U+1E030, a letter Unicode 15.0
    added, folds to a Cyrillic a on Python 3.12 and stays itself on 3.11): the compiler
    version names the database, and a host with another one refuses the bundle."""
    import unicodedata

    assert f"unicode/{unicodedata.unidata_version}" in COMPILER_VERSION
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    other = "0.0.0" if unicodedata.unidata_version != "0.0.0" else "1.0.0"
    _rewrite(
        bundle,
        compiler_version=COMPILER_VERSION.replace(unicodedata.unidata_version, other),
    )
    with pytest.raises(BundleError, match=rf"unicode/{other}'.*recompile"):
        load_bundle(bundle)


_UNICODE_PROBE = """
import sys, unicodedata
from sharedos.policy.bundle import BundleError, load_bundle
try:
    policy = load_bundle(sys.argv[1])
except BundleError as exc:
    print("refused", exc)
else:
    ctx = {"principal": "a", "tenant": "t", "roles": [], "attributes": {}}
    print(policy.decide("files.write", {"path": "/a", "name": "\\U0001e030"}, ctx).allowed)
"""


def _python_with_other_unicode() -> str | None:
    """Another CPython (3.11 or later) on this machine whose Unicode database differs."""
    import os
    import shutil
    import subprocess
    import sys
    import unicodedata

    names = [shutil.which(n) for n in ("python3.13", "python3.12", "python3.14", "python3.11")]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    names += [str(p) for p in sorted(pyenv.glob("3.1*/bin/python3"))]
    for found in names:
        if found is None:
            continue
        probe = subprocess.run(
            [
                found,
                "-c",
                "import sys, unicodedata; print(sys.version_info >= (3, 11), "
                "unicodedata.unidata_version)",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        fields = probe.stdout.split()
        usable = probe.returncode == 0 and fields[:1] == ["True"] and found != sys.executable
        if usable and fields[1:] != [unicodedata.unidata_version]:
            return found
    return None


def test_another_pythons_unicode_tables_do_not_decide_a_bundle_differently(
    tmp_path: Path,
) -> None:
    """End to end, where another Python is installed: the bundle compiled here either
    decides the same there, or is refused there; it never silently decides otherwise."""
    import os
    import subprocess
    import sys
    import sysconfig

    from sharedos.policy import compile_source

    other = _python_with_other_unicode()
    if other is None:
        pytest.skip("no Python with another Unicode database on this machine")
    source = (
        "namespace files\n"
        "requirement files.write { action write; resource path(args.path) }\n"
        'permit write on "/**"\n'
        'forbid write on "/**" when lower(args.name) == "\u0430"\n'
    )
    bundle = tmp_path / "b.json"
    compile_source(source, "p.sos").save_bundle(bundle)
    here = compile_source(source, "p.sos").decide(
        "files.write",
        {"path": "/a", "name": "\U0001e030"},
        {"principal": "a", "tenant": "t", "roles": [], "attributes": {}},
    )
    repo = Path(__file__).resolve().parents[2]
    # the pure-Python dependencies a bundle load needs, from this environment
    path = os.pathsep.join([str(repo), sysconfig.get_paths()["purelib"]])
    there = subprocess.run(
        [other, "-c", _UNICODE_PROBE, str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    if there.returncode != 0:
        pytest.skip(f"{other} cannot load sharedos.policy.bundle here: {there.stderr[-300:]}")
    answer = there.stdout.strip()
    assert answer == str(here.allowed) or answer.startswith("refused"), (sys.version, answer)


def test_other_grammar_is_refused(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    _rewrite(bundle, grammar_sha256="0" * 64)
    with pytest.raises(BundleError, match="different grammar"):
        load_bundle(bundle)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[]",
        b'{"format": "zip"}',
        b"\xff\xfe",
        b'{"format": "sharedos-policy-bundle"}',
    ],
)
def test_junk_is_refused_with_a_clear_error(tmp_path: Path, content: bytes) -> None:
    bundle = tmp_path / "b.json"
    bundle.write_bytes(content)
    with pytest.raises(BundleError):
        load_bundle(bundle)


def test_malformed_program_is_refused(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    from sharedos.policy.policyset import program_hash

    _rewrite(bundle, program={"rules": []}, bundle_hash=program_hash({"rules": []}))
    with pytest.raises(BundleError, match="malformed"):
        load_bundle(bundle)


def test_missing_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="cannot read"):
        load_bundle(tmp_path / "absent.json")


def test_save_is_atomic_and_overwrites(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "sub" / "b.json"
    bundle.parent.mkdir()
    bundle.write_text("old")
    shipped.save_bundle(bundle)
    assert load_bundle(bundle).bundle_hash == shipped.bundle_hash
    assert [p.name for p in bundle.parent.iterdir()] == ["b.json"]


def test_prepare_compiles_everything_and_changes_nothing(shipped) -> None:  # type: ignore[no-untyped-def]
    before = [shipped.decide(t, a, c) for t, a, c in CALLS]
    assert shipped.prepare() is shipped
    assert all(r is not None for r in shipped._records)
    assert [shipped.decide(t, a, c) for t, a, c in CALLS] == before


def test_a_bundle_is_ready_when_loaded_and_decodes_only_what_decisions_cite(
    shipped, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    raw = bundle.read_bytes()
    # the program is the last member, in exactly the canonical form its hash covers
    from sharedos.policy.policyset import canonical_program

    doc = json.loads(raw)
    assert raw.endswith(b',"program":' + canonical_program(doc["program"]) + b"}")
    loaded = load_bundle(bundle)
    assert all(r is None for r in loaded._records)  # nothing decoded by the load itself
    decisions = [loaded.decide(t, a, c) for t, a, c in CALLS]
    assert decisions == [shipped.decide(t, a, c) for t, a, c in CALLS]
    # a decision reads the rule columns as loaded: it decodes no rule record, and
    # cites the references the load built (one per rule, shared), builds none
    assert all(r is None for r in loaded._records)
    built = {id(ref) for ref in loaded._cols.refs}
    cited = [ref for d in decisions for ref in d.rule_ids]
    assert cited and all(id(ref) in built for ref in cited)


def test_a_reformatted_bundle_still_loads_and_an_edited_one_does_not(
    shipped, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    doc = json.loads(bundle.read_text())
    # reformatted (keys reordered, indented): the slow path re-serializes and checks the hash
    bundle.write_text(json.dumps(dict(reversed(list(doc.items()))), indent=2))
    assert load_bundle(bundle).bundle_hash == shipped.bundle_hash
    # an edit inside the canonical program text, layout kept: caught by either path
    shipped.save_bundle(bundle)
    raw = bundle.read_bytes()
    assert b'"/public/**"' in raw
    bundle.write_bytes(raw.replace(b'"/public/**"', b'"/**"', 1))
    with pytest.raises(BundleError, match="does not match its bundle_hash"):
        load_bundle(bundle)


def test_the_program_that_runs_is_the_one_whose_hash_was_checked(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A second "program" member cannot smuggle an unchecked program past the fast path."""
    from sharedos.policy.policyset import canonical_program

    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    raw = bundle.read_bytes()
    head, _, body = raw.partition(b',"program":')
    evil = json.loads(body[:-1])
    evil["rules"]["effect"] = [0] * len(evil["rules"]["effect"])  # every forbid a permit
    evil_text = canonical_program(evil)
    for crafted in (
        head + b',"program":' + evil_text + b',"program":' + body,  # checked one last
        head + b',"program":' + body[:-1] + b',"program":' + evil_text + b"}",  # unchecked last
    ):
        bundle.write_bytes(crafted)
        try:
            loaded = load_bundle(bundle)
        except BundleError:
            continue
        # if it loads, it must run the program the hash covers: traversal is still forbidden
        assert not loaded.decide(*CALLS[1]).allowed


def test_a_corrupt_index_fails_the_load_with_a_clear_error(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    for corrupt in (
        '[[[], {"public": "not a node"',
        [[{"public": "not a node"}, 0, 0], []],
        [[{}, [99999], 0], [{}, 0, 0]],
        [[{}, [-1], 0], [{}, 0, 0]],
    ):
        doc = json.loads(bundle.read_text())
        doc["program"]["index"]["files"]["read"] = corrupt
        _tamper(bundle, doc, rehash=True)  # past the hash check: the structure check still refuses
        with pytest.raises(BundleError, match="malformed"):
            load_bundle(bundle)
    doc = json.loads(bundle.read_text())
    doc["program"]["groups"][0] = [10**6]
    _tamper(bundle, doc, rehash=True)
    with pytest.raises(BundleError, match="malformed"):
        load_bundle(bundle)


def test_a_corrupt_rule_fails_closed_where_it_is_used(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A rule column of the right shape but garbage inside (a condition that is not an
    expression, a matcher that is not one) fails closed: the forbid applies."""
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    doc = json.loads(bundle.read_text())
    rules = doc["program"]["rules"]
    for i, effect in enumerate(rules["effect"]):
        if effect == 1:  # every forbid: a garbage condition, a garbage matcher
            rules["cond"][i] = "[not json"
            rules["ckind"][i] = 1
            rules["mkind"][i] = 3
            rules["mtests"][i] = [["Q"]]
    _tamper(bundle, doc, rehash=True)
    loaded = load_bundle(bundle)
    admin = ("files.read", {"path": "/private/a"}, {"principal": "dana", "roles": ["admin"]})
    assert shipped.decide(*admin).allowed
    assert loaded.decide(*admin).reason.value == "forbidden"
    assert not loaded.explain(*admin).decision.allowed


def test_a_malformed_requirement_fails_the_load(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    doc = json.loads(bundle.read_text())
    del doc["program"]["requirements"]["files.read"]["resource"]
    _tamper(bundle, doc, rehash=True)
    with pytest.raises(BundleError, match="malformed"):
        load_bundle(bundle)


def test_loading_a_bundle_and_deciding_never_imports_the_parser(shipped, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A host that only loads a bundle pays for neither Lark, the checker nor pydantic."""
    import subprocess
    import sys

    bundle = tmp_path / "b.json"
    shipped.save_bundle(bundle)
    tool, args, context = CALLS[0]
    code = (
        "import json, sys\n"
        "import sharedos.policy as sp\n"
        f"p = sp.load_bundle({str(bundle)!r})\n"
        f"d = p.decide({tool!r}, {args!r}, {context!r})\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('lark', 'pydantic')"
        " or m in ('sharedos.policy.parser', 'sharedos.policy.checker', 'sharedos.policy.ast'))\n"
        "print(json.dumps([d.allowed, heavy]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    allowed, heavy = json.loads(out.stdout)
    assert allowed is shipped.decide(tool, args, context).allowed
    assert heavy == []


def test_a_compiled_policy_parses_its_files_again_only_when_asked(repo_root: Path) -> None:
    from sharedos.policy import compile_source
    from sharedos.policy.parser import parse_source

    text = (repo_root / "rules" / "files.sos").read_text()
    policy = compile_source(text, "files.sos")
    assert policy._files is None  # the syntax trees are not kept by the compile
    assert policy.files == (parse_source(text, "files.sos").file,)
    assert policy.files is policy.files  # parsed once
    assert policy.tests and policy.tests == policy.files[0].tests


def test_a_pattern_of_more_segments_than_a_bundle_can_nest_is_sos207(tmp_path: Path) -> None:
    """The decision walk nests one level per literal segment: a pattern of ~500
    segments compiled, but its program could be neither hashed nor saved
    (RecursionError: SOS900 from compile, no bundle_hash for evidence)."""
    from sharedos.policy import PolicyError, compile_source, save_bundle

    head = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
    deepest = "/" + "/".join(["a"] * 255) + "/**"  # 256 segments
    policy = compile_source(head + f'permit read on "{deepest}"\n', "deep.sos")
    save_bundle(policy, tmp_path / "b.json")
    path = {"path": "/" + "/".join(["a"] * 300)}
    assert load_bundle(tmp_path / "b.json").decide("files.read", path, {}).allowed
    for n in (257, 500):
        pattern = "/" + "/".join(["a"] * n)
        with pytest.raises(PolicyError) as err:
            compile_source(head + f'forbid read on "{pattern}"\n', "deep.sos")
        [diag] = err.value.diagnostics
        assert (diag.code, diag.line, diag.col) == ("SOS207", 3, 18 + 2 * 256), diag.render()
        assert "more than 256 segments" in diag.message

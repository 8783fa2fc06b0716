"""``compile``, ``explain``, ``eval`` and ``test`` through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.policy import main

DATA = Path(__file__).resolve().parent.parent / "data" / "policy_cli"
BOB = '{"principal": "bob", "roles": []}'


def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


# ---------------------------------------------------------------- compile


def test_compile_writes_a_bundle_and_prints_its_hash(tmp_path: Path) -> None:
    out = tmp_path / "policy.bundle.json"
    code, stdout, _ = invoke("compile", str(DATA / "good"), "-o", str(out))
    assert code == 0
    digest, written = stdout.split()
    assert written == str(out) and len(digest) == 64
    from sharedos.policy import compile_paths, load_bundle

    assert load_bundle(out).bundle_hash == digest == compile_paths([DATA / "good"]).bundle_hash


def test_compile_of_a_broken_policy_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "policy.bundle.json"
    code, _, stderr = invoke("compile", str(DATA / "bad" / "syntax.sos"), "-o", str(out))
    assert code == 1
    assert "SOS10" in stderr
    assert not out.exists()


def test_compile_requires_an_output() -> None:
    code, _, _ = invoke("compile", str(DATA / "good"))
    assert code == 2


# ---------------------------------------------------------------- explain


def test_explain_text_shows_the_decision_path() -> None:
    code, stdout, _ = invoke(
        "explain",
        str(DATA / "good"),
        "--tool",
        "files.read",
        "--args",
        '{"path": "/public/../private/a.txt"}',
        "--context",
        BOB,
    )
    assert code == 0
    assert "requirement: files.read at" in stdout and "files.sos:4" in stdout
    assert "canonical resource: /private/a.txt" in stdout
    assert "[APPLIES] forbid" in stdout
    assert "[skipped] permit" in stdout
    assert "forbid won: private-forbidden at" in stdout
    assert "deny (forbidden)" in stdout


def test_explain_json_and_args_from_file(tmp_path: Path) -> None:
    args = tmp_path / "args.json"
    args.write_text('{"path": "/home/alice/notes"}', encoding="utf-8")
    code, stdout, _ = invoke(
        "explain",
        str(DATA / "good"),
        "--tool",
        "files.write",
        "--args",
        f"@{args}",
        "--context",
        '{"principal": "alice", "roles": []}',
        "--format",
        "json",
    )
    assert code == 0
    payload = json.loads(stdout)
    assert payload["decision"]["effect"] == "allow"
    assert payload["resource"] == "/home/alice/notes"
    assert payload["requirement"]["action"] == "write"
    applied = [r["rule"]["id"] for r in payload["rules"] if r["applied"]]
    assert applied == ["home-owner"]


def test_explain_unknown_tool_and_unresolvable_resource() -> None:
    code, stdout, _ = invoke("explain", str(DATA / "good"), "--tool", "nope.tool", "--context", BOB)
    assert code == 0 and "tool_unavailable" in stdout
    code, stdout, _ = invoke(
        "explain", str(DATA / "good"), "--tool", "files.read", "--args", '{"path": "/../etc"}'
    )
    assert code == 0
    assert "unresolvable" in stdout


def test_explain_from_a_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "b.bundle.json"
    assert invoke("compile", str(DATA / "good"), "-o", str(bundle))[0] == 0
    code, stdout, _ = invoke(
        "explain",
        str(bundle),
        "--tool",
        "files.read",
        "--args",
        '{"path": "/private/x"}',
        "--context",
        BOB,
    )
    assert code == 0
    assert "forbid won: private-forbidden" in stdout


def test_explain_bad_json_options_are_usage_errors() -> None:
    code, _, stderr = invoke(
        "explain", str(DATA / "good"), "--tool", "files.read", "--args", "{bad"
    )
    assert code == 2 and "not valid JSON" in stderr
    code, _, stderr = invoke(
        "explain", str(DATA / "good"), "--tool", "files.read", "--context", "[1]"
    )
    assert code == 2 and "expected a JSON object" in stderr
    code, _, stderr = invoke(
        "explain", str(DATA / "good"), "--tool", "files.read", "--args", "@/no/such/file.json"
    )
    assert code == 2 and "cannot read" in stderr


# ------------------------------------------------------------------- eval


def _lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_eval_batch_with_malformed_lines() -> None:
    code, stdout, _ = invoke("eval", str(DATA / "good"), "--input", str(DATA / "requests.jsonl"))
    assert code == 1  # some lines were malformed
    out = _lines(stdout)
    by_line = {o["line"]: o for o in out}
    assert sorted(by_line) == [1, 2, 3, 5, 6, 7, 8]  # the blank line 4 is skipped
    assert by_line[1]["effect"] == "allow" and by_line[1]["rule_ids"] == ["public-read"]
    assert by_line[2]["reason"] == "forbidden" and by_line[2]["resource"] == "/private/a.txt"
    assert by_line[3]["error"]["code"] == "invalid_json"  # type: ignore[index]
    assert by_line[5]["error"]["code"] == "invalid_request"  # type: ignore[index]
    assert by_line[6]["reason"] == "tool_unavailable"
    assert by_line[7]["error"]["code"] == "invalid_request"  # type: ignore[index]
    assert by_line[8]["reason"] == "unresolvable_resource"


def test_eval_reads_stdin_and_exits_0_when_every_line_is_valid() -> None:
    stdin = "\n".join(
        json.dumps(
            {
                "tool": "files.read",
                "args": {"path": p},
                "context": {"principal": "bob", "roles": []},
            }
        )
        for p in ("/public/a", "/private/b", "/home/bob/c")
    )
    code, stdout, _ = invoke("eval", str(DATA / "good"), stdin=stdin + "\n")
    assert code == 0
    assert [o["effect"] for o in _lines(stdout)] == ["allow", "deny", "allow"]


def test_eval_answers_a_line_that_is_not_utf8_and_continues(tmp_path: Path) -> None:
    # JSON is UTF-8 (RFC 8259): a line of other bytes is that line's invalid_json,
    # never an internal error that answers no line at all
    good = b'{"tool": "files.read", "args": {"path": "/public/a"}, "context": {"principal": "bob"}}'
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(
        good + b"\n" + b'{"tool": "files.read", "args": {"path": "/\xff"}}\n' + good + b"\r\n"
    )
    for args in (("--input", str(requests)), ()):
        result = CliRunner().invoke(
            main, ["eval", str(DATA / "good"), *args], input=requests.read_bytes()
        )
        assert result.exit_code == 1, result.output
        out = _lines(result.stdout)
        assert [o["line"] for o in out] == [1, 2, 3]
        assert out[0]["effect"] == out[2]["effect"] == "allow"
        assert out[1]["error"] == {  # type: ignore[comparison-overlap]
            "code": "invalid_json",
            "message": "not UTF-8 text (byte 43 of the line)",
        }


def test_eval_reads_an_input_that_opens_with_a_byte_order_mark(tmp_path: Path) -> None:
    # Windows editors save JSONL with a BOM; a policy file or a --context file with
    # one is read, and eval answered its first request as invalid_json
    good = b'{"tool": "files.read", "args": {"path": "/public/a"}, "context": {"principal": "bob"}}'
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(b"\xef\xbb\xbf" + good + b"\r\n" + b"\xef\xbb\xbf" + good + b"\n")
    result = CliRunner().invoke(main, ["eval", str(DATA / "good"), "--input", str(requests)])
    out = _lines(result.stdout)
    assert out[0]["effect"] == "allow", out
    # only the input's first bytes are a mark: inside, U+FEFF is the line's text
    assert out[1]["error"]["code"] == "invalid_json"  # type: ignore[index]
    assert result.exit_code == 1


def test_eval_from_a_bundle_matches_eval_from_sources(tmp_path: Path) -> None:
    bundle = tmp_path / "b.bundle.json"
    assert invoke("compile", str(DATA / "good"), "-o", str(bundle))[0] == 0
    _, from_sources, _ = invoke("eval", str(DATA / "good"), "--input", str(DATA / "requests.jsonl"))
    _, from_bundle, _ = invoke("eval", str(bundle), "--input", str(DATA / "requests.jsonl"))
    assert from_sources == from_bundle


def test_eval_with_a_non_bundle_file_is_a_policy_error(tmp_path: Path) -> None:
    fake = tmp_path / "fake.json"
    fake.write_text("{}", encoding="utf-8")
    code, _, stderr = invoke("eval", str(fake), stdin="")
    assert code == 1
    assert "not a policy bundle" in stderr


# ------------------------------------------------------------------- test


def test_test_command_passes_on_a_good_policy() -> None:
    code, stdout, _ = invoke("test", str(DATA / "good"))
    assert code == 0
    assert "PASS " in stdout and "files.sos:19 public read" in stdout
    assert "3 tests: 3 passed, 0 failed" in stdout


def test_test_command_reports_failures_with_location_and_coverage() -> None:
    code, stdout, _ = invoke("test", "--coverage", str(DATA / "failing_test.sos"))
    assert code == 1
    assert "FAIL " in stdout and "failing_test.sos:16 this expectation is wrong" in stdout
    assert "expected allow, got deny" in stdout
    assert "2 tests: 1 passed, 1 failed" in stdout
    assert "coverage: 1/2 rules exercised (50.00%)" in stdout
    assert "not exercised:" in stdout and "never-tested" in stdout


def test_test_command_json_and_verbose() -> None:
    code, stdout, _ = invoke(
        "test", "--format", "json", "--coverage", str(DATA / "failing_test.sos")
    )
    assert code == 1
    payload = json.loads(stdout)
    assert payload["total"] == 2 and payload["failed"] == 1
    assert payload["coverage"]["percent"] == "50.00"
    assert [r["id"] for r in payload["coverage"]["uncovered"]] == ["never-tested"]
    code, stdout, _ = invoke("test", "-v", str(DATA / "good"))
    assert code == 0 and "allow (allowed) resource=/public/a.txt rules=public-read" in stdout


def test_test_command_on_a_broken_policy_exits_4_not_1() -> None:
    # CI tells "the policy does not compile" from "a test failed"
    code, _, stderr = invoke("test", str(DATA / "bad"))
    assert code == 4 and "error[SOS" in stderr and "no test was run" in stderr


def test_test_command_json_is_always_json_on_stdout() -> None:
    import json

    code, stdout, _ = invoke("test", "--format", "json", str(DATA / "bad"))
    doc = json.loads(stdout)
    assert code == 4 and doc["ok"] is False and doc["error"]["code"] == "does_not_compile"
    assert doc["diagnostics"] and doc["diagnostics"][0]["code"].startswith("SOS")


def test_shipped_policies_tests_pass_with_full_coverage(repo_root: Path) -> None:
    code, stdout, _ = invoke(
        "test", "--coverage", str(repo_root / "rules"), str(repo_root / "policy")
    )
    assert code == 0, stdout
    assert "0 failed" in stdout


def test_help_lists_every_subcommand() -> None:
    code, stdout, _ = invoke("--help")
    assert code == 0
    for name in ("check", "fmt", "compile", "test", "explain", "eval"):
        assert name in stdout
    assert "Exit codes" in stdout


def test_names_and_descriptions_cannot_rewrite_the_line_they_are_printed_on(
    tmp_path: Path,
) -> None:
    # A carriage return in a failing test's name printed it, on a terminal, as
    # "PASS"; a bidi override in a description reordered the explanation.
    policy = tmp_path / "p.sos"
    policy.write_text(
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        '@description("d\\u202eRED")\n'
        'permit read on "/a/**"\n'
        'test "u\\rPASS" { call files.read { path: "/b" } expect allow }\n'
        'test "s" { skip "why\\u2028not"; call files.read { path: "/b" } expect allow }\n'
    )
    code, stdout, _ = invoke("test", str(policy))
    assert code == 1
    assert "\r" not in stdout and "\u202e" not in stdout and "\u2028" not in stdout
    assert f"FAIL {policy.name}:5 u\\x0dPASS" in stdout.replace(str(tmp_path) + "/", "")
    assert "description: d\\u202eRED" in stdout and "skipped: why\\u2028not" in stdout
    code, stdout, _ = invoke(
        "explain", str(policy), "--tool", "files.read", "--args", '{"path": "/a/x"}'
    )
    assert code == 0 and "description: d\\u202eRED" in stdout and "\u202e" not in stdout


def test_diff_and_test_spell_a_rule_id_written_with_bidi_escapes(tmp_path: Path) -> None:
    # an @id written with escapes ("\u202e" in the source: no raw character, no SOS106) is a
    # raw bidi override in the compiled id: diff, test -v and test --coverage printed it so,
    # reordering the line the reviewer reads ("allow<RLO><LRI>tixe")
    head = (
        "namespace files\n"
        "requirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/pub/**"\n'
    )
    old, new = tmp_path / "old.sos", tmp_path / "new.sos"
    old.write_text(head, encoding="utf-8")
    new.write_text(
        head + '@id("allow\\u202e\\u2066tixe")\npermit read on "/t/**"\n'
        '@id("second\\u200f")\npermit read on "/u/**"\n'
        'test "t" { call files.read { path: "/t/a" } expect allow }\n',
        encoding="utf-8",
    )
    outputs = [
        invoke("diff", str(old), str(new))[1],
        invoke("test", "--verbose", str(new))[1],
        invoke("test", "--coverage", str(new))[1],
    ]
    assert "allow\\u202e\\u2066tixe" in outputs[0], outputs[0]
    assert "allow\\u202e\\u2066tixe" in outputs[1], outputs[1]
    assert "second\\u200f" in outputs[2], outputs[2]
    for out in outputs:
        assert not {"\u202e", "\u2066", "\u200f"} & set(out), ascii(out)

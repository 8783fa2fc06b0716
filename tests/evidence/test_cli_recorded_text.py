"""What a call carried is shown spelled out by the evidence commands an operator reads.

A harness or a model chooses a call's tool name (recorded as sent, even for a
tool that does not exist) and its arguments. Printed raw, an escape sequence
retitles the terminal or erases the line, a carriage return rewrites it, a C1
CSI or a bidi override reorders what follows, a line separator starts a line
that is not there: the auditor reads another record than the store holds.
``sharedos evidence list``, ``replay`` and ``shadow`` (text) spell each such
character ``\\xNN`` / ``\\uNNNN``. Real parts: a host running the files tools
with a shadow policy, a SQLite store, the ``sharedos`` CLI.
"""

from __future__ import annotations

import contextlib
import unicodedata
from pathlib import Path

import anyio
from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.kernel import Kernel, RuntimeHost, ToolCall
from sharedos.kernel.shadow import ShadowDecider
from sharedos.policy import compile_source
from tests.kernel.test_approvals import BOB, POLICY, RUN, Host

#: the candidate forbids what the host allows: every /shared write is an example
CANDIDATE = POLICY + 'forbid write on "/shared/**"\n'
TOOL = "files.nope\x1b]0;all clear\x07\x1b[2K\rfiles.read  allowed"
CONTENT = "x\x9b2K\u202eteg\u2028\u200b\x1b[8m"


HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs")


def _hidden(text: str) -> list[str]:
    return [c for c in text if c != "\n" and unicodedata.category(c) in HIDDEN]


def test_list_replay_and_shadow_spell_what_a_call_carried(tmp_path: Path) -> None:
    h = Host(tmp_path)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry),
        h.store,
        approvals=h.settings,
        shadow=ShadowDecider(compile_source(CANDIDATE, "files.sos"), enforced=h.policy),
    )

    sent = [
        (TOOL, {"path": "/x"}),
        ("files.write", {"path": "/shared/n.txt", "content": CONTENT}),
    ]

    async def calls() -> None:
        for tool, args in sent:
            await h.host.invoke_tool(
                ToolCall(tool=tool, arguments=args, turn_id="turn-1"), BOB, RUN
            )

    anyio.run(calls)
    candidate = tmp_path / "candidate.sos"
    candidate.write_text(CANDIDATE, encoding="utf-8")
    db = str(h.db)
    runner = CliRunner()
    for args, code in (
        (["evidence", "list", "--db", db], 0),
        (["evidence", "shadow", "--db", db, "--examples", "0"], 1),
        (["evidence", "replay", "--db", db, "--policy", str(candidate), "--examples", "0"], 1),
    ):
        out = runner.invoke(main, args)
        assert out.exit_code == code, out.output
        assert _hidden(out.output) == [], (args[1], out.output)
    listed = runner.invoke(main, ["evidence", "list", "--db", db]).output
    assert "files.nope\\x1b]0;all clear\\x07\\x1b[2K\\x0dfiles.read" in listed
    shadow = runner.invoke(main, ["evidence", "shadow", "--db", db]).output
    assert "\\x9b2K\\u202eteg\\u2028\\u200b" in shadow


def test_replay_json_carries_a_lone_surrogate_a_call_sent(tmp_path: Path) -> None:
    """JSON (and so a recorded argument) may hold a lone surrogate, which UTF-8 cannot:
    ``evidence replay --format json`` wrote it raw and failed (internal error, exit 3,
    no report) where ``shadow --format json`` and ``export`` escape it."""
    import json
    import subprocess
    import sys

    from tests.timing import bound

    h = Host(tmp_path)
    h.host = RuntimeHost(
        Kernel(h.policy, h.registry),
        h.store,
        shadow=ShadowDecider(compile_source(CANDIDATE, "files.sos"), enforced=h.policy),
    )
    args = {"path": "/shared/n.txt", "content": "a\ud800b"}

    async def calls() -> None:
        await h.host.invoke_tool(ToolCall(tool="files.write", arguments=args), BOB, RUN)

    anyio.run(calls)
    candidate = tmp_path / "candidate.sos"
    candidate.write_text(CANDIDATE, encoding="utf-8")
    sharedos = str(Path(sys.executable).parent / "sharedos")
    for argv in (
        ["replay", "--policy", str(candidate)],
        ["shadow"],
    ):
        done = subprocess.run(
            [sharedos, "evidence", *argv, "--db", str(h.db), "--format", "json"],
            capture_output=True,
            timeout=bound(120),
            check=False,
        )
        assert done.returncode == 1, (argv, done.stderr)
        doc = json.loads(done.stdout)
        (group,) = doc["groups"]
        (example,) = group["examples"]
        sent = example["args"] if "args" in example else example["arguments"]
        assert sent == args, argv


#: a turn id a tamperer wrote into the store: a forged verdict, then the real one hidden
FORGED_TURN = "turn-1: verified 1 turn(s): clean\r\x9b8m\u202e\u2028\x1b[8m"


def test_verify_turns_and_counts_spell_what_a_tampered_store_holds(tmp_path: Path) -> None:
    """``evidence verify`` reads a store someone may have edited, and its findings name
    the turn as the store holds it: a turn id holding a carriage return and an SGR
    "conceal" printed a forged "clean" line over the finding and hid what followed
    (the real verdict). ``turns`` and ``counts`` printed store values raw alike."""
    import sqlite3

    h = Host(tmp_path)
    for _ in range(2):
        h.call({"path": "/shared/n.txt", "content": "x"})
    with contextlib.closing(sqlite3.connect(h.db)) as con:
        con.execute("UPDATE chain SET turn_id = ? WHERE rowid >= 3", (FORGED_TURN,))
        con.execute("UPDATE chain SET reason = ? WHERE reason IS NOT NULL", (FORGED_TURN,))
        con.commit()
    runner = CliRunner()
    db = str(h.db)
    for args, code in (
        (["evidence", "verify", "--db", db], 1),
        (["evidence", "turns", "--db", db], 0),
        (["evidence", "counts", "--db", db], 0),
    ):
        out = runner.invoke(main, args)
        assert out.exit_code == code, out.output
        assert _hidden(out.output.replace("\t", " ")) == [], (args[1], out.output)
    verified = runner.invoke(main, ["evidence", "verify", "--db", db]).output
    assert "turn-1: verified 1 turn(s): clean\\x0d\\x9b8m\\u202e\\u2028" in verified


def test_copy_spells_the_turns_of_a_tampered_source(tmp_path: Path) -> None:
    """``evidence copy`` names the turns it did not copy (they do not verify on the source)
    as the source holds them: a turn id holding a carriage return printed a forged
    "clean" over the line that said so."""
    import sqlite3

    h = Host(tmp_path)
    for _ in range(2):
        h.call({"path": "/shared/n.txt", "content": "x"})
    with contextlib.closing(sqlite3.connect(h.db)) as con:
        con.execute("UPDATE chain SET turn_id = ? WHERE rowid >= 3", (FORGED_TURN,))
        con.commit()
    out = CliRunner().invoke(
        main, ["evidence", "copy", "--from", str(h.db), "--to", str(tmp_path / "copy.sqlite")]
    )
    assert out.exit_code == 1, out.output
    assert _hidden(out.output) == [], out.output
    assert "turn-1: verified 1 turn(s): clean\\x0d\\x9b8m\\u202e\\u2028" in out.output


def test_json_output_escapes_what_a_terminal_would_not_show_and_keeps_the_value(
    tmp_path: Path,
) -> None:
    """JSON escapes C0 controls only: ``list``/``export`` in JSON (and ``sharedos-policy``'s
    JSON) wrote a C1 CSI, a bidi override or a line separator a call carried raw onto
    the operator's terminal. Each is now its ``\\uNNNN`` escape: the same JSON value."""
    import json

    from sharedos.cli.policy import main as policy_main

    h = Host(tmp_path)
    sent = {"path": "/shared/n.txt", "content": CONTENT}

    async def calls() -> None:
        await h.host.invoke_tool(
            ToolCall(tool="files.write", arguments=sent, turn_id="turn-1"), BOB, RUN
        )

    anyio.run(calls)
    db = str(h.db)
    runner = CliRunner()
    for args in (
        ["evidence", "list", "--db", db, "--format", "jsonl"],
        ["evidence", "list", "--db", db, "--format", "json"],
        ["evidence", "export", "--db", db, "--format", "jsonl"],
        ["evidence", "export", "--db", db, "--format", "json"],
    ):
        out = runner.invoke(main, args)
        assert out.exit_code == 0, out.output
        assert _hidden(out.output) == [], (args, out.output)
        doc = (
            json.loads(out.output) if args[-1] == "json" else json.loads(out.output.split("\n")[0])
        )
        (record,) = doc if isinstance(doc, list) else [doc]
        assert record["arguments"] == sent, args
    policy = tmp_path / "p.sos"
    policy.write_text(
        "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
        'permit read on "/x" # \u202e\x85\n',
        encoding="utf-8",
    )
    out = runner.invoke(policy_main, ["check", "--format", "json", str(policy)])
    assert _hidden(out.output) == [], out.output
    assert "# \\u202e\\u0085" in out.output
    excerpts = [d["excerpt"] for d in json.loads(out.output)["diagnostics"]]
    assert excerpts and all(e.endswith("# \u202e\x85") for e in excerpts)


def _on_a_terminal(argv: list[str]) -> str:
    """What the real ``sharedos`` writes on a terminal (a pty) running ``argv``."""
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    sharedos = str(Path(sys.executable).parent / "sharedos")
    proc = subprocess.Popen([sharedos, *argv], stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    shown = b""
    with contextlib.suppress(OSError):  # EIO: the command is gone and its output read
        while chunk := os.read(master, 65536):
            shown += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0
    return shown.decode("utf-8").replace("\r\n", "\n")


def test_a_csv_export_is_spelled_on_a_terminal(tmp_path: Path) -> None:
    """CSV has no escape: ``evidence export --format csv`` wrote the tool name a harness
    sent (an OSC title, an erase, a carriage return) and a C1 CSI, a bidi override a call
    carried raw onto the operator's terminal. There each cell is spelled (into a file or
    a pipe it is the recorded value, for the program that reads it)."""
    import csv
    import io

    h = Host(tmp_path)
    principal = BOB.model_copy(update={"principal": "bob\u202e\u2066\u200b"})

    async def calls() -> None:
        await h.host.invoke_tool(
            ToolCall(tool=TOOL, arguments={"path": "/x"}, turn_id="turn-1"), principal, RUN
        )

    anyio.run(calls)
    db = str(h.db)
    shown = _on_a_terminal(["evidence", "export", "--db", db, "--format", "csv"])
    assert _hidden(shown) == [], ascii(shown)
    row = next(csv.DictReader(io.StringIO(shown)))
    assert row["tool"] == "files.nope\\x1b]0;all clear\\x07\\x1b[2K\\x0dfiles.read  allowed"
    assert row["principal"] == "bob\\u202e\\u2066\\u200b"

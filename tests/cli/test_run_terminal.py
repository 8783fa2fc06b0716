"""What ``sharedos run`` prints from others (an upstream's tool names, the names a harness
called, its stderr) cannot drive the operator's terminal: control characters are spelled."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from sharedos.cli.run import summary_lines
from tests.upstream.conftest import DATA, PY

SHAREDOS = str(Path(PY).parent / "sharedos")
ESCAPES = "\x1b[2J\x1b]0;owned\x07\r"


def test_dry_run_spells_an_upstream_tool_name_with_terminal_escapes(tmp_path: Path) -> None:
    # before: the refused name reached the terminal raw: the screen cleared, the window retitled
    served = tmp_path / "served"
    served.mkdir()
    tools = served / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {"name": "ok", "inputSchema": {"type": "object"}},
                {"name": f"bad{ESCAPES}name", "inputSchema": {"type": "object"}},
            ]
        ),
        encoding="utf-8",
    )
    host = tmp_path / "conf" / "host.toml"
    host.parent.mkdir()
    args = [str(DATA / "hostile_server.py"), "--tools", str(tools)]
    host.write_text(
        f"[harness.claude-code]\n[upstream.h]\ncommand = {json.dumps(PY)}\n"
        f'args = {json.dumps(args)}\nroots = [{{ path = "{served}" }}]\npinning = "off"\n',
        encoding="utf-8",
    )
    argv = [SHAREDOS, "run", "--host-config", str(host), "--principal", "alice"]
    argv += ["--policy", "dev-open", "--dry-run", "--evidence", str(tmp_path / "ev.sqlite")]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
    assert "\r" not in proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("  h.bad"))
    assert line.startswith("  h.bad\\x1b[2J\\x1b]0;owned\\x07\\x0dname ")


def test_the_evidence_summary_spells_a_recorded_tool_name() -> None:
    # a tool name is recorded exactly as the harness sent it (never narrowed)
    record = SimpleNamespace(
        seq=3, tool=f"files.read{ESCAPES}", resource=None, outcome="denied", reason="unknown_tool"
    )
    lines = summary_lines([record], [{"alias": f"mcp__x{ESCAPES}"}])
    assert all("\x1b" not in line and "\r" not in line for line in lines)
    assert lines[-1] == (
        "  #3 files.read\\x1b[2J\\x1b]0;owned\\x07\\x0d: denied (unknown_tool); "
        "the model called it mcp__x\\x1b[2J\\x1b]0;owned\\x07\\x0d"
    )


def test_dry_run_spells_bidi_and_invisible_characters_of_an_upstream(tmp_path: Path) -> None:
    # the upstream report ``sharedos run`` prints on stderr spelled control characters only: a
    # right-to-left override in the name the upstream gave itself reordered the rest of the
    # line (to a bidi terminal); a zero-width space, a filler or a line separator hid
    hidden = "\u202e\u2066\u200b\u2028\u3164"
    served = tmp_path / "served"
    served.mkdir()
    tools = served / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {"name": "ok", "inputSchema": {"type": "object"}},
                {"name": f"bad{hidden}name", "inputSchema": {"type": "object"}},
            ]
        ),
        encoding="utf-8",
    )
    host = tmp_path / "conf" / "host.toml"
    host.parent.mkdir()
    args = [str(DATA / "hostile_server.py"), "--tools", str(tools)]
    args += ["--server-name", f"files{hidden}-server"]
    host.write_text(
        f"[harness.claude-code]\n[upstream.h]\ncommand = {json.dumps(PY)}\n"
        f'args = {json.dumps(args)}\nroots = [{{ path = "{served}" }}]\npinning = "off"\n',
        encoding="utf-8",
    )
    argv = [SHAREDOS, "run", "--host-config", str(host), "--principal", "alice"]
    argv += ["--policy", "dev-open", "--dry-run", "--evidence", str(tmp_path / "ev.sqlite")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout + proc.stderr
    assert not set(hidden) & set(shown), ascii(shown)
    assert "[files\\u202e\\u2066\\u200b\\u2028\\u3164-server 1]" in proc.stderr
    assert "bad\\u202e\\u2066\\u200b\\u2028\\u3164name" in proc.stderr


def test_a_streamed_line_spells_bidi_and_invisible_characters_and_keeps_tabs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sharedos.cli.run import stream_printer

    stream_printer("codex")("stdout", "rm -rf /\u202e\u2066 ; echo \u200bsafe\tdone")
    assert capsys.readouterr().err == "[codex] rm -rf /\\u202e\\u2066 ; echo \\u200bsafe\tdone\n"


def _answered(text: str) -> SimpleNamespace:
    """What a harness run hands ``_report``: an answer, no attempts, no confinement."""
    output = SimpleNamespace(final_text=text, error=None, events=[], tool_events=[])
    return SimpleNamespace(
        output=output,
        process=SimpleNamespace(stdout=""),
        identity=SimpleNamespace(confinement=None, catalog_hash="sha256:x"),
        evidence=[],
        issued=[],
        notes=[],
        failed=False,
    )


HOSTILE_ANSWER = (
    "Done.\r\n\tAll 3 files read.\n"
    "\x1b]52;c;cm0gLXJmIH4K\x07\x1b[1A\x1b[2K\u009b2J no denial\u202e\u200b.\n"
    "名前: 山田 — الاسم: علي"
)


def test_the_answer_on_a_terminal_is_spelled_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: the model's answer went to the terminal as it wrote it: an OSC 52 wrote the
    # operator's clipboard, ESC[1A ESC[2K erased the line above, a CSI (C1) cleared the screen
    import os
    import pty

    from sharedos.cli.run import _report
    from sharedos.redaction import Redactor

    master, slave = pty.openpty()
    with open(slave, "w", encoding="utf-8", closefd=True) as tty:
        monkeypatch.setattr("sys.stdout", tty)
        code = _report(
            {"as_json": False}, _answered(HOSTILE_ANSWER), SimpleNamespace(), tmp_path, True,
            Redactor([]),
        )  # fmt: skip
        tty.flush()
    shown = b""
    while "علي\n".encode() not in shown.replace(b"\r\n", b"\n"):  # the tty writes "\r\n"
        shown += os.read(master, 4096)
    os.close(master)
    assert code == 0
    text = shown.decode("utf-8").replace("\r\n", "\n")
    assert not {"\x1b", "\x07", "\r", "\u009b", "\u202e", "\u200b"} & set(text), ascii(text)
    assert text.split("\n")[:4] == [
        "Done.",
        "\tAll 3 files read.",  # the lines and tabs of a legitimate answer are kept
        "\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[1A\\x1b[2K\\x9b2J no denial\\u202e\\u200b.",
        "名前: 山田 — الاسم: علي",  # CJK and Arabic shown as themselves
    ]


def test_the_answer_into_a_pipe_is_exact(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # a script reading ``sharedos run``'s stdout gets exactly what the model said
    from sharedos.cli.run import _report
    from sharedos.redaction import Redactor

    _report(
        {"as_json": False}, _answered(HOSTILE_ANSWER), SimpleNamespace(), tmp_path, True,
        Redactor([]),
    )  # fmt: skip
    assert capsysbinary.readouterr().out.decode("utf-8") == HOSTILE_ANSWER + "\n"

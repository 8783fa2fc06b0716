"""``sharedos run`` stopped by SIGINT (Ctrl-C), SIGTERM or SIGHUP closes its turn in order.

A real ``sharedos run`` drives the real Claude Code through the real bridge
(HTTP, and stdio through the relay); the scripted model writes file after file
with ``files.write``. Once the first file is on disk the run gets ``SIGTERM``
(what ``kill``, ``timeout``, systemd and container runtimes send) or ``SIGHUP``
(a closed terminal). Python's default for both ends the process on the spot:
before this, the run died with status -15, its turn was never sealed, and its
temporary run directory — the harness's transcript, every tool result in it —
stayed in the temporary directory, while Ctrl-C closed all of it in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from sharedos.harness.process import _group_alive
from tests.timing import bound
from tests.upstream.conftest import PY

SHAREDOS = str(Path(PY).parent / "sharedos")
RULES = """
namespace files
requirement files.write { action write; resource path(args.path) }
permit write on "/home/{context.principal}/**"
toolpolicy run { mode open
 managed files.*
}
"""


def _writing_run(tmp_path: Path, transport: str, writes: int) -> list[str]:
    """A ``sharedos run`` whose scripted model writes ``writes`` files into alice's home."""
    (tmp_path / "sandbox" / "home" / "alice").mkdir(parents=True)
    host = tmp_path / "host.toml"
    host.write_text(f'[harness.claude-code]\ntransport = "{transport}"\n', encoding="utf-8")
    rules = tmp_path / "rules.sos"
    rules.write_text(RULES, encoding="utf-8")
    plan = tmp_path / "plan.json"
    calls = [
        {"tool": "files.write", "arguments": {"path": f"/home/alice/f{i}.txt", "content": str(i)}}
        for i in range(writes)
    ]
    plan.write_text(json.dumps(calls), encoding="utf-8")
    return [
        SHAREDOS, "run", "--host-config", str(host), "--harness", "claude-code",
        "--rules", str(rules), "--policy", "run", "--principal", "alice",
        "--sandbox", str(tmp_path / "sandbox"), "--evidence", str(tmp_path / "evidence.sqlite"),
        "--plan", str(plan), "--timeout", "300", "write the files",
    ]  # fmt: skip


@pytest.mark.harness("claude-code")
@pytest.mark.parametrize(
    ("transport", "sig"),
    [
        ("http", signal.SIGTERM),
        ("stdio", signal.SIGTERM),
        ("http", signal.SIGHUP),
        ("stdio", signal.SIGINT),
    ],
)
def test_a_signalled_run_seals_its_turn_and_removes_its_run_directory(
    tmp_path: Path, transport: str, sig: signal.Signals
) -> None:
    argv = _writing_run(tmp_path, transport, 200)
    home = tmp_path / "sandbox" / "home" / "alice"
    db = tmp_path / "evidence.sqlite"
    err = tmp_path / "run.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            # the signal at its default, whatever this test was started with: a run started
            # with it ignored keeps it ignored (the test below), and the suite may run as a
            # background job of a script, whose SIGINT the shell ignores ('cmd &')
            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
        )
    try:
        deadline = time.monotonic() + bound(120)
        while not any(home.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, err.read_text()[-3000:]
        assert any(home.iterdir()), "no call was made in time"
        proc.send_signal(sig)
        code = proc.wait(timeout=bound(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    ours = "\n".join(ln for ln in text.splitlines() if not ln.startswith("[claude-code"))
    assert code == 128 + sig, ours[-3000:]
    assert "Traceback" not in text
    found = re.search(r"run directory: (\S+) \(removed after the run", text)
    assert found is not None, ours[-3000:]
    assert not Path(found.group(1)).exists(), "the run directory was left behind"
    db_ro = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        sealed = db_ro.execute("SELECT count(*) FROM seals").fetchone()[0]
        recorded = {r[0] for r in db_ro.execute("SELECT resource FROM attempts")}
        unfinished = db_ro.execute("SELECT count(*) FROM evidence WHERE outcome IS NULL")
        interrupted = unfinished.fetchone()[0]
    finally:
        db_ro.close()
    assert sealed == 1, "the turn was not sealed"
    assert interrupted == 0, "a call in flight was left without its outcome"
    effects = {f"/home/alice/{p.name}" for p in home.iterdir()}
    assert effects <= recorded, sorted(effects - recorded)
    verify = subprocess.run(
        [SHAREDOS, "evidence", "verify", "--db", str(db)], capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.harness("claude-code")
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT])
def test_a_run_started_with_a_stop_signal_ignored_keeps_running_through_it(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """``nohup sharedos run ...`` (SIGHUP ignored, so a closed terminal does not stop it):
    the run used to install its own SIGHUP handler over that, and stopped at the hangup
    (exit 129, the harness killed mid-turn). A signal the run was started with ignored
    stays ignored; so does SIGINT in ``sharedos run ... &`` of a script (a shell ignores
    it in its background jobs), as in any Python program."""
    argv = _writing_run(tmp_path, "http", 30)
    home = tmp_path / "sandbox" / "home" / "alice"
    err = tmp_path / "run.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: signal.signal(sig, signal.SIG_IGN),  # as nohup, or '&', does
        )
    try:
        deadline = time.monotonic() + bound(120)
        while not any(home.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, err.read_text()[-3000:]
        proc.send_signal(sig)  # the terminal closed; Ctrl-C, or kill -INT
        code = proc.wait(timeout=bound(240))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    ours = "\n".join(ln for ln in text.splitlines() if not ln.startswith("[claude-code"))
    assert code == 0, ours[-3000:]
    assert "stopping the run" not in text
    assert len(list(home.iterdir())) == 30


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


@pytest.mark.harness("claude-code")
def test_a_second_sigint_while_the_run_closes_leaves_at_once_and_says_so(
    tmp_path: Path,
) -> None:
    """Ctrl-C pressed twice: the second one, while the run is closing its turn, used to
    restore asyncio's KeyboardInterrupt and raise it, so the close ran on anyway and the
    run left as click's ``Aborted!``, exit 1 ("nothing ran"). It now ends the run at once
    by SIGINT's default action, after saying on stderr what it leaves undone; the
    harness's tree still ends with the run. The harness is held stopped (SIGSTOP) so the
    close waits out its grace: the second Ctrl-C finds the run closing, on any machine."""
    argv = _writing_run(tmp_path, "stdio", 200)
    home = tmp_path / "sandbox" / "home" / "alice"
    err = tmp_path / "run.err"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    harness: list[int] = []
    try:
        deadline = time.monotonic() + bound(120)
        while not any(home.iterdir()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, err.read_text()[-3000:]
        # the harness's process group (its supervisor leads it: start_new_session)
        harness = [c for c in _children(proc.pid) if os.getpgid(c) == c]
        assert harness, "no harness process group under the run"
        for pgid in harness:
            os.killpg(pgid, signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + bound(30)
        while "stopping the run" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, err.read_text()[-3000:]
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=bound(30))
    finally:
        for pgid in harness:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGCONT)  # its parent-death SIGTERM is pending
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    ours = "\n".join(ln for ln in text.splitlines() if not ln.startswith("[claude-code"))
    assert code == -signal.SIGINT, ours[-3000:]
    assert "SIGINT while stopping: leaving at once" in text, ours[-3000:]
    assert "may be left unsealed" in text
    assert "Aborted!" not in text
    assert "Traceback" not in text
    deadline = time.monotonic() + bound(30)
    while any(_group_alive(pgid) for pgid in harness) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_group_alive(pgid) for pgid in harness), "the harness outlived the run"
    found = re.search(r"run directory: (\S+) \(removed after the run", text)
    if found is not None:
        shutil.rmtree(found.group(1), ignore_errors=True)  # left on disk, as said

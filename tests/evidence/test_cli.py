"""``sharedos evidence list|export|counts|turns`` on a real database written by a real RuntimeHost."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from sharedos.catalog import ToolRegistry
from sharedos.cli.main import main
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

POLICY = """
namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/public/**"
forbid read on "/private/**"
"""


@pytest.fixture
def db(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "public").mkdir(parents=True)
    (root / "public" / "a.txt").write_text("A")
    path = tmp_path / "e.db"
    registry = ToolRegistry()
    register_files_tools(registry, root)
    host = RuntimeHost(
        Kernel(compile_source(POLICY, "cli.sos"), registry), SqliteEvidenceStore(path)
    )
    run = ToolPolicy(name="cli", mode=RunMode.OPEN, managed=("files.*",))

    async def turn(turn_id: str, paths: list[str]) -> None:
        ctx = AccessContext(principal="alice", turn_id=turn_id)
        for i, p in enumerate(paths):
            await host.invoke_tool(
                ToolCall(call_id=f"{turn_id}-{i}", tool="files.read", arguments={"path": p}),
                ctx,
                run,
            )

    anyio.run(turn, "t1", ["/public/a.txt", "/private/x", "/etc/x", "/public/missing"])
    anyio.run(turn, "t2", ["/public/a.txt"])
    return path


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["evidence", *args])
    return result.exit_code, result.output


def test_counts_show_the_denial_rate(db: Path) -> None:
    code, out = invoke("counts", "--db", str(db), "--turn", "t1")
    assert code == 0
    assert "turn t1: 4 attempts, denied 2/4 (50.0%)" in out
    assert "forbidden" in out and "no_matching_permit" in out and "handler_error" in out
    code, out = invoke("counts", "--db", str(db), "--format", "json")
    payload = json.loads(out)
    assert payload["total"] == 5 and payload["denied"] == 2
    assert payload["by_outcome"] == {"denied": 2, "failed": 1, "succeeded": 2}


def test_list_and_export_by_turn(db: Path, tmp_path: Path) -> None:
    code, out = invoke("list", "--db", str(db), "--turn", "t1")
    assert code == 0
    assert out.count("\n") == 5 and "forbidden" in out and "/private/x" in out
    code, out = invoke("list", "--db", str(db), "--format", "jsonl", "--outcome", "denied")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["call_id"] for r in rows] == ["t1-1", "t1-2"]
    target = tmp_path / "out.jsonl"
    code, _ = invoke("export", "--db", str(db), "--turn", "t2", "-o", str(target))
    assert code == 0
    (row,) = [json.loads(line) for line in target.read_text().splitlines()]
    assert (
        row["turn_id"] == "t2"
        and row["outcome"] == "succeeded"
        and row["resource"] == "/public/a.txt"
    )
    code, out = invoke("turns", "--db", str(db))
    assert out.split() == ["t1", "4", "t2", "1"]


def test_verify_of_a_store_it_cannot_open_is_no_finding(tmp_path: Path) -> None:
    """`verify` exits 1 when it found the store changed; a mistyped path or a file that is
    no store exited 1 as well, so a script read "tampered" where nothing was checked."""
    (tmp_path / "notes.db").write_text("not a database\n", encoding="utf-8")
    refused = "postgresql://nobody@127.0.0.1:1/evidence"  # nothing listens on port 1
    for db in (str(tmp_path / "nope.db"), str(tmp_path / "notes.db"), refused):
        code, out = invoke("verify", "--db", db)
        assert code == 2, out
        assert out.startswith("Error: ") and len(out.strip().splitlines()) == 1, out


def test_verify_json_of_a_turn_the_store_has_no_record_of_is_a_json_finding(db: Path) -> None:
    """`verify --turn T --format json` of a turn the store has no record of exits 1 (a
    finding: it may have been deleted whole) with its report on standard output as JSON,
    not clean, naming why; before, standard output was empty."""
    result = CliRunner().invoke(
        main, ["evidence", "verify", "--db", str(db), "--turn", "nope", "--format", "json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["clean"] is False and "no turn 'nope'" in report["error"]
    assert "no turn 'nope'" in result.stderr


def test_missing_database_is_a_clear_error_not_a_new_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    code, out = invoke("counts", "--db", str(missing))
    assert code != 0 and f"no evidence database at {missing}" in out
    assert not missing.exists()


def test_the_installed_console_script_runs(db: Path) -> None:
    exe = Path(sys.executable).with_name("sharedos")
    proc = subprocess.run(
        [str(exe), "evidence", "counts", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "denied 2/5" in proc.stdout


def _limited(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving the child ``RLIMIT_FSIZE`` = ``limit`` bytes (a disk that fills)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "json"])
def test_an_export_the_disk_cannot_hold_is_one_line_and_leaves_no_cut_file(
    db: Path, tmp_path: Path, fmt: str
) -> None:
    """Before, a full disk (here ``RLIMIT_FSIZE``) mid-export was a Python traceback, and the
    ``-o`` file was left cut at the limit, its last record half written, like an export."""
    whole = tmp_path / "whole.out"
    assert invoke("export", "--db", str(db), "--format", fmt, "-o", str(whole))[0] == 0
    limit = whole.stat().st_size // 2
    cli = [str(Path(sys.executable).with_name("sharedos")), "evidence", "export", "--db", str(db)]
    new = tmp_path / "new.out"
    kept = tmp_path / "kept.out"
    kept.write_text("an earlier export\n")
    for target in (new, kept):
        proc = subprocess.run(
            [*cli, "--format", fmt, "-o", str(target)],
            capture_output=True,
            text=True,
            preexec_fn=_limited(limit),
        )
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"Error: cannot write {target}: File too large")
    assert not new.exists(), "a cut export was left behind"
    assert kept.read_text() == "an earlier export\n"
    # no temporary file left beside them (every other file here is a plain name)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    # standard output on a full disk: one line, and exit 6 as every command's (not 1)
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*cli, "--format", fmt], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert proc.returncode == 6
    assert proc.stderr == "error: cannot write to standard output: No space left on device\n"


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_larger_than_a_buffer_to_a_full_stdout_exits_6(tmp_path: Path, fmt: str) -> None:
    """A CSV export past the stream's buffer (8 KiB) met the full disk inside the CSV
    writer's row adapter, which was not taken for standard output: exit 1 and "Error:
    cannot write the output" where every other command, and the same export as JSON
    Lines, says the output could not be written and exits 6 (docs/upstreams.md)."""
    path = tmp_path / "big.db"
    registry = ToolRegistry()
    register_files_tools(registry, tmp_path)
    host = RuntimeHost(
        Kernel(compile_source(POLICY, "cli.sos"), registry), SqliteEvidenceStore(path)
    )
    run = ToolPolicy(name="cli", mode=RunMode.OPEN, managed=("files.*",))

    async def turn() -> None:
        ctx = AccessContext(principal="alice", turn_id="t-big")
        for i in range(40):
            call = ToolCall(call_id=f"c{i}", tool="files.read", arguments={"path": f"/private/{i}"})
            await host.invoke_tool(call, ctx, run)

    anyio.run(turn)
    cli = [str(Path(sys.executable).with_name("sharedos")), "evidence", "export", "--db", str(path)]
    whole = subprocess.run([*cli, "--format", fmt], capture_output=True, check=True)
    assert len(whole.stdout) > 8192  # past the buffer: written while the rows are
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*cli, "--format", fmt], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert proc.returncode == 6, proc.stderr
    assert proc.stderr == "error: cannot write to standard output: No space left on device\n"


@pytest.mark.parametrize(
    "args", [["counts"], ["list"], ["turns"], ["export"], ["verify"], ["shadow"]]
)
def test_a_store_that_fails_mid_read_is_one_line_not_a_traceback(
    tmp_path: Path, args: list[str]
) -> None:
    """A store that opens but fails while a command reads it (here a file whose middle
    pages were overwritten in place: ``database disk image is malformed``) is one line and
    a non-zero exit, for every command, never a Python traceback."""
    from tests.evidence.test_store_faults import attempt

    path = tmp_path / "e.db"
    store = SqliteEvidenceStore(path)
    for i in range(2000):
        store.begin(attempt(f"c{i}"))
    store.close()  # the close folds the WAL into the file
    pages = path.stat().st_size // 4096
    with open(path, "r+b") as f:  # the schema's pages (the first ones) are left whole
        f.seek(pages * 2 // 5 * 4096)
        f.write(b"\xff" * (pages // 5 * 4096))
    exe = Path(sys.executable).with_name("sharedos")
    proc = subprocess.run(
        [str(exe), "evidence", *args, "--db", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "malformed" in line


def test_verify_refuses_a_key_file_holding_a_private_key_or_more_keys(
    db: Path, tmp_path: Path
) -> None:
    """`--key` trusted only a file's first public key block: a .pub with the private key
    appended, or two public keys in one file, is a usage error saying why."""
    from sharedos.evidence.chain import Signer

    one, two = Signer.generate(), Signer.generate()
    leaked = tmp_path / "leaked.pub"
    leaked.write_bytes(one.public_pem() + one.private_pem())
    both = tmp_path / "both.pub"
    both.write_bytes(one.public_pem() + two.public_pem())
    for path, why in ((leaked, "holds a private key"), (both, "holds 2 PEM blocks")):
        code, out = invoke("verify", "--db", str(db), "--key", str(path))
        assert code == 2 and why in out, out
    (tmp_path / "one.pub").write_bytes(one.public_pem())
    code, out = invoke("verify", "--db", str(db), "--key", str(tmp_path / "one.pub"))
    assert "Usage" not in out and "verified" in out, out


def test_verify_refuses_a_key_file_another_user_can_change(db: Path, tmp_path: Path) -> None:
    """A `--key` file anyone can write (or a link to one) vouches for whatever key was
    written into it: a usage error saying why, never a clean verification."""
    from sharedos.evidence.chain import Signer

    planted = tmp_path / "planted.pub"
    planted.write_bytes(Signer.generate().public_pem())
    planted.chmod(0o666)
    (tmp_path / "host.pub").symlink_to(planted)
    for path in (planted, tmp_path / "host.pub"):
        code, out = invoke("verify", "--db", str(db), "--key", str(path))
        assert code == 2 and "other users can write (mode 0666)" in out, out


def test_an_output_that_is_the_stores_own_file_is_refused(db: Path, tmp_path: Path) -> None:
    # `export -o` naming the database (a slip of the shell history, a tab completion)
    # renamed the export over it: exit 0, the evidence gone, a host writing it broken
    (tmp_path / "link.db").symlink_to(db)
    assert invoke("checkpoint", "--take", "--db", str(db))[0] == 0
    SqliteEvidenceStore(db).close()
    before = db.read_bytes()
    for args in (
        ("export", "--db", str(db), "-o", str(db)),
        ("export", "--db", str(db), "-o", f"{db}-wal"),
        ("export", "--db", str(tmp_path / "link.db"), "-o", str(db)),
        ("export", "--db", str(db), "-o", str(tmp_path / "link.db")),
        ("checkpoint", "--db", str(db), "-o", str(db)),
    ):
        code, out = invoke(*args)
        assert code == 1, (args, out)
        assert "is the evidence store's own file" in out and len(out.strip().splitlines()) == 1
    assert db.read_bytes() == before
    code, out = invoke("verify", "--db", str(db))
    assert code == 0, out
    code, out = invoke("export", "--db", str(db), "-o", str(tmp_path / "x.jsonl"))
    assert code == 0 and "exported 5 records" in out


@pytest.mark.parametrize(
    ("change", "column"),
    [
        ("arguments = '{bad'", "arguments"),
        ("rule_ids = 'not json'", "rule_ids"),
        ("context = '['", "context"),
        ("tool = x'00ff'", "tool"),
        ("reason = 'no-such-reason'", ""),
    ],
)
def test_a_row_changed_outside_sharedos_is_one_line_from_every_reader(
    db: Path, change: str, column: str
) -> None:
    # what `verify` exists to find: a value edited in place. `list` and `export` (and
    # `replay`, `shadow`, which read records the same way) ended in a traceback
    import sqlite3

    conn = sqlite3.connect(db)
    (seq,) = conn.execute(
        "SELECT seq FROM chain WHERE kind = 'attempt' AND reason IS NULL ORDER BY seq LIMIT 1"
    ).fetchone()
    if column == "":
        seq = conn.execute(
            "SELECT attempt FROM chain WHERE kind = 'outcome' ORDER BY seq LIMIT 1"
        ).fetchone()[0]
        conn.execute(f"UPDATE chain SET {change} WHERE kind = 'outcome' AND attempt = ?", (seq,))
    else:
        conn.execute(f"UPDATE chain SET {change} WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    for args in (
        ("list",),
        ("list", "--format", "jsonl"),
        ("export",),
        ("export", "--format", "csv"),
    ):
        result = CliRunner().invoke(main, ["evidence", *args, "--db", str(db)])
        assert isinstance(result.exception, SystemExit), (args, result.exception)
        assert result.exit_code == 1
        errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "Traceback" not in result.output, result.output
        last = errors[0]
        assert last.startswith(f"Error: cannot read record {seq} of {db}"), last
        if column:
            assert f"column {column}" in last
    code, out = invoke("verify", "--db", str(db))
    assert code == 1 and "edited" in out

# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""``sharedos evidence`` on either store: ``--db`` paths and URLs, ``verify`` and ``migrate`` exit codes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.chain import Signer
from sharedos.evidence.migrate import LATEST
from tests.evidence.stores import Raw, backend, opener, raw, store  # noqa: F401  (fixtures)
from tests.evidence.test_chain import write_turn


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def location(store: Any) -> str:
    return str(getattr(store, "url", None) or store.path)


def test_verify_a_clean_store_exits_0(store: Any) -> None:
    write_turn(store)
    code, out = cli("evidence", "verify", "--db", location(store))
    assert code == 0, out
    assert "verified 1 turn(s), 10 link(s), 0 checkpoint(s): clean (1 sealed)" in out
    code, out = cli("evidence", "verify", "--db", location(store), "--format", "json")
    assert code == 0 and json.loads(out)["clean"] is True


def test_verify_reports_tampering_with_its_position_and_exits_1(store: Any, raw: Raw) -> None:
    seqs = write_turn(store)
    raw("UPDATE chain SET resource = '/public/x' WHERE seq = ?", seqs["d1"])
    raw("DELETE FROM chain WHERE attempt = ?", seqs["a1"])
    code, out = cli("evidence", "verify", "--db", location(store))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("deleted: turn T position 2")
    assert lines[1].startswith("edited: turn T position 3 (seq")
    assert lines[-1].endswith("2 problem(s) (1 sealed)")
    code, out = cli("evidence", "verify", "--db", location(store), "--turn", "nope")
    assert code == 1 and "no turn 'nope'" in out


def test_verify_checks_signed_seals_with_the_given_key(opener: Any, tmp_path: Path) -> None:
    signer = Signer.generate()
    store = opener(signer=signer)
    write_turn(store)
    (tmp_path / "host.pub").write_bytes(signer.public_pem())
    (tmp_path / "other.pub").write_bytes(Signer.generate().public_pem())
    code, out = cli(
        "evidence", "verify", "--db", location(store), "--key", str(tmp_path / "host.pub")
    )
    assert code == 0 and "1 signed" in out
    code, out = cli(
        "evidence", "verify", "--db", location(store), "--key", str(tmp_path / "other.pub")
    )
    assert code == 1 and "signature: turn T position 9" in out
    (tmp_path / "junk.pub").write_text("not a key")
    code, out = cli(
        "evidence", "verify", "--db", location(store), "--key", str(tmp_path / "junk.pub")
    )
    assert code == 2


def test_counts_and_list_take_a_url_or_a_path(store: Any) -> None:
    write_turn(store)
    code, out = cli("evidence", "counts", "--db", location(store), "--format", "json")
    assert code == 0 and json.loads(out)["total"] == 4
    code, out = cli("evidence", "list", "--db", location(store), "--format", "jsonl")
    assert code == 0 and len(out.splitlines()) == 4


def test_migrate_reports_an_up_to_date_store(store: Any) -> None:
    code, out = cli("evidence", "migrate", "--db", location(store))
    assert code == 0 and f"evidence schema version {LATEST}, up to date" in out


def test_a_mistyped_store_is_one_clear_line(tmp_path: Path) -> None:
    # verify's exit 1 means "found something": a store it cannot open is exit 2
    for args, status in (
        (("evidence", "counts", "--db", str(tmp_path / "missing.db")), 1),
        (("evidence", "verify", "--db", "mysql://h/db"), 2),
        (("evidence", "migrate", "--db", str(tmp_path / "missing.db")), 1),
    ):
        code, out = cli(*args)
        assert code == status and out.startswith("Error: ")
        assert len(out.strip().splitlines()) == 1


def test_list_streams_so_its_memory_does_not_grow_with_the_store(
    store: Any, backend: tuple[str, str], tmp_path: Path
) -> None:
    # ``list`` read every record into one list before printing the first: on a store of
    # 200,000 calls that is gigabytes. Text and JSON Lines now stream, as export does.
    import tracemalloc

    from sharedos.cli.evidence import list_cmd
    from tests.evidence.test_export import bulk_fill

    n, few = 4000, 2000  # few: one whole batch of the stream
    bulk_fill(backend[0], location(store), n)
    peaks: dict[int | None, int] = {}
    for limit in (few, None):
        for fmt in ("text",):
            out = tmp_path / f"list-{limit}.{fmt}"
            with out.open("w") as fh, contextlib.redirect_stdout(fh):
                tracemalloc.start()
                try:
                    list_cmd.callback(  # type: ignore[misc]
                        db=location(store), turn=None, outcome=None, limit=limit, fmt=fmt
                    )
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
            peaks[limit] = max(peaks.get(limit, 0), peak)
            lines = out.read_text().count("\n")
            assert lines == (limit or n) + (fmt == "text")  # the text has a header
    growth = peaks[None] - peaks[few]
    assert growth < 1_000_000, f"peak {peaks}: {growth} bytes more for {n} records"

"""Lines of ``sharedos evidence`` that name a path the operator or a host file gave are
spelled, as the records around them are (``sharedos.terminal.unambiguous``)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sharedos.cli.main import main
from sharedos.evidence.sqlite import SqliteEvidenceStore


def test_export_names_its_output_spelled(tmp_path: Path) -> None:
    # "exported N records to PATH" printed the path raw: a bidi override in it reordered
    # the line, a BEL rang
    db = tmp_path / "evidence.sqlite"
    SqliteEvidenceStore(str(db)).close()
    out_path = tmp_path / "ex\u202eport\x07.jsonl"
    result = CliRunner().invoke(
        main, ["evidence", "export", "--db", str(db), "--format", "jsonl", "-o", str(out_path)]
    )
    assert result.exit_code == 0, result.output
    assert "exported 0 records to" in result.output, result.output
    assert not {"\x07", "\u202e"} & set(result.output), ascii(result.output)
    assert "ex\\u202eport\\x07.jsonl" in result.output, ascii(result.output)

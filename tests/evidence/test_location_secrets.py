"""A database password never reaches a message, in any spelling, on any error path (issue 24).

A password is planted in every place libpq takes one — ``user:password@``, a
``password`` (or ``sslpassword``) query parameter, plain and percent-encoded,
a key=value string, bare and quoted — and every path that builds an
``EvidenceStoreError`` or prints a location is driven against a real
PostgreSQL server (or a port where none listens): opening, writing to a
replaced, closed or read-only store, migrating, and each ``sharedos
evidence`` command. No spelling of the password may appear in any of it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import conninfo_to_dict

from sharedos.cli.main import main
from sharedos.evidence.migrate import migrate_store
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.url import open_store, parse_store_url
from tests.evidence.test_chain import attempt, ok

PASSWORD = "plantedS3cretValue"
#: what must not appear: the password, a piece of it, and its encodings
SPELLINGS = (
    PASSWORD,
    "S3cretValue",
    "planted%53%33cret",
    urllib.parse.quote(PASSWORD + " with space", safe=""),
    "cretValue",
)


def _forms(params: dict[str, Any]) -> dict[str, str]:
    host, port, db, user = params["host"], params["port"], params["dbname"], params["user"]
    q = urllib.parse.quote(host, safe="/")
    url = f"postgresql://{user}@/{db}?host={q}&port={port}"
    kv = f"host={host} port={port} dbname={db} user={user}"
    return {
        "userinfo": f"postgresql://{user}:{PASSWORD}@/{db}?host={q}&port={port}",
        "query": f"{url}&password={PASSWORD}",
        "query-encoded": f"{url}&password=planted%53%33cretValue",
        "query-sslpassword": f"{url}&sslpassword={PASSWORD}",
        "keyvalue": f"{kv} password={PASSWORD}",
        "keyvalue-quoted": f"{kv} password='{PASSWORD} with space'",
        "keyvalue-spaced": f"{kv} password = {PASSWORD}",
    }


def clean(text: str) -> bool:
    return not any(s in text for s in SPELLINGS)


@pytest.fixture
def params(pg_url: str) -> dict[str, Any]:
    return conninfo_to_dict(pg_url)


@pytest.fixture(params=list(_forms({"host": "h", "port": "1", "dbname": "d", "user": "u"})))
def form(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def reachable(params: dict[str, Any], form: str) -> str:
    return _forms(params)[form]


@pytest.fixture
def unreachable(params: dict[str, Any], form: str) -> str:
    return _forms({**params, "port": "1", "host": "127.0.0.1"})[form]


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    return result.output + (str(result.exception) if result.exception else "")


def test_the_location_is_shown_without_it(reachable: str) -> None:
    target = parse_store_url(reachable)
    assert target.kind == "postgresql" and clean(target.shown)
    assert "***" in target.shown


def test_no_connection_no_password(unreachable: str) -> None:
    with pytest.raises(EvidenceStoreError) as exc:
        open_store(unreachable)
    assert clean(str(exc.value)), str(exc.value)
    with pytest.raises(EvidenceStoreError) as exc:
        migrate_store(unreachable)
    assert clean(str(exc.value)), str(exc.value)
    for args in (
        ("counts", "--db"),
        ("list", "--db"),
        ("verify", "--db"),
        ("export", "--db"),
        ("migrate", "--db"),
        ("checkpoint", "--db"),
        ("checkpoint", "--take", "--db"),
        ("copy", "--to", "x.db", "--from"),
    ):
        out = cli("evidence", *args, unreachable)
        assert clean(out), out


def test_every_error_of_a_working_store_says_nothing_of_it(
    reachable: str, pg_url: str, tmp_path: Path
) -> None:
    store = open_store(reachable)
    try:
        assert clean(store.shown)
        store.finish(store.begin(attempt("a")), ok())
        store.take_checkpoint()
        # the CLI on it: every command's output
        outputs = [
            cli("evidence", cmd, "--db", reachable)
            for cmd in ("counts", "list", "verify", "export", "migrate", "turns", "checkpoint")
        ]
        outputs.append(cli("evidence", "copy", "--from", reachable, "--to", str(tmp_path / "c.db")))
        outputs.append(cli("evidence", "copy", "--from", str(tmp_path / "c.db"), "--to", reachable))
        for out in outputs:
            assert clean(out), out
        # a read-only open, written to
        reader = open_store(reachable, read_only=True)
        with pytest.raises(EvidenceStoreError) as exc:
            reader.begin(attempt("b"))
        reader.close()
        assert clean(str(exc.value))
        # the database replaced under the store
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE chain RENAME TO chain_gone")
        try:
            with pytest.raises(EvidenceStoreError) as exc:
                store.begin(attempt("c", "new-turn"))
            assert clean(str(exc.value)), str(exc.value)
            with pytest.raises(EvidenceStoreError) as exc:
                store.take_checkpoint(everything=True)
            assert clean(str(exc.value)), str(exc.value)
        finally:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                conn.execute("ALTER TABLE chain_gone RENAME TO chain")
    finally:
        store.close()
    with pytest.raises(EvidenceStoreError) as exc:
        store.begin(attempt("d"))  # closed
    assert clean(str(exc.value))


@pytest.mark.parametrize(
    "location",
    [
        f"postgresq://u:{PASSWORD}@h/db",  # a mistyped scheme
        f"postgresql://u:{PASSWORD}@x@h/db",  # an unencoded '@': which part is the password?
        f"host=h password='{PASSWORD}",  # an unterminated quote
        f"hots=h password={PASSWORD}",  # a misspelt keyword
        f"postgresql://u@h:notaport/db?password={PASSWORD}",
    ],
)
def test_a_malformed_location_is_refused_without_it(location: str) -> None:
    try:
        open_store(location)
    except EvidenceStoreError as exc:
        assert clean(str(exc)), str(exc)
    else:  # pragma: no cover - each of these must fail
        pytest.fail("a malformed location was accepted")
    out = cli("evidence", "counts", "--db", location)
    assert clean(out), out


def test_a_host_file_with_a_bad_location_does_not_repeat_it() -> None:
    from sharedos.harness.hostconfig import HostConfigError, parse_host_config

    with pytest.raises(HostConfigError) as exc:
        parse_host_config(
            f'[harness.claude]\nkind = "claude-code"\n\n[evidence]\nurl = "pgsql://u:{PASSWORD}@h/db"\n',
            source="host.toml",
        )
    assert clean(str(exc.value)), str(exc.value)


@pytest.fixture(autouse=True)
def no_leak_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Nothing logged along the way (the pool's reconnection warnings included) holds it either."""
    with caplog.at_level("DEBUG"):
        yield
    assert clean(caplog.text)

"""Which store a ``--db`` value names: paths and sqlite URLs, PostgreSQL URLs, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.evidence.sqlite import SqliteEvidenceStore
from sharedos.evidence.store import EvidenceStoreError
from sharedos.evidence.url import open_store, parse_store_url


@pytest.mark.parametrize(
    ("value", "kind", "location"),
    [
        ("evidence.db", "sqlite", "evidence.db"),
        ("/var/lib/sharedos/e.db", "sqlite", "/var/lib/sharedos/e.db"),
        ("sqlite:///var/lib/e.db", "sqlite", "/var/lib/e.db"),
        ("sqlite:relative/e.db", "sqlite", "relative/e.db"),
        (":memory:", "sqlite", ":memory:"),
        ("postgresql://u@h/db", "postgresql", "postgresql://u@h/db"),
        ("postgres://u@h:5432/db", "postgresql", "postgres://u@h:5432/db"),
        (
            "postgresql://u@/db?host=/run/postgresql",
            "postgresql",
            "postgresql://u@/db?host=/run/postgresql",
        ),
    ],
)
def test_locations(value: str, kind: str, location: str) -> None:
    target = parse_store_url(value)
    assert (target.kind, target.location) == (kind, location)


@pytest.mark.parametrize("value", ["mysql://h/db", "http://h/evidence", "sqlite://", "", "  "])
def test_what_names_no_store_is_refused(value: str) -> None:
    with pytest.raises(ValueError):
        parse_store_url(value)


def test_a_password_is_never_shown() -> None:
    assert parse_store_url("postgresql://u:pw@h/db").shown == "postgresql://u:***@h/db"


def test_readers_never_create_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(EvidenceStoreError, match="no evidence database"):
        open_store(missing, read_only=True)
    with pytest.raises(EvidenceStoreError, match="no evidence database"):
        open_store(f"sqlite://{missing}", must_exist=True)
    assert not missing.exists()
    with pytest.raises(EvidenceStoreError, match="unknown evidence store scheme"):
        open_store("mysql://h/db")


def test_a_postgres_store_over_a_unix_socket_names_its_socket() -> None:
    """A sandbox must not be shown the socket (tests/confine/test_escape_evidence_socket.py)."""
    from sharedos.evidence.url import postgres_sockets, store_files

    assert postgres_sockets("postgresql://u@/db?host=/run/postgresql", {}) == [
        "/run/postgresql/.s.PGSQL.5432"
    ]
    assert postgres_sockets("postgresql://u@/db?host=/a,/b&port=1,2", {}) == [
        "/a/.s.PGSQL.1",
        "/b/.s.PGSQL.2",
    ]
    assert postgres_sockets("host=/x port=7 dbname=e", {}) == ["/x/.s.PGSQL.7"]
    assert postgres_sockets("postgresql://u@/db", {"PGHOST": "/s", "PGPORT": "9"}) == [
        "/s/.s.PGSQL.9"
    ]
    assert postgres_sockets("postgresql://u@db.internal/e", {}) == []  # TCP only
    assert store_files("/var/e.sqlite")[0] == "/var/e.sqlite"


def test_a_store_path_under_home_is_opened_there_not_under_a_directory_named_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``url = "~/evidence.sqlite"``: the host file's reader took it for an absolute path and
    the sandboxes hid $HOME/evidence.sqlite, but the store opened ``./~/evidence.sqlite``
    (no such directory: the host failed at open; with one, evidence went where no sandbox
    hid it)."""
    from sharedos.evidence.url import open_configured_store, sqlite_files
    from sharedos.harness.hostconfig import load_host_config

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cwd = tmp_path / "cwd"
    (cwd / "~").mkdir(parents=True)
    monkeypatch.chdir(cwd)
    host = tmp_path / "host.toml"
    host.write_text('[harness.codex]\n[evidence]\nurl = "~/evidence.sqlite"\n')
    config = load_host_config(host)
    location = config.evidence_location()
    assert location is not None
    want = home / "evidence.sqlite"
    assert str(want) in sqlite_files(location)
    store = open_configured_store(location)
    store.close()
    assert want.is_file()
    assert not (cwd / "~" / "evidence.sqlite").exists()
    for value in ("~/evidence.sqlite", "sqlite:~/evidence.sqlite"):
        assert parse_store_url(value).location == str(want)
        with open_store(value, read_only=True) as reader:  # the CLI's readers find it too
            assert reader.query() == []
    store = SqliteEvidenceStore("~/evidence.sqlite")
    store.close()
    assert not (cwd / "~" / "evidence.sqlite").exists()


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        # libpq's user information runs to the first '@': '#' and '?' in it are the password's
        ("postgresql://u:pa#ss-word@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:pa?ss-word@/db?host=/run/pg", "postgresql://u:***@/db?host=/run/pg"),
        # a query value runs to the next '&', a '#' or ';' in it included
        ("postgresql://h/db?password=ab#cd-word", "postgresql://h/db?password=***"),
        (
            "postgresql://h/db?password=ab;cd-word&sslmode=require",
            "postgresql://h/db?password=***&sslmode=require",
        ),
        # a password holding an unencoded '/' (a base64 one): libpq reads host, port and
        # database of its pieces, and the location was shown whole, the password in clear
        ("postgresql://u:pa/ss-word@h/db", "postgresql://***@h/db"),
        (
            "postgresql://u:Zm9v/YmFy+cXV4@h:5432/db?sslmode=require",
            "postgresql://***@h:5432/db?sslmode=require",
        ),
        # an empty authority is kept: what a message shows is still a location libpq takes
        ("postgresql:///db?host=/run/pg", "postgresql:///db?host=/run/pg"),
        ("postgresql:///db?host=/run/pg&password=pw", "postgresql:///db?host=/run/pg&password=***"),
    ],
)
def test_a_location_is_shown_as_libpq_reads_it(value: str, shown: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from sharedos.evidence.url import redacted_location

    assert redacted_location(value) == shown
    password = conninfo_to_dict(value).get("password")
    assert password is None or password not in shown
    if "***" not in shown:
        assert conninfo_to_dict(shown) == conninfo_to_dict(value)


def test_a_password_holding_a_slash_is_neither_shown_nor_left_in_what_the_driver_says() -> None:
    """``sharedos evidence verify --db postgresql://sos:<password with a '/'>@h/db`` printed
    "cannot connect to the evidence database postgresql://sos:<the password>@h/db": the
    location was shown whole (libpq ends the authority at the '/', so there was no user
    information to hide), and the password was no secret of the run either."""
    from sharedos.evidence.url import location_secrets

    password = "Zm9vYmFyYmF6/cXV4cXV1eA"
    value = f"postgresql://sos:{password}@127.0.0.1:1/x"
    shown = parse_store_url(value).shown
    assert shown == "postgresql://***@127.0.0.1:1/x"
    secrets = location_secrets(value)
    # and the pieces libpq took for a port and a database, as its messages may quote them
    assert {password, "Zm9vYmFyYmF6", "cXV4cXV1eA"} <= set(secrets)

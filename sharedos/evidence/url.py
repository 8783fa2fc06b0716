"""Which evidence store a ``--db`` value or a host's ``[evidence] url`` names, and opening it.

* a bare path, or ``sqlite:PATH`` / ``sqlite://PATH`` (``sqlite:///var/x.db``
  is the absolute path ``/var/x.db``): the SQLite store (the default);
* ``postgresql://…`` or ``postgres://…``: the PostgreSQL store (a libpq URL;
  a Unix socket is ``postgresql://user@/db?host=/run/postgresql``);
* a libpq key=value connection string (``host=db.internal dbname=evidence``):
  the PostgreSQL store too.

Anything else with a ``scheme://`` is refused with a clear message, so a
mistyped URL never becomes a SQLite file named after it.

A location is never shown as it was given: ``redacted_location`` drops the
password from every place libpq takes one (``user:password@``, a
``password`` or ``sslpassword`` query parameter, a ``password=`` key, quoted
or not), and ``location_secrets`` gives every spelling of it (as given,
percent-decoded, as libpq parses it) so that an error text from the driver
can be scrubbed of it before it is put in a message. Passwords belong in the
libpq environment (``PGPASSWORD``, ``~/.pgpass``), not in the location.
"""

from __future__ import annotations

import os
import re
import stat
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sharedos import textfile
from sharedos.evidence.store import EvidenceStoreError

__all__ = [
    "StoreTarget",
    "location_secrets",
    "open_configured_store",
    "open_store",
    "parse_store_url",
    "postgres_sockets",
    "redacted_location",
    "sqlite_files",
    "store_files",
    "store_passwords",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
#: a libpq key=value connection string starts with a keyword and "="
_CONNINFO = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=")
#: libpq keywords whose value is a secret
_SECRET_KEYS = frozenset({"password", "sslpassword"})
#: a secret keyword's value in a key=value string: quoted (escapes allowed, maybe unterminated) or bare
_CONNINFO_SECRET = re.compile(
    r"\b(password|sslpassword)(\s*=\s*)('(?:\\.|[^'\\])*'?|\S*)", re.IGNORECASE
)
_HIDDEN = "***"
#: where a URL's user information ends (at an '@'), or is found absent (at a '/'), as libpq reads it
_USERINFO_END = re.compile(r"[@/]")


def _is_conninfo(text: str) -> bool:
    return "://" not in text and bool(_CONNINFO.match(text))


def redacted_location(text: str) -> str:
    """A store location as a message may show it: the password gone, in every spelling.

    URLs keep their shape (``postgresql://u:***@h/db?password=***``); a
    key=value string keeps its keys (``password=***``); a path is a path. A URL
    whose user information is ambiguous (an unencoded ``@`` in it) shows none
    of it.
    """
    if _is_conninfo(text):
        return _CONNINFO_SECRET.sub(lambda m: m.group(1) + "=" + _HIDDEN, text)
    m = _SCHEME.match(text)
    if m is None or not text[m.end() :].startswith("//"):
        return text
    # read as libpq reads it (not as ``urlsplit`` does): the user information runs to
    # the first '@' before any '/' ('?' and '#' in a password are the password's), a
    # query value to the next '&' (a '#' too); written out again as given, an empty
    # authority kept (``postgresql:///db?host=/run/postgresql``: a location a message
    # shows can be copied into the command it gives)
    rest = text[m.end() + 2 :]
    shown_user = ""
    cut = _USERINFO_END.search(rest)
    if cut is not None and cut.group() == "@":
        userinfo, rest = rest[: cut.start()], rest[cut.end() :]
        more = _USERINFO_END.search(rest)
        if more is not None and more.group() == "@":
            # ambiguous: which '@' ends the password is libpq's guess; none of it is shown
            slash = rest.find("/")
            rest = rest[(rest if slash < 0 else rest[:slash]).rfind("@") + 1 :]
            shown_user = f"{_HIDDEN}@"
        else:
            user, colon, _password = userinfo.partition(":")
            shown_user = f"{user}:{_HIDDEN}@" if colon else f"{user}@"
    elif "@" in rest.partition("?")[0]:
        # an '@' after the first '/': a password holding an unencoded '/' (a base64 one, say),
        # which libpq reads as host, port and database; shown, it was the password in clear.
        # None of what comes before the last such '@' is shown
        head = rest.partition("?")[0]
        rest = rest[head.rfind("@") + 1 :]
        shown_user = f"{_HIDDEN}@"
    hostpath, mark, query = rest.partition("?")
    if query and any(_is_secret_key(k) for k, _ in _query_pairs(query)):
        query = "&".join(
            f"{k}={_HIDDEN}" if _is_secret_key(k) else (f"{k}={v}" if v is not None else k)
            for k, v in _query_pairs(query)
        )
    return f"{m.group(1)}://{shown_user}{hostpath}{mark}{query}"


def _is_secret_key(raw_key: str) -> bool:
    return urllib.parse.unquote_plus(raw_key).strip().lower() in _SECRET_KEYS


def _query_pairs(query: str) -> list[tuple[str, str | None]]:
    """The raw (undecoded) key/value pairs of a query string (split at '&' only, as libpq
    does: a ';' or '#' in a value is the value's)."""
    pairs: list[tuple[str, str | None]] = []
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        pairs.append((key, value if eq else None))
    return pairs


def location_secrets(text: str) -> tuple[str, ...]:
    """Every spelling of the passwords a store location holds (to scrub driver messages of)."""
    found: set[str] = set()

    def add(value: str | None) -> None:
        if value:
            for spelling in (
                value,
                urllib.parse.unquote(value),
                urllib.parse.unquote_plus(value),
                urllib.parse.quote(value, safe=""),
            ):
                if spelling:
                    found.add(spelling)

    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(text)
        for key in _SECRET_KEYS:
            value = params.get(key)
            add(str(value) if value is not None else None)
    except Exception:  # not parseable: the raw spellings below still count
        pass
    if _is_conninfo(text):
        for found_secret in _CONNINFO_SECRET.finditer(text):
            raw = found_secret.group(3)
            add(raw)
            if raw.startswith("'"):
                inner = raw[1:-1] if raw.endswith("'") and len(raw) > 1 else raw[1:]
                add(inner)
                add(re.sub(r"\\(.)", r"\1", inner))
        return tuple(sorted(found, key=len, reverse=True))
    scheme = _SCHEME.match(text)
    if scheme is not None:
        rest = text[scheme.end() :]
        netloc_end = len(rest)
        for stop in "/?#":
            at = rest.find(stop, 2)
            if at != -1:
                netloc_end = min(netloc_end, at)
        netloc = rest[2:netloc_end] if rest.startswith("//") else ""
        # every way the user information could end (an unencoded '@' is ambiguous)
        for at in [i for i, c in enumerate(netloc) if c == "@"]:
            _user, colon, password = netloc[:at].partition(":")
            if colon:
                add(password)
        # and a password holding an unencoded '/' (libpq reads the authority to the first
        # '/', and then host, port and database of the password's pieces): the password
        # and each piece long enough to be worth one, as a driver's message may quote them
        from sharedos.redaction import MIN_SECRET_CHARS

        written = rest[2:].partition("?")[0] if rest.startswith("//") else ""
        for at in [i for i, c in enumerate(written) if c == "@" and i > len(netloc)]:
            _user, colon, password = written[:at].partition(":")
            if colon:
                add(password)
                for piece in password.split("/"):
                    add(piece if len(piece) >= MIN_SECRET_CHARS else None)
        query = text.partition("?")[2].partition("#")[0]
        for key, value in _query_pairs(query):
            if _is_secret_key(key):
                add(value)
    return tuple(sorted(found, key=len, reverse=True))


#: the most of a password file read for its passwords (one is some lines of text)
_PASSFILE_LIMIT = 1 << 20


def store_passwords(
    value: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """Every password the PostgreSQL store ``value`` names may be reached with, wherever
    libpq finds it: the location's own (``location_secrets``), ``PGPASSWORD``, each
    ``password`` of the connection service files (``_service_files``) and each password of
    every password file libpq may read (``passfile`` of the location or of a service,
    ``PGPASSFILE``, ``~/.pgpass``: the way docs/evidence.md recommends). None for SQLite or
    no store at all.

    The host holds them all (its environment, its files) whichever one libpq picks: a
    model that has one anyway must not have it recorded or printed, any more than a
    password written in the location.
    """
    try:
        target = parse_store_url(value)
    except ValueError:
        return ()
    if target.kind != "postgresql":
        return ()
    env = os.environ if environ is None else environ
    found = list(location_secrets(target.location))
    found.append(env.get("PGPASSWORD") or "")
    try:
        from psycopg.conninfo import conninfo_to_dict

        passfile = str(conninfo_to_dict(target.location).get("passfile") or "")
    except Exception:  # not parseable: the store cannot be opened either
        passfile = ""
    # every file libpq may take the password from, whichever it picks: the host holds them all
    passfiles = [passfile, env.get("PGPASSFILE") or ""]
    if env.get("HOME"):
        passfiles.append(os.path.join(env["HOME"], ".pgpass"))
    for service_file in _service_files(env):
        for key, setting in _service_settings(service_file):
            if key == "password":
                found.append(setting)
            elif key == "passfile":
                passfiles.append(setting)
    for name in dict.fromkeys(p for p in passfiles if p):
        found += _passfile_passwords(Path(name).expanduser())
    return tuple(dict.fromkeys(v for v in found if v))


def _service_files(env: Mapping[str, str]) -> list[Path]:
    """The connection service files libpq reads (``service=`` in a location, or
    ``PGSERVICE``): ``PGSERVICEFILE`` or ``~/.pg_service.conf``, and the system-wide
    ``pg_service.conf`` of ``PGSYSCONFDIR`` (the one libpq was built with otherwise,
    which no environment names)."""
    files: list[Path] = []
    if env.get("PGSERVICEFILE"):
        files.append(Path(env["PGSERVICEFILE"]).expanduser())
    elif env.get("HOME"):
        files.append(Path(env["HOME"]) / ".pg_service.conf")
    if env.get("PGSYSCONFDIR"):
        files.append(Path(env["PGSYSCONFDIR"]) / "pg_service.conf")
    return files


def _service_settings(path: Path) -> list[tuple[str, str]]:
    """The ``key=value`` settings of every service in a connection service file (an INI
    file: ``[service]`` headers, ``#`` comments); none when it cannot be read."""
    text = _small_regular_file(path)
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "[")):
            continue
        key, eq, setting = line.partition("=")
        if eq and setting:
            out.append((key.strip(), setting))
            if setting.strip() != setting:
                out.append((key.strip(), setting.strip()))
    return out


def _small_regular_file(path: Path) -> str:
    """The text of a regular file of at most ``_PASSFILE_LIMIT`` bytes read; "" when it
    cannot be read (no wait on a pipe put in its place)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return ""
            return fh.read(_PASSFILE_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ""


def _passfile_passwords(path: Path) -> list[str]:
    """The password field of each line of a libpq password file (``host:port:db:user:password``,
    ``\\`` escaping ``:`` and ``\\``); none when it cannot be read."""
    text = _small_regular_file(path)
    out: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields: list[str] = []
        current: list[str] = []
        escaped = False
        for ch in line.rstrip("\r"):
            if escaped:
                current.append(ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == ":" and len(fields) < 4:
                fields.append("".join(current))
                current = []
            else:
                current.append(ch)
        if len(fields) == 4:
            out.append("".join(current))
    return out


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each of ``secrets`` in every encoding removed (``sharedos.redaction``),
    and a short value's raw occurrences replaced by ``***`` too (a message is not worth
    a password)."""
    if not secrets:
        return text
    from sharedos.redaction import Redactor

    out = Redactor(secrets).scrub(text)
    for value in secrets:
        out = out.replace(value, _HIDDEN)
    return out


@dataclass(frozen=True, slots=True)
class StoreTarget:
    """A parsed store location: ``kind`` and the path (SQLite) or URL (PostgreSQL)."""

    kind: Literal["sqlite", "postgresql"]
    location: str

    @property
    def shown(self) -> str:
        """The location as messages print it (no password)."""
        return redacted_location(self.location) if self.kind == "postgresql" else self.location


def parse_store_url(value: str | os.PathLike[str]) -> StoreTarget:
    """Parse ``value``; ``ValueError`` with a one-line reason when it names no store."""
    text = os.fspath(value)
    if not text.strip():
        raise ValueError("an empty evidence store location")
    m = _SCHEME.match(text)
    scheme = m.group(1).lower() if m else None
    if scheme in ("postgresql", "postgres") or _is_conninfo(text):
        if scheme is not None and "@" in text.partition("//")[2].split("/")[0].rpartition("@")[0]:
            raise ValueError(
                f"{redacted_location(text)}: the user information holds an unencoded '@'; "
                "percent-encode it (%40), or better, keep the password out of the URL "
                "(PGPASSWORD, ~/.pgpass)"
            )
        return StoreTarget("postgresql", text)
    if scheme == "sqlite":
        path = text[len("sqlite:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise ValueError(f"{text}: a sqlite URL needs a path (sqlite:///var/evidence.db)")
        return StoreTarget("sqlite", os.path.expanduser(path))
    if scheme is not None and len(scheme) > 1 and text[m.end() :].startswith("//"):  # type: ignore[union-attr]
        raise ValueError(
            f"{redacted_location(text)}: unknown evidence store scheme {scheme!r} "
            "(a path or sqlite:///path for SQLite, postgresql://... for PostgreSQL)"
        )
    # ``~`` is the home directory wherever a SQLite path is read (the host file's
    # ``[evidence] url``, ``--db``, ``--evidence``): left as written, the store opened
    # ``./~/…`` (or failed to) while the files hidden from every sandbox were $HOME's
    return StoreTarget("sqlite", os.path.expanduser(text))


def sqlite_files(value: str | os.PathLike[str]) -> list[str]:
    """The files of the SQLite store ``value`` names (the database, its ``-wal``,
    ``-shm`` and ``-journal``, as absolute paths, and the path as written when a
    symbolic link leads to the database: the host opens it by that link); none for
    PostgreSQL, ``:memory:`` or no store at all."""
    try:
        target = parse_store_url(value)
    except ValueError:
        return []
    if target.kind != "sqlite" or target.location == ":memory:":
        return []
    given = os.path.abspath(Path(target.location).expanduser())
    db = str(Path(given).resolve())
    # ``-journal`` too: a hot journal beside the database is played back into it by the
    # next connection that opens it (whatever mode it is in), so whoever can create that
    # file can rewrite or replace the store
    return [db, db + "-wal", db + "-shm", db + "-journal", *([given] if given != db else [])]


#: where libpq looks for a server's Unix socket when a location names no host (its
#: compiled default: Debian's, and PostgreSQL's own)
_DEFAULT_SOCKET_DIRS = ("/var/run/postgresql", "/run/postgresql", "/tmp")


def postgres_sockets(
    value: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """The Unix sockets (``DIR/.s.PGSQL.PORT``) through which the PostgreSQL store ``value``
    names is reached; none for SQLite, TCP only, or no store at all.

    The socket is the store to whoever may ``connect`` to it as SharedOS's uid (``peer``
    authentication, Debian's default for local connections, or ``trust``), and a sandbox
    runs as that uid: no sandbox may show it. A host that is a directory names its
    socket; no host at all (nor ``PGHOST``) means libpq's default directory, and the
    sockets found in the usual ones are given.
    """
    try:
        target = parse_store_url(value)
    except ValueError:
        return []
    if target.kind != "postgresql":
        return []
    env = os.environ if environ is None else environ
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(target.location)
    except Exception:  # not parseable: the store cannot be opened either
        return []
    hosts = str(params.get("host") or env.get("PGHOST") or "").split(",")
    ports = [p.strip() for p in str(params.get("port") or env.get("PGPORT") or "").split(",")]
    out: list[str] = []
    for i, host in enumerate(h.strip() for h in hosts):
        # libpq: one port for every host, or one per host
        port = (ports[i] if i < len(ports) else ports[-1]) or "5432"
        name = f".s.PGSQL.{port}"
        if host.startswith("/"):
            out.append(os.path.join(host, name))
        elif not host and not params.get("hostaddr"):
            out += [
                os.path.join(d, name)
                for d in _DEFAULT_SOCKET_DIRS
                if os.path.lexists(os.path.join(d, name))
            ]
    return out


def store_files(
    value: str | os.PathLike[str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """What no sandbox may show of the store ``value`` names: a SQLite store's files
    (``sqlite_files``) or a PostgreSQL store's Unix sockets (``postgres_sockets``)."""
    return [*sqlite_files(value), *postgres_sockets(value, environ)]


def open_store(
    value: str | os.PathLike[str],
    *,
    read_only: bool = False,
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    signer: Any = None,
    must_exist: bool = False,
    checkpoint_interval_s: float | None = None,
) -> Any:
    """Open the store ``value`` names (``EvidenceStoreError`` with one clear line otherwise).

    ``must_exist`` (the CLI's readers): a SQLite path with no file is refused
    rather than created. ``signer`` (a ``chain.Signer``) signs turn seals and
    checkpoints; ``checkpoint_interval_s`` overrides the stores' default.
    """
    try:
        target = parse_store_url(value)
    except ValueError as exc:
        raise EvidenceStoreError(str(exc), "io") from None
    if target.kind == "postgresql":
        from sharedos.evidence.postgres import PostgresEvidenceStore

        extra: dict[str, Any] = {}
        if checkpoint_interval_s is not None:
            extra["checkpoint_interval_s"] = checkpoint_interval_s
        return PostgresEvidenceStore(target.location, read_only=read_only, signer=signer, **extra)
    from sharedos.evidence.sqlite import SqliteEvidenceStore

    missing = target.location != ":memory:" and not Path(target.location).is_file()
    if (must_exist or read_only) and missing:
        raise EvidenceStoreError(f"no evidence database at {target.location}", "io")
    kwargs: dict[str, Any] = {"read_only": read_only}
    if not read_only:
        kwargs["synchronous"] = synchronous
    if signer is not None:
        kwargs["signer"] = signer
    if checkpoint_interval_s is not None:
        kwargs["checkpoint_interval_s"] = checkpoint_interval_s
    return SqliteEvidenceStore(target.location, **kwargs)


def open_configured_store(
    url: str | os.PathLike[str],
    *,
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    sign_key: str | os.PathLike[str] | None = None,
    otlp_endpoint: str | None = None,
    checkpoint_interval_s: float | None = None,
) -> Any:
    """The store a host configuration's ``[evidence]`` table describes, ready to write.

    ``sign_key``: an ed25519 private key (PKCS#8 PEM file) that signs each
    turn's seal. ``otlp_endpoint``: an OTLP/HTTP base URL; the store is then
    wrapped so each attempt is also a log record and a span
    (``sharedos.evidence.otel``).
    """
    signer = None
    if sign_key is not None:
        from sharedos.evidence.chain import Signer

        try:
            signer = Signer.from_pem(textfile.read_private(sign_key))
        except (OSError, ValueError) as exc:
            raise EvidenceStoreError(
                f"cannot use the signing key {sign_key}: {exc}", "io"
            ) from None
    store = open_store(
        url, synchronous=synchronous, signer=signer, checkpoint_interval_s=checkpoint_interval_s
    )
    _say_rewrite_grants(store)
    if otlp_endpoint:
        from sharedos.evidence.otel import TelemetryStore, otlp_providers

        try:
            tracer_provider, logger_provider = otlp_providers(otlp_endpoint)
        except RuntimeError as exc:
            store.close()
            raise EvidenceStoreError(str(exc), "io") from None
        store = TelemetryStore(store, tracer_provider, logger_provider)
    return store


def _say_rewrite_grants(store: Any) -> None:
    """Warn when the host's role could change or remove evidence rows (PostgreSQL): a host
    needs SELECT and INSERT only, and with more, whoever holds its credentials can rewrite
    what every host of the fleet recorded."""
    grants = getattr(store, "rewrite_grants", None)
    found = grants() if grants is not None else []
    if found:
        import logging

        logging.getLogger("sharedos.evidence").warning(
            "sharedos: the role this host writes evidence as can %s in %s: whoever holds "
            "its credentials can rewrite or remove what every host recorded (found only "
            "where a signature or an exported checkpoint anchors it); grant a host SELECT "
            'and INSERT alone (docs/evidence.md, "Least privilege")',
            "; ".join(found),
            store.shown,
        )

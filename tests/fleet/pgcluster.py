"""A throwaway PostgreSQL cluster for tests and benchmarks (Debian's ``postgresql`` binaries).

``TempCluster.start()`` runs ``initdb`` into a fresh temporary directory as an
unprivileged user (``initdb`` and ``postgres`` refuse to run as root: as root
the cluster is owned by the ``postgres`` user the Debian package creates, or
by a ``sharedos-pg`` system user created here), starts ``postgres`` listening
on a Unix socket in that directory and on 127.0.0.1 with a random free port,
and ``stop()`` shuts it down (fast mode) and removes the directory. Nothing is
left running: the server is also stopped at interpreter exit, and it is
started with ``-c`` settings meant for throwaway use (no fsync unless asked).

``find_bindir()`` says where the server binaries are, or why they are not
usable, so a test can skip with that reason.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SUPERUSER = "sharedos"
DBNAME = "sharedos"
_FALLBACK_USER = "sharedos-pg"


class ClusterUnavailable(RuntimeError):
    """PostgreSQL cannot be run here; the message says why (a test skips with it)."""


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``postgres`` (highest installed version)."""
    override = os.environ.get("SHAREDOS_PG_BINDIR")
    candidates = [override] if override else []
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
        reverse=True,
    )
    for cand in candidates:
        if cand and (Path(cand) / "initdb").is_file() and (Path(cand) / "postgres").is_file():
            return Path(cand)
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).parent
    raise ClusterUnavailable(
        "PostgreSQL server binaries not found (Debian package `postgresql`; "
        "scripts/ensure-postgres.sh installs it when run as root)"
    )


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server as when we are root; None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", _FALLBACK_USER):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    useradd = shutil.which("useradd")
    if useradd is None:
        raise ClusterUnavailable("running as root and no unprivileged user for PostgreSQL")
    subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _FALLBACK_USER],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(_FALLBACK_USER)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class TempCluster:
    """One throwaway cluster; ``url`` (Unix socket) and ``tcp_url`` (127.0.0.1) reach its database."""

    #: False: no fsync (throwaway data, fast tests); True: fsync on; None: the configuration
    #: decides (so ``ALTER SYSTEM SET fsync`` and a reload can switch it, as the benchmark does)
    fsync: bool | None = False
    bindir: Path = field(default_factory=find_bindir)
    root: Path | None = None
    port: int = 0
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def socket_dir(self) -> Path:
        """Where the server's Unix socket lives."""
        assert self.root is not None
        return self.root / "sock"

    @property
    def url(self) -> str:
        """``postgresql://`` URL over the Unix socket (the fast path)."""
        return f"postgresql://{SUPERUSER}@/{DBNAME}?host={self.socket_dir}&port={self.port}"

    @property
    def tcp_url(self) -> str:
        """``postgresql://`` URL over TCP on 127.0.0.1."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DBNAME}"

    def database_url(self, name: str) -> str:
        """The Unix-socket URL of another database of this cluster."""
        return f"postgresql://{SUPERUSER}@/{name}?host={self.socket_dir}&port={self.port}"

    def _cmd(self, args: list[str], user: pwd.struct_passwd | None) -> list[str]:
        if user is None:
            return args
        runuser = shutil.which("runuser") or shutil.which("setpriv")
        if runuser is None:
            raise ClusterUnavailable("running as root without runuser to drop privileges")
        if runuser.endswith("setpriv"):
            return [
                runuser,
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--clear-groups",
                *args,
            ]
        return [runuser, "-u", user.pw_name, "--", *args]

    def start(self, timeout_s: float = 30.0) -> TempCluster:
        """initdb, start, wait until it accepts connections, create the database."""
        user = _run_as()
        self.root = Path(tempfile.mkdtemp(prefix="sharedos-pg-"))
        os.chmod(self.root, 0o700)
        data, sock = self.root / "data", self.root / "sock"
        sock.mkdir()
        if user is not None:
            for p in (self.root, sock):
                os.chown(p, user.pw_uid, user.pw_gid)
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        init = subprocess.run(
            self._cmd(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    SUPERUSER,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-locale",
                    "--no-sync",
                ],
                user,
            ),
            capture_output=True,
            env=env,
            cwd=self.root,
        )
        if init.returncode != 0:
            self._remove()
            raise ClusterUnavailable(
                f"initdb failed: {init.stderr.decode(errors='replace')[-500:]}"
            )
        self.port = _free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(sock),
            "max_connections": "200",
            "shared_buffers": "64MB",
            "synchronous_commit": "on",
            "log_min_messages": "fatal",
            "logging_collector": "off",
        }
        if self.fsync is not None:
            settings["fsync"] = "on" if self.fsync else "off"
            settings["full_page_writes"] = "on" if self.fsync else "off"
        args = [str(self.bindir / "postgres"), "-D", str(data)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log = open(self.root / "server.log", "wb")  # noqa: SIM115 - kept open for the server
        self._proc = subprocess.Popen(
            self._cmd(args, user),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.root,
            start_new_session=True,
        )
        log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                text = (self.root / "server.log").read_text(errors="replace")[-800:]
                self._remove()
                raise ClusterUnavailable(f"postgres exited at start: {text}")
            if (sock / f".s.PGSQL.{self.port}").exists() and self._ready():
                break
            time.sleep(0.05)
        else:
            self.stop()
            raise ClusterUnavailable(f"postgres did not accept connections within {timeout_s} s")
        self.create_database(DBNAME)
        return self

    def _ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.database_url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def create_database(self, name: str) -> str:
        """Create database ``name`` (quoted identifier); return its Unix-socket URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.database_url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.database_url(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown, then SIGKILL after 10 s) and remove its directory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)  # fast shutdown
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._remove()

    def _remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


class FrozenBackends:
    """The server processes serving one database, stopped and resumed (SIGSTOP/SIGCONT):
    a frozen server (a hung disk does the same), which no statement timeout ends.

    ``freeze`` stops the sessions of the database (only those idle in a transaction, if
    asked; only those whose last query ``keep`` accepts); ``thaw`` resumes every one it
    stopped and may be called any number of times (a ``finally`` and a timer both may)."""

    def __init__(self, cluster: TempCluster, database_url: str) -> None:
        from psycopg.conninfo import conninfo_to_dict

        self._admin_url = cluster.database_url("postgres")
        self._name = conninfo_to_dict(database_url)["dbname"]
        self.pids: list[int] = []

    def freeze(
        self, *, idle_in_transaction: bool = False, keep: Callable[[str], bool] | None = None
    ) -> None:
        """Stop the database's sessions (see the class)."""
        import psycopg

        sql = "SELECT pid, query FROM pg_stat_activity WHERE datname = %s"
        if idle_in_transaction:
            sql += " AND state = 'idle in transaction'"
        with psycopg.connect(self._admin_url, autocommit=True) as admin:
            found = [(int(pid), str(query)) for pid, query in admin.execute(sql, (self._name,))]
        for pid, query in found:
            if keep is None or keep(query):
                os.kill(pid, signal.SIGSTOP)
                self.pids.append(pid)

    def thaw(self) -> None:
        """Resume every session ``freeze`` stopped (a timer's thread and the test's may
        both call it at once: each pid is taken by one of them)."""
        while True:
            try:
                pid = self.pids.pop()
            except IndexError:
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

"""Where a host remembers the last bundle release it enforced, so a restart cannot be rolled back.

A ``BundleManager`` refuses a bundle whose ``sequence`` is lower than the one
in force (``sharedos.bundles.manager``). In memory that protects a running
host; a host that restarts would otherwise take whatever its source serves
first. ``BundleState`` keeps the last enforced release in a small JSON file::

    {"sequence": 42, "revision": "r42", "bundle_hash": "…", "origin": "https://…",
     "signed_by": "…", "signed_at": "…", "enforced_at": "…"}

and beside it the bundle's own bytes (``bundle-….last-good.json``: what a host
starting while its source fails puts in force, verified again, when the state records a
release of that source: ``of_source``), both
written before the release is put in force (atomically: a temporary file,
``fsync``, ``rename``, then the directory ``fsync``; mode 0600), and read
at every poll (the processes of one host share it); the manager compares a
release with the one recorded and writes it under ``locked()``. A file that cannot be read or parsed is not taken
as "nothing enforced yet": the manager refuses every bundle until an operator
fixes or removes it (fail closed). An operator who deliberately goes back to
an older release removes the file (or publishes the old program with a higher
sequence, which is the better way).

Where: ``[policy] state`` in the host configuration; by default
``$XDG_STATE_HOME/sharedos/bundle-<16 hex digits of SHA-256 of the source>.json``
(``~/.local/state/…`` when ``XDG_STATE_HOME`` is unset): one file per source, a URL
named without its credentials (its password, every query value, and the host variables
its path is built from that are named as a credential, ``${BUNDLE_TOKEN}``, as messages
show them; another, ``${DEPLOY_ENV}``, says which bundle it is, and is in the name, in
the query too, ``?env=${DEPLOY_ENV}``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import stat
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sharedos import textfile
from sharedos.atomicfile import fsync_directory, remove_strays, take_lock, write_atomically
from sharedos.bundles.verify import LoadedBundle
from sharedos.errors import BundleDistributionError

__all__ = [
    "BundleState",
    "Enforced",
    "StateError",
    "default_state_path",
    "lock_path_of",
    "of_source",
]

#: far above any state file this module writes (a few hundred bytes)
_STATE_LIMIT = 1 << 20
#: how long a poll waits for another process of the host to compare and write its release
_LOCK_WAIT_S = 5.0


class StateError(BundleDistributionError, OSError):
    """The state file cannot be read, parsed or written; the message says which and where."""


@dataclass(frozen=True, slots=True)
class Enforced:
    """The last release a host put in force."""

    sequence: int
    revision: str
    bundle_hash: str
    origin: str
    signed_by: str | None = None
    signed_at: str | None = None
    enforced_at: str = ""

    @classmethod
    def of(cls, loaded: LoadedBundle) -> Enforced:
        """The record of ``loaded`` being put in force now."""
        return cls(
            sequence=loaded.sequence,
            revision=loaded.revision,
            bundle_hash=loaded.bundle_hash,
            origin=loaded.origin,
            signed_by=loaded.signed_by,
            signed_at=loaded.signed_at,
            enforced_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        )

    def same_release(self, loaded: LoadedBundle) -> bool:
        """True when ``loaded`` is this release (same sequence, revision and program; a
        bundle that declares no revision is named by its bytes, which another signature
        changes, so then the same sequence and program are the same release)."""
        if (self.sequence, self.bundle_hash) != (loaded.sequence, loaded.bundle_hash):
            return False
        return self.revision == loaded.revision or not loaded.revision_declared

    def describe(self) -> str:
        """One line: sequence, revision, program."""
        return (
            f"sequence {self.sequence} (revision {self.revision}, bundle {self.bundle_hash[:16]}…)"
        )


def lock_path_of(state_path: Path) -> Path:
    """The lock file of a state file (``BundleState.locked``): beside it, hidden."""
    return state_path.parent / f".{state_path.name}.lock"


def default_state_path(origin: str, hidden: Iterable[str] = (), named: Iterable[str] = ()) -> Path:
    """The default state file of a bundle source (see the module docstring).

    A URL is named as messages show it (``shown_url``: no password, every query value
    ``***``): a presigned URL renewed before it expires (a new signature, a new expiry)
    or a rotated ``?token=`` is the same source, with the same history; named by the
    URL as written, each renewal started a new state file, and the host took an older
    release as if it had enforced none. ``hidden``: the host variables the URL's path is
    built from that rotate (``HostConfig.bundle_rotating``: named as a credential),
    masked as messages and the state's recorded origin mask them: named with them in
    clear, rotating ``${BUNDLE_TOKEN}`` in ``https://h/t/${BUNDLE_TOKEN}/policy.tar``
    started a new state file, whose earlier history (recorded as ``…/t/***/…``) was not
    found under the new token either: the host took an older signed release, and a start
    whose source failed had no copy. Not every variable messages mask: one that says which
    bundle it is (``https://h/${DEPLOY_ENV}/policy.tar``) is in the name (hashed), or
    staging and prod shared one history, and each put the other's release in force.
    ``named``: the values of the host variables the URL is built from
    (``HostConfig.bundle_hidden``; those in ``hidden`` stay masked): one in the query
    (``?env=${DEPLOY_ENV}``), whose every value the URL as shown masks, is added to the
    name (``_in_query``)."""
    from sharedos.bundles.source import shown_location

    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    shown = shown_location(origin, hidden)
    in_query = _in_query(origin, [v for v in named if v not in set(hidden)])
    return Path(base) / "sharedos" / _state_name("\n".join([shown, *in_query]))


def _in_query(origin: str, named: Iterable[str]) -> list[str]:
    """Of ``named``, the host variable values that say which bundle a URL is, the ones in
    its query, sorted: the URL as shown masks every query value, so named by it alone,
    ``?env=${DEPLOY_ENV}`` = staging and prod shared one state file, and a prod host put
    staging's kept copy in force. A value in the path too is in the name already (and
    one in a path that only happens to be in a query, ``/${REGION}/b.json?fmt=eu``, keeps
    the name e02b297 gave it)."""
    from sharedos.bundles.source import is_url

    if not is_url(origin):
        return []
    try:
        parts = urllib.parse.urlsplit(origin)
    except ValueError:
        return []
    forms = (lambda v: v, lambda v: urllib.parse.quote(v, safe=""), urllib.parse.quote_plus)
    return sorted(
        {
            v
            for v in named
            if v
            and any(form(v) in parts.query for form in forms)
            and not any(form(v) in parts.path for form in forms)
        }
    )


def _state_name(named: str) -> str:
    """The default state file's name for a source named ``named``."""
    digest = hashlib.sha256(named.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"bundle-{digest}.json"


def _fields(data: Any) -> dict[str, Any]:
    """``data`` as ``Enforced``'s keyword arguments; ``ValueError`` saying what is wrong
    in a state file's terms (not in the dataclass constructor's: "argument after ** must
    be a mapping", "missing 4 required positional arguments")."""
    if not isinstance(data, dict):
        raise ValueError(f"a JSON object of the enforced release, not {type(data).__name__}")
    known = [f.name for f in dataclasses.fields(Enforced)]
    required = ("sequence", "revision", "bundle_hash", "origin")
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(repr(k) for k in unknown)}")
    return data


def of_source(recorded: str, origin: str, hidden: Iterable[str] = ()) -> bool:
    """True when ``recorded``, the origin a state file records (a URL as shown, or as an
    earlier SharedOS wrote it; the path of a bundle file), names the bundle source
    ``origin`` (``BundleSource.origin``: a URL as shown; a directory, or the file itself).
    A state file is one source's history (``[policy] state`` shared by two sources' hosts
    is not): what it and its kept copy record of another source is not this one's.
    ``hidden``: the host variables the URL's path is built from, masked on both sides (a
    SharedOS before 21b9192 recorded them in clear)."""
    from sharedos.bundles.source import BUNDLE_NAME, is_url, shown_location

    if _same_server(shown_location(recorded, hidden)) == _same_server(
        shown_location(origin, hidden)
    ):
        return True
    if is_url(origin):
        return False
    # a directory source records the bundle file it read in it
    return os.path.normpath(recorded) == os.path.normpath(os.path.join(origin, BUNDLE_NAME))


def _same_server(location: str) -> str:
    """``location`` with what names the same server alike whoever wrote it: a URL's scheme
    and host in lower case, its scheme's default port (``:443``, ``:80``) left out. A host
    file edited from ``https://Bundles.example.com/b.json`` to ``https://bundles.example.com
    /b.json``, or to ``https://bundles.example.com:443/b.json``, names the same source:
    compared as written, the state under the earlier name was another source's, and the
    host took an older signed release as if it had enforced none. A path, or a URL that
    cannot be read so, is as it is."""
    from sharedos.bundles.source import is_url

    if not is_url(location):
        return location
    try:
        parts = urllib.parse.urlsplit(location)
        scheme, host, port = parts.scheme.lower(), parts.hostname or "", parts.port
    except ValueError:
        return location
    userinfo, at, _hostport = parts.netloc.rpartition("@")
    server = f"[{host}]" if ":" in host else host
    if port is not None and port != {"https": 443, "http": 80}.get(scheme):
        server = f"{server}:{port}"
    return urllib.parse.urlunsplit(parts._replace(scheme=scheme, netloc=f"{userinfo}{at}{server}"))


class BundleState:
    """The last enforced release, kept in the JSON file at ``path``.

    ``source``: the bundle source ``path`` is the default state file of (None for a state
    file the operator named). The default name has changed between releases (the URL as
    written, then as messages show it, which changed too): a host upgraded with no file
    under the new name would have taken any older signed release as if it had enforced
    none. So when ``path`` has no file, ``load`` reads the newest release recorded by the
    state files beside it whose origin is that source (what an earlier SharedOS wrote,
    under the name it gave them), and ``kept_copies`` the copies beside that file; the
    next ``save`` writes it under the new name.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        source: str | None = None,
        hidden: Iterable[str] = (),
    ) -> None:
        self.path = Path(path)
        self.source = source
        #: the host variables the source URL's path is built from (``of_source``)
        self.hidden = tuple(hidden)
        #: when a value masked in the origin says which bundle the source is (``default_for``):
        #: the source named with only its rotating values masked, the names its default
        #: state file has had, the only earlier files ``_earlier`` reads whose recorded
        #: origin, masked, cannot tell this source from another, and whether an origin
        #: recorded with those values in clear tells it (never when one is in the query,
        #: whose every value a recorded origin masks)
        self._identity: tuple[str, tuple[str, ...], frozenset[str], bool] | None = None

    @classmethod
    def default_for(
        cls, origin: str, hidden: Iterable[str] = (), rotating: Iterable[str] | None = None
    ) -> BundleState:
        """The default state of the bundle source ``origin`` (``default_state_path``;
        ``hidden``: what its URL's path masks, as the origin a release records does;
        ``rotating``: of those, the ones the state's name masks, ``hidden`` when None)."""
        from sharedos.bundles.source import shown_location

        hidden = tuple(hidden)
        rotating = hidden if rotating is None else tuple(rotating)
        named = [v for v in hidden if v not in set(rotating)]
        state = cls(
            default_state_path(origin, rotating, named),
            source=shown_location(origin, hidden),
            hidden=hidden,
        )
        if set(rotating) != set(hidden):
            # each release records the origin masked alike (``…/***/…`` for staging and
            # prod): found by that alone, staging's history was prod's
            names = {state.path.name, _state_name(origin)}
            in_query = bool(_in_query(origin, named))
            if not in_query:
                # named by the URL as shown (before 207a5e6): with the value in the query,
                # masked there, that name was every bundle's of this URL, as was the one
                # e02b297 gave it (the URL as shown, its rotating values masked)
                names.add(_state_name(shown_location(origin)))
            state._identity = (
                shown_location(origin, rotating),
                rotating,
                frozenset(names),
                not in_query,
            )
        return state

    def load(self) -> Enforced | None:
        """The release recorded there; None when no file exists; ``StateError`` otherwise."""
        try:
            # bounded, never waiting: a pipe nobody writes to or a device here is refused
            raw = _read_regular(self.path, limit=_STATE_LIMIT)
        except FileNotFoundError:
            return self._earlier() if self.source is not None else None
        except OSError as exc:
            raise StateError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            data: Any = json.loads(raw)
            enforced = Enforced(**_fields(data))
        except RecursionError:  # nested past the decoder's depth: not a state file either
            raise StateError(
                f"{self.path} is not a bundle state file (nested too deeply)"
            ) from None
        except (ValueError, TypeError) as exc:
            raise StateError(f"{self.path} is not a bundle state file ({exc})") from None
        if type(enforced.sequence) is not int or enforced.sequence < 0:
            raise StateError(f"{self.path} records a malformed sequence {enforced.sequence!r}")
        # every field is said in a message or compared with a bundle's: one of another
        # type (hand-edited, or written by something else) is refused here, with why
        for name in ("revision", "bundle_hash", "origin", "enforced_at"):
            if type(getattr(enforced, name)) is not str:
                raise StateError(
                    f"{self.path} records a malformed {name} {getattr(enforced, name)!r} (a string)"
                )
        for name in ("signed_by", "signed_at"):
            if getattr(enforced, name) is not None and type(getattr(enforced, name)) is not str:
                raise StateError(
                    f"{self.path} records a malformed {name} {getattr(enforced, name)!r} "
                    "(a string or null)"
                )
        return enforced

    def _earlier(self) -> Enforced | None:
        """The newest release the other state files beside ``path`` record for ``source``
        (files that cannot be read as state files are another's business: skipped)."""
        found = self._earlier_state()
        return found[1] if found is not None else None

    def _earlier_state(self) -> tuple[BundleState, Enforced] | None:
        """The state file beside ``path`` that ``_earlier`` reads, with what it records."""
        assert self.source is not None
        newest: tuple[BundleState, Enforced] | None = None
        with contextlib.suppress(OSError):
            for other in sorted(self.path.parent.glob("bundle-*.json")):
                if other.name.endswith(".last-good.json"):  # a kept bundle, not a state
                    continue
                try:
                    enforced = BundleState(other).load()
                except StateError:
                    continue
                if enforced is None or not of_source(enforced.origin, self.source, self.hidden):
                    continue
                if self._identity is not None:
                    named, rotating, names, clear = self._identity
                    # recorded in clear (a query value never is)
                    recorded = clear and of_source(enforced.origin, named, rotating)
                    if not recorded and other.name not in names:
                        continue  # another bundle's, masked alike (another DEPLOY_ENV)
                if newest is None or enforced.sequence > newest[1].sequence:
                    newest = BundleState(other), enforced
        return newest

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held while a release is compared with the one recorded and written down: the
        processes of one host (two ``sharedos run`` at once, a poller beside them) share
        the file, and one must not write an older release over a newer one another wrote
        after it read the file (``StateError`` when the lock cannot be taken). A process
        that cannot write the directory locks the file opened to read (``_take_lock``)."""
        lock_path = lock_path_of(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = _take_lock(lock_path)
        except TimeoutError:
            raise StateError(
                f"cannot lock {self.path}: another process holds {lock_path}"
            ) from None
        except OSError as exc:
            raise StateError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        try:
            # every writer of the state and its kept copy holds this lock: a temporary
            # file of either is a killed writer's (as large as the bundle), removed here
            # (not without the lock: a directory this process cannot write)
            if fd is not None:
                remove_strays(self.path)
                remove_strays(self.kept_path)
                remove_strays(self.pending_path)
            yield
        finally:
            if fd is not None:
                os.close(fd)  # and the lock with it

    @property
    def kept_path(self) -> Path:
        """Where the bytes of the last release enforced are kept (``bundle.json`` →
        ``bundle.last-good.json``, beside the state file)."""
        return self.path.with_name(f"{self.path.stem}.last-good{self.path.suffix or '.json'}")

    @property
    def pending_path(self) -> Path:
        """Where the bytes of a release wait while it is written down (``bundle.json`` →
        ``bundle.next.last-good.json``), until the state records it and they replace the
        kept copy."""
        return self.path.with_name(f"{self.path.stem}.next.last-good{self.path.suffix or '.json'}")

    def save(self, enforced: Enforced, data: bytes | None = None) -> None:
        """Record ``enforced`` durably (atomic replace, fsynced), and ``data``, the bundle's
        bytes as fetched (``kept``); ``StateError`` when either cannot be written.

        ``data`` is written first beside the copy (``pending_path``), then the state, then
        it replaces the copy: at every moment a copy of the release the state records is
        on disk, so a process killed between the writes leaves a host that can still start
        while its source fails (``kept_copies``), on the release the state records."""
        text = json.dumps(asdict(enforced), indent=1, sort_keys=True) + "\n"
        # the message names the file that could not be written (a directory put where the
        # bytes wait failed every save, said as the state file, which was a good one)
        writing = self.path
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if data is not None:
                writing = self.pending_path
                write_atomically(self.pending_path, data, mode=0o600, exact_mode=True, durable=True)
            writing = self.path
            write_atomically(self.path, text, mode=0o600, exact_mode=True, durable=True)
            if data is not None:
                writing = self.kept_path
                os.replace(self.pending_path, self.kept_path)
                fsync_directory(self.path.parent)
        except OSError as exc:
            raise StateError(f"cannot write {writing}: {exc.strerror or exc}") from None

    def kept(self) -> bytes | None:
        """The bytes of the last release enforced (None when none were kept, or they cannot
        be read: the caller verifies them as it would a fetched bundle, so nothing here is
        trusted)."""
        return _read_copy(self.kept_path)

    def settle(self, is_recorded: Callable[[bytes], bool], *, must: bool = True) -> str | None:
        """Finish what a writer killed midway left (bytes waiting at ``pending_path``), under
        ``locked()``, before anything else is written: ``is_recorded(data)`` says whether
        bytes are the release the state records (the caller verifies them).

        Bytes waiting that are that release while the kept copy is not (a writer killed
        after the state, before the copy) become the kept copy, as its save would have
        made them: the next save writes its own bytes where they wait, and that write (or
        a kill during it) destroyed the only copy of the release recorded. When the kept
        copy is that release, the waiting bytes are none the state records (a writer
        killed before the state; a file put there): removed, so one copy is left.
        ``StateError`` when the waiting bytes cannot be put in place and ``must`` (a save
        follows, which would write over them); otherwise they are left where a start finds
        them (a read-only directory). Returns what it did, in a line for the host's log
        (None: nothing): a file removed or moved there may have been put by someone else."""
        if not os.path.lexists(self.pending_path):
            return None
        kept = _read_copy(self.kept_path)
        if kept is not None and is_recorded(kept):
            try:
                # only a name is removed (a link, never what it leads to), never a directory
                os.unlink(self.pending_path)
            except OSError:  # a file left is only space
                return None
            return (
                f"sharedos: removed {self.pending_path}: not the release the state file "
                f"{self.path} records, whose copy is {self.kept_path} (a writer killed before "
                "the state, or a file put there)"
            )
        pending = _read_copy(self.pending_path)
        if pending is None or not is_recorded(pending):
            return None  # neither is: nothing here to keep
        try:
            os.replace(self.pending_path, self.kept_path)
            fsync_directory(self.path.parent)
        except OSError as exc:
            if must:
                raise StateError(f"cannot write {self.kept_path}: {exc.strerror or exc}") from None
            return None
        return (
            f"sharedos: moved {self.pending_path} to {self.kept_path}: the release the state "
            f"file {self.path} records, left there by a writer killed before its copy"
        )

    def kept_copies(self) -> list[bytes]:
        """Every copy a start may use, in order: the kept copy, then the bytes of a release
        whose writer was killed after the state recorded it and before they replaced the
        copy. The caller uses the one that is the release the state records.

        When ``path`` has no file and ``load`` reads the release an earlier SharedOS
        recorded under another name (``_earlier``), the copies beside that file are the
        ones of the release it records: before, a host upgraded across a change of the
        default name that started while its source failed found no copy under the new
        name, and ran with no policy, although the copy of the release it had recorded
        was on disk beside the record it read."""
        copies = [_read_copy(self.kept_path), _read_copy(self.pending_path)]
        if self.source is not None and not os.path.lexists(self.path):
            # after them: bytes waiting under the new name are a first save killed there
            found = self._earlier_state()
            if found is not None:
                copies += [_read_copy(found[0].kept_path), _read_copy(found[0].pending_path)]
        return [c for c in copies if c is not None]


def _take_lock(lock_path: Path) -> int | None:
    """``take_lock`` on a state's lock file; when this process cannot write the directory
    (mounted read-only, another user's), the lock file is opened to read (``flock`` needs
    no write access), and when there is none, None: no lock, as no process that could
    write there ever took one, and this one can write nothing there either, so it only
    reads the state and its copy (verified as ever). Before, the lock file could not be
    opened to write, and a host whose state directory is read-only refused the release
    the state records, from its source or its kept copy alike: no policy, nothing ran."""
    try:
        return take_lock(lock_path, wait_s=_LOCK_WAIT_S)
    except TimeoutError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        cannot_write = exc
    try:
        return take_lock(lock_path, wait_s=_LOCK_WAIT_S, read_only=True)
    except FileNotFoundError:
        if os.access(lock_path.parent, os.W_OK) and cannot_write.errno != errno.EROFS:
            raise cannot_write from None  # the directory is writable: a lock is needed
        return None


def _read_copy(path: Path) -> bytes | None:
    """A kept bundle's bytes (None when there are none, or they cannot be read)."""
    from sharedos.bundles.source import MAX_BUNDLE_BYTES

    try:
        return _read_regular(path, limit=MAX_BUNDLE_BYTES)
    except (OSError, ValueError):
        return None


def _read_regular(path: Path, *, limit: int) -> bytes:
    """``textfile.read_bytes`` of a file this module wrote: a regular file (a link
    followed to one), else ``UnreadableFile`` ("not a regular file"). Every file here is
    written as one, so anything else was put there: a named pipe whose write end is held
    open without a write was read for ever (a start, and every poll waiting on the
    state's lock behind it, hung)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise textfile.UnreadableFile(errno.EINVAL, kind, os.fspath(path))
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, min(max(st.st_size + 1, 1 << 16), limit + 1)):
            size += len(chunk)
            if size > limit:
                raise textfile.UnreadableFile(
                    errno.EFBIG, f"larger than {limit:,} bytes", os.fspath(path)
                )
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)

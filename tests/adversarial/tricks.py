"""The path-trick arena: a sandbox with planted secrets and planted links, and a corpus of paths.

``Arena`` builds a sandbox laid out like the shipped rules expect
(``/public``, ``/home/bob``, ``/shared``, ``/private``), plants a secret in
``/private`` and another outside the root, and plants tricks in the areas a
caller may touch: hard and symbolic links to the secrets, to ``/private`` and
out of the root, a link loop, a dangling link into ``/private``, a FIFO.
``corpus()`` is the deterministic list of path strings the quick mode drives
through the real kernel; ``TOKENS`` feed the generated paths of long mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.adversarial.planted import files_below, plant

#: the areas a caller may touch, by principal (rules/files.sos)
BOB_AREAS = ("/public/docs", "/home/bob")
CAROL_AREAS = ("/shared", "/public/docs")
#: the tricks planted in every area (name -> what it is)
TRICKS = (
    "hl_keys",  # hard link to /private/keys.txt
    "hl_out",  # hard link to a file outside the root
    "sl_keys",  # symbolic link to /private/keys.txt
    "sl_rel",  # relative symbolic link up to /private/keys.txt
    "sl_priv",  # symbolic link to /private
    "sl_out",  # symbolic link to a directory outside the root
    "sl_loop",  # a link to itself
    "sl_dangling",  # a link to a file that does not exist yet, in /private
    "fifo",  # a named pipe
    "hdir",  # a real directory holding a hard link to the secret
)


class Arena:
    """A sandbox root with planted secrets, planted tricks and a snapshot of what must not change."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "root"
        self.outside = base / "outside"
        self.secret = plant("private")
        self.outside_secret = plant("outside")
        #: text a caller may search for (half of the secret, never the whole)
        self.fragment = self.secret[: len(self.secret) // 2]
        for d in ("public/docs", "private/sub", "home/bob", "home/alice", "shared"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.outside.mkdir(parents=True, exist_ok=True)
        (self.root / "public" / "docs" / "readme.txt").write_text("public readme\n")
        (self.root / "home" / "bob" / "notes.txt").write_text("bob's notes\n")
        (self.root / "shared" / "plan.md").write_text("the plan\n")
        self.keys = self.root / "private" / "keys.txt"
        self.keys.write_text(f"keys: {self.secret}\n")
        (self.root / "private" / "sub" / "deep.txt").write_text(f"deep {self.secret}\n")
        (self.root / "home" / "alice" / "diary.txt").write_text(f"alice {self.secret}\n")
        self.outside_file = self.outside / "secret.txt"
        self.outside_file.write_text(f"outside {self.outside_secret}\n")
        self.plant()
        self.frozen = self.snapshot()

    @property
    def secrets(self) -> tuple[str, str]:
        """Both planted secret values."""
        return (self.secret, self.outside_secret)

    def plant(self) -> None:
        """(Re)create every trick in every area (idempotent: calls may have removed some)."""
        for area in {*BOB_AREAS, *CAROL_AREAS}:
            d = self.root / area.lstrip("/")
            up = os.path.relpath(self.keys, d)
            makers: dict[str, Callable[[Path], None]] = {
                "hl_keys": lambda p: os.link(self.keys, p),
                "hl_out": lambda p: os.link(self.outside_file, p),
                "sl_keys": lambda p: os.symlink(self.keys, p),
                "sl_rel": lambda p, up=up: os.symlink(up, p),  # type: ignore[misc]
                "sl_priv": lambda p: os.symlink(self.root / "private", p),
                "sl_out": lambda p: os.symlink(self.outside, p),
                "sl_loop": lambda p: os.symlink(p, p),
                "sl_dangling": lambda p: os.symlink(self.root / "private" / "created.txt", p),
                "fifo": lambda p: os.mkfifo(p),
                "hdir": _hdir(self.keys),
            }
            for name in TRICKS:
                p = d / name
                if not os.path.lexists(p):
                    makers[name](p)

    def snapshot(self) -> dict[str, str]:
        """What must stay byte-identical: everything under ``/private``, ``/home/alice`` and outside."""
        out: dict[str, str] = {}
        for top in (self.root / "private", self.root / "home" / "alice", self.outside):
            stack = [top]
            while stack:
                d = stack.pop()
                for e in sorted(os.scandir(d), key=lambda e: e.name):
                    p = Path(e.path)
                    rel = str(p.relative_to(self.base))
                    if e.is_symlink():
                        out[rel] = "link:" + os.readlink(p)
                    elif e.is_dir(follow_symlinks=False):
                        out[rel] = "dir"
                        stack.append(p)
                    elif e.is_file(follow_symlinks=False):
                        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
                    else:
                        out[rel] = "other"
        return out

    def files_containing(self, needle: str) -> list[str]:
        """Every regular file in the sandbox or outside it whose bytes hold ``needle``."""
        found = []
        for top in (self.root, self.outside):
            for p in files_below(top):
                if needle.encode() in p.read_bytes():
                    found.append(str(p.relative_to(self.root if top == self.root else self.base)))
        return found


def _hdir(keys: Path) -> Callable[[Path], None]:
    def make(p: Path) -> None:
        p.mkdir()
        os.link(keys, p / "keys.txt")

    return make


# -- the corpus ----------------------------------------------------------------------
DOTS = (
    "..",
    "%2e%2e",
    "%2E%2E",
    ".%2e",
    "%2e.",
    "%252e%252e",
    "%c0%ae%c0%ae",
    "%e0%80%ae%e0%80%ae",
    "\udcc0\udcae\udcc0\udcae",  # overlong UTF-8 of "..", as escaped bytes
    "\uff0e\uff0e",  # fullwidth full stops
    "\u2024\u2024",  # one-dot leaders
    "\u2025",  # two-dot leader
    "\u2026",  # ellipsis
    "\ufe52\ufe52",  # small full stops
    ".\u200b.",  # a zero-width space between
    "...",
    "....",
    ". .",
)
SLASHES = (
    "/",
    "%2f",
    "%2F",
    "%252f",
    "\\",
    "%5c",
    "\uff0f",  # fullwidth solidus
    "\u2215",  # division slash
    "\u2044",  # fraction slash
    "\u29f8",  # big solidus
    "%c0%af",
    "\udcc0\udcaf",  # overlong "/" as escaped bytes
    "\x00",
    "/\x00/",
    "%00",
    "//",
    "/./",
)


def corpus() -> list[str]:
    """The quick mode's path strings: links, traversal, encodings, look-alikes, odd lengths."""
    paths: list[str] = []
    for area in {*BOB_AREAS, *CAROL_AREAS}:
        for trick in TRICKS:
            base = f"{area}/{trick}"
            paths += [base, base + "/", base + "/.", base + "/keys.txt", base + "/secret.txt"]
            paths += [base + "/../keys.txt", base + "/..", f"{base}/sub/deep.txt"]
        paths += [f"{area}/hdir/keys.txt", f"{area}/sl_priv/sub/deep.txt"]
    # ".." in every position of a path from an allowed area to the secret
    for area in ("/public/docs", "/home/bob", "/shared"):
        segs = area.strip("/").split("/")
        for k in range(len(segs) + 3):  # too few, exactly enough, and too many climbs
            paths.append("/" + "/".join([*segs, *[".."] * k, "private", "keys.txt"]))
        for i in range(len(segs) + 1):
            back = [".."] * (len(segs) + 1)
            paths.append("/" + "/".join([*segs[:i], "..", *segs[i:], *back, "private", "keys.txt"]))
    target = ["private", "keys.txt"]
    for i in range(len(target) + 1):
        paths.append("/" + "/".join([*target[:i], "..", *target[i:]]))
        paths.append("/" + "/".join([*target[:i], ".", *target[i:]]))
        paths.append("/public/docs/" + "/".join([*target[:i], "..", "..", *target[i:]]))
    paths += ["..", "/..", "/.", ".", "", "/", "./private/keys.txt", "../private/keys.txt"]
    # encodings and look-alikes of ".." and "/"
    for dots in DOTS:
        for slash in SLASHES:
            paths.append(f"/public/docs{slash}{dots}{slash}{dots}{slash}private{slash}keys.txt")
        paths.append(f"/public/docs/{dots}/{dots}/private/keys.txt")
    for slash in SLASHES:
        paths.append(f"{slash}private{slash}keys.txt")
        paths.append(f"/home/bob{slash}sl_priv{slash}keys.txt")
    # NUL, backslashes, drive letters, UNC
    paths += [
        "/private/keys.txt\x00",
        "/public/docs/readme.txt\x00/../../../private/keys.txt",
        "/public\x00/../private/keys.txt",
        "/public\\..\\private\\keys.txt",
        "\\private\\keys.txt",
        "/public/docs\\..\\..\\private\\keys.txt",
        "C:\\private\\keys.txt",
        "C:/private/keys.txt",
        "//?/root/private/keys.txt",
        "\\\\?\\private\\keys.txt",
        "file:///private/keys.txt",
        "~/../private/keys.txt",
        "$HOME/../private/keys.txt",
    ]
    # trailing dots, slashes and spaces; case and Unicode look-alikes of "private"
    for name in ("/private/keys.txt", "/public/docs/sl_keys", "/home/bob/hl_keys"):
        paths += [
            name + s for s in ("/", ".", "..", "/.", "//", " ", "%20", ";", "?", "#", "::$DATA")
        ]
    paths += [
        "/private./keys.txt",
        "/private /keys.txt",
        "/private//keys.txt",
        "//private/keys.txt",
        "///private///keys.txt",
        "/PRIVATE/keys.txt",
        "/Private/keys.txt",
        "/pr\u0131vate/keys.txt",  # dotless i
        "/pr\u0456vate/keys.txt",  # Cyrillic i
        "/private\u0301/keys.txt",  # a combining accent
        "/pri\u200bvate/keys.txt",  # zero-width space
        "/\u202eetavirp/keys.txt",  # right-to-left override
        "/\uff50\uff52\uff49\uff56\uff41\uff54\uff45/keys.txt",  # fullwidth letters
        "/private\ufeff/keys.txt",
        "/public/docs/readme.txt\u0000",
        "/public/docs/\ud800",  # a lone surrogate
        "/public/docs/\udcff.txt",  # an escaped non-UTF-8 byte
    ]
    # very long names and paths
    paths += [
        "/home/bob/" + "a" * 255,
        "/home/bob/" + "a" * 256,
        "/home/bob/" + "a" * 5000,
        "/home/bob/" + "d/" * 2000 + "x",
        "/public/docs/" + "../" * 10000 + "private/keys.txt",
        "/" * 10000 + "private/keys.txt",
        "/public/docs/" + "./" * 20000 + "../../private/keys.txt",
        "/home/bob/" + "é" * 200,
        "/home/bob/" + "\U0001f600" * 100,
        "/public/" + "x" * 200_000,
    ]
    seen: dict[str, None] = {}
    for p in paths:
        seen.setdefault(p, None)
    return list(seen)


#: the pieces long mode composes paths from
TOKENS = (
    *DOTS,
    *SLASHES,
    ".",
    "",
    "private",
    "keys.txt",
    "public",
    "docs",
    "home",
    "bob",
    "alice",
    "shared",
    "sub",
    "deep.txt",
    *TRICKS,
    "a" * 300,
)


class Swapper:
    """A thread that keeps replacing ``<area>/swap`` with each trick in turn while calls run."""

    def __init__(self, arena: Arena, areas: tuple[str, ...]) -> None:
        self.arena = arena
        self.dirs = [arena.root / a.lstrip("/") for a in areas]
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _forms(self, d: Path) -> list[Callable[[Path], None]]:
        keys, priv = self.arena.keys, self.arena.root / "private"
        return [
            lambda p: os.symlink(keys, p),
            lambda p: os.link(keys, p),
            lambda p: p.write_text("an ordinary public file\n"),
            lambda p: os.symlink(priv, p),
            _hdir(keys),
            lambda p: os.symlink(self.arena.outside, p),
            lambda p: (p.mkdir(), (p / "keys.txt").write_text("decoy\n")),  # type: ignore[func-returns-value]
        ]

    def _run(self) -> None:
        while not self.stop.is_set():
            for d in self.dirs:
                for make in self._forms(d):
                    tmp, target, old = d / ".swap-new", d / "swap", d / ".swap-old"
                    with contextlib.suppress(OSError):
                        _remove(tmp)
                        make(tmp)
                        if target.is_dir() and not target.is_symlink():
                            os.rename(target, old)
                        os.rename(tmp, target)
                        self.swaps += 1
                    with contextlib.suppress(OSError):
                        _remove(old)

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        for child in p.iterdir():
            child.unlink()
        p.rmdir()
    elif os.path.lexists(p):
        p.unlink()


def calls_for(path: str, arena: Arena) -> Iterator[tuple[str, dict[str, object]]]:
    """Every files tool aimed at ``path``, with arguments that would leak if a trick worked."""
    yield "files.read", {"path": path}
    yield "files.write", {"path": path, "content": MARK}
    yield "files.list", {"path": path}
    yield "files.search", {"root": path, "pattern": "*", "text": arena.fragment}
    yield "files.delete", {"path": path}


#: what writes put in files (checked to land only where writes are allowed)
MARK = "WRITTEN-BY-THE-PATH-TRICK-CORPUS"

"""What a sandboxed process can see: an allow-list of host paths, each at its own path.

A ``SandboxView`` is plain data: the paths bound read-only, the paths bound
read-write, the managed paths masked, the symbolic links recreated so that a
path the caller uses (``.tools`` → ``~/.cache/sharedos/tools/…``) still
resolves, the private ``tmpfs`` directories, and the network mode with its
allowed loopback ports. Everything else of the host's filesystem is absent:
the sandbox's root is an empty ``tmpfs``.

``ViewBuilder`` assembles one and ``build(managed=...)`` checks it against the
managed roots (the ``files.*`` sandbox root, every brokered upstream's roots,
the evidence store and its ``-wal``/``-shm``, the host file, key files, the
policy sources or bundle): a managed root that a visible path contains is
masked when it exists, and the view is refused (``ManagedRootVisible``) when a
visible path lies inside a managed root, *is* one, or contains one that does
not exist yet (it would appear there once created), or one below a directory
the sandbox could rename (inside a read-write path: the mask moves with it and
the path is free to plant), or is a file (a file the host replaces by renaming
a new one over it loses its mask in the sandbox): only directories are masked.

``digest()`` is a SHA-256 over the canonical JSON of the sorted paths and the
network mode, with per-turn paths replaced by their placeholder (``{turn}``)
and the (ephemeral) port numbers left out, so two turns with the same view
have the same digest; ``describe()`` gives the full lists for diagnostics.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sharedos.canonical import tag as content_tag
from sharedos.errors import ConfinementError

#: ``none``: no network at all; ``loopback``: its own loopback, where only the allowed
#: ports of the host's loopback answer; ``host``: the host's network, unfiltered
NetworkMode = Literal["none", "loopback", "host"]

#: Entries of /etc a program may need (users, name service, TLS roots, dynamic linker,
#: time zone, shell start-up files); /etc as a whole is not visible (shadow, host configs).
ETC_ENTRIES: tuple[str, ...] = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "issue",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.gen",
    "localtime",
    "lsb-release",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "services",
    "ssl",
    "terminfo",
    "timezone",
)
#: /etc entries only a sandbox with the host's network gets (name resolution)
ETC_NETWORK_ENTRIES: tuple[str, ...] = ("resolv.conf",)
#: Directories inside the shown /etc entries that hold the host's secrets: each gets an empty
#: tmpfs of the sandbox's own. A sandbox runs as SharedOS's uid mapped, so under a root
#: SharedOS owner bits apply, and ``/etc/ssl/private`` (the host's TLS private keys,
#: ``root:ssl-cert`` 0710) was readable in every sandbox that was shown ``/etc/ssl``.
ETC_HIDDEN: tuple[str, ...] = ("ssl/private",)
#: Top-level system directories bound read-only (or recreated as the symlinks they are)
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class ManagedRootVisible(ConfinementError, ValueError):
    """A managed root would be visible or writable in a sandbox; ``str()`` names it and why."""


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _mount_of(path: str, readonly: Sequence[str], writable: Sequence[str]) -> str | None:
    """The bound path ``path`` lies in (the deepest one), or None: not on a host bind."""
    best: str | None = None
    for bound in (*readonly, *writable):
        if _is_under(path, bound) and (best is None or len(bound) > len(best)):
            best = bound
    return best


def _movable(path: str, readonly: Sequence[str], writable: Sequence[str]) -> str | None:
    """``path`` or the first directory above it that a sandboxed process could rename, or
    None: a plain directory (not a bind's own mount point) inside a read-write bind.

    A mask (a tmpfs or ``/dev/null`` mounted over a root) cannot be unlinked or
    renamed, and neither can a bind's own mount point; but a plain directory between
    them, inside a read-write bind, can: moved away (the mask moves with it), the
    path is free, and what the process creates there replaces the root on the host.
    """
    mounts = {*readonly, *writable}
    here = path
    while here != os.path.dirname(here):
        parent = os.path.dirname(here)
        if here not in mounts and _mount_of(parent, readonly, writable) in writable:
            return here
        here = parent
    return None


def _movable_ancestor(root: str, readonly: Sequence[str], writable: Sequence[str]) -> str | None:
    """A directory on the way to ``root`` that a sandboxed process could rename, or None."""
    return _movable(os.path.dirname(root), readonly, writable)


def _replaceable(path: str, readonly: Sequence[str], writable: Sequence[str]) -> bool:
    """True when a sandboxed process could remove, rename or replace ``path`` on the host."""
    return _movable(path, readonly, writable) is not None


def canonical(path: str | os.PathLike[str]) -> str:
    """The absolute path with every symbolic link resolved (need not exist)."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def symlink_chain(path: str) -> list[tuple[str, str]]:
    """Every (link, target) met while resolving ``path`` component by component."""
    links: list[tuple[str, str]] = []
    todo = [p for p in Path(os.path.abspath(path)).parts[1:]]
    cur = "/"
    hops = 0
    while todo:
        comp = todo.pop(0)
        if comp in ("", "."):
            continue
        if comp == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, comp)
        if os.path.islink(nxt):
            hops += 1
            if hops > 40:
                break
            target = os.readlink(nxt)
            links.append((nxt, target))
            parts = list(Path(target).parts)
            if os.path.isabs(target):
                cur, parts = "/", parts[1:]
            todo = parts + todo
        else:
            cur = nxt
    return links


@dataclass(frozen=True)
class SandboxView:
    """The filesystem and network a sandboxed process gets (see the module docstring)."""

    readonly: tuple[str, ...]
    writable: tuple[str, ...]
    masked: tuple[str, ...] = ()
    symlinks: tuple[tuple[str, str], ...] = ()
    tmpfs: tuple[str, ...] = ("/tmp",)
    network: NetworkMode = "none"
    ports: tuple[int, ...] = ()
    #: (host path, sandbox path): SharedOS's own helpers, bound read-only elsewhere
    helpers: tuple[tuple[str, str], ...] = ()
    #: (path prefix, placeholder) replaced in the digest: per-turn directories
    placeholders: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def visible(self) -> tuple[str, ...]:
        """Every host path bound into the sandbox (read-only or read-write), sorted."""
        return tuple(sorted({*self.readonly, *self.writable}))

    def shows(self, path: str) -> bool:
        """True when directory ``path`` exists in the sandbox: inside a bound path, or on
        the way to one (a private tmpfs is empty: only its own root counts)."""
        path = os.path.abspath(path)
        bound = [*self.readonly, *self.writable]
        if any(_is_under(path, p) for p in bound) or path in self.tmpfs:
            return True
        places = [*bound, *(link for link, _ in self.symlinks)]
        return any(_is_under(p, path) and p != path for p in places)

    def _stable(self, path: str) -> str:
        for prefix, label in self.placeholders:
            if _is_under(path, prefix):
                return label + path[len(prefix.rstrip("/")) :]
        return path

    def describe(self, *, stable: bool = False) -> dict[str, Any]:
        """JSON-ready lists (sorted); ``stable`` replaces per-turn paths and leaves ports out."""
        fix = self._stable if stable else (lambda p: p)
        out: dict[str, Any] = {
            "readonly": sorted({fix(p) for p in self.readonly}),
            "writable": sorted({fix(p) for p in self.writable}),
            "masked": sorted({fix(p) for p in self.masked}),
            "tmpfs": sorted({fix(p) for p in self.tmpfs}),
            "helpers": sorted({fix(dest) for _src, dest in self.helpers}),
            "network": self.network,
        }
        if not stable:
            out["ports"] = sorted(self.ports)
            out["symlinks"] = sorted([list(s) for s in self.symlinks])
        return out

    def digest(self) -> str:
        """``sha256:<hex>`` of the stable description (same view, same digest, turn after turn)."""
        text = json.dumps(self.describe(stable=True), sort_keys=True, separators=(",", ":"))
        return content_tag(text.encode())


class ViewBuilder:
    """Collects the paths of a view; ``build`` checks them against the managed roots."""

    def __init__(self) -> None:
        self._ro: dict[str, None] = {}
        self._rw: dict[str, None] = {}
        self._links: dict[str, str] = {}
        self._tmpfs: dict[str, None] = {"/tmp": None}
        self._placeholders: list[tuple[str, str]] = []

    def system(self, *, network: bool = False) -> ViewBuilder:
        """The system read-only: /usr and its companions, the selected /etc entries."""
        for top in SYSTEM_DIRS:
            if os.path.islink(top):
                self._links[top] = os.readlink(top)
            elif os.path.isdir(top):
                self._ro[canonical(top)] = None
        for name in (*ETC_ENTRIES, *(ETC_NETWORK_ENTRIES if network else ())):
            self.readonly(f"/etc/{name}", optional=True)
        for name in ETC_HIDDEN:
            hidden = canonical(f"/etc/{name}")
            if os.path.isdir(hidden) and any(_is_under(hidden, p) for p in self._ro):
                self._tmpfs[hidden] = None  # mounted after the bind that holds it (bwrap_argv)
        return self

    def readonly(self, path: str | os.PathLike[str], *, optional: bool = False) -> ViewBuilder:
        """Show ``path`` read-only at its own path (through its symlinks, if any)."""
        return self._add(self._ro, path, optional=optional)

    def writable(self, path: str | os.PathLike[str]) -> ViewBuilder:
        """Show ``path`` read-write at its own path."""
        return self._add(self._rw, path, optional=False)

    def placeholder(self, path: str | os.PathLike[str], label: str) -> ViewBuilder:
        """Name a per-turn directory in the digest by ``label`` instead of its path."""
        self._placeholders.append((canonical(path), label))
        return self

    def _add(
        self, into: dict[str, None], path: str | os.PathLike[str], *, optional: bool
    ) -> ViewBuilder:
        raw = os.path.abspath(os.fspath(path))
        if not os.path.lexists(raw):
            if optional:
                return self
            raise ManagedRootVisible(f"sandbox path {raw} does not exist")
        real = canonical(raw)
        if not os.path.exists(real):
            if optional:
                return self  # a dangling link: nothing to show
            raise ManagedRootVisible(f"sandbox path {raw} is a dangling link")
        into[real] = None
        for link, target in symlink_chain(raw):
            self._links.setdefault(link, target)
        return self

    def build(
        self,
        *,
        managed: Iterable[str | os.PathLike[str]] = (),
        network: NetworkMode = "none",
        ports: Sequence[int] = (),
        helpers: Sequence[tuple[str, str]] = (),
        never_writable: Iterable[str | os.PathLike[str]] = (),
        private: Iterable[str | os.PathLike[str]] = (),
        never_held: Iterable[str | os.PathLike[str]] = (),
    ) -> SandboxView:
        """The view, with managed roots masked; ``ManagedRootVisible`` when one cannot be hidden,
        or when a read-write path would hold or lie in one of ``never_writable`` (SharedOS's
        own installation: ``programs.sharedos_installation``), which may be shown read-only,
        or when a read-write path would hold one of ``never_held`` (the directories the host's
        Python imports from: ``programs.import_dirs``; a read-write path inside one is kept,
        as a files root inside one is).

        ``private`` directories hold other sandboxes' paths beside this one's own (the runs'
        base: every run's turn directory): one that a visible path holds gets an empty tmpfs
        of the sandbox's own over it, under which only the view's own paths are bound."""
        places = list(dict.fromkeys(canonical(p) for p in private))
        # a private directory shown read-only as a whole is shown as the private one (its
        # own tmpfs, this view's paths bound in it): a bind of that very path would cover
        # the tmpfs, and every other sandbox's directory in it with it
        shown_ro = [p for p in self._ro if p not in places]
        hidden = [p for p in self._ro if p in places]
        # a path inside another path of the same kind adds nothing to the view
        writable = [p for p in self._rw if not any(_is_under(p, o) and p != o for o in self._rw)]
        readonly = [
            p
            for p in shown_ro
            if p not in self._rw and not any(_is_under(p, o) and p != o for o in shown_ro)
        ]
        visible = [*readonly, *writable]
        # every path shown, however it came (a program's installation, a script argument,
        # a venv's home, a tools directory): one holding a directory where the host's
        # services make their sockets shows those sockets, and a read-only bind does not
        # stop a connect() (``sockets``)
        from sharedos.confine.sockets import socket_dirs  # it imports this module

        for held in socket_dirs():
            for seen in visible:
                if _is_under(held, seen):
                    raise ManagedRootVisible(
                        f"the sandbox would be shown {seen}, which holds {held}, where the "
                        "host's services make their Unix sockets (tmux, ssh-agent, D-Bus, "
                        "docker): a read-only bind does not stop a connect(), and the "
                        "sandbox runs as this user, so each would serve it as the host "
                        "user; show a narrower path (a program's own directory) instead"
                    )
        for kept in dict.fromkeys(canonical(k) for k in never_writable):
            for open_path in writable:
                if _is_under(kept, open_path) or _is_under(open_path, kept):
                    raise ManagedRootVisible(
                        f"SharedOS's own installation (or a program it runs: a harness CLI, an "
                        f"upstream's server, a repository an unconfined upstream runs git "
                        f"in: its work tree and its git directory, and git's global "
                        f"configuration, ~/.gitconfig) {kept} would "
                        "be writable in the sandbox "
                        f"(the view makes {open_path} read-write): a sandboxed process could change "
                        "the code the host runs next; declare that path read-only, confine "
                        "the upstream that runs it (give an unconfined mcp-server-git "
                        "--repository), or install SharedOS outside it"
                    )
        for kept in dict.fromkeys(canonical(k) for k in never_held):
            for open_path in writable:
                if _is_under(kept, open_path):
                    raise ManagedRootVisible(
                        f"{kept}, a directory the host's Python imports from (sys.path, "
                        f"PYTHONPATH, the user's site-packages) or an unconfined upstream "
                        f"loads code from (its env's PYTHONPATH or NODE_PATH, the cwd of "
                        f"python -m, its Python's user site-packages), would be writable in the "
                        f"sandbox (the view makes {open_path} read-write): a sandboxed process "
                        "could plant a sitecustomize.py, a .pth file or a module SharedOS "
                        "imports, run as the host at its next start; declare that path "
                        "read-only, or keep the import path outside it"
                    )
        masked: list[str] = []
        given = list(dict.fromkeys(os.path.abspath(os.fspath(m)) for m in managed))
        for path in given:
            # the host reaches a root given through a symbolic link by that link: one the
            # sandbox can replace would lead the host to a file of the sandbox's choosing
            for link, _target in symlink_chain(path):
                if _replaceable(link, readonly, writable):
                    raise ManagedRootVisible(
                        f"managed root {path} is reached through the symbolic link {link}, "
                        "which the sandbox could replace (it lies in a read-write path); "
                        "name the root by its real path or move the link out of that path"
                    )
        for root in dict.fromkeys(canonical(m) for m in given):
            for seen in visible:
                if _is_under(seen, root):
                    raise ManagedRootVisible(
                        f"managed root {root} would be visible in the sandbox: the view shows "
                        f"{seen}, which is {'that root' if seen == root else 'inside it'}"
                    )
                if _is_under(root, seen):
                    if not os.path.lexists(root):
                        raise ManagedRootVisible(
                            f"managed root {root} lies inside {seen}, which the sandbox shows, "
                            "and does not exist yet, so it cannot be masked (it would appear "
                            "there once created); move it out of that directory"
                        )
                    movable = _movable_ancestor(root, readonly, writable)
                    if movable is not None:
                        raise ManagedRootVisible(
                            f"managed root {root} lies inside {movable}, which the sandbox can "
                            f"rename: a mask covers a path, so moving {movable} away and "
                            "creating the path again would replace the root on the host; "
                            "move it out of the read-write path or declare that path read-only"
                        )
                    if not os.path.isdir(root):
                        rw = _mount_of(os.path.dirname(root), readonly, writable) in writable
                        raise ManagedRootVisible(
                            f"managed file {root} lies in {seen}, which the sandbox shows: "
                            "when the host replaces it (a new file renamed over it, as its "
                            "state, pins and host file are written) the mask comes off, and "
                            "the new file is the sandbox's to read"
                            + (" and rewrite" if rw else "")
                            + "; move it out of that path"
                        )
                    masked.append(root)
        tmpfs = dict(self._tmpfs)
        for place in places:
            if place in hidden or any(_is_under(place, seen) and place != seen for seen in visible):
                tmpfs[place] = None
        # a host service listening inside any shown path serves the sandbox as the host
        # user (the program's installation, found from its command, is no narrower than
        # an operator's path): the mount that shows it is the deepest one over it (a
        # tmpfs or a mask hides it; at one depth a bind is mounted after a tmpfs)
        from sharedos.confine.sockets import listening_sockets  # it imports this module

        covers = [
            *((p, False) for p in tmpfs),
            *((p, False) for p in masked),
            *((p, True) for p in visible),
        ]
        for sock in listening_sockets():
            over = [c for c in covers if _is_under(sock, c[0])]
            if over:
                top, shown = max(over, key=lambda c: (c[0].count("/") + (c[0] != "/"), c[1]))
                if shown:
                    raise ManagedRootVisible(
                        f"the sandbox would be shown {top}, which holds the Unix socket "
                        f"{sock} a host service listens on: a read-only bind does not stop "
                        "a connect(), and the sandbox runs as this user, so the service "
                        "would serve it as the host user; move the socket out of that "
                        "path, or show a narrower one"
                    )
        # A recreated symlink that lies inside a bound directory already exists there.
        links = {
            link: target
            for link, target in self._links.items()
            if not any(_is_under(link, v) for v in visible) or link in SYSTEM_DIRS
        }
        return SandboxView(
            readonly=tuple(sorted(readonly)),
            writable=tuple(sorted(writable)),
            masked=tuple(sorted(set(masked))),
            symlinks=tuple(sorted(links.items())),
            tmpfs=tuple(sorted(tmpfs)),
            network=network,
            ports=tuple(sorted(set(ports))),
            helpers=tuple(helpers),
            placeholders=tuple(self._placeholders),
        )

"""A brokered call's path resource, checked on this host's filesystem before it is forwarded.

The kernel decides on a canonical path *string*; the upstream then opens that
path on disk and follows whatever it finds there. server-filesystem resolves
symbolic links inside its allowed directories, and mcp-server-git opens a
repository through a ``.git`` pointer or borrowed objects: a link in a
directory the caller may use would carry the call to a file the decision
never saw (issue 22). So before a call whose requirement reads
``path(args.X)`` is forwarded, its canonical path is checked with the rules
the built-in files tools apply (``sharedos.pathwalk``, one implementation):

- no symbolic link as any existing component or as the object;
- a regular file has exactly one link (no hard link to a file elsewhere);
- no ``$NAME`` or ``${...}`` anywhere (GitPython expands environment variables in
  a repository path: ``/srv/git/team/$HOME`` opens ``/srv/git/team/root``);
- no FIFO, socket or device;
- a path that does not exist yet (a file to be created) has a link-free
  chain of existing parents;
- a directory that is a git repository (holds ``.git``, or is a git
  directory) reaches nothing through git's own indirections: ``.git`` is a
  real directory (not a link, not a ``gitdir:`` pointer of a worktree or
  submodule checkout), it is not a worktree's private directory
  (``commondir``), borrows no objects (``objects/info/alternates``), relocates
  no working tree (``core.worktree``), includes no other config, sets no config
  key outside a list known to be inert (git runs what ``core.fsmonitor``,
  ``diff.external``, filters and textconv drivers name, with the upstream's
  access), and holds no symbolic link anywhere inside;
- every checked-out submodule (a gitlink of the index whose directory holds
  ``.git``, which git status and diff enter) is a ``gitdir:`` pointer into
  ``.git/modules``, whose git directories are held to the same rules.

A refusal is a ``SandboxError`` whose code the forwarder reports as
``linked_resource``; the upstream receives nothing. What remains between this
check and the upstream's own open (a race) is in docs/upstreams.md, "Links".
"""

from __future__ import annotations

import os
import posixpath
import re
import stat

from sharedos.pathwalk import (
    CHANGED,
    NOT_A_DIRECTORY,
    NOT_A_REGULAR_FILE,
    NOT_FOUND,
    SYMLINK,
    Probe,
    Sandbox,
    SandboxError,
    explain,
    lstat_at,
)

#: codes of the git indirections (beside pathwalk's ``symlink``, ``hard_link`` ...)
GIT_POINTER = "git_pointer"
GIT_ALTERNATES = "git_alternates"
GIT_WORKTREE = "git_worktree"
GIT_TOO_LARGE = "git_too_large"
GIT_CONFIG = "git_config"
#: a path holding ``$NAME`` or ``${...}``: an upstream may expand it into a path never checked
EXPANDABLE = "expandable_path"
GIT_SUBMODULE = "git_submodule"
#: an HTTP upstream on another host with ``path_check`` unset: nothing can be checked here
UNCHECKED = "unchecked_host"
#: most entries of one git directory walked for links per call (a repository past it
#: is refused, not half-checked: ``git gc`` packs loose objects into a few files)
GIT_MAX_ENTRIES = 200_000
#: the largest git config read for ``core.worktree`` and includes
MAX_GIT_CONFIG_BYTES = 1024 * 1024
#: the largest index read for submodules (gitlinks); a larger one is refused, not skipped
MAX_GIT_INDEX_BYTES = 64 * 1024 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: what ``os.path.expandvars`` (GitPython's ``Repo(path)``) and shells expand: ``$`` before a
#: word character (any script, to err towards refusing) or ``{``
_VARIABLE = re.compile(r"\$[\w{]")
#: a config line that relocates the working tree or pulls in another file; matched
#: anywhere, whatever the section, so an unusual spelling errs towards refusing
_WORKTREE_KEY = re.compile(rb"(?im)^[ \t]*(?:\[[^\]\n]*\][ \t]*)?worktree[ \t]*(?:=|$)")
_INCLUDE_SECTION = re.compile(rb"(?im)^[ \t]*\[[ \t]*include(?:if)?\b")


def _name(name: str) -> str:
    """A file name as message text (undecodable bytes as ``\\xNN``)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _open_dir(dfd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except (OSError, ValueError) as exc:
        st = lstat_at(dfd, name, shown)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise SandboxError(SYMLINK, shown, "is a symbolic link") from None
        raise explain(exc, shown) from None


class LocalPaths:
    """Checks path resources on this host's filesystem (one per broker; no state but ``/``)."""

    def __init__(self) -> None:
        self._sandbox = Sandbox("/")

    def check(self, resource: str) -> str | None:
        """Return when ``resource`` leads straight to its object; else ``SandboxError``.

        Cheap checks only (a few ``openat``/``fstatat`` per component, and for a git
        repository its pointers, alternates and config). When ``resource`` is a git
        repository, the path of its git directory is returned: ``walk_git`` must
        still look through it for links (it can take a while; run it off the event
        loop). Only descriptors walked from ``/`` with ``O_NOFOLLOW`` are used, so
        every answer is about the object at the canonical path.
        """
        if _VARIABLE.search(resource):
            # GitPython expands $HOME in a repository path: git would open <path>/<home>,
            # which this walk never saw
            raise SandboxError(
                EXPANDABLE,
                resource,
                "holds an environment variable reference ($NAME or ${...}); an upstream may "
                "expand it (GitPython does, in a repository path) into a path that was never "
                "decided or checked",
            )
        with self._sandbox.probe(resource) as found:
            if found.kind == "directory":
                return _check_repository(found, resource)
        return None

    def walk_git(self, git_directory: str) -> None:
        """Refuse a symbolic link anywhere inside ``git_directory``, a submodule's git
        directory there that reaches elsewhere, and a checked-out submodule of the
        working tree whose ``.git`` is not one of them (``SandboxError``)."""
        with self._sandbox.probe(git_directory) as found:
            if found.kind != "directory":
                raise SandboxError(CHANGED, git_directory, "changed while the call was checked")
            _walk_for_links(found.fd, git_directory)
            if git_directory.endswith("/.git"):
                # git status and diff run git again in every checked-out submodule
                worktree = git_directory[: -len("/.git")] or "/"
                with self._sandbox.probe(worktree) as tree:
                    if tree.kind != "directory":
                        raise SandboxError(CHANGED, worktree, "changed while the call was checked")
                    _check_gitlinks(tree.fd, found.fd, git_directory)


def _check_repository(found: Probe, shown: str) -> str | None:
    """If the directory ``found`` is a git repository, refuse git's own indirections;
    return its git directory (still to be walked for links), or None."""
    base = "" if shown == "/" else shown
    dot_git = lstat_at(found.fd, ".git", f"{base}/.git")
    if dot_git is None:
        if _is_git_directory(found.fd, base):
            _check_git_directory(found.fd, shown)
            return shown
        return None
    where = f"{base}/.git"
    if stat.S_ISLNK(dot_git.st_mode):
        raise SandboxError(SYMLINK, where, "is a symbolic link to a git directory elsewhere")
    if stat.S_ISREG(dot_git.st_mode):
        raise SandboxError(
            GIT_POINTER,
            where,
            "is a 'gitdir:' pointer to a git directory elsewhere (a worktree or submodule "
            "checkout): git would read and write that repository",
        )
    if not stat.S_ISDIR(dot_git.st_mode):
        raise SandboxError(NOT_A_REGULAR_FILE, where, "is not a directory")
    gfd = _open_dir(found.fd, ".git", where)
    try:
        _check_git_directory(gfd, where)
    finally:
        os.close(gfd)
    return where


def _is_git_directory(dfd: int, base: str) -> bool:
    """True when the directory looks like a git directory itself (a bare repository)."""
    head = lstat_at(dfd, "HEAD", f"{base}/HEAD")
    objects = lstat_at(dfd, "objects", f"{base}/objects")
    refs = lstat_at(dfd, "refs", f"{base}/refs")
    return head is not None and objects is not None and refs is not None


def _check_git_directory(gfd: int, shown: str, *, module: bool = False) -> None:
    """Refuse a git directory that reaches another repository or holds a link
    (``module``: a submodule's, below ``.git/modules``)."""
    if lstat_at(gfd, "commondir", f"{shown}/commondir") is not None:
        raise SandboxError(
            GIT_POINTER,
            shown,
            "is a worktree's git directory: its objects and refs live in another repository "
            "(commondir)",
        )
    _check_alternates(gfd, shown)
    _check_config(gfd, shown, module=module)


def _check_alternates(gfd: int, shown: str) -> None:
    objects = lstat_at(gfd, "objects", f"{shown}/objects")
    if objects is None or not stat.S_ISDIR(objects.st_mode):
        return  # a link is refused by the walk; a missing store is git's problem
    ofd = _open_dir(gfd, "objects", f"{shown}/objects")
    try:
        info = lstat_at(ofd, "info", f"{shown}/objects/info")
        if info is None or not stat.S_ISDIR(info.st_mode):
            return
        ifd = _open_dir(ofd, "info", f"{shown}/objects/info")
        try:
            for name in ("alternates", "http-alternates"):
                if lstat_at(ifd, name, f"{shown}/objects/info/{name}") is not None:
                    raise SandboxError(
                        GIT_ALTERNATES,
                        shown,
                        f"borrows objects from another repository (objects/info/{name})",
                    )
        finally:
            os.close(ifd)
    finally:
        os.close(ofd)


def _check_config(gfd: int, shown: str, *, module: bool = False) -> None:
    """Refuse a config (``config``, ``config.worktree``) that makes git reach elsewhere:
    a relocated working tree, an included file, or any key not known to be inert
    (``_INERT_KEYS``): git runs the programs a config names (``core.fsmonitor`` on
    every status, ``diff.external`` on every diff, filters on add) with the
    upstream's access, not the caller's. ``module``: the git directory of a
    submodule, whose ``core.worktree`` points back at its checkout."""
    for name in ("config", "config.worktree"):
        where = f"{shown}/{name}"
        st = lstat_at(gfd, name, where)
        if st is None or not stat.S_ISREG(st.st_mode):
            continue  # a link is refused by the walk
        data = _read_config(gfd, name, where)
        if not module and _WORKTREE_KEY.search(data):
            raise SandboxError(
                GIT_WORKTREE,
                shown,
                f"relocates its working tree elsewhere (core.worktree in {name})",
            )
        if _INCLUDE_SECTION.search(data):
            raise SandboxError(
                GIT_WORKTREE,
                shown,
                f"includes another config file ([include] / [includeIf] in {name})",
            )
        key = _first_active_key(data, module=module)
        if key is not None:
            raise SandboxError(
                GIT_CONFIG,
                shown,
                f"sets {key} in {name}: SharedOS forwards only repositories whose config holds "
                "keys known to run no program and read no other file (git would obey it with "
                "the upstream's access)",
            )


#: config keys that run no program, read no other file and reach no other repository
#: (section, key) for sections without a subsection; everything else is refused
_INERT_KEYS = frozenset(
    {
        ("core", k)
        for k in (
            "repositoryformatversion",
            "filemode",
            "bare",
            "logallrefupdates",
            "ignorecase",
            "precomposeunicode",
            "symlinks",
            "autocrlf",
            "eol",
            "safecrlf",
            "quotepath",
            "checkstat",
            "trustctime",
            "abbrev",
            "compression",
            "loosecompression",
            "whitespace",
            "warnambiguousrefs",
            "sparsecheckout",
            "sparsecheckoutcone",
            "untrackedcache",
            "splitindex",
            "commitgraph",
            "multipackindex",
            "preloadindex",
        )
    }
    | {("user", "name"), ("user", "email"), ("init", "defaultbranch")}
    | {("status", "showuntrackedfiles"), ("diff", "algorithm"), ("diff", "renames")}
    | {("merge", "conflictstyle"), ("log", "date"), ("rerere", "enabled")}
    | {("i18n", "commitencoding"), ("i18n", "logoutputencoding")}
    | {("pull", "rebase"), ("pull", "ff"), ("push", "default"), ("fetch", "prune")}
    | {("index", "version"), ("extensions", "objectformat"), ("color", "ui")}
)
#: (section, key) allowed under any subsection (``[remote "origin"]``, ``[branch "main"]``)
_INERT_SUBSECTION_KEYS = frozenset(
    {("remote", k) for k in ("url", "fetch", "pushurl", "push", "tagopt", "prune", "mirror")}
    | {("branch", k) for k in ("remote", "merge", "rebase", "pushremote", "description")}
    | {("submodule", k) for k in ("url", "active")}
)
_SECTION_LINE = re.compile(
    rb'[ \t]*\[[ \t]*([A-Za-z0-9.-]+)(?:[ \t]+"((?:[^"\\\n]|\\.)*)")?[ \t]*\](.*)', re.DOTALL
)
_KEY_LINE = re.compile(rb"[ \t]*([A-Za-z][A-Za-z0-9-]*)[ \t]*(?:[=;#]|$)", re.DOTALL)
#: what a key or section is shown by in a refusal: git's own names are short words
_NAMEABLE = re.compile(r"[a-z]{1,24}")
_BLANK_LINE = re.compile(rb"[ \t]*(?:[;#].*)?", re.DOTALL)


def _first_active_key(data: bytes, *, module: bool) -> str | None:
    """The first key of a git config not in the inert lists, as text; None if all are.

    Conservative by construction: every physical line (split at CR as well as LF)
    is read on its own; a line after one ending in a backslash (git may continue a
    value onto it, in the section before it) and a line that is neither a section
    header, a key, a comment nor blank are refused (a false refusal at worst, never a
    key missed). A refusal names a key only when it looks like one of git's; a line
    by its number, never its text (a config line can hold a credential).
    """
    section: tuple[str, str | None] | None = None
    continued = False  # the line before ends with a backslash: git reads this one as a value
    for number, raw in enumerate(re.split(rb"\r\n|\r|\n", data), start=1):
        line, after_backslash, continued = raw, continued, raw.endswith(b"\\")
        if after_backslash:
            # git may read this line as the value before it continued, in the section
            # before it: neither its key nor a header on it can be read for sure here
            return f"a line a backslash may continue (line {number})"
        head = _SECTION_LINE.fullmatch(line)
        if head is not None:
            name = head.group(1).decode("ascii").lower()
            sub = head.group(2)
            if sub is not None:
                section = (name, sub.decode("utf-8", "backslashreplace"))
            elif "." in name:  # [section.subsection], the deprecated spelling
                first, _, rest = name.partition(".")
                section = (first, rest)
            else:
                section = (name, None)
            line = head.group(3)
        if _BLANK_LINE.fullmatch(line):
            continue
        key = _KEY_LINE.match(line)
        if key is None or section is None:
            # by number, never its text: a config line can hold a credential
            return f"a line git may read as a key (line {number})"
        name = key.group(1).decode("ascii").lower()
        kind, sub = section
        if sub is None and (kind, name) in _INERT_KEYS:
            continue
        if sub is not None and (kind, name) in _INERT_SUBSECTION_KEYS:
            continue
        if module and sub is None and (kind, name) == ("core", "worktree"):
            continue  # a submodule's git directory names its checkout
        if not (_NAMEABLE.fullmatch(kind) and _NAMEABLE.fullmatch(name)):
            return f"a key outside the inert list (line {number})"  # not git's: not shown
        return f"{kind}.{name}" if sub is None else f"{kind}.<subsection>.{name}"
    return None


def _read_config(gfd: int, name: str, where: str, limit: int = MAX_GIT_CONFIG_BYTES) -> bytes:
    try:
        # O_NOCTTY: a terminal swapped in since the type check must not become the host's
        # controlling terminal (a host without one would die of SIGHUP when it hangs up)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        fd = os.open(name, flags, dir_fd=gfd)
    except (OSError, ValueError) as exc:
        raise explain(exc, where) from None
    try:
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise explain(exc, where) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise SandboxError(GIT_TOO_LARGE, where, f"is larger than {limit} bytes; not checked")
    return data


def _walk_for_links(gfd: int, shown: str) -> None:
    """Refuse a symbolic link anywhere in the git directory (git follows them: a linked
    ``objects`` or pack is another repository's content), and a FIFO, socket or device
    (git opens its files by name: one would block every git call of the upstream). Hard links are allowed here:
    ``git clone --local`` shares object files by hard link, and an object's name is its
    content's hash."""
    seen = 0
    modules = f"{shown}/modules/"
    stack: list[tuple[int, str]] = [(os.dup(gfd), shown)]
    try:
        while stack:
            dfd, where = stack.pop()
            try:
                if where.startswith(modules) and _is_git_directory(dfd, where):
                    # a submodule's git directory: git obeys its config too
                    _check_git_directory(dfd, where, module=True)
                with os.scandir(dfd) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > GIT_MAX_ENTRIES:
                            raise SandboxError(
                                GIT_TOO_LARGE,
                                shown,
                                f"holds more than {GIT_MAX_ENTRIES} entries, too many to check "
                                "for links on every call (`git gc` packs loose objects)",
                            )
                        path = f"{where}/{_name(entry.name)}"
                        if entry.is_symlink():
                            raise SandboxError(SYMLINK, path, "is a symbolic link")
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((_open_dir(dfd, entry.name, path), path))
                        elif not entry.is_file(follow_symlinks=False):
                            # git opens config, HEAD, refs by name: a FIFO blocks it for
                            # good, and mcp-server-git runs one git call at a time
                            raise SandboxError(
                                NOT_A_REGULAR_FILE,
                                path,
                                "is not a regular file or a directory (a FIFO, socket or "
                                "device in a git directory would stall git)",
                            )
            except OSError as exc:
                raise explain(exc, where) from None
            finally:
                os.close(dfd)
    finally:
        for dfd, _ in stack:
            os.close(dfd)


def _check_gitlinks(wfd: int, gfd: int, gitdir: str) -> None:
    """Refuse a checked-out submodule (a gitlink of the index whose directory holds
    ``.git``) unless its ``.git`` is a ``gitdir:`` pointer into ``gitdir/modules``,
    which the walk has checked: git runs status and diff again inside it, under that
    git directory's config. An embedded repository (its own ``.git`` directory) is
    refused: its config and objects were never looked at."""
    base = gitdir[: -len("/.git")]
    for rel in _gitlinks(gfd, gitdir):
        shown = f"{base}/{_name(os.fsdecode(rel))}"
        fd = os.dup(wfd)
        try:
            for i, part in enumerate(rel.split(b"/")):
                step = f"{base}/{_name(os.fsdecode(b'/'.join(rel.split(b'/')[: i + 1])))}"
                try:
                    nxt = _open_dir(fd, os.fsdecode(part), step)
                except SandboxError as exc:
                    if exc.code in (NOT_FOUND, NOT_A_DIRECTORY):
                        break  # not checked out: git does not enter it
                    raise
                os.close(fd)
                fd = nxt
            else:
                _check_submodule(fd, shown, f"{gitdir}/modules/")
        finally:
            os.close(fd)


def _check_submodule(fd: int, shown: str, modules: str) -> None:
    where = f"{shown}/.git"
    st = lstat_at(fd, ".git", where)
    if st is None:
        return  # not checked out
    if not stat.S_ISREG(st.st_mode):
        raise SandboxError(
            GIT_SUBMODULE,
            where,
            "is the git directory of an embedded repository (not a submodule under "
            ".git/modules): git would run in it under a config and objects never checked",
        )
    text = _read_config(fd, ".git", where, 4096).decode("utf-8", "surrogateescape")
    target = text[len("gitdir:") :].strip() if text.startswith("gitdir:") else ""
    resolved = posixpath.normpath(posixpath.join(shown, target)) if target else ""
    if not (resolved + "/").startswith(modules) or resolved + "/" == modules:
        raise SandboxError(
            GIT_POINTER,
            where,
            "is a 'gitdir:' pointer outside the repository's .git/modules: git would run "
            "in that other repository",
        )


def _gitlinks(gfd: int, shown: str) -> list[bytes]:
    """The paths of the index's gitlinks (mode 160000), shared index included; an
    index that cannot be read is refused rather than skipped."""
    st = lstat_at(gfd, "index", f"{shown}/index")
    if st is None:
        return []
    if not stat.S_ISREG(st.st_mode):
        raise SandboxError(NOT_A_REGULAR_FILE, f"{shown}/index", "is not a regular file")
    config = lstat_at(gfd, "config", f"{shown}/config")
    sha256 = config is not None and stat.S_ISREG(config.st_mode)
    sha256 = sha256 and bool(_SHA256.search(_read_config(gfd, "config", f"{shown}/config")))
    size = 32 if sha256 else 20
    data = _read_config(gfd, "index", f"{shown}/index", MAX_GIT_INDEX_BYTES)
    links, shared = _parse_index(data, size, f"{shown}/index")
    if shared is not None:
        name = f"sharedindex.{shared}"
        more, _ = _parse_index(
            _read_config(gfd, name, f"{shown}/{name}", MAX_GIT_INDEX_BYTES),
            size,
            f"{shown}/{name}",
        )
        links += more
    return links


_SHA256 = re.compile(rb"(?im)^[ \t]*objectformat[ \t]*=[ \t]*\"?sha256")


def _parse_index(data: bytes, size: int, where: str) -> tuple[list[bytes], str | None]:
    """(gitlink paths, the shared index's hash or None) of a git index file."""

    def bad() -> SandboxError:
        return SandboxError(GIT_SUBMODULE, where, "cannot be read to find its submodules")

    if len(data) < 12 + size or data[:4] != b"DIRC":
        raise bad()
    version = int.from_bytes(data[4:8], "big")
    count = int.from_bytes(data[8:12], "big")
    if version not in (2, 3, 4):
        raise bad()
    links: list[bytes] = []
    pos, prev, end = 12, b"", len(data) - size
    try:
        for _ in range(count):
            mode = int.from_bytes(data[pos + 24 : pos + 28], "big")
            flags = int.from_bytes(data[pos + 40 + size : pos + 42 + size], "big")
            name_at = pos + 42 + size + (2 if flags & 0x4000 and version >= 3 else 0)
            if version == 4:
                strip, name_at = _varint(data, name_at)
                stop = data.index(b"\0", name_at, end)
                if strip > len(prev):
                    raise bad()
                path = prev[: len(prev) - strip] + data[name_at:stop]
                pos = stop + 1
            else:
                stop = data.index(b"\0", name_at, end)
                path = data[name_at:stop]
                pos += (name_at - pos + len(path) + 8) & ~7
            if pos > end:
                raise bad()
            prev = path
            if mode & 0xF000 == 0xE000:
                links.append(path)
        shared = None
        while pos + 8 <= end:
            length = int.from_bytes(data[pos + 4 : pos + 8], "big")
            if data[pos : pos + 4] == b"link" and length >= size:
                named = data[pos + 8 : pos + 8 + size].hex()
                shared = None if named.strip("0") == "" else named
            pos += 8 + length
    except (ValueError, IndexError):  # no NUL where a name must end, or cut short
        raise bad() from None
    return links, shared


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """git's offset varint (index v4): (value, position after it)."""
    c = data[pos]
    pos += 1
    value = c & 0x7F
    while c & 0x80:
        c = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (c & 0x7F)
    return value, pos

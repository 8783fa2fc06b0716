"""What a program needs to see to run: its installation, found from the program itself.

``program_paths("mcp-server-git", path_env)`` → the read-only paths a sandbox
must show for that program to start: the program as it is called (so its
symbolic links are recreated), its installation root — a virtualenv (the
directory holding ``pyvenv.cfg``, plus the Python it was made from), the
``node_modules`` directory an npm package lives in, the prefix of a
``PREFIX/bin/program``, or else the program's own directory (never a home
directory, the temporary directory or ``/``: there the program's own
directory, or its file alone) — and, through its ``#!`` line, the same for
its interpreter. Paths under ``/usr`` are left out: the system view already
shows them.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from sharedos.confine.sockets import socket_dirs
from sharedos.confine.view import canonical

_SYSTEM = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/")


def _is_system(path: str) -> bool:
    return any(path.startswith(p) for p in _SYSTEM)


def _venv_home(root: Path) -> str | None:
    try:
        for line in (root / "pyvenv.cfg").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                return canonical(Path(value.strip()).parent)
    except OSError:
        return None
    return None


def install_root(real: str) -> list[str]:
    """The installation a (resolved) program file belongs to, as paths to show."""
    path = Path(real)
    for parent in path.parents:
        if (parent / "pyvenv.cfg").is_file():
            home = _venv_home(parent)
            return [str(parent), *([home] if home else [])]
        if parent.name == "node_modules":
            top = parent
            for above in parent.parents:  # the outermost node_modules of a nested install
                if above.name == "node_modules":
                    top = above
            return [str(top)]
    # a prefix installation (``PREFIX/bin/prog`` with its ``PREFIX/lib``): the prefix;
    # else the program's own directory; never a home, the temporary directory or ``/``
    # (``~/bin/prog``, ``~/server.py``): the program's directory, or the file alone
    prefix = path.parent.parent if path.parent.name == "bin" else path.parent
    for candidate in (prefix, path.parent):
        if not too_wide(str(candidate)):
            return [str(candidate)]
    return [str(path)]


def too_wide(directory: str) -> bool:
    """True for a directory no installation is shown as: ``/``, one holding the user's
    home or a directory where the host's services make their Unix sockets (the temporary
    directory, ``/run``, ``/dev/shm``, ``$XDG_RUNTIME_DIR``: ``sockets.socket_dirs``), or
    a home directory (``/root``, ``/home/NAME``).

    A socket directory shown read-only still serves its sockets (``connect`` needs no
    write access): ``python $XDG_RUNTIME_DIR/tap.py`` or ``/dev/shm/bin/prog`` showed the
    whole directory, the session's D-Bus and gpg-agent with it, as the program's own."""
    real = canonical(directory)
    held = (canonical(Path.home()), *socket_dirs(), "/root")
    if any(h == real or h.startswith(real.rstrip("/") + "/") for h in held):
        return True
    return os.path.dirname(real) == "/home"


_CHECKOUT = Path(__file__).resolve().parents[2]


def tools_dir() -> Path:
    """``node_modules`` of the pinned npm tools (may not exist; ``harness.paths``)."""
    override = os.environ.get("SHAREDOS_TOOLS_DIR")
    if override:
        return Path(override)
    return _CHECKOUT / ".tools" / "node_modules"


def dsh_dir() -> Path:
    """The venv holding ``deepseek-harness-runtime-bin`` (may not exist; ``harness.paths``)."""
    override = os.environ.get("SHAREDOS_DSH_DIR")
    if override:
        return Path(override)
    return _CHECKOUT / ".dsh"


#: the packages SharedOS runs on: where each was imported from is code the host runs
_OWN_DEPENDENCIES = (
    "mcp",
    "pydantic",
    "pydantic_core",
    "lark",
    "click",
    "cachetools",
    "anyio",
    "starlette",
    "httpx",
    "jsonschema",
    "re2",
    "psycopg",
    "cryptography",
)


def sharedos_installation() -> tuple[str, ...]:
    """The directories whose files the host runs as SharedOS: what no sandbox may write.

    The directory the ``sharedos`` package was imported from (an editable
    install's whole checkout), the Python environment (``sys.prefix``, the
    interpreter it was made from), the directory of each dependency
    SharedOS has imported, and the pinned harness CLIs (``tools_dir``,
    ``dsh_dir``: the host runs ``CLI --version`` itself, unconfined). A sandbox may see them read-only (an upstream run
    by the same virtualenv must); one that could write them could change the
    code of the kernel that decides its calls at the host's next start.
    """
    import sharedos

    package = Path(sharedos.__file__).resolve().parent
    roots = [str(package.parent), sys.prefix, sys.exec_prefix, sys.base_prefix]
    # the pinned harness CLIs, where their links lead: the host runs them itself, outside
    # any sandbox (``CLI --version`` before every turn, strict runs included)
    roots += [str(tools_dir()), str(dsh_dir())]
    for name in _OWN_DEPENDENCIES:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) if module is not None else None
        if where:  # the directory it was imported from (site-packages)
            top = Path(where).resolve().parent
            roots.append(str(top.parent if hasattr(module, "__path__") else top))
    return tuple(dict.fromkeys(canonical(r) for r in roots if r))


def import_dirs() -> tuple[str, ...]:
    """The directories the host's Python imports code from beyond SharedOS's installation:
    every ``sys.path`` entry (``PYTHONPATH``'s included; ``""`` is the working directory)
    and, when the interpreter reads it, the user's site-packages (made or not yet).

    What is written there runs as the host at its next start: a ``sitecustomize.py``,
    a ``.pth`` file of a site directory, or a module named like one SharedOS imports
    later. No files root may hold them (``tools.files.root_holds_code``); a root inside
    one is served, since a file written there is only importable under the root's own
    name."""
    import site

    dirs = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return tuple(dict.fromkeys(dirs))


#: a Python interpreter by its name: ``python``, ``python3``, ``python3.12``, ``pypy3``
_PYTHON = re.compile(r"^(python|pypy)[0-9.]*$")
#: Python options that take a value as the next word (``-W ignore``, ``-X dev``)
_PYTHON_VALUED = ("-W", "-X", "-Q")


def _python_runs_in_cwd(args: Iterable[str], environ: Mapping[str, str]) -> bool:
    """True when ``python ARGS`` puts its working directory first on ``sys.path``: ``-m``
    and ``-c`` (a script puts its own directory there, ``program_paths``), unless ``-I``,
    ``-P`` or ``PYTHONSAFEPATH`` make the path safe."""
    if environ.get("PYTHONSAFEPATH"):
        return False
    words = iter(args)
    for word in words:
        if word in _PYTHON_VALUED:
            next(words, None)
            continue
        if word == "-" or not word.startswith("-") or word == "--":
            return word == "-"  # a script (its own directory), or stdin (the cwd)
        if word.startswith("--"):
            continue  # ``--check-hash-based-pycs always`` and the like: no ``-m`` there
        flags = word[1:]
        for flag in flags:
            if flag in "IP":
                return False
            if flag in "mc":
                return True
            if flag in "WXQ":  # ``-Wignore``: the rest of the word is its value
                break
    return False


def _python_flags(args: Iterable[str]) -> set[str]:
    """The one-letter options a Python interpreter is given before its module, command or
    script (``-u -W ignore -sm server`` → ``u``, ``W``, ``s``, ``m``)."""
    flags: set[str] = set()
    words = iter(args)
    for word in words:
        if word in _PYTHON_VALUED:
            flags.add(word[1])
            next(words, None)
            continue
        if not word.startswith("-") or word in ("-", "--"):
            break
        if word.startswith("--"):
            continue
        for flag in word[1:]:
            flags.add(flag)
            if flag in "WXQmc":  # the rest of the word is its value
                break
        if flags & {"m", "c"}:
            break
    return flags


def upstream_import_dirs(
    command: str, args: Iterable[str], environ: Mapping[str, str], cwd: str | None
) -> list[str]:
    """Where a stdio upstream started as ``command args`` with ``environ``
    (``upstream_environ``) in ``cwd`` (None: the host's working directory, where the SDK
    starts it) loads code from by name, beyond its program's own files (``code_paths``):
    the ``PYTHONPATH``, ``NODE_PATH`` and ``LD_LIBRARY_PATH`` directories its ``env``
    names, the files its ``NODE_OPTIONS`` preload (``--require``/``-r``/``--import``/
    ``--loader PATH``), its ``LD_PRELOAD`` libraries and its ``BASH_ENV`` (which bash
    sources before running any script: a ``bash -c``, a ``#!/bin/bash`` server), and
    for a Python interpreter run with ``-m`` or ``-c`` its working directory, first on
    its ``sys.path``, and for one outside a virtualenv its user site-packages
    (``_user_site``).

    An unconfined upstream's are as much code the host runs as its program: under a
    files root holding the host's working directory, a permitted ``files.write`` of
    ``/mcp_server_git/__main__.py`` was the server ``python -m mcp_server_git`` ran
    next, as the host. Like the host's own ``import_dirs``, a root holding one is
    refused and a root inside one is served: a file written there is importable only
    under the root's own name."""
    args = list(args)
    found: list[str] = []
    for name in ("PYTHONPATH", "NODE_PATH", "LD_LIBRARY_PATH"):
        entries = (environ.get(name) or "").split(os.pathsep) if environ.get(name) else []
        # an empty entry (``/opt/lib:``, ``:/opt/lib``) is the working directory to Python
        # and the dynamic loader (node skips it)
        found += [e or os.curdir for e in entries if e or name != "NODE_PATH"]
    # the dynamic loader's preloads (``:`` or blank between them) and bash's start file:
    # loaded into the upstream's every process, its interpreter's included
    found += [e for e in re.split(r"[:\s]+", environ.get("LD_PRELOAD") or "") if "/" in e]
    if environ.get("BASH_ENV"):
        found.append(environ["BASH_ENV"])
    options = (environ.get("NODE_OPTIONS") or "").split()
    for i, word in enumerate(options):
        flag, eq, value = word.partition("=")
        if flag in ("--require", "-r", "--import", "--loader", "--experimental-loader"):
            value = value if eq else (options[i + 1] if i + 1 < len(options) else "")
            # a file; a bare specifier (``dotenv/config``) names a package in node_modules
            if value.startswith(("/", "./", "../", "file://")):
                found.append(value.removeprefix("file://"))
    if _PYTHON.match(os.path.basename(command)) and _python_runs_in_cwd(args, environ):
        found.append(cwd or os.getcwd())
    if _runs_project(command, args):
        found.append(cwd or os.getcwd())
    site = _user_site(command, args, environ)
    if site is not None:
        found.append(site)
    base = cwd or os.getcwd()
    return list(dict.fromkeys(os.path.abspath(os.path.join(base, p)) for p in found))


#: package runners that read the project they run in: its config and its own packages
_PROJECT_RUNNERS = ("npx", "npm", "pnpm", "pnpx", "yarn", "bunx", "bun", "uv")


def _runs_project(command: str, args: Iterable[str]) -> bool:
    """True when ``command args`` is a package runner that reads the project of its working
    directory, or of the nearest directory above holding one: npm's (``npx``, ``npm
    exec``) and pnpm's ``.npmrc`` (``node-options=--require FILE`` runs FILE in the server
    started) and a package its ``node_modules`` holds (run instead of the one named),
    yarn's ``.yarnrc.yml`` (``yarnPath``: the yarn that runs), bun's ``bunfig.toml``
    (``preload``), uv's ``pyproject.toml``/``uv.toml`` and ``.venv`` for ``uv run`` (not
    ``uv tool run``/``uvx``, which read only the user's configuration).

    Under a files root holding the host's working directory, where the SDK starts an
    upstream declaring no ``cwd``, a ``files.write`` of ``/.npmrc`` and of the file it
    preloads ran as the host at the next start of an unconfined ``npx -y SERVER``."""
    name = os.path.basename(command)
    if name not in _PROJECT_RUNNERS:
        return False
    words = [w for w in args if not w.startswith("-")]
    return not (name == "uv" and words[:1] == ["tool"])


def _user_site(command: str, args: Iterable[str], environ: Mapping[str, str]) -> str | None:
    """The user site-packages the Python that ``command args`` runs reads at start, or None:
    ``command`` a Python interpreter, or a program whose ``#!`` line names one (a console
    script, ``#!/usr/bin/python3``), which is no virtualenv's (one made without system
    site packages reads none) and is not told to skip it (``-s``, ``-I``,
    ``PYTHONNOUSERSITE``). ``$PYTHONUSERBASE`` (else ``~/.local``) ``/lib/pythonX.Y/
    site-packages``, X.Y from the interpreter's real name; ``…/lib`` when it names none.

    Its ``.pth`` files run at every start: under a files root holding the home, a
    permitted ``files.write`` of ``/.local/lib/python3.11/site-packages/x.pth`` ran as the
    host at the next start of an unconfined ``/usr/bin/python3 server.py``."""
    path_env = environ.get("PATH")
    found = shutil.which(command, path=path_env) if "/" not in command else command
    if found is None or not os.path.isfile(found):
        return None
    words = [*args]
    if not _PYTHON.match(os.path.basename(found)):
        shebang = _shebang(canonical(found))
        if not shebang:
            return None
        if os.path.basename(shebang[0]) == "env" and len(shebang) > 1:
            shebang = [w for w in shebang[1:] if not w.startswith("-") or w in ("-s", "-I")]
        if not shebang or not _PYTHON.match(os.path.basename(shebang[0])):
            return None
        found = shebang[0] if "/" in shebang[0] else shutil.which(shebang[0], path=path_env)
        words = shebang[1:]
        if found is None or not os.path.isfile(found):
            return None
    if environ.get("PYTHONNOUSERSITE"):
        return None
    if {"s", "I"} & _python_flags(words):
        return None
    cfg = Path(os.path.abspath(found)).parent.parent / "pyvenv.cfg"
    try:
        venv = cfg.read_text(encoding="utf-8", errors="replace")
    except OSError:
        venv = None
    if venv is not None and not re.search(
        r"^\s*include-system-site-packages\s*=\s*true\s*$", venv, re.I | re.M
    ):
        return None
    home = environ.get("HOME") or str(Path.home())
    base = environ.get("PYTHONUSERBASE") or os.path.join(home, ".local")
    version = re.search(r"([0-9]+\.[0-9]+)$", os.path.basename(canonical(found)))
    lib = os.path.join(base, "lib")
    if version is None:
        return os.path.abspath(lib)
    return os.path.abspath(os.path.join(lib, f"python{version.group(1)}", "site-packages"))


def git_dirs(
    paths: Iterable[str], cwd: str | None = None, *, work_trees: bool = False
) -> list[str]:
    """The git directories of the repositories ``paths`` lie in (each resolved against
    ``cwd``; a ``--flag=PATH`` word by its value; paths that are no existing directory
    are skipped): ``.git`` of the enclosing work tree, or a bare repository itself; with
    ``work_trees`` the enclosing work tree as well.

    A work tree is as much code as its ``.git``: git pointed anywhere in it (mcp-server-git
    takes any ``repo_path`` inside its ``--repository``) enters the innermost repository
    there, so a ``SUB/.git/config`` made inside the work tree set the ``core.fsmonitor``
    that git ran.

    A program the host runs unconfined that runs git there (``mcp-server-git
    --repository REPO``) runs what that directory says as the host: ``core.fsmonitor``,
    ``core.hooksPath`` and the ``hooks`` are code, so they are code no sandbox and no
    files root may write (``cli.run.host_programs``)."""
    found: list[str] = []
    for word in paths:
        for candidate in dict.fromkeys((word, word.partition("=")[2])):
            if not candidate or candidate.startswith("-"):
                continue
            where = Path(cwd or os.getcwd(), candidate)
            if not where.is_dir():
                continue
            for directory in (where.resolve(), *where.resolve().parents):
                if (directory / ".git").exists():
                    found += [str(directory)] if work_trees else []
                    found += _git_dir_and_common(directory / ".git")
                    break
                if (directory / "HEAD").is_file() and (
                    (directory / "objects").is_dir() or (directory / "commondir").is_file()
                ):
                    found += _git_dir_and_common(directory)  # a bare repository, a git dir
                    break
    return list(dict.fromkeys(found))


#: a word naming git or a git server: ``git``, ``mcp-server-git``, ``mcp_server_git``,
#: ``@cyanheads/git-mcp-server`` (``git`` as a whole word of the name; not ``github``)
_GIT_WORD = re.compile(r"(?<![a-z0-9])git(?![a-z0-9])", re.IGNORECASE)

#: the environment variables naming the repository git works on, whatever its cwd
GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR")


def runs_git(command: str, args: Iterable[str], environ: Mapping[str, str]) -> bool:
    """True when an upstream started as ``command args`` with ``environ`` runs git: its
    program or one of its words (``uvx mcp-server-git``, ``python -m mcp_server_git``,
    ``npx @cyanheads/git-mcp-server``) names git, or its environment names a repository
    (``GIT_DIR``, ``GIT_WORK_TREE``: how an operator declares a server that runs git under
    another name). Only then are the repositories of its arguments and its working
    directory code the host runs (``git_dirs``): ``server-filesystem /srv/project``
    never reads ``/srv/project/.git/hooks``."""
    if any(environ.get(k) for k in GIT_ENV):
        return True
    for word in (command, *args):
        value = word.partition("=")[2] if word.startswith("-") else word
        if _GIT_WORD.search(os.path.basename(value.rstrip("/"))):
            return True
    return False


def git_config_files(environ: Mapping[str, str], commands: list[str] | None = None) -> list[str]:
    """The configuration files git reads wherever it runs, besides a repository's own
    (made or not yet), for a program started with ``environ`` (``upstream_environ``: the
    host's ``HOME``, the upstream's own ``env``): ``$GIT_CONFIG_GLOBAL``, or else both
    ``$XDG_CONFIG_HOME/git/config`` (``~/.config/git/config``) and ``~/.gitconfig``, and
    ``$GIT_CONFIG_SYSTEM`` when it is set (``/etc/gitconfig`` lies in the system view),
    with what each of these and ``/etc/gitconfig`` include, the ``core.hooksPath`` and
    the programs they name by path (``_git_config_names``).

    Git runs what they name as it runs a repository's ``.git/config`` (``core.fsmonitor``
    on every status, ``core.hooksPath``, a filter driver), in every repository: under a
    files root holding the home, a permitted ``files.write`` of ``/.gitconfig`` made an
    unconfined mcp-server-git's next ``git_status`` run what the model wrote, as the host,
    though its ``--repository`` lay outside the root. The check before forwarding
    (``upstream.localpaths``) holds a repository's config to inert keys and leaves these
    to the operator, who puts an LFS filter there: they are the operator's, never a root's.

    ``commands``, when given, gets the programs they name by a bare name (``diff.external
    = difft``, ``git-lfs filter-process``), found on the ``PATH`` (``git_commands``).
    """
    home = Path(environ.get("HOME") or Path.home())
    found: list[str | Path] = []
    if environ.get("GIT_CONFIG_GLOBAL"):
        found.append(environ["GIT_CONFIG_GLOBAL"])
    else:
        xdg = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        found += [xdg / "git" / "config", home / ".gitconfig"]
    if environ.get("GIT_CONFIG_SYSTEM"):
        found.append(environ["GIT_CONFIG_SYSTEM"])
    read = [os.path.abspath(p) for p in found]
    if not environ.get("GIT_CONFIG_NOSYSTEM") and not environ.get("GIT_CONFIG_SYSTEM"):
        read.append("/etc/gitconfig")  # in the system view itself; what it names may not be
    named: list[str] = []
    seen: dict[str, int] = {}  # shared: ~/.gitconfig and ~/.config/git/config may include one file
    for config in read:
        named += _git_config_names(config, str(home), seen=seen, commands=commands)
    return list(dict.fromkeys([*(os.path.abspath(p) for p in found), *named]))


#: a section header, ``[include]``, ``[includeIf "gitdir:~/work/"]``, ``[core]``, and the
#: rest of its line (git reads a key there too)
_GIT_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"(?:[^"\\]|\\.)*")?\s*\](.*)$')
_GIT_KEY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=(.*))?$")

#: the keys (``section.key``, a subsection dropped: ``diff.NAME.textconv`` is
#: ``diff.textconv``) whose value is a program git runs, or a shell command whose first
#: word is one: on a status (``core.fsmonitor``), a diff (``diff.external``, a diff
#: driver's ``command`` and ``textconv``), an add or a checkout (a filter driver), a
#: merge, a commit (``core.editor``, ``gpg.program``), a fetch or push (``core.sshCommand``,
#: ``credential.helper``, ``core.askPass``, ``core.gitProxy``). ``core.pager`` is not one:
#: git pages only on a terminal, and an upstream has none.
_GIT_PROGRAM_KEYS = frozenset(
    {
        "core.fsmonitor",
        "core.sshcommand",
        "core.editor",
        "core.askpass",
        "core.gitproxy",
        "sequence.editor",
        "diff.external",
        "diff.command",
        "diff.textconv",
        "filter.clean",
        "filter.smudge",
        "filter.process",
        "merge.driver",
        "credential.helper",
        "gpg.program",
        "uploadpack.packobjectshook",
    }
)


def _git_config_value(raw: str) -> str:
    """A git configuration value as git reads it: quotes joined, ``\\`` escapes taken,
    a ``#``/``;`` comment outside quotes cut, the unquoted ends trimmed."""
    out: list[str] = []
    quoted = False
    chars = iter(raw.strip())
    for ch in chars:
        if ch == '"':
            quoted = not quoted
        elif ch == "\\":
            nxt = next(chars, "")
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt))
        elif ch in "#;" and not quoted:
            break
        else:
            out.append(ch)
    return "".join(out).strip()


def _git_config_names(
    config: str,
    home: str,
    depth: int = 0,
    seen: dict[str, int] | None = None,
    commands: list[str] | None = None,
) -> list[str]:
    """The files and directories a git configuration file makes git read or run, made or
    not yet: the files its ``include.path`` and ``includeIf.<cond>.path`` include (every
    one, whatever its condition: a ``gitdir:`` one holds wherever the upstream runs git;
    ``~/`` from ``home``, a relative one from the including file's directory; a missing
    one is skipped by git without a word, so it may be made later), and theirs in turn
    (git's own depth, 10), and its ``core.hooksPath`` (``~/`` or absolute: a relative one
    lies in the work tree, kept already), the hooks git and GitPython run on a commit or
    a checkout, and the program each key git runs names by path (``_GIT_PROGRAM_KEYS``:
    ``core.fsmonitor = ~/bin/fsmon`` ran on every ``git_status``, and a files root over
    ``~/bin`` let a ``files.write`` of ``fsmon`` be that program).

    An included file is read as the one including it: ``[include] path =
    ~/dotfiles/gitconfig`` and ``[includeIf "gitdir:~/work/"] path = ~/work/.gitconfig``
    are what many homes hold, and under a files root over ``~/dotfiles`` or ``~/work``
    a permitted ``files.write`` of the included file set the ``core.fsmonitor`` that an
    unconfined mcp-server-git's next ``git_status`` ran as the host.

    Each file is read once (``seen``: the shallowest depth it was read at; read again
    only from nearer the top, where more of what it includes is within git's depth):
    every include is followed whatever its condition, so a cycle git never takes (``path
    = ~/.gitconfig`` under an ``includeIf`` that does not hold) or a file included from
    several places was read once per path to it, up to ten deep: three such lines held
    each look 18 s (``sharedos run`` looks three times at its start), four minutes."""
    seen = {} if seen is None else seen
    if seen.get(config, depth + 1) <= depth:
        return []
    seen[config] = depth
    try:
        text = Path(config).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found: list[str] = []
    section = ""
    for line in text.splitlines():
        header = _GIT_SECTION.match(line)
        if header:
            section, line = header.group(1).lower(), header.group(2)
        key = _GIT_KEY.match(line)
        if key is None or key.group(2) is None:
            continue
        name = f"{section}.{key.group(1).lower()}"
        if name in _GIT_PROGRAM_KEYS:
            value = _git_config_value(key.group(2))
            program = _git_program(value, home)
            if name == "credential.helper" and not value.startswith("!"):
                # ``store``: ``git credential-store``, from git's own exec path
                program = program if os.path.isabs(program) else ""
            if os.path.isabs(program):
                found.append(program)
            elif program and "/" not in program and commands is not None:
                commands.append(program)  # looked up on the PATH: ``git_commands``
            continue
        if name not in ("include.path", "includeif.path", "core.hookspath"):
            continue
        value = _git_config_value(key.group(2))
        if value.startswith("~/"):
            value = os.path.join(home, value[2:])
        elif not os.path.isabs(value):
            if name == "core.hookspath" or not value:
                continue  # relative to the work tree git runs in: kept as the repository
            value = os.path.join(os.path.dirname(config), value)
        value = os.path.abspath(value)
        found.append(value)
        if name != "core.hookspath" and depth < 10:
            found += _git_config_names(value, home, depth + 1, seen, commands)
    return found


def _git_program(command: str, home: str) -> str:
    """The program file a git configuration value runs, when it names one by path: the
    first word of the command (``!`` taken off a ``credential.helper``'s), ``~/`` or
    ``$HOME/`` from ``home`` (the shell git runs it with expands them so), or absolute. A bare name (``difft``,
    ``git-lfs filter-process``), found on the ``PATH``, is returned as it is; ``true``
    and ``false``, an ``fsmonitor`` switch, are no program (``""``)."""
    try:
        words = shlex.split(command.removeprefix("!").strip())
    except ValueError:
        words = command.removeprefix("!").split()
    if not words or words[0].lower() in ("true", "false", "yes", "no", "on", "off"):
        return ""
    program = words[0]
    for prefix in ("~/", "$HOME/", "${HOME}/"):  # the shell expands each to the home
        if program.startswith(prefix):
            program = os.path.join(home, program.removeprefix(prefix))
    return os.path.abspath(program) if os.path.isabs(program) else program


def git_commands(environ: Mapping[str, str]) -> list[str]:
    """The programs a git upstream started with ``environ`` runs by a bare name, looked up
    on its ``PATH``: ``git`` itself (GitPython, mcp-server-git's, runs the first on the
    ``PATH``) and those git's global configuration names so (``diff.external = difft``,
    run on every diff; ``filter.lfs.process = git-lfs filter-process``).

    One installed in the home (``~/.local/bin/git``, ``~/.cargo/bin/difft``) lay in a
    files root over ``~/.local`` or ``~/.cargo``, and a ``files.write`` replacing it
    (a replaced file keeps its mode) was what the unconfined upstream ran next, as the
    host: they are its programs (``code_paths``, with the ``PATH`` directories before
    them)."""
    commands: list[str] = []
    git_config_files(environ, commands)
    return list(dict.fromkeys(["git", *commands]))


#: mcp-server-git, whose ``--repository``/``-r`` fences the ``repo_path`` of its calls
_GIT_SERVER = re.compile(r"mcp[-_]server[-_]git", re.IGNORECASE)


def unfenced_git_server(command: str, args: Iterable[str]) -> bool:
    """True for mcp-server-git started without ``--repository``/``-r``: it runs git in
    whatever ``repo_path`` a call names, anywhere on the host, so any directory a write
    can reach may be made the repository whose ``core.fsmonitor`` its ``git_status``
    runs. Its reach is the whole file system (``cli.run.host_trees`` keeps ``/``)."""
    words = [command, *args]
    if not any(_GIT_SERVER.search(os.path.basename(w)) for w in words):
        return False
    return not any(
        w in ("--repository", "-r") or w.startswith(("--repository=", "-r")) for w in args
    )


def _git_dir_and_common(dot_git: Path) -> list[str]:
    """``dot_git`` and the directories git reads through it: the directory a ``.git`` file
    points to (``gitdir: PATH``: a worktree's ``MAIN/.git/worktrees/NAME``, a submodule's
    ``SUPER/.git/modules/NAME``) and the common directory that one names (``commondir``:
    the main repository's ``.git``, whose ``config`` and ``hooks`` a worktree's git runs).
    """
    out = [str(dot_git)]
    git_dir = dot_git
    if dot_git.is_file():
        try:
            line = dot_git.read_text(encoding="utf-8", errors="replace").splitlines()[0]
        except (OSError, IndexError):
            return out
        key, _, value = line.partition(":")
        if key.strip() != "gitdir" or not value.strip():
            return out
        git_dir = (dot_git.parent / value.strip()).resolve()
        out.append(str(git_dir))
    try:
        common = (git_dir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        common = ""
    if common:
        out.append(str((git_dir / common).resolve()))
    return out


def runner_dirs(program: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """Where a package runner named by ``program`` keeps the packages it runs (made or
    not yet): ``npx``/``npm exec`` the npm cache (``$npm_config_cache``, ``~/.npm``;
    ``_npx`` holds each package installed, run from there again), ``pnpm dlx`` pnpm's cache
    and store, ``yarn dlx`` yarn's global folder and cache, ``uvx``/``uv`` its cache
    and tool directories, ``pipx`` its home, ``bunx`` bun's install cache; and the
    runner's user configuration (``~/.npmrc``, whose ``node-options`` preloads a file into
    the server it starts; ``~/.yarnrc.yml``; uv's ``uv.toml``; ``.bunfig.toml``). ``environ`` is
    the program's own environment (``upstream_environ``), not the host's.

    The runner installs the server once and runs the installed files at every later
    start without checking them: a file written there (a permitted ``files.write`` under
    a files root holding the home) was the server the host ran next, unconfined
    (``cli.run.host_programs``). Other programs: none."""
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    data = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share")
    name = os.path.basename(program)
    found: list[str | Path] = []
    if name in ("npx", "npm", "pnpm", "pnpx", "yarn"):
        found.append(env.get("npm_config_cache") or env.get("NPM_CONFIG_CACHE") or home / ".npm")
        # the user's npmrc: ``node-options``, ``cache``, ``prefix`` set what runs and where
        found.append(
            env.get("npm_config_userconfig") or env.get("NPM_CONFIG_USERCONFIG") or home / ".npmrc"
        )
    if name in ("pnpm", "pnpx"):  # ``pnpm dlx``: its cache's ``dlx``, linked from its store
        found.append(env.get("npm_config_cache_dir") or cache / "pnpm")
        found.append(env.get("npm_config_store_dir") or env.get("PNPM_HOME") or data / "pnpm")
    if name == "yarn":  # ``yarn dlx``: the global cache of the archives it unpacks
        found.append(env.get("YARN_GLOBAL_FOLDER") or home / ".yarn" / "berry")
        found.append(env.get("YARN_CACHE_FOLDER") or cache / "yarn")
        found.append(home / ".yarnrc.yml")  # ``yarnPath``: the yarn that runs
    if name in ("uvx", "uv"):
        found.append(env.get("UV_CACHE_DIR") or cache / "uv")
        found.append(env.get("UV_TOOL_DIR") or data / "uv" / "tools")
        # its user configuration (``cache-dir``, the index its packages come from)
        config = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
        found.append(env.get("UV_CONFIG_FILE") or config / "uv" / "uv.toml")
    if name == "pipx":
        found += [env.get("PIPX_HOME") or data / "pipx", home / ".local" / "pipx"]
    if name in ("bunx", "bun"):  # bun's own order: its cache dir, BUN_INSTALL, XDG, HOME
        bun = env.get("BUN_INSTALL") or Path(env.get("XDG_CACHE_HOME") or home) / ".bun"
        found.append(env.get("BUN_INSTALL_CACHE_DIR") or Path(bun) / "install" / "cache")
        # its global bunfig (``preload``: scripts run before the package)
        found.append(Path(env.get("XDG_CONFIG_HOME") or home) / ".bunfig.toml")
    return list(dict.fromkeys(os.path.abspath(p) for p in found))


def upstream_environ(env: Mapping[str, str]) -> dict[str, str]:
    """The environment a stdio upstream runs with: what the MCP SDK passes on of the
    host's (``HOME``, ``PATH``, …) and the upstream's own ``env``. The host's other
    variables (``XDG_CACHE_HOME``, ``npm_config_cache``) never reach it."""
    from mcp.client.stdio import get_default_environment

    return {**get_default_environment(), **env}


def _shebang(real: str) -> list[str]:
    try:
        with open(real, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line.split()


def program_paths(program: str, path_env: str | None = None, *, _depth: int = 0) -> list[str]:
    """Read-only paths a sandbox shows so that ``program`` can run (see the module docstring)."""
    found = shutil.which(program, path=path_env) if "/" not in program else program
    if found is None or not os.path.exists(found):
        return []
    found = os.path.abspath(found)
    real = canonical(found)
    out: list[str] = []
    if not _is_system(found):
        out.append(found)
    # both the path as called (a virtualenv's ``bin/python`` is a link to the base
    # interpreter: the venv, with its packages, is what it runs in) and the real file
    for where in dict.fromkeys((found, real)):
        if not _is_system(where):
            out.extend(p for p in install_root(where) if not _is_system(p))
    if _depth < 3:
        words = _shebang(real)
        if words:
            interpreter = words[0]
            if os.path.basename(interpreter) == "env" and len(words) > 1:
                interpreter = words[1] if not words[1].startswith("-") else words[-1]
            out.extend(program_paths(interpreter, path_env, _depth=_depth + 1))
    return list(dict.fromkeys(out))


def searched_dirs(program: str, path_env: str | None = None, *, _depth: int = 0) -> list[str]:
    """The ``PATH`` directories a program named by a bare name is looked up in: every one
    up to and including the one it is found in (all of them when it is not found), and
    the same for an interpreter its ``#!`` line names by a bare name (``env node``).

    A program planted in one of them under that name is what the host (``CLI
    --version``) or a sandbox (``execvp``) finds and runs next: ``~/.local/bin``, first
    on many ``PATH``s, lies in an upstream's ``rw`` root over the home. So they are as
    unwritable as the program itself (``code_paths``)."""
    out: list[str] = []
    if "/" not in program:
        for entry in (path_env if path_env is not None else os.defpath).split(os.pathsep):
            where = os.path.abspath(entry or ".")
            out.append(where)
            candidate = os.path.join(where, program)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                break
    found = shutil.which(program, path=path_env) if "/" not in program else program
    if _depth < 3 and found is not None and os.path.exists(found):
        words = _shebang(canonical(found))
        if words and os.path.basename(words[0]) == "env" and len(words) > 1:
            interpreter = words[1] if not words[1].startswith("-") else words[-1]
            out += searched_dirs(interpreter, path_env, _depth=_depth + 1)
    return list(dict.fromkeys(out))


def code_paths(program: str, path_env: str | None = None) -> list[str]:
    """What no sandbox may write for ``program`` to stay the program the host means:
    its ``program_paths`` and, for a bare name, the ``PATH`` directories it is looked
    up in (``searched_dirs``)."""
    return list(
        dict.fromkeys([*program_paths(program, path_env), *searched_dirs(program, path_env)])
    )

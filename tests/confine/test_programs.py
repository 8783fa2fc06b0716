"""``confine.programs.git_dirs`` through ``cli.run.host_trees``: the git directories an
unconfined upstream's git reads, wherever git finds them.

A worktree's or a submodule's ``.git`` is a file (``gitdir: PATH``) naming a directory
elsewhere, and a worktree's git reads the main repository's ``config`` and ``hooks``
(its ``commondir``); ``GIT_DIR`` in the upstream's environment names the repository
whatever its arguments. Each was left writable by a files root (a root over the main
repository, or inside ``.git/modules``): a permitted ``files.write`` of a hook or of
``core.fsmonitor`` ran as the host at the git server's next call.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.cli.run import host_programs, host_trees
from sharedos.confine.programs import git_config_files
from sharedos.harness.hostconfig import parse_host_config
from sharedos.tools.files import root_holds_code


def _git(*args: str) -> None:
    subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args], check=True, capture_output=True
    )


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    _git("init", "-q", str(path))
    _git(
        "-C",
        str(path),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "first",
    )
    return path


def _host(
    tmp_path: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    module: str = "mcp_server_git",
) -> object:
    """A host file with one unconfined upstream: ``python -m MODULE ARGS`` (a git server
    unless ``module`` says otherwise)."""
    argv = ["-m", module, *args]
    text = f"[upstream.git]\ncommand = {sys.executable!r}\nargs = {argv!r}\n"
    if env:
        text += "[upstream.git.env]\n" + "".join(f"{k} = {v!r}\n" for k, v in env.items())
    return parse_host_config(text, str(tmp_path / "host.toml"))


def _refused(root: Path, trees: tuple[str, ...]) -> str | None:
    return root_holds_code(root, (), inside=trees)


def test_a_worktree_git_upstream_keeps_the_main_repositorys_git_directory(
    tmp_path: Path,
) -> None:
    main = _repo(tmp_path / "main")
    worktree = tmp_path / "elsewhere" / "wt"
    _git("-C", str(main), "worktree", "add", "-q", str(worktree))
    trees = host_trees(None, _host(tmp_path, ["--repository", str(worktree)]))
    assert str(main / ".git") in trees, trees
    problem = _refused(main, trees)
    assert problem is not None and str(main / ".git") in problem
    # another project with its own .git, beside both: served
    assert _refused(_repo(tmp_path / "project"), trees) is None


def test_a_submodule_git_upstream_keeps_its_git_directory_under_modules(
    tmp_path: Path,
) -> None:
    sub = _repo(tmp_path / "sub")
    sup = _repo(tmp_path / "super")
    _git(
        "-C",
        str(sup),
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        str(sub),
        "dep",
    )
    trees = host_trees(None, _host(tmp_path, ["--repository", str(sup / "dep")]))
    modules = sup / ".git" / "modules" / "dep"
    assert str(modules) in trees, trees
    problem = _refused(modules / "hooks", trees)
    assert problem is not None and "lies inside" in problem


def test_a_git_dir_named_by_the_upstreams_environment_is_kept(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    trees = host_trees(None, _host(tmp_path, [], {"GIT_DIR": str(repo / ".git")}))
    assert str(repo / ".git") in trees, trees
    assert _refused(repo, trees) is not None


def test_a_runner_cache_named_by_the_upstreams_environment_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upstream runs with the SDK's few inherited variables and its own ``env``: its
    ``UV_CACHE_DIR`` is where ``uvx`` runs the server from, and the host's
    ``XDG_CACHE_HOME`` never reaches it (its cache is ``~/.cache/uv``)."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "hostcache"))
    host = parse_host_config(
        '[upstream.git]\ncommand = "uvx"\nargs = ["mcp-server-git", "-r", "/srv/git/x"]\n'
        f"[upstream.git.env]\nUV_TOOL_DIR = {str(tmp_path / 'srv' / 'tools')!r}\n",
        str(tmp_path / "host.toml"),
    )
    trees = host_trees(None, host)
    assert str(home / ".cache" / "uv") in trees, trees
    assert str(tmp_path / "srv" / "tools") in trees, trees
    problem = _refused(tmp_path / "srv", trees)
    assert problem is not None and str(tmp_path / "srv" / "tools") in problem


@pytest.mark.parametrize(
    ("runner", "installs"),
    [
        ("pnpm", (".cache/pnpm", ".local/share/pnpm")),  # pnpm dlx: cache/dlx, the store
        ("yarn", (".yarn/berry",)),  # yarn dlx: the global archive cache
    ],
)
def test_pnpm_and_yarn_dlx_installs_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: str, installs: tuple[str, ...]
) -> None:
    """``pnpm dlx server`` runs the server from pnpm's cache (``dlx``), linked from its
    store; ``yarn dlx`` unpacks the archives of its global cache: code the host runs next,
    as ``~/.npm/_npx`` is for ``npx``. Only ``~/.npm`` was kept."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    host = parse_host_config(
        f'[upstream.srv]\ncommand = "{runner}"\nargs = ["dlx", "some-mcp-server"]\n',
        str(tmp_path / "host.toml"),
    )
    trees = host_trees(None, host)
    for where in installs:
        assert str(home / where) in trees, trees
        problem = _refused(home / where / "dlx", trees)
        assert problem is not None and "lies inside" in problem


def test_a_server_that_runs_no_git_leaves_its_repository_to_the_files_root(
    tmp_path: Path,
) -> None:
    """An unconfined file server (or any upstream not running git) given ``/srv/project``
    never runs git there: its ``.git`` is no code the host runs, and a files root over the
    project (or a monorepo's root, the server given a package of it) is served. Every
    existing-directory argument had its repository kept, and such an ordinary root was
    refused with no way out but moving ``.git``."""
    project = _repo(tmp_path / "srv" / "project")
    (project / "packages" / "api").mkdir(parents=True)
    for args in ([str(project)], [str(project / "packages" / "api")]):
        trees = host_trees(None, _host(tmp_path, args, module="mcp_server_filesystem"))
        assert str(project / ".git") not in trees, trees
        assert _refused(project, trees) is None
        assert _refused(tmp_path / "srv", trees) is None
    # the same arguments to a git server, or a server declaring its repository: kept
    for host in (
        _host(tmp_path, [str(project / "packages" / "api")]),
        _host(tmp_path, [], {"GIT_WORK_TREE": str(project)}, module="custom_server"),
    ):
        assert _refused(project, host_trees(None, host)) is not None


def test_a_git_upstreams_whole_work_tree_is_kept(tmp_path: Path) -> None:
    """mcp-server-git ``--repository REPO`` takes any ``repo_path`` inside REPO, and git
    there enters the innermost repository: a files root over ``REPO/src`` (beside
    ``REPO/.git``, so served) let a ``files.write`` make ``REPO/src/x/.git/config`` with a
    ``core.fsmonitor``, which the real server's ``git_status`` ran as the host."""
    repo = _repo(tmp_path / "repo")
    (repo / "src").mkdir()
    trees = host_trees(None, _host(tmp_path, ["--repository", str(repo)]))
    problem = _refused(repo / "src", trees)
    assert problem is not None and "lies inside" in problem and str(repo) in problem
    assert "confine that upstream" in problem
    # a project beside it is served
    assert _refused(_repo(tmp_path / "project"), trees) is None


def test_a_git_upstream_naming_no_repository_runs_git_in_the_hosts_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git upstream with no repository argument and no ``cwd`` is started in the host's
    working directory, and runs git there: with ``sharedos run`` started inside a
    checkout, that repository was kept by nothing, and a files root over it served."""
    repo = _repo(tmp_path / "checkout")
    (repo / "work").mkdir()
    monkeypatch.chdir(repo / "work")
    trees = host_trees(None, _host(tmp_path, [], module="git_tools"))
    assert str(repo / ".git") in trees, trees
    assert _refused(repo, trees) is not None
    # a declared cwd elsewhere is where it runs instead
    other = tmp_path / "elsewhere"
    other.mkdir()
    host = parse_host_config(
        f"[upstream.git]\ncommand = {sys.executable!r}\n"
        f"args = ['-m', 'git_tools']\ncwd = {str(other)!r}\n",
        str(tmp_path / "host.toml"),
    )
    assert _refused(repo, host_trees(None, host)) is None


@pytest.mark.parametrize(
    ("env", "cache"),
    [
        ({"BUN_INSTALL": "/opt/bun"}, "/opt/bun/install/cache"),
        ({"XDG_CACHE_HOME": "/var/cache/u"}, "/var/cache/u/.bun/install/cache"),
        ({"BUN_INSTALL_CACHE_DIR": "/srv/bc", "BUN_INSTALL": "/opt/bun"}, "/srv/bc"),
        ({}, "HOME/.bun/install/cache"),
    ],
)
def test_bunx_installs_are_where_bun_puts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], cache: str
) -> None:
    """bun looks for its install cache at ``$BUN_INSTALL_CACHE_DIR``, else
    ``$BUN_INSTALL/install/cache``, else ``$XDG_CACHE_HOME/.bun/install/cache``, else
    ``~/.bun/install/cache``: an upstream's ``BUN_INSTALL`` (the installer's own setting)
    moved the cache ``bunx`` runs the server from where no check looked."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    text = '[upstream.srv]\ncommand = "bunx"\nargs = ["some-mcp-server"]\n'
    if env:
        text += "[upstream.srv.env]\n" + "".join(f"{k} = {v!r}\n" for k, v in env.items())
    trees = host_trees(None, parse_host_config(text, str(tmp_path / "host.toml")))
    assert cache.replace("HOME", str(home)) in trees, trees


def test_mcp_server_git_without_repository_reaches_every_files_root(tmp_path: Path) -> None:
    """mcp-server-git started without ``--repository`` runs git in any ``repo_path`` a
    call names: a files root anywhere let a ``files.write`` make ``ROOT/x/.git/config``
    with a ``core.fsmonitor`` that its ``git_status`` ran as the host. No files root is
    served beside it; the refusal says how to fence it or confine it."""
    root = tmp_path / "sandbox"
    root.mkdir()
    trees = host_trees(None, _host(tmp_path, []))
    problem = _refused(root, trees)
    assert problem is not None and "--repository" in problem and "confine" in problem
    # fenced (``-r`` too), it reaches only its repository
    repo = _repo(tmp_path / "repo")
    for args in (["--repository", str(repo)], ["-r", str(repo)], [f"--repository={repo}"]):
        assert _refused(root, host_trees(None, _host(tmp_path, args))) is None


def test_gits_global_configuration_is_kept_beside_a_git_upstream_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Git reads ``~/.gitconfig`` and ``~/.config/git/config`` in every repository (or the
    ``GIT_CONFIG_GLOBAL`` the upstream's ``env`` names, and its ``GIT_CONFIG_SYSTEM``):
    their ``core.fsmonitor`` runs as a repository's own does. A server that runs no git
    never reads them, and leaves the home to a files root."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    repo = _repo(tmp_path / "repo")
    trees = host_trees(None, _host(tmp_path, ["--repository", str(repo)]))
    assert str(home / ".gitconfig") in trees and str(home / ".config/git/config") in trees
    assert _refused(home, trees) is not None
    assert _refused(home / ".config", trees) is not None
    named = {"GIT_CONFIG_GLOBAL": str(tmp_path / "g"), "GIT_CONFIG_SYSTEM": str(tmp_path / "s")}
    trees = host_trees(None, _host(tmp_path, ["--repository", str(repo)], named))
    assert str(tmp_path / "g") in trees and str(tmp_path / "s") in trees, trees
    assert str(home / ".gitconfig") not in trees
    assert _refused(home, trees) is None
    other = host_trees(None, _host(tmp_path, [str(home)], module="some_server"))
    assert not any(p.startswith(str(home)) for p in other), other


@pytest.mark.parametrize(
    ("command", "args", "env", "in_cwd"),
    [
        ("python3", ["-m", "server"], {}, True),
        ("/usr/bin/python3.12", ["-u", "-W", "ignore", "-m", "server"], {}, True),
        ("python", ["-um", "server"], {}, True),
        ("python3", ["-c", "import server"], {}, True),
        ("python3", ["-I", "-m", "server"], {}, False),  # isolated: no cwd on the path
        ("python3", ["-P", "-m", "server"], {}, False),
        ("python3", ["-m", "server"], {"PYTHONSAFEPATH": "1"}, False),
        ("python3", ["/srv/app/server.py"], {}, False),  # its own directory: code_paths
        ("node", ["-m"], {}, False),
        ("mcp-server-git", ["-m"], {}, False),
    ],
)
def test_an_upstream_imports_from_its_cwd_when_python_runs_a_module(
    tmp_path: Path, command: str, args: list[str], env: dict[str, str], in_cwd: bool
) -> None:
    from sharedos.confine.programs import upstream_import_dirs

    found = upstream_import_dirs(command, args, env, str(tmp_path))
    assert (str(tmp_path) in found) is in_cwd, found


def test_an_upstreams_env_names_where_it_imports_from(tmp_path: Path) -> None:
    from sharedos.confine.programs import upstream_import_dirs

    env = {
        "PYTHONPATH": f"{tmp_path}/py:rel",
        "NODE_PATH": f"{tmp_path}/node",
        "NODE_OPTIONS": f"--max-old-space-size=99 -r {tmp_path}/pre.js --import=./hook.mjs "
        "--require dotenv/config",
    }
    found = upstream_import_dirs("node", ["server.js"], env, str(tmp_path / "here"))
    assert found == [
        f"{tmp_path}/py",
        f"{tmp_path}/here/rel",
        f"{tmp_path}/node",
        f"{tmp_path}/pre.js",
        f"{tmp_path}/here/hook.mjs",
    ]


def _exe(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
    return path


def test_a_python_outside_a_virtualenv_imports_from_the_users_site_packages(
    tmp_path: Path,
) -> None:
    """A Python that is no virtualenv's runs the ``.pth`` files of the user's
    site-packages at every start: under a files root over the home, one written there
    ran as the host at the next start of an unconfined ``/usr/bin/python3 server.py``
    (or of a console script whose ``#!`` names that Python)."""
    from sharedos.confine.programs import upstream_import_dirs

    home = tmp_path / "home"
    python = _exe(tmp_path / "py" / "bin" / "python3.9")
    (tmp_path / "py" / "bin" / "python3").symlink_to("python3.9")
    env = {"HOME": str(home), "PATH": str(tmp_path / "py" / "bin")}
    site = str(home / ".local" / "lib" / "python3.9" / "site-packages")

    def found(command: str, args: list[str], **extra: str) -> list[str]:
        return upstream_import_dirs(command, args, {**env, **extra}, str(tmp_path))

    assert site in found("python3", ["/srv/server.py"])
    assert site in found(str(python), ["-u", "-W", "ignore", "/srv/server.py"])
    script = _exe(tmp_path / "srv" / "server", f"#!{tmp_path}/py/bin/python3\n")
    assert site in found(str(script), [])
    assert site in found(str(_exe(tmp_path / "srv" / "s2", "#!/usr/bin/env python3\n")), [])
    base = str(tmp_path / "base" / "lib" / "python3.9" / "site-packages")
    assert base in found("python3", ["/srv/server.py"], PYTHONUSERBASE=str(tmp_path / "base"))
    # told to skip it, or a virtualenv made without system site packages: none
    assert site not in found("python3", ["-s", "/srv/server.py"])
    assert site not in found("python3", ["-Im", "server"])
    assert site not in found(str(_exe(tmp_path / "srv" / "s3", f"#!{python} -s\n")), [])
    assert site not in found("python3", ["/srv/server.py"], PYTHONNOUSERSITE="1")
    venv = _exe(tmp_path / "venv" / "bin" / "python")
    (tmp_path / "venv" / "pyvenv.cfg").write_text(f"home = {python.parent}\n", encoding="utf-8")
    assert found(str(venv), ["/srv/server.py"]) == []
    (tmp_path / "venv" / "pyvenv.cfg").write_text(
        "include-system-site-packages = true\n", encoding="utf-8"
    )
    assert [str(home / ".local" / "lib")] == found(str(venv), ["/srv/server.py"])
    assert found("node", ["/srv/server.js"]) == []


def test_the_files_gits_global_configuration_includes_are_kept_beside_a_git_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/.gitconfig`` often includes another file (``[include] path =
    ~/dotfiles/gitconfig``, ``[includeIf "gitdir:~/work/"] path = work/.gitconfig``) and
    names a ``core.hooksPath``: git reads the one as the global file itself and runs the
    other's hooks, in every repository. Under a files root over ``~/work`` or
    ``~/dotfiles`` a permitted ``files.write`` of the included file set the
    ``core.fsmonitor`` an unconfined mcp-server-git's next ``git_status`` ran as the
    host; the root was served."""
    home = tmp_path / "home"
    work, dotfiles, hooks = home / "work", home / "dotfiles", home / "githooks"
    for d in (work, dotfiles, hooks):
        d.mkdir(parents=True)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = t\n"
        '[include]\n\tpath = "~/dotfiles/gitconfig" ; the shared one\n'
        '[includeIf "gitdir:/"]\n\tpath = work/.gitconfig\n',
        encoding="utf-8",
    )
    (dotfiles / "gitconfig").write_text("[core]\n\thooksPath = ~/githooks\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    repo = _repo(tmp_path / "repo")
    # git itself reads the not-yet-made included file: what a files.write there says runs
    mark = tmp_path / "ran"
    (work / ".gitconfig").write_text(
        f'[core]\n\tfsmonitor = "touch {mark}; false"\n', encoding="utf-8"
    )
    subprocess.run(["git", "-C", str(repo), "status"], capture_output=True, check=False)
    assert mark.exists()
    (work / ".gitconfig").unlink()
    trees = host_trees(None, _host(tmp_path, ["--repository", str(repo)]))
    for kept in (work / ".gitconfig", dotfiles / "gitconfig", hooks):
        assert str(kept) in trees, trees
    for root in (work, dotfiles, hooks, hooks / "sub"):
        problem = _refused(root, trees)
        assert problem is not None and "include" in problem, (root, problem)
    # a project under the home beside them: served
    project = home / "project"
    project.mkdir()
    assert _refused(project, trees) is None


def test_an_upstreams_script_named_relative_to_its_cwd_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``command = "python3"``, ``args = ["server.py"]``, ``cwd = "/srv/mcp"``: the SDK
    starts the script in the upstream's ``cwd``, but the check looked for ``server.py``
    in the host's working directory, found none there, and kept nothing of it: a files
    root over ``/srv/mcp`` was served, and a permitted ``files.write`` of ``/server.py``
    was the server the host ran next, unconfined."""
    from sharedos.cli.run import host_programs
    from sharedos.upstream.sandbox import upstream_programs

    served = tmp_path / "srv" / "mcp"
    served.mkdir(parents=True)
    (served / "server.py").write_text("print('server')\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # where ``sharedos run`` was started
    text = (
        f"[upstream.tap]\ncommand = {sys.executable!r}\nargs = ['server.py']\n"
        f"cwd = {str(served)!r}\n"
    )
    host = parse_host_config(text, str(tmp_path / "host.toml"))
    code = host_programs(None, host)
    assert str(served) in code, code
    problem = root_holds_code(served, code)
    assert problem is not None and "holds code" in problem
    # a confined upstream's rw root may not hold it either
    assert str(served) in upstream_programs(host.upstream.values())


@pytest.mark.parametrize(
    ("env", "kept"),
    [
        # an empty entry is the working directory to Python and to the dynamic loader
        ({"PYTHONPATH": "/opt/lib:"}, ["/opt/lib", "{cwd}"]),
        ({"PYTHONPATH": ":/opt/lib"}, ["{cwd}", "/opt/lib"]),
        ({"NODE_PATH": "/opt/node:"}, ["/opt/node"]),  # node skips it
        ({"LD_LIBRARY_PATH": "/opt/so:"}, ["/opt/so", "{cwd}"]),
        ({"LD_PRELOAD": "/opt/a.so /opt/b.so:./c.so libm.so.6"}, ["/opt/a.so", "/opt/b.so"]),
        ({"BASH_ENV": "/opt/start.sh"}, ["/opt/start.sh"]),
    ],
)
def test_an_upstreams_env_names_what_its_loader_and_shell_load(
    tmp_path: Path, env: dict[str, str], kept: list[str]
) -> None:
    """Beyond PYTHONPATH's directories, an upstream's ``env`` names code its every process
    loads by name: ``LD_LIBRARY_PATH``'s directories (a library there replaces the
    system's of that soname), the ``LD_PRELOAD`` libraries, bash's ``BASH_ENV`` (sourced
    before a ``bash -c`` or a ``#!/bin/bash`` server runs), and an empty ``PYTHONPATH``
    entry (``/opt/lib:``) puts the working directory on ``sys.path``: under a files root
    (or a confined upstream's ``rw`` root) over one of them, what was written there ran
    as the host at that upstream's next start, and the root was served."""
    from sharedos.confine.programs import upstream_import_dirs

    cwd = tmp_path / "here"
    found = upstream_import_dirs("/opt/server", [], env, str(cwd))
    want = [k.format(cwd=cwd) for k in kept]
    if "LD_PRELOAD" in env:
        want.append(str(cwd / "c.so"))
    assert found == want, found


@pytest.mark.parametrize(
    ("command", "args", "in_cwd"),
    [
        ("npx", ["-y", "@modelcontextprotocol/server-everything"], True),
        ("/usr/bin/npm", ["exec", "--yes", "server"], True),
        ("pnpm", ["dlx", "server"], True),
        ("yarn", ["dlx", "server"], True),
        ("bunx", ["server"], True),
        ("uv", ["run", "server.py"], True),
        ("uv", ["--quiet", "tool", "run", "server"], False),  # the user's config only
        ("uvx", ["mcp-server-fetch"], False),
        ("node", ["/srv/server.js"], False),
    ],
)
def test_a_package_runner_reads_the_project_of_its_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, args: list[str], in_cwd: bool
) -> None:
    """``npx -y SERVER`` started where the SDK starts an upstream declaring no ``cwd`` (the
    host's working directory) reads that project's ``.npmrc``, whose ``node-options =
    --require ./x.js`` runs ``x.js`` as the host, and runs a package its
    ``node_modules`` holds instead of the one named (yarn's ``.yarnrc.yml``, bun's
    ``bunfig.toml``, ``uv run``'s ``pyproject.toml`` likewise): under a files root over
    that directory the root was served, and two ``files.write`` ran as the host at
    the upstream's next start. The user's ``~/.npmrc`` is as much the runner's."""
    from sharedos.cli.run import host_imports
    from sharedos.confine.programs import runner_dirs, upstream_import_dirs

    here = tmp_path / "here"
    found = upstream_import_dirs(command, args, {}, str(here))
    assert (str(here) in found) is in_cwd, found
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    if os.path.basename(command) in ("npx", "npm", "pnpm", "yarn"):
        assert str(home / ".npmrc") in runner_dirs(command, {"HOME": str(home)})
    if not in_cwd:
        return
    monkeypatch.chdir(here.parent)
    here.mkdir()
    monkeypatch.chdir(here)  # ``sharedos run`` started in the project, no cwd declared
    text = f"[upstream.srv]\ncommand = {command!r}\nargs = {args!r}\n"
    host = parse_host_config(text, str(tmp_path / "host.toml"))
    problem = root_holds_code(here, host_imports(host))
    assert problem is not None and "package runner" in problem, problem
    assert root_holds_code(here / "sandbox", host_imports(host)) is None


def test_the_programs_gits_global_configuration_names_are_kept_beside_a_git_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/.gitconfig`` names programs by path (``core.fsmonitor = ~/bin/fsmon``,
    ``diff.external``, a ``credential.helper``, a filter driver): git runs them in every
    repository, as the host beside an unconfined git upstream. Only its includes and
    ``core.hooksPath`` were kept: under a files root over ``~/bin`` a permitted
    ``files.write`` of ``fsmon`` (a replaced file keeps its mode) was what
    mcp-server-git's next ``git_status`` ran."""
    home, bin_dir = tmp_path / "home", tmp_path / "home" / "bin"
    bin_dir.mkdir(parents=True)
    (home / ".gitconfig").write_text(
        "[core]\n\tfsmonitor = ~/bin/fsmon\n"
        '[diff]\n\texternal = "/opt/difftools/ext" --color\n'
        '[credential "https://example.com"]\n\thelper = "!~/.local/bin/cred --store"\n'
        '[filter "lfs"]\n\tprocess = git-lfs filter-process\n'
        '[diff "pdf"]\n\ttextconv = ~/bin/pdf2txt\n'
        "[core]\n\tsshCommand = $HOME/bin/ssh-wrap -i key\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    repo = _repo(tmp_path / "repo")
    # git runs the user's program the config names; a files.write replacing it keeps
    # its mode, so what the model wrote is what git runs next
    mark = tmp_path / "ran"
    (bin_dir / "fsmon").write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n", encoding="utf-8")
    (bin_dir / "fsmon").chmod(0o755)
    subprocess.run(["git", "-C", str(repo), "status"], capture_output=True, check=False)
    assert mark.exists()
    trees = host_trees(None, _host(tmp_path, ["--repository", str(repo)]))
    kept = (
        bin_dir / "fsmon",
        bin_dir / "pdf2txt",
        bin_dir / "ssh-wrap",
        Path("/opt/difftools/ext"),
        home / ".local" / "bin" / "cred",
    )
    for program in kept:
        assert str(program) in trees, trees
    for root in (bin_dir, home / ".local"):
        problem = _refused(root, trees)
        assert problem is not None and "programs it names" in problem, (root, problem)
    # a name found on the PATH names no file here; a project beside them is served
    assert not any(t.endswith("git-lfs") for t in trees), trees
    project = home / "project"
    project.mkdir()
    assert _refused(project, trees) is None


def test_gits_global_configuration_is_read_once_per_file_whatever_its_includes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every include is followed whatever its condition, so a cycle git never takes (an
    ``includeIf`` whose condition does not hold, naming ``~/.gitconfig``) or a file
    included from several places was read once per path to it, ten deep: three such
    lines held ``sharedos run`` 18 s at each of its three looks at its start, four for
    minutes. Each file is read once, and what they name is kept as before."""
    home = tmp_path / "home"
    (home / "dotfiles").mkdir(parents=True)
    (home / ".gitconfig").write_text(
        '[includeIf "onbranch:never-made/"]\n\tpath = ~/.gitconfig\n\tpath = ~/.gitconfig\n'
        "[include]\n\tpath = dotfiles/gitconfig\n\tpath = ~/dotfiles/gitconfig\n",
        encoding="utf-8",
    )
    (home / "dotfiles" / "gitconfig").write_text(
        "[include]\n\tpath = ~/.gitconfig\n\tpath = ~/.gitconfig\n"
        "[core]\n\thooksPath = ~/githooks\n",
        encoding="utf-8",
    )
    reads: list[str] = []
    real = Path.read_text

    def counted(self: Path, *args: object, **kwargs: object) -> str:
        reads.append(str(self))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", counted)
    found = git_config_files({"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"})
    assert str(home / "dotfiles" / "gitconfig") in found
    assert str(home / "githooks") in found
    assert len(reads) <= 3, len(reads)  # ~/.config/git/config, ~/.gitconfig, the dotfiles'


def test_the_programs_a_git_upstream_runs_by_name_are_kept_where_its_path_finds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitPython runs the first ``git`` on the upstream's ``PATH``, and git runs a
    ``diff.external = difft`` of the global configuration from there too: one installed
    in the home (``~/.local/bin``) lay in a files root over ``~/.local``, and a
    ``files.write`` replacing it (its mode kept) was what the unconfined mcp-server-git
    ran next as the host. A bare credential helper is git's own (``git
    credential-store``), from git's exec path."""
    home, local_bin = tmp_path / "home", tmp_path / "home" / ".local" / "bin"
    local_bin.mkdir(parents=True)
    for name in ("git", "difft"):
        (local_bin / name).write_text('#!/bin/sh\nexec /usr/bin/git "$@"\n', encoding="utf-8")
        (local_bin / name).chmod(0o755)
    (home / ".gitconfig").write_text(
        "[diff]\n\texternal = difft\n[credential]\n\thelper = store\n", encoding="utf-8"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{local_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    repo = _repo(tmp_path / "repo")
    code = host_programs(None, _host(tmp_path, ["--repository", str(repo)]))
    for name in ("git", "difft"):
        assert str(local_bin / name) in code, code
    assert not any("credential-store" in p or p.endswith("/store") for p in code), code
    problem = root_holds_code(home / ".local", code)
    assert problem is not None and str(local_bin / "git") in problem, problem
    # an upstream that runs no git keeps no git
    other = host_programs(None, _host(tmp_path, [], module="mcp_server_fetch"))
    assert str(local_bin / "git") not in other, other

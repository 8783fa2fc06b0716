"""``sharedos run``: the operator's files and flags are taken as written, or refused in one line.

A ``--context`` file, a ``--plan`` and ``--timeout`` are the operator's input: a value of the
wrong shape is refused before anything opens (exit 1, or 2 for a flag), never coerced into
something else and never a Python traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.upstream.conftest import PY

SHAREDOS = str(Path(PY).parent / "sharedos")
#: a permit for anyone holding the role "d": what "roles": "admin" became, letter by letter
RULES = """
namespace files
requirement files.read { action read; resource path(args.path) }
permit read on "/public/**" when "d" in context.roles
toolpolicy run { mode open
 managed files.*
}
"""


def sharedos_run(
    tmp_path: Path, *args: str, rules_text: str = RULES, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "rules.sos"
    rules.write_text(rules_text, encoding="utf-8")
    (tmp_path / "sandbox").mkdir(exist_ok=True)
    argv = [SHAREDOS, "run", "--rules", str(rules), "--policy", "run", "--dry-run", "--json"]
    argv += ["--sandbox", str(tmp_path / "sandbox"), "--evidence", str(tmp_path / "ev.sqlite")]
    return subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env,
    )


@pytest.mark.parametrize(
    ("context", "problem"),
    [
        ({"principal": "alice", "roles": "admin"}, "roles is a list of role names, not str"),
        ({"principal": "alice", "attributes": [1]}, "attributes is an object, not list"),
        ({"principal": "alice", "attributes": "ab"}, "attributes is an object, not str"),
    ],
)
def test_a_context_file_of_the_wrong_shape_is_refused(
    tmp_path: Path, context: dict[str, object], problem: str
) -> None:
    # before: "roles": "admin" was split into the roles a, d, m, i, n (files.read was offered
    # under a permit for role "d"), and attributes that were no object ended in a traceback
    ctx = tmp_path / "context.json"
    ctx.write_text(json.dumps(context), encoding="utf-8")
    proc = sharedos_run(tmp_path, "--context", str(ctx))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"error: {ctx}: {problem}"
    assert proc.stdout == ""


def test_a_context_file_as_written_is_the_context(tmp_path: Path) -> None:
    ctx = tmp_path / "context.json"
    ctx.write_text(
        json.dumps({"principal": "alice", "roles": ["d"], "attributes": None}), encoding="utf-8"
    )
    proc = sharedos_run(tmp_path, "--context", str(ctx))
    assert proc.returncode == 0, proc.stderr
    tools = {t["tool"]: t["in"] for t in json.loads(proc.stdout)["tools"]}
    assert tools["files.read"] is True
    # a --role given on the command line still replaces the file's roles
    ctx.write_text(json.dumps({"principal": "alice", "roles": ["d"]}), encoding="utf-8")
    proc = sharedos_run(tmp_path, "--context", str(ctx), "--role", "reader")
    assert proc.returncode == 0, proc.stderr
    assert {t["tool"]: t["in"] for t in json.loads(proc.stdout)["tools"]}["files.read"] is False


@pytest.mark.parametrize("arguments", [[1], "ab", [["path", "/public/a.txt"]], 3, [], ""])
def test_a_plan_whose_arguments_are_no_object_is_refused(tmp_path: Path, arguments: object) -> None:
    # before: [1] and "ab" ended in a traceback; [["path", "/public/a.txt"]] was made into the
    # call {"path": "/public/a.txt"}, which the plan never wrote
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"tool": "files.read", "arguments": arguments}]), encoding="utf-8")
    proc = sharedos_run(tmp_path, "--principal", "alice", "--plan", str(plan))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (
        f'error: {plan}: a plan is a JSON list of {{"tool": NAME, "arguments": {{...}}}}'
    )
    plan.write_text(json.dumps([{"tool": "files.read"}]), encoding="utf-8")
    assert sharedos_run(tmp_path, "--principal", "alice", "--plan", str(plan)).returncode == 0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400", "3601"])
def test_a_timeout_that_is_no_deadline_is_a_usage_error(tmp_path: Path, value: str) -> None:
    # before: nan and inf ran the harness without any deadline, 0 ended in "cannot be
    # confined ... Install bubblewrap" (exit 5), and -1 launched the harness anyway
    proc = sharedos_run(tmp_path, "--principal", "alice", f"--timeout={value}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Invalid value for '--timeout'" in proc.stderr and "seconds" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.harness("claude-code")
def test_an_unset_variable_in_the_harness_env_is_said_before_the_turn_opens(
    tmp_path: Path,
) -> None:
    # before: the launch raised MissingHostVariable as a traceback, after the turn had opened
    # (exit 1, "nothing ran", with a turn in the store); `host check --versions` said ok
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.claude-code]\n[harness.claude-code.env]\nFOO = "${SHAREDOS_TEST_UNSET_VAR}"\n',
        encoding="utf-8",
    )
    rules = tmp_path / "rules.sos"
    rules.write_text(RULES, encoding="utf-8")
    db = tmp_path / "ev.sqlite"
    argv = [SHAREDOS, "run", "--host-config", str(host), "--rules", str(rules), "--policy", "run"]
    argv += ["--principal", "alice", "--evidence", str(db), "--no-stream", "hello"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == (
        "error: harness 'claude-code': env.FOO: ${SHAREDOS_TEST_UNSET_VAR} is not set in the "
        "host environment"
    )
    assert not db.exists()  # nothing opened
    check = [SHAREDOS, "host", "check", "--versions", str(host)]
    proc = subprocess.run(check, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1
    assert "env.FOO: ${SHAREDOS_TEST_UNSET_VAR} is not set" in proc.stderr


def test_rules_do_not_replace_a_bundle_the_host_trusts_only_signed(tmp_path: Path) -> None:
    # before: --rules silently replaced the host file's [policy] bundle, even where [policy]
    # keys says only bundles signed by them are used: the run enforced unsigned sources
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.claude-code]\n[policy]\nbundle = "bundle.json"\nkeys = ["policy.pub"]\n',
        encoding="utf-8",
    )
    proc = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().startswith(
        f"error: {host}: this host enforces only policy bundles signed by its [policy] keys; "
        "--rules would replace them"
    )
    assert proc.stdout == ""
    # without keys the bundle is no promise: the rules are used, and the run says so
    host.write_text('[harness.claude-code]\n[policy]\nbundle = "bundle.json"\n', encoding="utf-8")
    proc = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice")
    assert proc.returncode == 0, proc.stderr
    assert f"policy: --rules, not the host file's [policy] bundle ({host})" in proc.stderr


def test_tenant_default_on_the_command_line_overrides_the_context_file(tmp_path: Path) -> None:
    # before: --tenant default was taken for "not given", and the file's tenant stayed
    rules = RULES.replace('"d" in context.roles', 'context.tenant == "default"')
    ctx = tmp_path / "context.json"
    ctx.write_text(json.dumps({"principal": "alice", "tenant": "acme"}), encoding="utf-8")

    def offered(*flags: str) -> bool:
        proc = sharedos_run(tmp_path, "--context", str(ctx), *flags, rules_text=rules)
        assert proc.returncode == 0, proc.stderr
        return {t["tool"]: t["in"] for t in json.loads(proc.stdout)["tools"]}["files.read"]

    assert offered() is False  # the file's tenant: acme
    assert offered("--tenant", "default") is True
    ctx.write_text(json.dumps({"principal": "alice"}), encoding="utf-8")
    assert offered() is True  # neither says: the default tenant


@pytest.mark.harness("claude-code")
def test_a_run_directory_in_a_managed_root_is_not_answered_with_install_bubblewrap(
    tmp_path: Path,
) -> None:
    # before: every reason a strict run could not start confined ended in "Install
    # bubblewrap", also where bubblewrap was there and --workdir lay inside --sandbox
    rules = RULES.replace("mode open", 'mode strict\n harness_local "shell"')
    sandbox = tmp_path / "sandbox"
    (sandbox / "public" / "wd").mkdir(parents=True)
    rules_file = tmp_path / "strict.sos"
    rules_file.write_text(rules, encoding="utf-8")
    argv = [SHAREDOS, "run", "--rules", str(rules_file), "--policy", "run"]
    argv += ["--principal", "alice", "--sandbox", str(sandbox), "--no-stream"]
    argv += ["--evidence", str(tmp_path / "ev.sqlite"), "--workdir", str(sandbox / "public" / "wd")]
    proc = subprocess.run(
        [*argv, "hello"], capture_output=True, text=True, timeout=120, check=False
    )
    # (a --workdir inside the files root is now refused before any confinement is tried,
    # open runs included: test_a_sandbox_root_that_holds_the_run_directory_is_refused)
    assert proc.returncode == 1, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert f"--sandbox {sandbox} holds SharedOS's run directories" in error
    assert "Install bubblewrap" not in error
    assert "give --workdir outside the files root" in error


def test_an_unset_variable_in_the_evidence_url_is_one_line(tmp_path: Path) -> None:
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.claude-code]\n[evidence]\nurl = "${SHAREDOS_TEST_UNSET_VAR}/ev.sqlite"\n',
        encoding="utf-8",
    )
    rules = tmp_path / "rules.sos"
    rules.write_text(RULES, encoding="utf-8")
    argv = [SHAREDOS, "run", "--host-config", str(host), "--rules", str(rules), "--policy", "run"]
    proc = subprocess.run(
        [*argv, "--principal", "alice", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == (
        "error: [evidence] url: ${SHAREDOS_TEST_UNSET_VAR} is not set in the host environment"
    )
    assert not list(tmp_path.rglob("*.sqlite"))


@pytest.mark.parametrize("inside", ["evidence", "rules"])
def test_a_sandbox_root_that_holds_sharedos_state_is_refused(tmp_path: Path, inside: str) -> None:
    """The files tools act on anything under their root a rule permits: with the evidence
    store (or the rules) there, a permitted ``files.write``/``files.delete`` would change
    the record of its own calls (or the next run's policy). Refused before anything opens."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    if inside == "evidence":
        extra = ["--evidence", str(sandbox / "ev.sqlite")]
    else:
        (sandbox / "more.sos").write_text("namespace more\n", encoding="utf-8")
        extra = ["--rules", str(sandbox / "more.sos")]
    proc = sharedos_run(tmp_path, *extra, "--principal", "alice")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds SharedOS's own state" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (sandbox / "ev.sqlite").exists() and not (tmp_path / "ev.sqlite").exists()
    # the same flags with the state beside the sandbox root run
    fine = sharedos_run(tmp_path, "--principal", "alice")
    assert fine.returncode == 0, fine.stdout + fine.stderr


def test_a_sandbox_root_that_holds_code_the_host_runs_is_refused(tmp_path: Path) -> None:
    """``files.write`` replacing a file keeps its permission bits: a root holding an
    unconfined upstream's server script (or SharedOS's own installation, a harness CLI)
    let a permitted write change the program the host runs next, outside every sandbox.
    A confined upstream may not write those paths; the files root may not hold them."""
    sandbox = tmp_path / "sandbox"
    (sandbox / "tools").mkdir(parents=True)
    server = sandbox / "tools" / "server.py"
    server.write_text("import sys\n", encoding="utf-8")
    host = tmp_path / "host.toml"
    host.write_text(
        f"[upstream.h]\ncommand = {json.dumps(PY)}\nargs = {json.dumps([str(server)])}\n"
        'pinning = "off"\n',
        encoding="utf-8",
    )
    proc = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr
    assert str(server) in proc.stderr and "Traceback" not in proc.stderr


def test_a_sandbox_root_over_sharedos_itself_is_refused(tmp_path: Path) -> None:
    """The files root over SharedOS's installation (a project holding its virtualenv, an
    editable checkout) let a permitted write rewrite the kernel of the next run."""
    # the second --sandbox is the one taken: the Python environment SharedOS runs in
    proc = sharedos_run(tmp_path, "--sandbox", sys.prefix, "--principal", "alice")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr


def test_a_sandbox_root_python_imports_from_is_refused(tmp_path: Path) -> None:
    """A root holding a directory on the host's ``sys.path`` (``PYTHONPATH=src``) let a
    permitted ``files.write`` of ``/sitecustomize.py`` (or of a module named like one
    SharedOS imports) run as the host at its next start, outside every sandbox."""
    sandbox = tmp_path / "sandbox"
    env = {**os.environ, "PYTHONPATH": str(sandbox / "src")}
    (sandbox / "src").mkdir(parents=True)
    proc = sharedos_run(tmp_path, "--principal", "alice", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr
    assert str(sandbox / "src") in proc.stderr and "PYTHONPATH" in proc.stderr
    # a root inside a directory on the path is served: what is written there is importable
    # only under the root's own name (no .pth file is read from a PYTHONPATH directory)
    env["PYTHONPATH"] = str(tmp_path)
    fine = sharedos_run(tmp_path, "--principal", "alice", env=env)
    assert fine.returncode == 0, fine.stdout + fine.stderr


def test_a_sandbox_root_that_holds_the_run_directory_is_refused(tmp_path: Path) -> None:
    """``--workdir`` under the files root (or a root holding the temporary directory the
    runs' private bases are in): a permitted ``files.search`` found the running turn's
    ``claude-mcp.json`` with the bridge's bearer token, and the harness's HOME (its
    settings) was writable. Upstream sandboxes mask those directories; the files root
    may not hold them."""
    sandbox = tmp_path / "sandbox"
    proc = sharedos_run(tmp_path, "--principal", "alice", "--workdir", str(sandbox / "work"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds SharedOS's run directories" in proc.stderr
    assert str(sandbox / "work") in proc.stderr and "--workdir" in proc.stderr
    (sandbox / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(sandbox / "tmp")}
    proc = sharedos_run(tmp_path, "--principal", "alice", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert str(sandbox / "tmp" / "sharedos-runs-") in proc.stderr
    # a run directory beside the root, or a root inside the run directory: served
    fine = sharedos_run(tmp_path, "--principal", "alice", "--workdir", str(tmp_path / "work"))
    assert fine.returncode == 0, fine.stdout + fine.stderr
    inner = sharedos_run(tmp_path, "--principal", "alice", "--workdir", str(tmp_path))
    assert inner.returncode == 0, inner.stdout + inner.stderr


def test_a_sandbox_root_that_holds_the_bwrap_the_host_runs_is_refused(tmp_path: Path) -> None:
    """``$SHAREDOS_BWRAP`` (or ``bwrap`` on ``PATH`` where the system has none) is run by
    the host itself and is every later sandbox: a root holding it let a permitted
    ``files.write`` replace it (an executable keeps its bits), and the next strict run's
    "confinement" was whatever the model wrote, run unconfined as the host."""
    sandbox = tmp_path / "sandbox"
    (sandbox / "bin").mkdir(parents=True)
    bwrap = sandbox / "bin" / "bwrap"
    bwrap.write_text('#!/bin/sh\nexec /usr/bin/bwrap "$@"\n', encoding="utf-8")
    bwrap.chmod(0o755)
    env = {**os.environ, "SHAREDOS_BWRAP": str(bwrap)}
    proc = sharedos_run(tmp_path, "--principal", "alice", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr
    assert str(bwrap) in proc.stderr


def test_a_sandbox_root_holding_a_repository_an_unconfined_upstream_runs_git_in_is_refused(
    tmp_path: Path,
) -> None:
    """An unconfined ``mcp-server-git --repository REPO`` runs git in REPO as the host: a
    files root holding REPO let a permitted ``files.write`` of ``/repo/.git/config``
    (``core.fsmonitor``, ``core.hooksPath``) or of ``/repo/.git/hooks/*`` make the next
    ``git_status`` run whatever the model wrote, outside every sandbox. The repository's
    git directory is code the host runs, as the upstream's program is."""
    repo = tmp_path / "sandbox" / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    host = tmp_path / "host.toml"
    host.write_text(
        f"[upstream.git]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps(['-m', 'mcp_server_git', '--repository', str(repo / 'sub')])}\n"
        'pinning = "off"\n',
        encoding="utf-8",
    )
    (repo / "sub").mkdir()
    proc = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr
    assert str(repo / ".git") in proc.stderr and "Traceback" not in proc.stderr
    # the same repository beside the files root: served
    host.write_text(
        host.read_text(encoding="utf-8").replace(str(repo), str(tmp_path / "repo")),
        encoding="utf-8",
    )
    (tmp_path / "repo" / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    fine = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice")
    assert fine.returncode == 0, fine.stdout + fine.stderr


def test_a_sandbox_root_holding_a_package_runners_installs_is_refused(tmp_path: Path) -> None:
    """``command = "npx"``, ``args = ["-y", "server"]`` installs the server once into
    ``~/.npm/_npx/…/node_modules`` and runs the installed files at every later start
    without checking them: under a files root holding the home, a permitted
    ``files.write`` of that ``index.js`` was the server the host ran next, unconfined.
    The runner's install directories are code the host runs, as its program is."""
    home = tmp_path / "sandbox" / "home"
    home.mkdir(parents=True)
    host = tmp_path / "host.toml"
    host.write_text(
        '[upstream.fs]\ncommand = "npx"\nargs = ["-y", "@modelcontextprotocol/server-everything"]\n'
        'pinning = "off"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_config")}
    env["HOME"] = str(home)
    proc = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr
    assert str(home / ".npm") in proc.stderr and "Traceback" not in proc.stderr


def test_a_sandbox_root_inside_a_git_directory_or_a_runners_installs_is_refused(
    tmp_path: Path,
) -> None:
    """A root inside ``REPO/.git`` (an unconfined upstream runs git in REPO) or inside
    ``~/.npm`` (an unconfined ``npx -y`` server) holds no such directory, but a permitted
    ``files.write`` of ``/config`` or ``/hooks/pre-commit`` (of ``/_npx/…/index.js``)
    changed what the host runs next all the same."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    home = tmp_path / "home"
    (home / ".npm" / "_npx").mkdir(parents=True)
    host = tmp_path / "host.toml"
    host.write_text(
        f"[upstream.git]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps(['-m', 'mcp_server_git', '--repository', str(repo)])}\n"
        'pinning = "off"\n'
        '[upstream.fs]\ncommand = "npx"\nargs = ["-y", "@modelcontextprotocol/server-everything"]\n'
        'pinning = "off"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_config")}
    env["HOME"] = str(home)
    for root in (repo / ".git" / "hooks", home / ".npm" / "_npx"):
        proc = sharedos_run(
            tmp_path,
            "--host-config",
            str(host),
            "--principal",
            "alice",
            "--sandbox",
            str(root),
            env=env,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "lies inside code SharedOS runs outside any sandbox" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_sandbox_root_holding_gits_global_configuration_is_refused(tmp_path: Path) -> None:
    """Git reads ``~/.gitconfig`` (and ``~/.config/git/config``) in every repository and
    runs what it names (``core.fsmonitor`` on every status): under a files root holding
    the home, a permitted ``files.write`` of ``/home/.gitconfig`` made an unconfined
    ``mcp-server-git --repository REPO``'s next ``git_status`` run what the model wrote,
    as the host, though REPO lay outside the root. The upstream's ``env`` naming its own
    ``GIT_CONFIG_GLOBAL`` outside the root is the way out."""
    home = tmp_path / "sandbox" / "home"
    home.mkdir(parents=True)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    host = tmp_path / "host.toml"
    upstream = (
        f"[upstream.git]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps(['-m', 'mcp_server_git', '--repository', str(repo)])}\n"
        'pinning = "off"\n'
    )
    host.write_text(upstream, encoding="utf-8")
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_CONFIG_HOME", None)
    proc = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr
    assert str(home / ".gitconfig") in proc.stderr, proc.stderr
    assert str(home / ".config" / "git" / "config") in proc.stderr
    assert "GIT_CONFIG_GLOBAL" in proc.stderr and "Traceback" not in proc.stderr
    # the upstream reading a global configuration outside the root: served
    outside = tmp_path / "gitconfig"
    host.write_text(
        upstream + f"[upstream.git.env]\nGIT_CONFIG_GLOBAL = {json.dumps(str(outside))}\n",
        encoding="utf-8",
    )
    fine = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice", env=env)
    assert fine.returncode == 0, fine.stdout + fine.stderr


def test_a_sandbox_root_an_unconfined_upstream_imports_from_is_refused(tmp_path: Path) -> None:
    """``python -m mcp_server_git`` puts its working directory (the host's, where the SDK
    starts it) first on its ``sys.path``: under a files root holding that directory, a
    permitted ``files.write`` of ``/mcp_server_git/__main__.py`` was the server the host
    ran next, unconfined. So is a directory its ``env``'s ``PYTHONPATH`` names. A root
    inside one is served; so is the root once the upstream runs in a ``cwd`` beside it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    host = tmp_path / "host.toml"
    upstream = (
        f"[upstream.git]\ncommand = {json.dumps(PY)}\n"
        f"args = {json.dumps(['-m', 'mcp_server_git', '--repository', str(repo)])}\n"
        'pinning = "off"\n'
    )
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    host.write_text(upstream, encoding="utf-8")
    argv = ["--host-config", str(host), "--principal", "alice"]
    (tmp_path / "rules.sos").write_text(RULES, encoding="utf-8")
    here = [SHAREDOS, "run", "--rules", str(tmp_path / "rules.sos"), "--policy", "run"]
    here += ["--dry-run", "--json", "--evidence", str(tmp_path / "ev.sqlite"), *argv]

    def started_in_the_root() -> subprocess.CompletedProcess[str]:  # ``--sandbox .``
        return subprocess.run(
            [*here, "--sandbox", "."],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=sandbox,
        )

    proc = started_in_the_root()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "holds code SharedOS runs outside any sandbox" in proc.stderr
    assert f"({sandbox})" in proc.stderr and "python -m" in proc.stderr
    assert "Traceback" not in proc.stderr
    # a cwd declared beside the root: served
    host.write_text(upstream + f"cwd = {json.dumps(str(repo))}\n", encoding="utf-8")
    fine = started_in_the_root()
    assert fine.returncode == 0, fine.stdout + fine.stderr
    # its env's PYTHONPATH under the root: refused; a root inside it: served
    lib = tmp_path / "sandbox" / "lib"
    lib.mkdir()
    host.write_text(
        upstream + f"[upstream.git.env]\nPYTHONPATH = {json.dumps(str(lib))}\n", encoding="utf-8"
    )
    proc = sharedos_run(tmp_path, *argv)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"({lib})" in proc.stderr and "PYTHONPATH" in proc.stderr
    host.write_text(
        upstream + f"[upstream.git.env]\nPYTHONPATH = {json.dumps(str(tmp_path))}\n",
        encoding="utf-8",
    )
    fine = sharedos_run(tmp_path, *argv)
    assert fine.returncode == 0, fine.stdout + fine.stderr


def test_a_sandbox_root_holding_an_unconfined_pythons_user_site_is_refused(
    tmp_path: Path,
) -> None:
    """A Python that is no virtualenv's runs the ``.pth`` files of the user's
    site-packages at every start: under a files root holding the home, a permitted
    ``files.write`` of ``/home/.local/lib/python3.X/site-packages/x.pth`` ran as the host
    at the next start of an unconfined ``python3 server.py``. ``PYTHONNOUSERSITE`` in the
    upstream's ``env`` is the way out."""
    home = tmp_path / "sandbox" / "home"
    home.mkdir(parents=True)
    server = tmp_path / "server.py"
    server.write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    base = os.path.realpath(PY)  # the interpreter the virtualenv was made from
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    host = tmp_path / "host.toml"
    upstream = (
        f"[upstream.tool]\ncommand = {json.dumps(base)}\nargs = {json.dumps([str(server)])}\n"
        'pinning = "off"\n'
    )
    host.write_text(upstream, encoding="utf-8")
    env = {**os.environ, "HOME": str(home)}
    env.pop("PYTHONUSERBASE", None)
    proc = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert str(home / ".local" / "lib" / version / "site-packages") in proc.stderr
    assert "PYTHONNOUSERSITE" in proc.stderr and "Traceback" not in proc.stderr
    host.write_text(upstream + '[upstream.tool.env]\nPYTHONNOUSERSITE = "1"\n', encoding="utf-8")
    fine = sharedos_run(tmp_path, "--host-config", str(host), "--principal", "alice", env=env)
    assert fine.returncode == 0, fine.stdout + fine.stderr

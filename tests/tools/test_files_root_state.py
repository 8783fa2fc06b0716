"""Which roots the files tools must not serve: SharedOS's own state under them, or them
inside a directory of SharedOS's own state (``root_holds_state``)."""

from __future__ import annotations

from pathlib import Path

from sharedos.policy import compile_paths
from sharedos.tools.files import root_holds_code, root_holds_state
from tests.tools.calls import call, tools

RULES = "namespace files\nrequirement files.write { action write; resource path(args.path) }\n"


def test_a_root_inside_a_rules_directory_is_refused(tmp_path: Path) -> None:
    """A rules directory is compiled recursively, so a root inside it let a permitted
    ``files.write`` of ``/x.sos`` add a rule to the next run's policy; only a rules
    directory *under* the root was refused before."""
    rules = tmp_path / "policy"
    root = rules / "workspace"
    root.mkdir(parents=True)
    (rules / "files.sos").write_text(RULES, encoding="utf-8")
    before = compile_paths([rules])
    # what a permitted write under that root does to the next run
    written = call(tools(root)["files.write"], "/x.sos", path="/x.sos", content="namespace x\n")
    assert not written.is_error
    assert compile_paths([rules]).bundle_hash != before.bundle_hash

    problem = root_holds_state(root, [rules, tmp_path / "evidence.sqlite"])
    assert problem is not None
    assert str(root) in problem and str(rules) in problem
    # beside it, or a file beside it whose name merely starts like the root's: served
    assert root_holds_state(root, [tmp_path / "rules", rules / "files.sos"]) is None
    assert root_holds_state(root, [rules / "work"]) is None


def test_a_root_holding_a_program_the_host_runs_is_refused(tmp_path: Path) -> None:
    """A write replacing a file keeps its permission bits: an executable the host runs (an
    upstream's server, a harness CLI, SharedOS's own installation) stays executable with
    the written content. ``root_holds_code`` names such a program within the root."""
    root = tmp_path / "work"
    (root / "bin").mkdir(parents=True)
    program = root / "bin" / "server"
    program.write_text("#!/bin/sh\necho served\n", encoding="utf-8")
    program.chmod(0o755)
    written = call(
        tools(root)["files.write"], "/bin/server", path="/bin/server", content="#!/bin/sh\nid\n"
    )
    assert not written.is_error
    assert program.stat().st_mode & 0o111 == 0o111  # what the host runs next

    problem = root_holds_code(root, [program])
    assert problem is not None and str(program) in problem
    assert root_holds_code(root, [tmp_path / "elsewhere" / "server"]) is None
    # a root inside a program's directory replaces none of its files: served
    assert root_holds_code(root / "bin" / "data", [root / "bin", program]) is None
    # a root inside a tree of code (SharedOS's installation, its site-packages) is not
    assert root_holds_code(root / "bin" / "data", [], trees=[root / "bin"]) is not None


def test_a_root_inside_sharedos_installation_is_said_to_lie_inside_it(tmp_path: Path) -> None:
    """Before: ``--sandbox venv/share/x`` was refused as a root that "holds code SharedOS
    runs outside any sandbox (venv)", naming a directory the root lies inside, not one
    it holds: the operator was told to move the installation out of a directory it held."""
    venv = tmp_path / "venv"
    inner = venv / "share" / "x"
    inner.mkdir(parents=True)
    problem = root_holds_code(inner, [], trees=[venv])
    assert problem is not None
    assert problem.startswith(f"{inner} lies inside SharedOS's own installation ({venv})")
    assert "holds code" not in problem
    # a root holding the installation is still said to hold it
    held = root_holds_code(tmp_path, [], trees=[venv])
    assert held is not None and held.startswith(f"{tmp_path} holds code SharedOS runs")

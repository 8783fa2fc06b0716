"""One policy, one bundle: compiling identical sources gives byte-identical bundles
whatever the process (hash seed), the checkout's location, the spelling of the
paths, their order on the command line or the order files were created on disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sharedos.policy import compile_paths

REPO = Path(__file__).resolve().parents[2]

# Enough rules at several literal prefixes, in two directories, that the
# program's groups, files and namespaces all have an order to get wrong.
SOURCES = {
    "a/files.sos": "namespace files\n"
    "requirement files.read { action read; resource path(args.path) }\n"
    "requirement files.write { action write; resource path(args.path) }\n"
    + "".join(
        f'permit read on "/p{i}/q{i % 3}/**" when "r{i}" in context.roles\n'
        f'forbid write on "/p{i}/**" unless "w{i}" in context.roles\n'
        for i in range(12)
    ),
    "a/more.sos": "namespace files\n"
    + "".join(f'permit write on "/x{i}/{{context.principal}}/**"\n' for i in range(6))
    # approval rules (issue 28): their own section of the program, ordered too
    + "".join(
        f'require approval by role "r{i}", group "g{i % 2}" for write on "/x{i}/**" '
        f'when "w{i}" in context.roles\n'
        for i in range(4)
    ),
    "b/github.sos": "namespace github\n"
    'requirement github.get { action read; resource "{args.owner}/{args.repo}" }\n'
    + "".join(f'permit read on "org{i}/*"\n' for i in range(8)),
    "b/run.sos": "toolpolicy dev { mode open; managed files.*, github.* }\n",
}


def _write(root: Path, order: list[str] | None = None) -> None:
    for name in order or list(SOURCES):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SOURCES[name], encoding="utf-8")


_CLI = "import sys; from sharedos.cli.policy import main; sys.exit(main())"


def _compile_in_subprocess(cwd: Path, seed: str, paths: list[str], out: Path) -> bytes:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    done = subprocess.run(
        [sys.executable, "-c", _CLI, "compile", *paths, "-o", str(out)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return out.read_bytes()


def test_the_bundle_is_byte_identical_across_hash_seeds_spellings_and_orders(
    tmp_path: Path,
) -> None:
    one = tmp_path / "checkout-one"
    two = tmp_path / "elsewhere" / "checkout-two"
    _write(one)
    _write(two, order=list(reversed(SOURCES)))  # created on disk in the other order
    (tmp_path / "link").symlink_to(one / "a", target_is_directory=True)
    runs = [
        (one, "0", ["a", "b"]),
        (one, "1", ["b", "a"]),
        (one, "2", ["./a/", "./b/"]),
        (one, "3", [str(one / "a"), "b/"]),
        (one, "4", [str(tmp_path / "link"), "b"]),
        (one, "5", ["a", str(one / "a"), "b", "a/files.sos"]),  # the same files twice
        (two, "6", ["b", "a"]),
        (two, "random", [str(two / "b" / "run.sos"), str(two / "b"), "a/"]),
    ]
    bundles = {
        _compile_in_subprocess(cwd, seed, paths, tmp_path / f"out-{i}.json")
        for i, (cwd, seed, paths) in enumerate(runs)
    }
    assert len(bundles) == 1


def test_compile_paths_gives_one_hash_for_every_spelling(tmp_path: Path) -> None:
    _write(tmp_path)
    here = Path.cwd()
    os.chdir(tmp_path)
    try:
        hashes = {
            compile_paths(paths).bundle_hash
            for paths in (
                ["a", "b"],
                ["b", "a"],
                ["./b/", "./a"],
                [str(tmp_path / "a"), "b"],
                ["a/more.sos", "a", "b", str(tmp_path / "b")],
            )
        }
    finally:
        os.chdir(here)
    assert len(hashes) == 1


def test_the_shipped_policy_compiles_to_one_hash_under_every_seed(tmp_path: Path) -> None:
    code = (
        "from sharedos.policy import compile_paths\n"
        "print(compile_paths(['rules', 'policy']).bundle_hash)\n"
    )
    hashes = set()
    for seed in ("0", "1", "2", "3", "4"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        hashes.add(done.stdout.strip())
    assert len(hashes) == 1


def test_a_copied_checkout_compiles_to_the_same_hash(tmp_path: Path) -> None:
    shutil.copytree(REPO / "rules", tmp_path / "copy" / "rules")
    shutil.copytree(REPO / "policy", tmp_path / "copy" / "policy")
    a = compile_paths([REPO / "rules", REPO / "policy"])
    b = compile_paths([tmp_path / "copy" / "policy", tmp_path / "copy" / "rules"])
    assert a.bundle_hash == b.bundle_hash

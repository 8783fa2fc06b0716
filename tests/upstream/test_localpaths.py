"""``LocalPaths``: each rule a brokered path resource is held to, one case at a time.

The real-upstream attacks are in test_links.py; here every rule is exercised
directly on a real filesystem, including the cases no shipped upstream
reaches (FIFOs, bare repositories, config includes, a git directory too large
to walk).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sharedos import pathwalk
from sharedos.harness.hostconfig import parse_host_config
from sharedos.pathwalk import SandboxError
from sharedos.upstream import localpaths
from sharedos.upstream.broker import UpstreamBroker
from sharedos.upstream.localpaths import LocalPaths
from tests.upstream.conftest import make_repo


def refusal(resource: Path | str) -> str | None:
    """The code ``LocalPaths`` refuses ``resource`` with (git walk included), or None."""
    paths = LocalPaths()
    try:
        git_directory = paths.check(str(resource))
        if git_directory is not None:
            paths.walk_git(git_directory)
    except SandboxError as exc:
        assert str(exc).endswith(f"({exc.code})")
        return exc.code
    return None


def test_plain_files_directories_and_files_to_be_created_pass(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.txt").write_text("x")
    (tmp_path / "d" / "f.txt").chmod(0o644)
    assert refusal(tmp_path / "d" / "f.txt") is None
    assert refusal(tmp_path / "d") is None
    assert refusal("/") is None
    # not there yet (a write creates it), parents missing too (create_directory makes them)
    assert refusal(tmp_path / "d" / "new.txt") is None
    assert refusal(tmp_path / "d" / "a" / "b" / "c") is None
    # a file where a directory would be: nothing lies beyond it
    assert refusal(tmp_path / "d" / "f.txt" / "x") is None


def test_a_symbolic_link_anywhere_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "f.txt").write_text("x")
    os.symlink(real / "sub" / "f.txt", tmp_path / "file_link")
    os.symlink(real, tmp_path / "dir_link")
    os.symlink("real/sub", tmp_path / "relative_link")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    assert refusal(tmp_path / "file_link") == "symlink"
    assert refusal(tmp_path / "dir_link") == "symlink"
    assert refusal(tmp_path / "dir_link" / "sub" / "f.txt") == "symlink"
    assert refusal(tmp_path / "relative_link" / "f.txt") == "symlink"
    assert refusal(tmp_path / "dangling") == "symlink"  # a write would create its target
    assert refusal(tmp_path / "dangling" / "x") == "symlink"
    assert refusal(tmp_path / "loop") == "symlink"
    assert refusal(real / "sub" / "f.txt") is None  # the real path is fine


def test_hard_links_and_special_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x")
    os.link(tmp_path / "f.txt", tmp_path / "second_name")
    os.mkfifo(tmp_path / "fifo")
    assert refusal(tmp_path / "second_name") == "hard_link"
    assert refusal(tmp_path / "f.txt") == "hard_link"  # both names are the same file
    assert refusal(tmp_path / "fifo") == "not_a_regular_file"


def test_a_plain_repository_passes_and_each_git_indirection_is_refused(tmp_path: Path) -> None:
    other = make_repo(tmp_path / "other")
    assert refusal(make_repo(tmp_path / "plain")) is None
    assert refusal(tmp_path / "plain" / ".git") is None  # the git directory itself

    (tmp_path / "dotlink").mkdir()
    os.symlink(other / ".git", tmp_path / "dotlink" / ".git")
    assert refusal(tmp_path / "dotlink") == "symlink"

    (tmp_path / "pointer").mkdir()
    (tmp_path / "pointer" / ".git").write_text(f"gitdir: {other / '.git'}\n")
    assert refusal(tmp_path / "pointer") == "git_pointer"

    worktree_gitdir = make_repo(tmp_path / "wtgit") / ".git"
    (worktree_gitdir / "commondir").write_text("../../other/.git\n")
    assert refusal(tmp_path / "wtgit") == "git_pointer"

    for name in ("alternates", "http-alternates"):
        repo = make_repo(tmp_path / f"alt-{name}")
        (repo / ".git" / "objects" / "info" / name).write_text(f"{other / '.git' / 'objects'}\n")
        assert refusal(repo) == "git_alternates"

    for i, text in enumerate(
        (
            f"[core]\n\tworktree = {other}\n",
            f"[core] worktree={other}\n",
            f"[CORE]\n  WorkTree = {other}\n",
            f"[include]\n\tpath = {other / '.git' / 'config'}\n",
            f'[includeIf "gitdir:/x/"]\n\tpath = {other / ".git" / "config"}\n',
        )
    ):
        repo = make_repo(tmp_path / f"cfg{i}")
        with (repo / ".git" / "config").open("a") as fh:
            fh.write(text)
        assert refusal(repo) == "git_worktree", text

    deep = make_repo(tmp_path / "deep")
    os.symlink(other / ".git" / "refs" / "heads", deep / ".git" / "refs" / "linked")
    assert refusal(deep) == "symlink"


def test_a_bare_repository_is_checked_like_a_git_directory(tmp_path: Path) -> None:
    other = make_repo(tmp_path / "other")
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(other), str(bare)], check=True)
    assert (bare / "HEAD").exists()
    assert refusal(bare) is None
    (bare / "objects" / "info").mkdir(exist_ok=True)
    (bare / "objects" / "info" / "alternates").write_text(f"{other / '.git' / 'objects'}\n")
    assert refusal(bare) == "git_alternates"


def test_hard_linked_objects_of_a_local_clone_are_allowed(tmp_path: Path) -> None:
    """``git clone --local`` shares object files by hard link: that is no indirection."""
    other = make_repo(tmp_path / "other")
    subprocess.run(
        ["git", "clone", "-q", "--local", str(other), str(tmp_path / "clone")], check=True
    )
    assert refusal(tmp_path / "clone") is None


def test_a_git_directory_too_large_to_walk_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    monkeypatch.setattr(localpaths, "GIT_MAX_ENTRIES", 5)
    assert refusal(repo) == "git_too_large"


def _config(text: str, tmp_path: Path) -> object:
    return parse_host_config(text, str(tmp_path / "host.toml"), base_dir=tmp_path)


def test_path_check_defaults_by_where_the_upstream_runs(tmp_path: Path) -> None:
    config = _config(
        '[upstream.a]\ncommand = "x"\n'
        '[upstream.b]\nurl = "http://127.0.0.1:9/mcp"\n'
        '[upstream.c]\nurl = "http://localhost:9/mcp"\n'
        '[upstream.d]\nurl = "https://mcp.example.com/mcp"\n'
        '[upstream.e]\nurl = "https://mcp.example.com/mcp"\npath_check = "off"\n'
        '[upstream.f]\ncommand = "x"\npath_check = "off"\n'
        '[upstream.g]\nurl = "http://[::1]:9/mcp"\n',
        tmp_path,
    )
    links = {uid: c.links for uid, c in config.upstream.items()}  # type: ignore[attr-defined]
    assert links == {
        "a": "local",
        "b": "local",
        "c": "local",
        "d": "unchecked",
        "e": "off",
        "f": "off",
        "g": "local",
    }
    assert "path calls refused" in config.upstream["d"].summary()  # type: ignore[attr-defined]


def test_a_bad_path_check_is_reported_at_its_position(tmp_path: Path) -> None:
    from sharedos.harness.hostconfig import HostConfigError

    with pytest.raises(HostConfigError) as caught:
        _config('[upstream.a]\ncommand = "x"\npath_check = "sometimes"\n', tmp_path)
    assert "host.toml:3:1: upstream.a.path_check" in str(caught.value)


@pytest.mark.anyio
async def test_the_broker_refuses_what_it_cannot_check_and_skips_what_it_is_told(
    tmp_path: Path,
) -> None:
    os.symlink(tmp_path, tmp_path / "link")
    config = _config(
        '[upstream.remote]\nurl = "https://mcp.example.com/mcp"\n'
        '[upstream.trusted]\nurl = "https://mcp.example.com/mcp"\npath_check = "off"\n'
        '[upstream.here]\ncommand = "x"\n',
        tmp_path,
    )
    ups = config.upstream  # type: ignore[attr-defined]
    broker = UpstreamBroker(ups, environ={})
    plain = str(tmp_path)
    linked = str(tmp_path / "link")
    remote = await broker.check_path(ups["remote"], plain)
    assert remote is not None and remote.endswith("(unchecked_host)")
    assert await broker.check_path(ups["trusted"], linked) is None
    assert await broker.check_path(ups["here"], plain) is None
    here = await broker.check_path(ups["here"], linked)
    assert here is not None and "(symlink)" in here and "'here'" in here


def _git(*args: str) -> None:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", *args], check=True, env=env, capture_output=True)


def test_a_config_key_that_runs_a_program_or_reads_elsewhere_is_refused(tmp_path: Path) -> None:
    """git obeys a repository's config with the upstream's access: only keys known to be
    inert pass (what init, clone and branch tracking write); a line the check cannot
    read as one of those is refused too."""
    origin = make_repo(tmp_path / "origin")
    _git("clone", "-q", str(origin), str(tmp_path / "clone"))
    _git("-C", str(tmp_path / "clone"), "config", "user.name", "Bob")
    _git("-C", str(tmp_path / "clone"), "config", "pull.rebase", "true")
    assert refusal(tmp_path / "clone") is None  # remote.origin.*, branch.main.*, user.name
    for i, text in enumerate(
        (
            '[core]\n\tfsmonitor = "cat /etc/shadow > /tmp/x"\n',
            "[core] hooksPath = /tmp/hooks\n",
            '[diff]\n\texternal = "sh -c id"\n',
            '[diff "x"]\n\ttextconv = cat\n',
            '[filter "x"]\n\tclean = "sh -c id"\n',
            "[Core]\n\tFSMonitor\n",  # a bare key is `true`
            "[core.fsmonitor]\n\tx = 1\n",  # the deprecated [section.subsection] spelling
            '[core ""]\n\tfsmonitor = x\n',
            "[core]\n\tabbrev = 7 \\\nfsmonitor = x\n",  # read as a key here, never missed
            # git reads the header as core.abbrev's value and stays in [core]
            '[core]\n\tabbrev = 7 \\\n[remote "o"]\n\turl = x\n',
            "[core]\r\tfsmonitor = x\n",  # a lone CR
            "[extensions]\n\tworktreeConfig = true\n",
            "[extensions]\n\tpartialClone = origin\n",
            '[remote "origin"]\n\tpromisor = true\n',
            '[credential]\n\thelper = "!sh -c id"\n',
            '[submodule "s"]\n\tupdate = "!sh -c id"\n',
            "\ufefffsmonitor = x\n",
        )
    ):
        repo = make_repo(tmp_path / f"cfg{i}")
        with (repo / ".git" / "config").open("a", encoding="utf-8", newline="") as fh:
            fh.write(text)
        assert refusal(repo) == "git_config", text
    # the per-worktree config is read alike
    repo = make_repo(tmp_path / "wtcfg")
    (repo / ".git" / "config.worktree").write_text("[core]\n\tfsmonitor = x\n")
    assert refusal(repo) == "git_config"


def test_submodules_under_git_modules_pass_and_everything_else_git_would_enter_is_refused(
    tmp_path: Path,
) -> None:
    lib = make_repo(tmp_path / "lib")
    repo = make_repo(tmp_path / "repo")
    _git(
        "-C",
        str(repo),
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        str(lib),
        "deps/lib",
    )
    _git("-C", str(repo), "commit", "-q", "-m", "submodule")
    assert refusal(repo) is None  # .git/modules/deps/lib, core.worktree pointing back
    # the submodule's own git directory is held to the same config rules
    module_config = repo / ".git" / "modules" / "deps" / "lib" / "config"
    kept = module_config.read_text()
    module_config.write_text(kept + "[core]\n\tfsmonitor = x\n")
    assert refusal(repo) == "git_config"
    module_config.write_text(kept)
    # a checked-out gitlink pointing outside .git/modules
    pointer = repo / "deps" / "lib" / ".git"
    kept = pointer.read_text()
    pointer.write_text(f"gitdir: {lib / '.git'}\n")
    assert refusal(repo) == "git_pointer"
    pointer.write_text("gitdir: ../../.git/modules/../../../lib/.git\n")
    assert refusal(repo) == "git_pointer"
    pointer.write_text(kept)
    assert refusal(repo) is None
    # an embedded repository (its own .git directory) added as a gitlink
    make_repo(repo / "embedded")
    _git("-C", str(repo), "add", "embedded")
    assert refusal(repo) == "git_submodule"
    assert refusal(repo / ".git") == "git_submodule"  # the git directory named itself


def test_gitlinks_are_found_in_every_index_format(tmp_path: Path) -> None:
    for version in ("2", "3", "4"):
        repo = make_repo(tmp_path / f"v{version}")
        make_repo(repo / "a" / "embedded")
        _git("-C", str(repo), "add", "a/embedded")
        _git("-C", str(repo), "update-index", f"--index-version={version}")
        assert refusal(repo) == "git_submodule", version
    repo = make_repo(tmp_path / "split")
    make_repo(repo / "embedded")
    _git("-C", str(repo), "add", "embedded")
    _git("-C", str(repo), "update-index", "--split-index")
    (repo / "b.txt").write_text("b\n")
    _git("-C", str(repo), "add", "b.txt")
    assert refusal(repo) == "git_submodule"
    (repo / ".git" / "index").write_bytes(b"DIRC\x00\x00\x00\x09" + b"\x00" * 40)
    assert refusal(repo) == "git_submodule"  # unreadable: refused, not skipped


def test_a_refused_config_line_is_named_by_number_never_by_its_text(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write(
            '[remote "origin"]\n\turl = https://x \\\nghp_PLANTEDtoken0123456789@example.invalid\n'
        )
    paths = LocalPaths()
    with pytest.raises(SandboxError) as caught:
        paths.check(str(repo))
    assert caught.value.code == "git_config"
    assert "PLANTED" not in str(caught.value) and "(line " in str(caught.value)
    for continued in ("ghpPLANTEDtoken0123456789", "PLANTEDtoken = 1"):
        repo = make_repo(tmp_path / f"repo-{continued[:6]}-{len(continued)}")
        with (repo / ".git" / "config").open("a") as fh:
            fh.write(f'[remote "origin"]\n\turl = https://x \\\n{continued}\n')
        with pytest.raises(SandboxError) as caught:
            paths.check(str(repo))
        assert "planted" not in str(caught.value).lower(), str(caught.value)
    repo = make_repo(tmp_path / "named")
    with (repo / ".git" / "config").open("a") as fh:
        fh.write("[core]\n\tfsmonitor = x\n")
    with pytest.raises(SandboxError) as caught:
        paths.check(str(repo))
    assert "core.fsmonitor" in str(caught.value)


def test_a_missing_name_is_checked_as_the_equivalent_unicode_name_an_upstream_opens(
    tmp_path: Path,
) -> None:
    """server-filesystem opens ``cafe\\u0301`` when asked for the missing ``café``: the
    check looks at that entry with the same rules, not at a canonical name that is absent."""
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.txt").write_text("x")
    os.symlink(tmp_path / "real", tmp_path / nfd)
    assert refusal(tmp_path / nfc) == "symlink"
    assert refusal(tmp_path / nfc / "f.txt") == "symlink"
    assert refusal(tmp_path / nfc / "new.txt") == "symlink"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / f"{nfd}.txt").write_text("x")
    assert refusal(tmp_path / "d" / f"{nfc}.txt") is None  # a plain file: served
    os.link(tmp_path / "d" / f"{nfd}.txt", tmp_path / "d" / "second")
    assert refusal(tmp_path / "d" / f"{nfc}.txt") == "hard_link"
    # U+212A KELVIN SIGN is 'K' in NFC: an ASCII request has equivalents too
    (tmp_path / "k").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "k" / "\u212aeys")
    assert refusal(tmp_path / "k" / "Keys" / "f.txt") == "symlink"
    # two spellings of one missing name: which one is opened is the upstream's choice
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "K\u0301").mkdir()  # both are U+1E30 in NFC
    (tmp_path / "two" / "\u212a\u0301").mkdir()
    assert refusal(tmp_path / "two" / "\u1e30" / "x") == "equivalent_names"


def test_only_the_known_characters_have_an_ascii_nfc_form() -> None:
    """``pathwalk.ASCII_TARGETS`` lets a missing ASCII name skip the directory scan; it must
    hold every ASCII character some other character normalizes to (a Python with a newer
    Unicode database that adds one fails here, not in production)."""
    import sys
    import unicodedata

    targets = set()
    for cp in range(0x80, sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        nfc = unicodedata.normalize("NFC", chr(cp))
        if nfc.isascii():
            targets.update(nfc)
    assert targets == set(pathwalk.ASCII_TARGETS)


def test_a_new_ascii_name_does_not_read_its_whole_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every call naming a new file would otherwise list its directory (37 ms of CPU per call
    in a directory of 100,000 entries); a name no other spelling reaches needs no list."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "old.txt").write_text("x")
    scans: list[object] = []
    real = os.scandir

    def counting(path: object) -> object:
        scans.append(path)
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(pathwalk.os, "scandir", counting)
    assert refusal(tmp_path / "d" / "new-file.txt") is None
    assert refusal(tmp_path / "d" / "new" / "deeper.txt") is None
    assert scans == []
    assert refusal(tmp_path / "d" / "Key.txt") is None  # K: KELVIN SIGN is another spelling
    assert len(scans) == 1


def test_a_path_an_upstream_would_expand_is_refused(tmp_path: Path) -> None:
    for name in ("$HOME", "${HOME}", "x$USER", "$é"):
        assert refusal(tmp_path / name) == "expandable_path", name
    for name in ("price$", "a$ b", "$-1"):
        assert refusal(tmp_path / name) is None, name  # nothing expandvars would touch

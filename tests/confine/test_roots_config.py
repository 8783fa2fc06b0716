"""``[upstream.ID] roots``, ``network``, ``readonly`` and ``[confinement]`` in the host file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import HostConfigError, load_host_config, parse_host_config

SHAREDOS = str(Path(sys.executable).parent / "sharedos")


def problems(text: str) -> list[str]:
    with pytest.raises(HostConfigError) as info:
        parse_host_config(text, "host.toml")
    return info.value.problems


def test_roots_are_absolute_existing_canonical_and_free_of_links(tmp_path: Path) -> None:
    real = tmp_path / "share"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    good = parse_host_config(
        f'[upstream.fs]\ncommand = "x"\nroots = [{{ path = "{real}", mode = "rw" }}, '
        f'{{ path = "{tmp_path}" }}]\nnetwork = true\n',
        "host.toml",
    ).upstream["fs"]
    assert [(r.path, r.mode) for r in good.roots or ()] == [
        (str(real), "rw"),
        (str(tmp_path), "ro"),
    ]
    assert good.network is True and "roots: " in good.summary()
    found = problems(
        '[upstream.fs]\ncommand = "x"\nroots = [\n'
        '  { path = "relative/dir" },\n'
        f'  {{ path = "{tmp_path / "link"}" }},\n'
        f'  {{ path = "{real}/../share" }},\n'
        f'  {{ path = "{tmp_path / "missing"}" }},\n'
        f'  {{ path = "{real}", mode = "write" }},\n'
        "]\n"
    )
    text = "\n".join(found)
    assert text.count("host.toml:3:1: upstream.fs.roots:") == 5, text
    assert "entry 1 (relative/dir): must be an absolute path" in text
    assert f"{tmp_path / 'link'} is a symbolic link" in text
    assert "must be written canonically" in text and "does not exist" in text
    assert 'mode is "ro" or "rw"' in text
    # roots belong to command upstreams
    assert any(
        "roots is for command upstreams" in p
        for p in problems('[upstream.d]\nurl = "http://127.0.0.1:1/mcp"\nroots = []\n')
    )


def test_a_declared_empty_root_list_and_an_absent_one_differ() -> None:
    none = parse_host_config('[upstream.a]\ncommand = "x"\n', "h").upstream["a"]
    empty = parse_host_config('[upstream.a]\ncommand = "x"\nroots = []\n', "h").upstream["a"]
    assert none.roots is None and "cannot be confined" in none.summary()
    assert empty.roots == () and "roots: no files" in empty.summary()


def test_confinement_table() -> None:
    cfg = parse_host_config(
        '[harness.claude-code]\n[confinement]\nnetwork = "host"\nloopback_ports = [3128]\n'
        'readonly = ["/opt/cli"]\n',
        "h",
    )
    assert cfg.confinement.network == "host" and cfg.confinement.loopback_ports == (3128,)
    bad = problems('[harness.claude-code]\n[confinement]\nnetwork = "any"\nloopback_ports = [0]\n')
    assert len(bad) == 2


def test_host_check_reports_roots(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    host = tmp_path / "host.toml"
    host.write_text(
        f'[upstream.fs]\ncommand = "x"\nroots = [{{ path = "{share}", mode = "rw" }}]\n'
        '[upstream.git]\ncommand = "y"\nroots = [{ path = "/no/such/dir" }]\n'
    )
    proc = subprocess.run(
        [SHAREDOS, "host", "check", str(host)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert f"{host}:6:1: upstream.git.roots: entry 1 (/no/such/dir): does not exist" in proc.stderr


def test_confinement_readonly_paths_are_read_as_the_host_files_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: they were read as a command: "~/.local/lib" became <host dir>/~/.local/lib (a
    # strict run then could not start: "sandbox path ... does not exist ... Install
    # bubblewrap"), and a bare "lib" was the working directory's lib, not the host file's
    from sharedos.harness.runtime import create_mcp_harness_runtime

    home, etc, elsewhere = tmp_path / "home", tmp_path / "etc", tmp_path / "cwd"
    for d in (home, etc, elsewhere):
        d.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(elsewhere)
    host = etc / "host.toml"
    host.write_text(
        '[harness.claude-code]\n[confinement]\nreadonly = ["~/.local/lib", "lib", '
        '"sub/dir", "${EXTRA}/x", "/opt/cli"]\n',
        encoding="utf-8",
    )
    cfg = load_host_config(host)
    runtime = create_mcp_harness_runtime("claude-code", cfg, environ={"EXTRA": "/srv"})
    shown = runtime._install_paths()[-5:]
    assert shown == [
        str(home / ".local/lib"),
        str(etc / "lib"),
        str(etc / "sub/dir"),
        "/srv/x",
        "/opt/cli",
    ]

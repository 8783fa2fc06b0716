"""launch.py: what a sandbox that cannot start says, and that nothing starts then."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.confine import find_bubblewrap
from sharedos.confine.launch import SETUP_FAILED, open_nofollow
from sharedos.confine.sandbox import HarnessSandbox
from sharedos.confine.upstream import plan_upstream
from sharedos.errors import ConfinementError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")


def test_a_missing_component_is_reported_with_the_whole_path(tmp_path: Path) -> None:
    gone = tmp_path / "share" / "public"
    with pytest.raises(FileNotFoundError) as caught:
        open_nofollow(str(gone))
    assert caught.value.filename == str(gone)
    assert str(tmp_path / "share") in str(caught.value)  # where the walk stopped
    (tmp_path / "share").mkdir()
    with pytest.raises(FileNotFoundError) as last:
        open_nofollow(str(gone))
    assert last.value.filename == str(gone)


def test_an_upstream_root_removed_since_the_plan_is_named_when_it_cannot_start(
    tmp_path: Path,
) -> None:
    """The upstream's stderr is all the operator sees of it: ``public: No such file or
    directory`` named no root (every upstream has its own ``public``, ``data``, ``src``)."""
    public = tmp_path / "share" / "public"
    public.mkdir(parents=True)
    marker = tmp_path / "ran"
    sandbox = plan_upstream(find_bubblewrap(), command="/bin/sh", roots=[(str(public), "ro")])
    public.rmdir()
    command, args = sandbox.wrap("/bin/sh", ["-c", f"echo ran > {marker}"])
    done = subprocess.run([command, *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == SETUP_FAILED
    assert f"{public}: No such file or directory" in done.stderr, done.stderr
    assert not marker.exists()


def test_a_harness_path_removed_since_the_plan_is_named_when_it_cannot_start(
    tmp_path: Path,
) -> None:
    shown = tmp_path / "tools" / "bin"
    shown.mkdir(parents=True)
    turn = tmp_path / "turn"
    turn.mkdir()
    sandbox = HarnessSandbox.plan(
        find_bubblewrap(), readonly=[shown], writable=[turn], managed=[], network="none"
    )
    (tmp_path / "tools" / "bin").rmdir()
    (tmp_path / "tools").rmdir()
    try:
        with pytest.raises(ConfinementError) as caught:
            sandbox.argv(["/bin/true"], cwd=turn)
    finally:
        sandbox.spawned()
    assert str(shown) in str(caught.value)
    assert str(tmp_path / "tools") in str(caught.value)


@pytest.mark.parametrize(
    "options",
    [
        ["--binds", "5"],  # past the command: was a traceback once the reads were opened
        ["--binds", "-1"],  # from the end: the program's last argument taken for a path
        ["--binds", "0"],  # the program itself
        ["--read", "1=/dev/null"],  # over the program's stdout
        ["--read", "3"],  # no file
        ["--binds"],  # no value
        ["--unknown", "1"],
    ],
)
def test_bad_launcher_arguments_start_nothing_and_say_so(
    options: list[str], tmp_path: Path
) -> None:
    from sharedos.confine.launch import launch_script

    marker = tmp_path / "ran"
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            launch_script(),
            *options,
            "--",
            "/bin/sh",
            "-c",
            f"touch {marker}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == SETUP_FAILED, done.stderr
    assert done.stderr.startswith("sharedos launch: ") and "Traceback" not in done.stderr
    assert not marker.exists()


AUTOMOUNT = """
import json, os, subprocess, sys
from sharedos.confine import find_bubblewrap
from sharedos.confine.upstream import plan_upstream
debug = sys.argv[1]
subprocess.run(["mount", "-t", "debugfs", "none", debug], check=True)
tracing = os.path.join(debug, "tracing")  # tracefs, mounted there at its first lookup
for root in (os.path.join(tracing, "options"), tracing):
    subprocess.run(["umount", tracing], capture_output=True)  # not mounted yet
    sandbox = plan_upstream(find_bubblewrap(), command="/bin/ls", roots=[(root, "ro")])
    command, args = sandbox.wrap("/bin/ls", [root])
    done = subprocess.run([command, *args], capture_output=True, text=True, timeout=30)
    print(json.dumps([done.returncode, done.stdout.split(), done.stderr.strip()]))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root")
def test_a_path_behind_an_automount_point_not_mounted_yet_is_bound(tmp_path: Path) -> None:
    """An autofs home (or ``/net`` share) after its idle timeout is an automount point not
    mounted: ``O_PATH`` alone stops on it, and the sandbox of a root there or under it
    refused to start (``No such file or directory`` when a later component was looked up
    in the trigger, ``bwrap: Race condition binding dirfd`` when bwrap's own lookup
    mounted it), where ``--ro-bind PATH PATH`` (a plain lookup) had mounted it.
    Measured with the kernel's own automount (tracefs under debugfs), in a mount namespace
    of the test's own."""
    debug = tmp_path / "debug"
    debug.mkdir()
    script = tmp_path / "automount.py"
    script.write_text(AUTOMOUNT, encoding="utf-8")
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-I", str(script),
         str(debug)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"no debugfs here: {done.stderr.strip()[-200:]}")
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == 2, done.stdout + done.stderr
    under, at = results  # a root under the automount point, then the point itself
    assert under[0] == 0 and under[2] == "" and len(under[1]) > 3, under
    assert at[0] == 0 and at[2] == "" and {"options", "trace"} <= set(at[1]), at

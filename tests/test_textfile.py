"""Files an operator names are read whole and bounded, never waited on, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sharedos.textfile import UnreadableFile, read_bytes, read_secret, read_text

BIN = Path(sys.executable).parent
SECRET = "CANARY-\u00e9-7f3a"  # what a credential file holds: never in an error


def test_reads_text_like_open_does(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_bytes(b"\xef\xbb\xbfa\r\nb\rc\n")
    assert read_text(f) == "a\nb\nc\n"
    assert read_bytes(f) == b"\xef\xbb\xbfa\r\nb\rc\n"


def test_not_utf8_names_the_place_not_the_bytes(tmp_path: Path) -> None:
    f = tmp_path / "creds"
    f.write_bytes(SECRET.encode() + b"\nab\xff\xfe")
    with pytest.raises(UnreadableFile) as err:
        read_text(f)
    assert str(err.value) == "not UTF-8 text (line 2, byte 3 of the line)"
    assert "CANARY" not in str(err.value)


def test_devices_directories_and_oversize_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFile, match="not a regular file"):
        read_bytes("/dev/zero")
    with pytest.raises(UnreadableFile, match="a directory"):
        read_bytes(tmp_path)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 5000)
    with pytest.raises(UnreadableFile, match="larger than 4,096 bytes"):
        read_bytes(big, limit=4096)
    assert len(read_bytes(big, limit=5000)) == 5000
    with pytest.raises(FileNotFoundError):
        read_bytes(tmp_path / "missing")


def test_a_pipe_is_read_and_one_nobody_writes_to_is_empty(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_text(fifo) == ""  # an open() of it waited forever
    r, w = os.pipe()
    os.write(w, b'{"principal": "alice"}')
    os.close(w)
    try:
        assert read_text(f"/dev/fd/{r}") == '{"principal": "alice"}'
    finally:
        os.close(r)


@pytest.mark.parametrize(
    "argv",
    [
        ["sharedos", "host", "check", "{bad}"],
        ["sharedos", "host", "check", "/dev/zero"],
        ["sharedos", "host", "check", "{fifo}"],
        ["sharedos-policy", "check", "{rules}", "--catalog", "/dev/zero"],
        ["sharedos", "evidence", "verify", "--db", "{db}", "--key", "/dev/zero"],
        ["sharedos", "evidence", "verify", "--db", "{db}", "--key", "{bad}"],
    ],
    ids=["not-utf8", "device", "fifo", "json-device", "key-device", "key-not-pem"],
)
def test_the_commands_say_what_is_wrong_and_stop(tmp_path: Path, argv: list[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"[harness.x]\nkind = \xff\n")
    fifo = tmp_path / "host.toml"
    os.mkfifo(fifo)
    rules = tmp_path / "r.sos"
    rules.write_text("namespace files\n")
    db = tmp_path / "e.sqlite"
    subs = {"{bad}": str(bad), "{fifo}": str(fifo), "{rules}": str(rules), "{db}": str(db)}
    args = [subs.get(a, a) for a in argv]
    proc = subprocess.run(
        [str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=60
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (1, 2), out
    assert "Traceback" not in out, out


def test_a_private_key_others_can_read_is_refused(tmp_path: Path) -> None:
    from sharedos.textfile import read_private

    key = tmp_path / "k.pem"
    key.write_bytes(b"-----BEGIN PRIVATE KEY-----\n")
    key.chmod(0o644)
    with pytest.raises(UnreadableFile, match=r"other users can read or write \(mode 0644\)"):
        read_private(key)
    key.chmod(0o600)
    assert read_private(key).startswith(b"-----BEGIN")
    proc = subprocess.run(
        [str(BIN / "sharedos-policy"), "sign", str(key), "--key", str(key)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "other users" not in proc.stderr  # 0600: the mode is not what it refuses
    key.chmod(0o640)
    proc = subprocess.run(
        [str(BIN / "sharedos-policy"), "sign", str(key), "--key", str(key)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "chmod 600" in proc.stderr, proc.stderr


def test_a_credential_is_checked_on_the_file_actually_opened(tmp_path: Path) -> None:
    """``read_secret`` refuses, on the open file itself, what an earlier ``lstat`` could
    have passed before a swap: a link (even to a good file), a file others can read, a
    pipe (never waited on), a directory. So a link swapped in between a look and the
    read is refused, never followed."""
    good = tmp_path / "token"
    good.write_text("s3cret-value\n")
    good.chmod(0o600)
    assert read_secret(good) == b"s3cret-value\n"
    link = tmp_path / "link"
    link.symlink_to(good)
    with pytest.raises(OSError):
        read_secret(link)
    loose = tmp_path / "loose"
    loose.write_text("s3cret-value")
    loose.chmod(0o644)
    with pytest.raises(UnreadableFile, match="readable or writable by others") as caught:
        read_secret(loose)
    assert "s3cret" not in str(caught.value)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(UnreadableFile, match="not a regular file"):
        read_secret(fifo)
    with pytest.raises(UnreadableFile, match="not a regular file"):
        read_secret(tmp_path)

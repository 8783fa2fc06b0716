"""The seccomp filter of every sandbox: no access to the kernel's keyrings.

The kernel's key management (``add_key``, ``request_key``, ``keyctl``) is not
confined by namespaces: a sandboxed process keeps the session keyring of the
process that started it, *possesses* every key reachable from it (a login's
session keyring links the user keyring, where Kerberos tickets, ``keyctl``-stored
tokens and file-system keys live), and, mapped onto SharedOS's own uid, passes the
owner checks of SharedOS's keys. Measured before this filter: a key SharedOS's
process held in its session keyring was read back, payload and all, from inside a
harness sandbox and an upstream sandbox (ids listed by the sandbox's own
``/proc/keys``). So, as Docker's default profile and Flatpak do, every sandbox
gets these three system calls refused with ``EPERM`` (``bwrap --seccomp FD``,
installed last, under ``no_new_privs``, after the sandbox is set up).

The filter is classic BPF over ``struct seccomp_data``: the architecture
(``AUDIT_ARCH_*``) picks the syscall numbers (x86-64 with its x32 numbers, i386,
AArch64, 32-bit ARM, RISC-V 64); any other system call is allowed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile

#: BPF opcodes (linux/bpf_common.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_RET_K = 0x06
#: seccomp return values (linux/seccomp.h)
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_EPERM = 1
_X32 = 0x40000000

#: AUDIT_ARCH_* → the numbers of add_key, request_key and keyctl there
KEYRING_SYSCALLS: dict[int, tuple[int, ...]] = {
    0xC000003E: (248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250),  # x86-64, x32
    0x40000003: (286, 287, 288),  # i386 (also 32-bit code on x86-64)
    0xC00000B7: (217, 218, 219),  # AArch64
    0x40000028: (309, 310, 311),  # ARM
    0xC00000F3: (217, 218, 219),  # RISC-V 64
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def keyring_filter() -> bytes:
    """The BPF program (``struct sock_filter`` array) ``bwrap --seccomp`` reads."""
    body: list[tuple[int, int, int, int | str]] = []  # jf/jt may name the "deny" label
    body.append((_LD_W_ABS, 0, 0, 4))  # A = seccomp_data.arch
    for arch, numbers in KEYRING_SYSCALLS.items():
        block = [(_LD_W_ABS, 0, 0, 0)]  # A = seccomp_data.nr
        block += [(_JEQ_K, -1, 0, n) for n in numbers]  # -1: jump to deny
        block += [(_RET_K, 0, 0, _ALLOW)]
        body.append((_JEQ_K, 0, len(block), arch))  # another architecture: skip the block
        body += block
    body.append((_RET_K, 0, 0, _ALLOW))  # an architecture not listed
    deny = len(body)
    body.append((_RET_K, 0, 0, _ERRNO | _EPERM))
    out = b""
    for at, (code, jt, jf, k) in enumerate(body):
        if jt == -1:
            jt = deny - at - 1
        out += _insn(code, jt, jf, int(k))
    return out


def filter_fd() -> int:
    """A memory file holding the filter, read from its start (inheritable; the caller
    passes it to ``bwrap`` and closes it after spawning)."""
    fd = os.memfd_create("sharedos-seccomp", 0)
    try:
        os.write(fd, keyring_filter())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def filter_file(directory: str | os.PathLike[str]) -> str:
    """The filter as a file in ``directory`` (a private directory no sandbox shows),
    written once (by content) and renamed into place; its path."""
    data = keyring_filter()
    path = os.path.join(directory, f"seccomp-{hashlib.sha256(data).hexdigest()[:16]}.bpf")
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        if fh.read() == data:
            return path
    fd, staging = tempfile.mkstemp(prefix=".seccomp-", dir=directory)
    try:
        os.write(fd, data)
        os.close(fd)
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
    return path

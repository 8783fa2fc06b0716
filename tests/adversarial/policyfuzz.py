"""Policy-text fuzzing: inputs from the grammar and from mutated real files, run in a watched worker.

``grammar_texts()`` draws programs from ``grammar/sharedos.lark`` with
Hypothesis's Lark support, every terminal followed by a separator (so
keywords do not fuse into names) and names/strings drawn from a realistic
vocabulary as well as from the terminal's own regular expression.
``mutated_inputs()`` takes the shipped and test ``.sos`` files and applies
byte and token mutations: deletions, duplications, splices between files,
inserted tokens, flipped bytes, truncation, deep repetition.

``Worker`` runs each input in a separate process (``policy_worker.py``)
through ``compile_source``, ``sharedos-policy check`` and ``sharedos-policy
fmt --check``, and kills it if an input takes longer than the bound.
``verdict()`` says what is wrong with a reply, if anything: an exception
other than ``PolicyError``, exit code 3 or a traceback, a stage over
``LIMIT_S`` seconds of CPU time (the work an input causes, which a busy
machine does not inflate as it does wall time; scaled by the processor's
measured speed, ``tests/timing.py``), or a hang: no answer within
``HANG_S`` seconds, scaled by the machine's measured slowdown
(``tests/timing.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import lark
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

from tests.timing import bound, cpu_bound

REPO = Path(__file__).resolve().parents[2]
GRAMMAR = REPO / "grammar" / "sharedos.lark"
REGRESSIONS = REPO / "tests" / "data" / "adversarial" / "policy"
#: where a run saves inputs it found (git-ignored); copy them to REGRESSIONS to keep them
FOUND = REPO / "reports" / "policy-fuzz-found"
#: the most CPU seconds one stage (API compile, check, fmt) may take on one input. Room
#: for linear work on the largest kept input (531 KB, 1.4-2.2 s of CPU per stage here,
#: which crossed a 2 s bound under load); a blowup is minutes, far past it.
LIMIT_S = 6.0
#: a stage that gives no answer within this many seconds (scaled by ``bound``) hangs
HANG_S = 15.0


def seed_files() -> list[Path]:
    """Every shipped and test ``.sos`` file (the mutation seeds)."""
    roots = [REPO / "rules", REPO / "policy", REPO / "tests" / "data"]
    found = sorted(p for r in roots for p in r.rglob("*.sos") if p.is_file())
    return [p for p in found if REGRESSIONS not in p.parents]


# -- inputs from the grammar -----------------------------------------------------------
_SEP = st.sampled_from([" ", " ", " ", "\n", "\t", " # c\n", "\r\n", "  "])
_NAMES = st.sampled_from(
    [
        "files",
        "github",
        "read",
        "write",
        "list",
        "search",
        "x",
        "_",
        "a_b",
        "args",
        "strict",
        "open",
    ]
)
_REFS = st.sampled_from(
    [
        "context.principal",
        "context.roles",
        "context.tenant",
        "args.path",
        "args.root",
        "args.x.y",
        "resource",
        "action",
        "path",
        "glob",
        "args",
    ]
)
_TOOLS = st.sampled_from(["files.read", "files.*", "github.search", "x", "a-b.c_d", "*", "**"])
_STRINGS = st.sampled_from(
    [
        '"/public/**"',
        '"/home/{context.principal}/**"',
        '"/private/*"',
        '"**"',
        '"*"',
        '"/"',
        '""',
        '"{args.path}"',
        '"{context.x}"',
        '"{"',
        '"}"',
        '"/a/{context.principal}{context.tenant}/b"',
        '"\\u0000"',
        '"\\"',
        '"editor"',
        '"x\\ny"',
        '"/a/**/b/**"',
    ]
)


def _terminal(name: str, pattern: str, vocabulary: Any = None) -> Any:
    own = st.from_regex(pattern, fullmatch=True)
    base = own if vocabulary is None else st.one_of(vocabulary, vocabulary, own)
    return st.tuples(base, _SEP).map("".join)


def _grammar_strategy() -> Any:
    g = lark.Lark(GRAMMAR.read_text(encoding="utf-8"), parser="lalr", lexer="contextual")
    vocab = {"NAME": _NAMES, "REF": _REFS, "TOOL": _TOOLS, "TOOLPAT": _TOOLS, "STRING": _STRINGS}
    explicit = {}
    for t in g.terminals:
        if t.name == "WS":
            explicit[t.name] = st.sampled_from([" ", "\n", "\t \r\n"])
            continue
        if t.name == "COMMENT":  # a comment ends its line, or it would swallow what follows
            explicit[t.name] = st.from_regex(r"#[^\n]{0,20}", fullmatch=True).map(
                lambda c: c + "\n"
            )
            continue
        pattern = t.pattern.to_regexp()
        explicit[t.name] = _terminal(t.name, pattern, vocab.get(t.name))
    return from_lark(g, explicit=explicit)


_GRAMMAR: Any = None


def grammar_texts() -> Any:
    """Programs drawn from the grammar (mostly parseable, so the checker and compiler run)."""
    global _GRAMMAR  # a cache of a pure function's result, not per-turn state
    if _GRAMMAR is None:
        _GRAMMAR = _grammar_strategy()
    return _GRAMMAR.map(lambda s: s.encode("utf-8"))


# -- inputs from mutating real files ---------------------------------------------------
TOKENS = [
    b"namespace", b"requirement", b"permit", b"forbid", b"toolpolicy", b"test", b"on",
    b"when", b"unless", b"action", b"resource", b"mode", b"managed", b"harness_local",
    b"external_direct", b"context", b"call", b"expect", b"allow", b"deny", b"and", b"or",
    b"not", b"in", b"==", b"!=", b"{", b"}", b"(", b")", b"[", b"]", b",", b";", b":",
    b"@id(\"x\")", b"@", b"*", b"**", b'"/a/**"', b'"', b"#", b"\n", b" ", b"path(args.p)",
    b"context.roles", b"args.x", b"1.5", b"-3", b"1e999", b"99999999999999999999999",
    b"true", b"false", b"null", b"\\", b"\x00", b"\xff", b"\xc0\xae", b"\xed\xa0\x80",
    b"\xe2\x80\xae", b"\xef\xbb\xbf", "é".encode(), "\uff0f".encode(), b"{context.principal}",
    b"\r", b"\x0c", b"\t", b"glob(", b"path(", b"\"\\u0000\"", b"strict", b"open",
]  # fmt: skip


def _seeds() -> list[bytes]:
    return [p.read_bytes() for p in seed_files()]


#: mutated inputs are cut to this size: the fuzzer looks for crashes and hangs in the
#: structure of a text; size alone is exercised by EXTREMES and the kept regressions
#: (a size cap also keeps it from rediscovering a known slow path on every run)
MAX_MUTATED = 16 * 1024


@st.composite
def mutated_inputs(draw: Any, max_ops: int = 6) -> bytes:
    """A seed file with 1..``max_ops`` random mutations applied (at most ``MAX_MUTATED`` bytes)."""
    seeds = _seeds()
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(
            st.sampled_from(
                ["delete", "dup", "insert", "flip", "splice", "truncate", "repeat", "swap"]
            )
        )
        n = len(data)
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 200)))
        if op == "delete":
            del data[i:j]
        elif op == "dup":
            data[i:i] = data[i:j]
        elif op == "insert":
            data[i:i] = draw(st.sampled_from(TOKENS)) + draw(st.sampled_from([b"", b" ", b"\n"]))
        elif op == "flip" and n:
            k = min(i, n - 1)
            data[k] = draw(st.integers(0, 255))
        elif op == "splice":
            other = draw(st.sampled_from(seeds))
            a = draw(st.integers(0, len(other)))
            data[i:j] = other[a : a + draw(st.integers(0, 400))]
        elif op == "truncate":
            del data[i:]
        elif op == "repeat":
            piece = bytes(data[i:j]) or draw(st.sampled_from(TOKENS))
            data[i:i] = piece * draw(st.sampled_from([2, 10, 100, 1000]))  # cut below
        elif op == "swap":
            k = draw(st.integers(0, n))
            end = draw(st.integers(k, min(n, k + 200)))
            if j <= k:
                data[i:end] = data[k:end] + data[j:k] + data[i:j]
        del data[MAX_MUTATED:]
    return bytes(data)


#: deep and long inputs no mutation reaches in a few steps
EXTREMES: list[tuple[str, bytes]] = [
    ("not-x1000", b'namespace f\npermit read on "/a" when ' + b"not " * 1000 + b"true\n"),
    ("parens-x1000", b'namespace f\npermit read on "/a" when ' + b"(" * 1000 + b"true" + b")" * 1000),
    ("list-x1000", b'namespace f\npermit read on "/a" when "x" in ' + b"[" * 1000 + b"]" * 1000),
    ("and-x5000", b'namespace f\npermit read on "/a" when true' + b" and true" * 5000),
    ("or-x5000", b'namespace f\npermit read on "/a" when true' + b" or true" * 5000),
    ("object-x1000", b'test "t" { context ' + b'{ a: ' * 1000 + b"1" + b" }" * 1000 + b" }"),
    ("globstar-x500", b'namespace f\npermit read on "/' + b"**/" * 500 + b'x"\n'),
    ("star-pattern", b'namespace f\npermit read on "/' + b"*a" * 2000 + b'"\n'),
    ("long-string", b'namespace f\npermit read on "/' + b"a" * 200_000 + b'"\n'),
    ("long-name", b"namespace " + b"n" * 100_000 + b"\n"),
    ("call-args-x1000", b'namespace f\nrequirement f.x { action read; resource path(' + b"path(" * 1000 + b"args.p" + b")" * 1001 + b" }"),
    ("nul-bytes", b"namespace f\x00\npermit\x00read on \"/a\"\n"),
    ("bom", b"\xef\xbb\xbfnamespace f\n"),
    ("lone-surrogate", b'namespace f\npermit read on "/\xed\xa0\x80"\n'),
    ("invalid-utf8", b'namespace f\npermit read on "/\xff\xfe"\n'),
    ("crlf-only", b"\r\r\r\r"),
    ("empty", b""),
]  # fmt: skip


# -- the watched worker ----------------------------------------------------------------
class Hang(Exception):
    """The worker did not answer within the bound (it has been killed)."""


class Worker:
    """One ``policy_worker`` process; ``run(data)`` returns its reply or raises ``Hang``."""

    def __init__(self, *, selftest: bool = False, hang_s: float = HANG_S) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.served = 0
        self.selftest = selftest
        #: no answer within this many seconds (scaled by ``bound``) is a hang
        self.hang_s = hang_s

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env["SOS_FUZZ_SELFTEST"] = "1" if self.selftest else "0"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.adversarial.policy_worker"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
        )
        self.proc = proc
        self._ask(proc, b"namespace warm\n", timeout=120.0)  # imports, first compile
        return proc

    def _ask(self, proc: subprocess.Popen[str], data: bytes, timeout: float) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"b64": base64.b64encode(data).decode()}) + "\n")
        proc.stdin.flush()
        reply: dict[str, Any] = {}
        for stage in STAGES:
            line = self._line(proc, timeout, stage)
            got = json.loads(line)
            assert got["stage"] == stage, got
            reply[stage] = got
        return reply

    def _line(self, proc: subprocess.Popen[str], timeout: float, stage: str) -> str:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout)
        if reader.is_alive() or not box or not box[0]:
            why = (
                f"{stage} gave no answer within {timeout:g} s"
                if reader.is_alive()
                else (f"the worker died during {stage} (exit {proc.poll()})")
            )
            self.close()
            raise Hang(why)
        return box[0]

    def run(self, data: bytes) -> dict[str, Any]:
        """All stages on ``data``, by stage; ``Hang`` if one gives no answer in time."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        self.served += 1
        return self._ask(proc, data, timeout=bound(self.hang_s))

    def close(self) -> None:
        """Stop the worker (killed: it may be stuck)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
            self.proc = None


STAGES = ("api", "check", "fmt")


def verdict(reply: dict[str, Any]) -> str | None:
    """What is wrong with one reply, or ``None`` when the input was handled as documented."""
    problems = []
    api = reply["api"]
    if api["result"] == "crash":
        problems.append(f"compile_source raised: {api['detail']}")
    for stage in ("check", "fmt"):
        got = reply[stage]
        if got["result"] == 3:
            problems.append(f"sharedos-policy {stage} exited 3 (internal error)")
        elif got["result"] not in (0, 1):
            problems.append(f"sharedos-policy {stage} exited {got['result']}")
        if got["traceback"]:
            problems.append(f"sharedos-policy {stage} printed a traceback")
        if got["detail"]:
            problems.append(f"{stage} output: {got['detail']}")
    cpus = {stage: reply[stage].get("cpu", reply[stage]["s"]) for stage in STAGES}
    if max(cpus.values()) > LIMIT_S:  # the machine's speed is measured only when it matters
        limit = cpu_bound(LIMIT_S)
        for stage, cpu in cpus.items():
            if cpu > limit:
                problems.append(
                    f"{stage} took {cpu:.2f} s of CPU (> {limit:.2f} s; "
                    f"{reply[stage]['s']:.2f} s wall)"
                )
    return "; ".join(problems) or None


def judge(worker: Worker, data: bytes) -> str | None:
    """``verdict`` of one input, a hang or a dead worker included."""
    try:
        return verdict(worker.run(data))
    except Hang as exc:
        return f"hang: {exc}"


def save_found(data: bytes) -> Path:
    """Keep an input that broke something (under reports/, git-ignored) and return its path."""
    FOUND.mkdir(parents=True, exist_ok=True)
    path = FOUND / f"{hashlib.sha256(data).hexdigest()[:16]}.sos"
    path.write_bytes(data)
    return path

"""Wire garbage for the bridge: a fixed corpus, seeded mutations, and an independent oracle.

Every frame carries (or once carried, before it was mangled) a ``files.write``
of a path unique to that frame, with the frame's label as content — an
allowed call for alice. So what ran can be told from the sandbox afterwards:
a file may exist only for a frame the oracle reads as exactly that call.

The oracle is written from the JSON-RPC and JSON specifications, not from
the bridge's code: strict UTF-8, Python's ``json`` (no lone surrogates, as
I-JSON requires), a depth the SDK's parser reads (200).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REGRESSIONS = Path(__file__).resolve().parent.parent / "data" / "bridge" / "garbage"
SDK_DEPTH = 200
MAX_FRAME = 4 * 1024 * 1024


@dataclass(frozen=True)
class Garbage:
    """One frame to send, and where its call would write if it ran."""

    label: str
    data: bytes
    path: str = ""


@dataclass
class Expectation:
    """What the bridge owes a frame (see ``expect``)."""

    #: strict: SDK-readable JSON; python: JSON Python reads (lone surrogate / deep); none: unreadable
    readable: str
    calls: int = 0
    #: ids of tools/call requests that must be answered with a result
    answer_ids: list[Any] = field(default_factory=list)
    #: (path, content) of files.write calls that may run (strictly read, arguments intact)
    may_write: list[tuple[str, str]] = field(default_factory=list)
    blank: bool = False
    oversized: bool = False


def _depth(value: object) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend(
                (c, depth + 1) for c in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _lone_surrogate(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend([*item.keys(), *item.values()])
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _answerable(item: dict[str, Any]) -> bool:
    rid = item.get("id")
    return isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))


def expect(data: bytes) -> Expectation:
    """What the bridge must do with ``data`` (one HTTP body or one stdio line)."""
    if len(data) > MAX_FRAME:
        return Expectation(readable="none", oversized=True)
    if not data.strip(b" \t\r\n"):  # JSON's whitespace (RFC 8259 section 2) only
        return Expectation(readable="none", blank=True)
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Expectation(readable="none")
    strict = _depth(value) <= SDK_DEPTH and not _lone_surrogate(value)
    out = Expectation(readable="strict" if strict else "python")
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, dict) or item.get("method") != "tools/call":
            continue
        out.calls += 1
        if _answerable(item):
            out.answer_ids.append(item["id"])
        params = item.get("params")
        if strict and isinstance(params, dict) and params.get("name") == "files.write":
            args = params.get("arguments")
            if isinstance(args, dict) and isinstance(args.get("path"), str):
                out.may_write.append((args["path"], str(args.get("content"))))
    return out


def write_call(n: int, label: str, *, request_id: Any = None) -> dict[str, Any]:
    """A ``files.write`` of ``/home/alice/g<n>.txt`` with the label as content."""
    return {
        "jsonrpc": "2.0",
        "id": n if request_id is None else request_id,
        "method": "tools/call",
        "params": {
            "name": "files.write",
            "arguments": {"path": f"/home/alice/g{n}.txt", "content": label},
        },
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _deep(n: int, depth: int, label: str) -> bytes:
    base = write_call(n, label)
    args = (
        _dumps(base["params"]["arguments"])[:-1] + b',"deep":' + b"[" * depth + b"]" * depth + b"}"
    )
    head = _dumps({**base, "params": {"name": "files.write", "arguments": "@"}})
    return head.replace(b'"@"', args)


def fixed(start: int) -> Iterator[Garbage]:
    """The named cases of issue 11 (one frame each), numbered from ``start``."""
    n = start

    def nxt(label: str, data: bytes) -> Garbage:
        return Garbage(label, data, f"/home/alice/g{n}.txt")

    cases: list[tuple[str, Any]] = [
        ("valid", lambda n, lb: _dumps(write_call(n, lb))),
        (
            "invalid-utf8-in-path",
            lambda n, lb: _dumps(write_call(n, lb)).replace(b".txt", b"\xff.txt"),
        ),
        (
            "invalid-utf8-in-content",
            lambda n, lb: _dumps(write_call(n, lb)).replace(lb.encode(), b"\xc3\x28"),
        ),
        (
            "lone-surrogate-path",
            lambda n, lb: _dumps(write_call(n, lb)).replace(b".txt", b"\\ud800.txt"),
        ),
        (
            "lone-low-surrogate",
            lambda n, lb: _dumps(write_call(n, lb)).replace(b".txt", b"\\udc00.txt"),
        ),
        ("deep-150", lambda n, lb: _deep(n, 150, lb)),
        ("deep-199", lambda n, lb: _deep(n, 199, lb)),
        ("deep-250", lambda n, lb: _deep(n, 250, lb)),
        ("deep-1000", lambda n, lb: _deep(n, 1000, lb)),
        ("deep-100000", lambda n, lb: _deep(n, 100_000, lb)),
        ("truncated-half", lambda n, lb: _dumps(write_call(n, lb))[:40]),
        ("truncated-last-byte", lambda n, lb: _dumps(write_call(n, lb))[:-1]),
        ("random-bytes", lambda n, lb: random.Random(n).randbytes(300).replace(b"\n", b" ")),
        ("not-json", lambda n, lb: b"hello tools/call"),
        ("empty-object", lambda n, lb: b"{}"),
        ("json-number", lambda n, lb: b"42"),
        ("json-null", lambda n, lb: b"null"),
        (
            "batch-two",
            lambda n, lb: _dumps([write_call(n, lb), {**write_call(n, lb), "id": n + 0.5}]),
        ),
        ("batch-empty", lambda n, lb: b"[]"),
        ("batch-nested", lambda n, lb: _dumps([[write_call(n, lb)]])),
        ("batch-dup-ids", lambda n, lb: _dumps([write_call(n, lb), write_call(n, lb)])),
        (
            "notification-call",
            lambda n, lb: _dumps({k: v for k, v in write_call(n, lb).items() if k != "id"}),
        ),
        ("id-null", lambda n, lb: _dumps({**write_call(n, lb), "id": None})),
        ("id-bool", lambda n, lb: _dumps({**write_call(n, lb), "id": True})),
        ("id-float", lambda n, lb: _dumps({**write_call(n, lb), "id": 1.5})),
        ("id-object", lambda n, lb: _dumps({**write_call(n, lb), "id": {"a": 1}})),
        ("id-string", lambda n, lb: _dumps({**write_call(n, lb), "id": f"s-{n}"})),
        ("jsonrpc-1.0", lambda n, lb: _dumps({**write_call(n, lb), "jsonrpc": "1.0"})),
        ("jsonrpc-number", lambda n, lb: _dumps({**write_call(n, lb), "jsonrpc": 2})),
        ("method-number", lambda n, lb: _dumps({**write_call(n, lb), "method": 5})),
        ("params-list", lambda n, lb: _dumps({**write_call(n, lb), "params": ["files.write"]})),
        ("params-string", lambda n, lb: _dumps({**write_call(n, lb), "params": "x"})),
        (
            "params-missing",
            lambda n, lb: _dumps({k: v for k, v in write_call(n, lb).items() if k != "params"}),
        ),
        (
            "name-number",
            lambda n, lb: _dumps({**write_call(n, lb), "params": {"name": 7, "arguments": {}}}),
        ),
        (
            "name-object",
            lambda n, lb: _dumps(
                {**write_call(n, lb), "params": {"name": {"x": 1}, "arguments": {}}}
            ),
        ),
        (
            "arguments-list",
            lambda n, lb: _dumps(
                {**write_call(n, lb), "params": {"name": "files.write", "arguments": [1]}}
            ),
        ),
        (
            "arguments-string",
            lambda n, lb: _dumps(
                {**write_call(n, lb), "params": {"name": "files.write", "arguments": "p"}}
            ),
        ),
        (
            "meta-number",
            lambda n, lb: _dumps(
                {**write_call(n, lb), "params": {**write_call(n, lb)["params"], "_meta": 5}}
            ),
        ),
        (
            "content-number",
            lambda n, lb: _dumps(write_call(n, lb)).replace(f'"{lb}"'.encode(), b"17"),
        ),
        (
            "nan-argument",
            lambda n, lb: _dumps(write_call(n, lb)).replace(f'"{lb}"'.encode(), b"NaN"),
        ),
        ("huge-int-id", lambda n, lb: _dumps({**write_call(n, lb), "id": 10**30})),
        (
            "dup-key-name",
            lambda n, lb: _dumps(write_call(n, lb)).replace(
                b'"name":"files.write"', b'"name":"files.write","name":"files.delete"'
            ),
        ),
        ("bom-prefix", lambda n, lb: b"\xef\xbb\xbf" + _dumps(write_call(n, lb))),
        ("nul-byte", lambda n, lb: _dumps(write_call(n, lb)).replace(b".txt", b"\\u0000.txt")),
        ("raw-control-char", lambda n, lb: _dumps(write_call(n, lb)).replace(b".txt", b"\x01.txt")),
        ("trailing-garbage", lambda n, lb: _dumps(write_call(n, lb)) + b"}}"),
        ("two-objects", lambda n, lb: _dumps(write_call(n, lb)) + _dumps(write_call(n, lb))),
        (
            "call-with-error-member",
            lambda n, lb: _dumps({**write_call(n, lb), "error": {"code": 1, "message": "x"}}),
        ),
        ("response-shaped", lambda n, lb: _dumps({"jsonrpc": "2.0", "id": n, "result": {}})),
        (
            "error-shaped",
            lambda n, lb: _dumps({"jsonrpc": "2.0", "id": n, "error": {"code": 1, "message": "x"}}),
        ),
    ]
    for label, build in cases:
        yield nxt(label, build(n, label))
        n += 1
    for path in sorted(REGRESSIONS.glob("*.frame")):
        yield Garbage(f"regression:{path.name}", path.read_bytes())


_WRONG = [None, True, 0, -1, 1.5, 10**40, "", "x" * 300, [], {}, [1, "a"], {"k": None}]


def _mutate_value(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """``value`` with one randomly chosen member replaced by a value of the wrong type."""
    if isinstance(value, dict) and value and depth < 4 and rng.random() < 0.7:
        key = rng.choice(list(value))
        return {**value, key: _mutate_value(rng, value[key], depth + 1)}
    if isinstance(value, list) and value and depth < 4 and rng.random() < 0.7:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate_value(rng, value[i], depth + 1), *value[i + 1 :]]
    return rng.choice(_WRONG)


def mutations(
    rng: random.Random, start: int, count: int, *, huge: bool = False
) -> Iterator[Garbage]:
    """``count`` seeded mutations of a valid call, numbered from ``start``."""
    for n in range(start, start + count):
        label = f"m{n}"
        base = write_call(n, label)
        raw = _dumps(base)
        kind = rng.randrange(11)
        if kind == 0:
            data = raw[: rng.randrange(len(raw))]
        elif kind == 1:
            data = bytearray(raw)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            data = bytes(data)
        elif kind == 2:
            data = raw.replace(
                b".txt", rng.choice([b"\\ud83d.txt", b"\\udfff.txt", b"\\ud800\\ud800.txt"])
            )
        elif kind == 3:
            data = _dumps(_mutate_value(rng, base))
        elif kind == 4:
            data = _dumps([base] * rng.randint(1, 3))
        elif kind == 5:
            data = _deep(
                n, rng.choice([10, 100, 198, 199, 200, 201, 202, 300, 990, 1500, 20_000]), label
            )
        elif kind == 6:
            drop = rng.choice(["id", "jsonrpc", "method", "params"])
            data = _dumps({k: v for k, v in base.items() if k != drop})
        elif kind == 7:
            data = rng.randbytes(rng.randint(1, 2000))
        elif kind == 8:
            cut = rng.randrange(len(raw))
            data = (
                raw[:cut]
                + rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"])
                + raw[cut:]
            )
        elif kind == 9:
            data = raw.replace(
                b'"id":', rng.choice([b'"id":null,"id":', b'"id":[1],"x":', b'"ID":']), 1
            )
        else:
            data = _dumps({**base, "id": rng.choice([n, str(n), -n, 0, 2**63, True, None, 1.25])})
        if huge and rng.random() < 0.01:
            data = raw[:-2] + b',"pad":"' + b"p" * (MAX_FRAME + 10) + b'"}}'
        yield Garbage(label, data.replace(b"\n", b" "), f"/home/alice/g{n}.txt")

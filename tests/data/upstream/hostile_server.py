"""A hostile stdio MCP upstream speaking raw JSON lines (no SDK on its side).

It answers the handshake and ``tools/list`` correctly enough to be brokered,
then misbehaves in the way ``--mode`` names, so tests can see what SharedOS
does with protocol-level garbage an SDK server would never send. Every line
it receives is appended to ``--log`` (one JSON object per line).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

parser = argparse.ArgumentParser()
parser.add_argument("--log")
parser.add_argument("--mode", default="")
parser.add_argument("--tools", default="")
#: the name it gives itself in the handshake (serverInfo.name)
parser.add_argument("--server-name", default="hostile")
#: every answer names its request's (integer) id as a string: "7" for 7, which JSON-RPC
#: peers (the SDKs) take for the same id
parser.add_argument("--string-ids", action="store_true")
opts = parser.parse_args()

OBJ = {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}}}
TOOLS: list[dict[str, Any]] = (
    json.loads(Path(opts.tools).read_text(encoding="utf-8"))
    if opts.tools
    else [{"name": n, "description": f"{n} tool", "inputSchema": OBJ} for n in ("echo", "bad")]
)

out = sys.stdout.buffer
#: one message at a time on stdout (``list-storm`` writes from a second thread)
_out_lock = threading.Lock()


def log(entry: Any) -> None:
    if opts.log:
        with open(opts.log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def send(obj: Any) -> None:
    send_raw(json.dumps(obj).encode() + b"\n")


def send_raw(data: bytes) -> None:
    with _out_lock:
        out.write(data)
        out.flush()


def storm() -> None:
    """``notifications/tools/list_changed`` every 2 ms, for the life of the process."""
    with contextlib.suppress(OSError, ValueError):
        while True:
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            time.sleep(0.002)


def answer(rid: Any, result: Any) -> None:
    if opts.string_ids and isinstance(rid, int):
        rid = str(rid)
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def main() -> None:
    mode = opts.mode
    if mode == "immortal":  # ignores SIGTERM and SIGHUP, outlives its stdin, forks a child
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if opts.log and os.fork() == 0:
            os.setsid()
            while True:
                with open(opts.log + ".child", "w") as fh:
                    fh.write(str(os.getpid()))
                time.sleep(0.2)
    if mode == "exit-at-start":
        sys.exit(0)
    if mode == "garbage-at-start":
        send_raw(b"\xff\xfe garbage \x00\x01 not json\n")
    if mode == "escapes":  # terminal escapes for the operator's screen: clear, retitle, rewrite
        sys.stderr.write("\x1b[2J\x1b]0;owned\x07\rhostile stderr\n")
        sys.stderr.flush()
    serve()
    if mode == "immortal":
        with open(opts.log + ".parent", "w") as fh:
            fh.write(str(os.getpid()))
        while True:
            time.sleep(1)


def serve() -> None:
    mode = opts.mode
    listed = False
    for raw in sys.stdin.buffer:
        try:
            msg = json.loads(raw)
        except ValueError:
            continue
        log(msg)
        method, rid = msg.get("method"), msg.get("id")
        if mode == "list-storm" and method == "notifications/initialized":
            # announces a change every few ms from now on; each listing takes 0.3 s
            threading.Thread(target=storm, daemon=True).start()
        if rid is None or method is None:
            continue  # a notification, or a response to a request of ours
        if method == "initialize" and mode == "hang-init":
            continue
        if method == "tools/list" and mode == "hang-list":
            continue
        if method == "tools/list" and mode == "hang-relist" and listed:
            log({"hung": os.getpid()})  # stuck as a whole from its second listing on
            time.sleep(600)
        listed = listed or method == "tools/list"
        if method == "initialize":
            # a server name and version of a MiB each (and instructions to match)
            huge = "h" * (1 << 20) if mode == "huge-info" else None
            answer(
                rid,
                {
                    "protocolVersion": msg["params"].get("protocolVersion", "2025-11-25"),
                    "capabilities": {"tools": {"listChanged": True}, "logging": {}},
                    "serverInfo": {
                        "name": "hostile\x1b[2J\x1b]0;owned\x07"
                        if mode == "escapes"
                        else (huge or opts.server_name),
                        "version": huge or "1",
                    },
                    **({"instructions": huge} if huge else {}),
                },
            )
            continue
        if method == "tools/list":
            # re-read at every listing: edit the file to make the tools drift
            tools = (
                json.loads(Path(opts.tools).read_text(encoding="utf-8")) if opts.tools else TOOLS
            )
            if mode in ("list-storm", "announce"):
                time.sleep(0.3)
            if mode == "cursor-loop":  # every page says there is another
                answer(rid, {"tools": tools, "nextCursor": "again"})
                continue
            if mode == "cursor-grow":  # every page lists new tools, and there is always another
                page = int((msg.get("params") or {}).get("cursor") or 0)
                more = [dict(t, name=f"{t['name']}{page}") for t in tools]
                answer(rid, {"tools": more, "nextCursor": str(page + 1)})
                continue
            answer(rid, {"tools": tools})
            continue
        if method == "ping":
            answer(rid, {})
            continue
        if method != "tools/call":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
            continue
        name = msg["params"]["name"]
        if name == "echo":
            answer(rid, {"content": [{"type": "text", "text": "echo ok"}]})
            continue
        misbehave(mode, rid, msg)


def misbehave(mode: str, rid: Any, msg: dict[str, Any]) -> None:
    if mode == "never":
        return
    if mode == "hang":  # stuck as a whole: nothing more is read, not even a ping
        log({"hung": os.getpid()})
        time.sleep(600)
        return
    if mode == "not-a-result":
        answer(rid, {"foo": 1})
    elif mode == "redos-v":  # a string Python's re takes seconds to match against (a|aa)+$
        answer(rid, {"content": [], "structuredContent": {"v": "a" * 40 + "!"}})
    elif mode == "result-scalar":
        answer(rid, 42)
    elif mode == "content-not-list":
        answer(rid, {"content": "just a string"})
    elif mode == "unknown-block":
        answer(rid, {"content": [{"type": "video", "url": "http://x"}]})
    elif mode == "error-wrong-shape":
        send({"jsonrpc": "2.0", "id": rid, "error": "a string, not an object"})
    elif mode == "error-and-result":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": 1, "message": "e"}, "result": {}})
    elif mode == "wrong-id":
        answer(str(rid) + "x", {"content": [{"type": "text", "text": "wrong id"}]})
    elif mode == "nan":
        send_raw(
            b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"n"}],'
            b'"structuredContent":{"v":NaN,"w":Infinity}}}\n' % json.dumps(rid).encode()
        )
    elif mode == "garbage":
        send_raw(b"\xff\xfe\x00 not json at all \x80\x81\n")
        send_raw(b'{"jsonrpc": "2.0", "id": \n')
    elif mode == "die":
        os._exit(7)
    elif mode in ("endless-line", "endless-drip"):  # an answer whose line never ends
        if msg["params"]["name"] == "endless":
            send_raw(
                b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"'
                % json.dumps(rid).encode()
            )
            chunk = b"x" * (1 << 20)
            with contextlib.suppress(OSError):
                if mode == "endless-drip":  # past the 4 MiB bound at once, then a byte at a time
                    for _ in range(5):
                        send_raw(chunk)
                    while True:
                        send_raw(b"x")
                        time.sleep(0.05)
                while True:
                    send_raw(chunk)
        answer(rid, {"content": [{"type": "text", "text": "ok"}]})
    elif mode == "exit-after":  # answers, then exits: found gone by the next call
        answer(rid, {"content": [{"type": "text", "text": f"answered by {os.getpid()}"}]})
        os._exit(0)
    elif mode == "close-stdout":
        os.close(1)
        time.sleep(30)
    else:
        handler = EXTRA.get(mode)
        if handler is None:
            answer(rid, {"content": [{"type": "text", "text": f"unknown mode {mode}"}]})
        else:
            handler(rid, msg)


def announce(rid: Any, msg: dict[str, Any]) -> None:
    """Announce ``notifications/tools/list_changed``, then answer (its listings take 0.3 s)."""
    send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    answer(rid, {"content": [{"type": "text", "text": "announced"}]})


def server_requests(rid: Any, msg: dict[str, Any]) -> None:
    """Ask the client things only the agent's own client could answer, then report."""
    asks = {
        "s1": (
            "sampling/createMessage",
            {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 5,
            },
        ),
        "s2": (
            "elicitation/create",
            {"message": "approve?", "requestedSchema": {"type": "object", "properties": {}}},
        ),
        "s3": ("roots/list", {}),
        "s4": ("ping", {}),
    }
    for sid, (method, params) in asks.items():
        send({"jsonrpc": "2.0", "id": sid, "method": method, "params": params})
    got: dict[str, Any] = {}
    while len(got) < len(asks):
        line = sys.stdin.buffer.readline()
        if not line:
            break
        reply = json.loads(line)
        log(reply)
        if reply.get("id") in asks and "method" not in reply:
            got[reply["id"]] = reply.get("result", reply.get("error"))
    answer(rid, {"content": [{"type": "text", "text": json.dumps(got)}]})


def ask_flood(rid: Any, msg: dict[str, Any]) -> None:
    """``n`` requests to the client (``ping``, or ``arguments.method``) sent at once, none of
    their answers read until the call is answered and ``arguments.hold`` seconds more."""
    n = int(msg["params"]["arguments"].get("n") or 100_000)
    method = msg["params"]["arguments"].get("method") or "ping"
    line = b'{"jsonrpc":"2.0","id":"a%d","method":"%s","params":{}}\n'
    for i in range(n):
        out.write(line % (i, method.encode()))
    out.flush()
    answer(rid, {"content": [{"type": "text", "text": f"asked {n}"}]})
    time.sleep(float(msg["params"]["arguments"].get("hold") or 0))


def hidden_id(rid: Any, msg: dict[str, Any]) -> None:
    """A call with ``arguments.never`` is never answered; another gets an answer of
    ``arguments.n`` KiB of text whose ``id`` is at neither edge (a member after the result,
    8 KiB before the end)."""
    if msg["params"]["arguments"].get("never"):
        return
    text = b"h" * (int(msg["params"]["arguments"].get("n") or 256) << 10)
    send_raw(
        b'{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"%s"}]},"id":%s,"z":"%s"}\n'
        % (text, json.dumps(rid).encode(), b"z" * 8192)
    )


def flood(rid: Any, msg: dict[str, Any]) -> None:
    token = (msg["params"].get("_meta") or {}).get("progressToken")
    n = int(msg["params"]["arguments"].get("n") or 10000)
    text = "p" * int(msg["params"]["arguments"].get("message_chars") or 1)
    for i in range(n):
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "error", "data": "x" * 100},
            }
        )
        if token is not None:
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": i, "message": text},
                }
            )
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    answer(rid, {"content": [{"type": "text", "text": f"flooded {n}"}]})


def stderr_huge(rid: Any, msg: dict[str, Any]) -> None:
    n = int(msg["params"]["arguments"].get("n") or 64)
    chunk = b"e" * (1 << 20)
    for _ in range(n):
        sys.stderr.buffer.write(chunk)
    sys.stderr.buffer.write(b"\n")
    sys.stderr.buffer.flush()
    answer(rid, {"content": [{"type": "text", "text": f"wrote {n} MiB to stderr"}]})


def progress_nan(rid: Any, msg: dict[str, Any]) -> None:
    token = (msg["params"].get("_meta") or {}).get("progressToken")
    for value in (b"NaN", b"Infinity", b"-Infinity", b"1e400"):
        send_raw(
            b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,'
            b'"progress":%s,"total":%s,"message":"odd"}}\n'
            % (json.dumps(token).encode(), value, value)
        )
    answer(rid, {"content": [{"type": "text", "text": "progress sent"}]})


def structured(rid: Any, msg: dict[str, Any]) -> None:
    how = msg["params"]["arguments"].get("how")
    result: dict[str, Any] = {"content": [{"type": "text", "text": "structured " + str(how)}]}
    if how == "wrong":
        result["structuredContent"] = {"v": "not an integer"}
    elif how == "w":
        result["structuredContent"] = {"w": "a string"}
    elif how == "error-wrong":
        result["structuredContent"] = {"v": "not an integer"}
        result["isError"] = True
    answer(rid, result)


def leak_invalid(rid: Any, msg: dict[str, Any]) -> None:
    """A result that is not a CallToolResult, holding the credential inside a longer string."""
    token = os.environ.get("FIXTURE_TOKEN", "")
    where = msg["params"]["arguments"].get("how") or "end"
    if where.startswith("structured-"):
        # structuredContent an outputSchema {"v": integer} refuses, the credential at an offset
        pad = "x" * int(where.split("-", 1)[1])
        answer(rid, {"content": [], "structuredContent": {"v": pad + token}})
        return
    value = {"end": "x" * 40 + token, "start": token + "y" * 40, "alone": token}[where]
    answer(rid, {"content": value})


def many_blocks(rid: Any, msg: dict[str, Any]) -> None:
    """A result of ``n`` tiny content blocks (under max_result_bytes as bytes)."""
    n = int(msg["params"]["arguments"].get("n") or 100_000)
    answer(rid, {"content": [{"type": "text", "text": "a"}] * n})


def many_strings(rid: Any, msg: dict[str, Any]) -> None:
    """structuredContent of ``n`` short strings (under max_result_bytes as bytes)."""
    n = int(msg["params"]["arguments"].get("n") or 100_000)
    answer(rid, {"content": [], "structuredContent": {"v": ["ab"] * n}})


def surrogate(rid: Any, msg: dict[str, Any]) -> None:
    """Text, structuredContent and a key holding lone surrogates (valid JSON escapes)."""
    send_raw(
        b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"a\\ud800b"}],'
        b'"structuredContent":{"k\\udfff":"v\\ud800"}}}\n' % json.dumps(rid).encode()
    )


def environment(rid: Any, msg: dict[str, Any]) -> None:
    """Everything the upstream can learn of where it runs: environment, argv, open fds."""
    fds = sorted(os.listdir("/proc/self/fd"))
    answer(
        rid,
        {
            "content": [
                {
                    "type": "text",
                    "text": json.dumps({"env": dict(os.environ), "argv": sys.argv, "fds": fds}),
                }
            ]
        },
    )


def big_blob(rid: Any, msg: dict[str, Any]) -> None:
    """One image block of ``n`` bytes of base64 (random bytes, so no credential in it)."""
    import base64

    n = int(msg["params"]["arguments"].get("n") or 3_000_000)
    data = base64.b64encode(os.urandom(n * 3 // 4)).decode()
    answer(rid, {"content": [{"type": "image", "data": data, "mimeType": "image/png"}]})


def deep(rid: Any, msg: dict[str, Any]) -> None:
    """A result nested ``n`` arrays deep (valid JSON; ``n`` bytes of brackets each way)."""
    n = int(msg["params"]["arguments"].get("n") or 100_000)
    send_raw(
        b'{"jsonrpc":"2.0","id":%s,"result":{"content":%s%s}}\n'
        % (json.dumps(rid).encode(), b"[" * n, b"]" * n)
    )


def bad_base64(rid: Any, msg: dict[str, Any]) -> None:
    """Content MCP clients on the TypeScript SDK refuse whole (the tool's name says which
    block): binary data that is no base64, a lastModified that is no date-time."""
    blocks = {
        "image": {"type": "image", "data": "not base64!", "mimeType": "image/png"},
        "audio": {"type": "audio", "data": "%%%%", "mimeType": "audio/wav"},
        "blob": {
            "type": "resource",
            "resource": {"uri": "file:///x", "blob": "a", "mimeType": "application/pdf"},
        },
    }
    dated = {"type": "text", "text": "t", "annotations": {"lastModified": "yesterday"}}
    blocks["dated"] = dated
    name = msg["params"]["name"]
    block = blocks.get(name.removesuffix("-error"), blocks["image"])
    result: dict[str, Any] = {"content": [{"type": "text", "text": "before"}, block]}
    if name.endswith("-error"):  # the tool's own error result: relayed as written, if it can be
        result["isError"] = True
    answer(rid, result)


EXTRA: dict[str, Any] = {
    "bad-base64": bad_base64,
    "deep": deep,
    "big-blob": big_blob,
    "environment": environment,
    "surrogate": surrogate,
    "many-strings": many_strings,
    "many-blocks": many_blocks,
    "leak-invalid": leak_invalid,
    "structured": structured,
    "progress-nan": progress_nan,
    "server-requests": server_requests,
    "flood": flood,
    "hidden-id": hidden_id,
    "ask-flood": ask_flood,
    "stderr-huge": stderr_huge,
    "announce": announce,
    "hang-relist": announce,
}

if __name__ == "__main__":
    main()

"""Planted secrets never reach a record or a model, whatever their characters and however the
call is spelled (issue 11 §2 "Secrets escape redaction", a-e).

Each test plants secrets containing a newline, quotes, a backslash and
non-ASCII characters, then greps the raw database bytes, every record field
and everything the caller is given for every encoding of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import Kernel, RuntimeHost, ToolCall, ToolResult
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.names import portable_tool_name
from sharedos.outcomes import Outcome, ReasonCode
from sharedos.redaction import MIN_SECRET_CHARS as MIN_SCRUB_CHARS
from sharedos.redaction import Redactor as Secrets

from .conftest import ALICE, ALL

pytestmark = pytest.mark.anyio

TOKEN = 'tok-"quoted"\nline2\\back é☃😀'
CREDENTIAL = "cred-'single'\"double\"\t\\tab-Ω"
HOST_KEY = 'sk-host-"9f8e7d"\\n-ключ'


def encodings(secret: str) -> list[str]:
    """Forms a secret takes in text: raw, JSON (both flavours), repr, and JSON of JSON."""
    once = json.dumps(secret)[1:-1]
    return [
        secret,
        once,
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        ascii(secret)[1:-1],
        json.dumps(once)[1:-1],
    ]


def assert_nowhere(secret: str, *texts: str) -> None:
    for text in texts:
        for form in encodings(secret):
            assert form not in text, f"{form!r} leaked into {text[:200]!r}"


def vault_tool(handler: Any = None) -> ToolDefinition:
    async def echo_error(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        cred = hctx.credentials["api"].get_secret_value()
        raise RuntimeError(f"login failed for {args!r} with {cred!r} / {json.dumps(args)}")

    return ToolDefinition(
        name="vault.get",
        description="Fetch a secret (test tool).",
        input_schema={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "token": {"type": "string", "minLength": 3},
                "note": {"type": "string"},
            },
            "required": ["path"],
            "maxProperties": 2,
        },
        handler=handler or echo_error,
        credentials={"api": SecretStr(CREDENTIAL)},
        secret_arguments=frozenset({"token"}),
    )


def make_host(
    kernel: Kernel, tmp_path: Path, tool: ToolDefinition | None = None, **kw: Any
) -> tuple[RuntimeHost, Path]:
    db = tmp_path / "secrets.db"
    registry = ToolRegistry([tool or vault_tool()])
    return RuntimeHost(Kernel(kernel.policy, registry), SqliteEvidenceStore(db), **kw), db


def everything(db: Path, results: list[ToolResult]) -> list[str]:
    """The raw database bytes, every record as JSON, and everything every caller was given."""
    raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    records = SqliteEvidenceStore(db, read_only=True).query()
    return [
        raw.decode("utf-8", "replace"),
        raw.decode("latin-1"),
        json.dumps([r.to_dict() for r in records], ensure_ascii=False),
        json.dumps([r.to_dict() for r in records]),
        *(json.dumps(r.to_mcp(), ensure_ascii=False) for r in results),
        *(json.dumps(r.to_mcp()) for r in results),
        *(str(r.error) for r in results),
    ]


async def call(host: RuntimeHost, tool: object, arguments: Any, call_id: str) -> ToolResult:
    return await host.invoke_tool(
        ToolCall.model_construct(call_id=call_id, tool=tool, arguments=arguments, turn_id=None),
        ALICE,
        ALL,
    )


async def test_a_root_level_schema_error_does_not_carry_a_repr_of_the_arguments(
    kernel: Kernel, tmp_path: Path
) -> None:
    host, db = make_host(kernel, tmp_path)
    # three properties against maxProperties 2: jsonschema's message is repr(arguments)
    result = await call(host, "vault.get", {"path": "/v", "token": TOKEN, "note": "n"}, "root")
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS)
    assert result.error == "$: the object does not satisfy 'maxProperties'"
    # a violation inside the secret field names the field and keyword, never the value
    short = await call(host, "vault.get", {"path": "/v", "token": 7}, "field")
    assert short.error == "$.token: value does not satisfy 'type'"
    assert_nowhere(TOKEN, *everything(db, [result, short]))


async def test_a_handler_echoing_secrets_in_any_encoding_is_scrubbed(
    kernel: Kernel, tmp_path: Path
) -> None:
    host, db = make_host(kernel, tmp_path)
    result = await call(host, "vault.get", {"path": "/v", "token": TOKEN}, "echo")
    assert (result.outcome, result.reason) == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    assert "[redacted]" in (result.error or "")
    (rec,) = SqliteEvidenceStore(db, read_only=True).query()
    assert rec.arguments == {"path": "/v", "token": "[redacted]"}
    texts = everything(db, [result])
    assert_nowhere(TOKEN, *texts)
    assert_nowhere(CREDENTIAL, *texts)


@pytest.mark.parametrize(
    "spelling",
    [
        "vault.gte",  # misspelled
        "mcp__sharedos__vault_get",  # a harness alias
        portable_tool_name("vault.get"),  # the portable escape (vault_dget)
        "VAULT.GET",
        ["vault.get"],  # not even a string
    ],
)
async def test_calls_under_any_other_spelling_are_redacted_too(
    kernel: Kernel, tmp_path: Path, spelling: object
) -> None:
    host, db = make_host(kernel, tmp_path)
    result = await call(host, spelling, {"path": "/v", "token": TOKEN}, "alias")
    assert (result.outcome, result.reason) == (Outcome.DENIED, ReasonCode.TOOL_UNAVAILABLE)
    (rec,) = SqliteEvidenceStore(db, read_only=True).query()
    assert rec.arguments == {"path": "/v", "token": "[redacted]"}
    assert_nowhere(TOKEN, *everything(db, [result]))


@pytest.mark.parametrize("arguments", [TOKEN, [TOKEN, "x"], 123456789, True])
async def test_non_object_arguments_are_never_stored(
    kernel: Kernel, tmp_path: Path, arguments: Any
) -> None:
    host, db = make_host(kernel, tmp_path)
    known = await call(host, "vault.get", arguments, "known")
    unknown = await call(host, "nope.tool", arguments, "unknown")
    assert known.reason is ReasonCode.INVALID_ARGUMENTS
    assert unknown.reason is ReasonCode.TOOL_UNAVAILABLE
    for rec in SqliteEvidenceStore(db, read_only=True).query():
        assert set(rec.arguments) == {"$nonobject", "$size"}
    assert_nowhere(TOKEN, *everything(db, [known, unknown]))
    if isinstance(arguments, int) and not isinstance(arguments, bool):
        assert all("123456789" not in text for text in everything(db, [known, unknown]))


async def test_a_short_secret_is_redacted_as_a_field_but_does_not_mangle_messages(
    kernel: Kernel, tmp_path: Path
) -> None:
    async def fails(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        return HandlerResult.error("the path /v could not be opened")

    host, db = make_host(kernel, tmp_path, vault_tool(fails))
    result = await call(
        host, "vault.get", {"path": "/v", "token": "v"[: MIN_SCRUB_CHARS - 5] + "ab"}, "c"
    )
    (rec,) = SqliteEvidenceStore(db, read_only=True).query()
    assert rec.arguments["token"] == "[redacted]"
    assert rec.error == "the path /v could not be opened"  # not "[redacted]" sprinkled through it
    assert "could not be opened" in result.content[0]["text"]
    assert not Secrets(["ab"]) and Secrets(["x" * MIN_SCRUB_CHARS])


async def test_host_secrets_are_scrubbed_from_every_record_field_and_every_answer(
    kernel: Kernel, tmp_path: Path
) -> None:
    async def leaks(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
        if args.get("note") == "fail":
            raise RuntimeError(f"upstream rejected key {HOST_KEY!r}")
        return HandlerResult.text(f"env says {HOST_KEY}", structured={"key": HOST_KEY})

    tool = vault_tool(leaks).model_copy(update={"credentials": {}})
    host, db = make_host(kernel, tmp_path, tool, host_secrets=[SecretStr(HOST_KEY)])
    results = [
        # in a non-secret argument, in diagnostics and identity, then echoed by the handler
        await host.invoke_tool(
            ToolCall(call_id="ok", tool="vault.get", arguments={"path": "/v", "note": HOST_KEY}),
            ALICE,
            ALL,
            diagnostics={"env": {"KEY": HOST_KEY}},
            identity={"declaredModel": f"model with {HOST_KEY}"},
        ),
        await call(host, "vault.get", {"path": "/v", "note": "fail"}, "fail"),
        await call(host, f"vault.{HOST_KEY}", {"path": HOST_KEY}, "name"),  # in the tool name
        await call(host, "vault.get", {"path": f"/home/{HOST_KEY}"}, "res"),  # in the resource
    ]
    ok = results[0]
    assert ok.outcome is Outcome.SUCCEEDED
    assert ok.content == [{"type": "text", "text": "env says [redacted]"}]
    assert ok.structured == {"key": "[redacted]"}
    (rec, *_) = SqliteEvidenceStore(db, read_only=True).query()
    assert rec.arguments == {"path": "/v", "note": "[redacted]"}
    assert rec.diagnostics == {"env": {"KEY": "[redacted]"}}
    assert_nowhere(HOST_KEY, *everything(db, results))


def test_secrets_scrub_every_encoding_and_nested_json() -> None:
    secrets = Secrets([TOKEN])
    for form in encodings(TOKEN):
        assert secrets.scrub(f"<{form}>") == "<[redacted]>"
    assert secrets.scrub_json({"a": [f"x{TOKEN}y"], TOKEN: 1}) == {
        "a": ["x[redacted]y"],
        "[redacted]": 1,
    }
    assert secrets.scrub(repr({"k": TOKEN})) == "{'k': '[redacted]'}"


def test_a_secret_is_scrubbed_whatever_its_case() -> None:
    """An upstream's header value comes back lowercased by the SDK, a hex dump in capitals:
    every case of every form is the secret, and the text around it keeps its own case."""
    secret = "Tok3n-MixedCase-Secret"
    secrets = Secrets([secret])
    for form in (secret.lower(), secret.upper(), secret.swapcase()):
        assert secrets.scrub(f"Header: {form}; Next") == "Header: [redacted]; Next"
        assert secrets.found_in(f"x{form}x")
    assert secrets.scrub(f"Bearer {secret.encode().hex().upper()}") == "Bearer [redacted]"
    # a character whose lower case is two characters long does not shift the cut
    assert secrets.scrub(f"İİ {secret.lower()} İ") == "İİ [redacted] İ"
    # cut at the end of a capped text, in another case
    assert secrets.scrub(f"Value: {secret.upper()[:12]}") == "Value: [redacted]"
    # texts without the secret are left exactly as they are
    assert secrets.scrub("Nothing To See Here, İstanbul") == "Nothing To See Here, İstanbul"


def test_a_secret_cut_by_a_cap_and_its_mark_is_scrubbed_whole() -> None:
    # a shadow candidate's failure is capped with "…" before its record scrubs it: the
    # head of a secret left before the mark must go too, not only one at the very end
    from sharedos.kernel.shadow import MAX_SHADOW_ERROR, _error_text

    secret = "hunter2-0123456789abcdef-canary"
    scrub = Secrets([secret]).scrub
    text = _error_text(ValueError("x" * (MAX_SHADOW_ERROR - 30) + secret))
    assert text.endswith("…") and secret not in text and secret[:12] in text
    scrubbed = scrub(text)
    assert secret[:MIN_SCRUB_CHARS] not in scrubbed and scrubbed.endswith("[redacted]…")
    for mark in ("...", "…"):
        assert scrub("seen: " + secret[:15] + mark) == "seen: [redacted]" + mark
    assert scrub("no secret here...") == "no secret here..."


def test_a_secret_in_a_wrapped_base64_blob_is_scrubbed_across_its_line_breaks() -> None:
    """A tool that answers a file in base64 as ``base64`` or a MIME part writes it (76
    columns), or GitHub's contents API (60, the breaks written ``\\n`` in its JSON): the
    secret's encoding straddles a line break at most places in the file, and each piece
    alone was no encoding of it, so the secret was kept and relayed for anyone to decode.
    A hex dump wrapped at a width is the same. Ordinary lines are left as they are."""
    import base64
    import textwrap

    secret = "ghp_R4nd0mT0k3nV4lu3Abcdefghijklmnop1234"
    secrets = Secrets([secret])

    def decoded(text: str) -> bytes:
        letters = "".join(c for c in text if c.isalnum() or c in "+/")
        return b"".join(
            base64.b64decode(letters[k:][: (len(letters) - k) // 4 * 4]) for k in range(4)
        )

    forms = secrets.needles
    straddled = 0
    for n in range(80):
        blob = base64.encodebytes(f"{'x' * n}GITHUB_TOKEN={secret}\nA=1\n".encode()).decode()
        # the case this is about: no line alone holds an encoding of the secret
        straddled += not any(f in line.lower() for line in blob.splitlines() for f in forms)
        github = json.dumps({"content": "\n".join(textwrap.wrap(blob.replace("\n", ""), 60))})
        for text in (blob, blob.replace("\n", "\r\n"), github):
            scrubbed = secrets.scrub(f"file:\n{text}\nend")
            assert secret.encode()[:MIN_SCRUB_CHARS] not in decoded(scrubbed), (n, scrubbed)
            assert scrubbed.startswith("file:\n") and scrubbed.endswith("\nend")
            assert secrets.found_in(text)
    assert straddled > 40
    dump = textwrap.fill(secret.encode().hex(), 32)
    assert secrets.scrub(f"hexdump:\n{dump}\nok") == "hexdump:\n[redacted]\nok"
    plain = "line one\nline two\nabc\ndef\\nghi"
    assert secrets.scrub(plain) == plain and not secrets.found_in(plain)


def test_a_wrapped_secret_is_found_without_a_step_per_line_break() -> None:
    """An upstream's answer with a line break every other character that holds the secret
    (its own credential, echoed): the scrub walked every break in Python to map the joined
    text back, 1.7 s for 1 MB and 15 s for 10 MB, the turn held meanwhile. Counted, not
    timed: the Python-level calls a scrub makes do not grow with the breaks."""
    import sys

    secret = "ghp_R4nd0mT0k3nV4lu3Abcdefghijklmnop1234"
    secrets = Secrets([secret])

    def calls(text: str) -> int:
        count = 0

        def profile(frame: Any, event: str, arg: Any) -> None:
            nonlocal count
            count += event in ("call", "c_call")

        sys.setprofile(profile)
        try:
            scrubbed = secrets.scrub(text)
        finally:
            sys.setprofile(None)
        assert secret not in scrubbed.replace("\n", "") and "[redacted]" in scrubbed
        return count

    def text(breaks: int) -> str:
        return "\n".join("x" * breaks + secret)

    calls(text(500))  # what is made once per secret (its expression) is made
    assert calls(text(50_000)) < 2 * calls(text(500)) + 100

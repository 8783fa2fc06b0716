"""A host secret cut by a length cap is still a secret: texts truncated *before* they are
scrubbed keep the part of the secret before the cut (the scrubber only knows whole values).

docs/kernel.md, "Secrets": every secret value known for the call -- the host's
``host_secrets`` among them -- is replaced wherever it occurs, in every record
field and every text a model is given. Each test plants a host secret where a
cap cuts it and looks for a long prefix of it in the answer and in the
evidence (record fields, the ``sharedos evidence export`` output and the raw
database bytes).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.policy import compile_paths
from sharedos.resources import shipped_dir
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools
from tests.adversarial.planted import plant, sharedos_cli

pytestmark = pytest.mark.anyio
RUN = ToolPolicy(name="files", mode=RunMode.OPEN, managed=("files.*",))
BOB = AccessContext(principal="bob", turn_id="bob-turn")
#: a prefix this long is most of a planted secret (``PLANTED-host-`` + 32 hex digits)
LEAK = 24


class Host:
    def __init__(self, tmp: Path, secret: str) -> None:
        self.root = tmp / "root"
        for d in ("public", "private", "home/bob"):
            (self.root / d).mkdir(parents=True)
        registry = ToolRegistry()
        register_files_tools(registry, self.root)
        kernel = Kernel(compile_paths([shipped_dir("rules") / "files.sos"]), registry)
        self.db = tmp / "evidence.db"
        self.store = SqliteEvidenceStore(self.db)
        self.host = RuntimeHost(kernel, self.store, host_secrets=[secret])

    async def call(self, call: ToolCall) -> str:
        result = await self.host.invoke_tool(call, BOB, RUN)
        return json.dumps(result.to_mcp(), ensure_ascii=False)

    def evidence(self) -> str:
        rows = json.dumps([r.to_dict() for r in self.store.query()], ensure_ascii=False)
        self.store.close()
        export = subprocess.run(
            [*sharedos_cli(), "evidence", "export", "--db", str(self.db)],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout.decode("utf-8", "replace")
        raw = b"".join(p.read_bytes() for p in self.db.parent.glob(self.db.name + "*")).decode(
            "utf-8", "replace"
        )
        return rows + export + raw


def leaked(secret: str, text: str) -> bool:
    return secret[:LEAK] in text


async def test_a_read_cut_by_max_bytes_does_not_hand_out_most_of_a_host_secret(
    tmp_path: Path,
) -> None:
    secret = plant("host")
    h = Host(tmp_path, secret)
    prefix = "token="
    (h.root / "public" / "app.env").write_text(f"{prefix}{secret}\n", encoding="utf-8")
    whole = await h.call(ToolCall(tool="files.read", arguments={"path": "/public/app.env"}))
    assert secret not in whole and "[redacted]" in whole  # the whole value is scrubbed
    # the same file read up to the secret's last character
    cut = len(prefix) + len(secret) - 1
    answer = await h.call(
        ToolCall(tool="files.read", arguments={"path": "/public/app.env", "max_bytes": cut})
    )
    assert not leaked(secret, answer), f"most of the host secret was handed out: {answer[:300]}"


@pytest.mark.parametrize(
    "path",
    [
        "relative/{pad}{secret}",  # not absolute
        "/public/\x01{pad}{secret}",  # a control character
        "/public/{pad}{secret}/cafe\u0301",  # not NFC
    ],
    ids=["relative", "control", "not-nfc"],
)
async def test_an_unresolvable_path_detail_does_not_keep_part_of_a_host_secret(
    tmp_path: Path, path: str
) -> None:
    secret = plant("host")
    h = Host(tmp_path, secret)
    args: dict[str, Any] = {"path": path.format(pad="a" * 40, secret=secret)}
    answer = await h.call(ToolCall(tool="files.read", arguments=args))
    evidence = h.evidence()
    assert '"[redacted]' in evidence or "[redacted]" in evidence  # the argument was scrubbed
    assert not leaked(secret, answer), f"part of the host secret in the answer: {answer[:400]}"
    assert not leaked(secret, evidence), "part of the host secret in the evidence"


async def test_a_long_call_id_does_not_keep_part_of_a_host_secret(tmp_path: Path) -> None:
    secret = plant("host")
    h = Host(tmp_path, secret)
    call_id = "c" * 220 + secret  # the record caps call ids at 256 characters
    answer = await h.call(
        ToolCall(tool="files.read", arguments={"path": "/public/x"}, call_id=call_id)
    )
    evidence = h.evidence()
    assert not leaked(secret, answer), "part of the host secret in the answer's callId"
    assert not leaked(secret, evidence), "part of the host secret in the recorded call_id"


@pytest.mark.parametrize("pad", [150, 990], ids=["cut-by-the-detail", "cut-by-the-record"])
async def test_a_long_tool_name_does_not_keep_part_of_a_host_secret(
    tmp_path: Path, pad: int
) -> None:
    secret = plant("host")
    h = Host(tmp_path, secret)
    tool = "files." + "a" * pad + secret  # no such tool: refused tool_unavailable
    answer = await h.call(ToolCall(tool=tool, arguments={"path": "/public/x"}))
    evidence = h.evidence()
    assert not leaked(secret, answer), "part of the host secret in the answer"
    assert not leaked(secret, evidence), "part of the host secret in the recorded tool or error"


@pytest.mark.parametrize("pad", [140, 150, 160])
async def test_a_long_denied_resource_in_the_refusal_sentence_keeps_no_part_of_a_host_secret(
    tmp_path: Path, pad: int
) -> None:
    """The refusal sentence quotes the resource cut at 200 characters and goes on
    ("... was refused: ..."): a secret cut there was no longer at an end of the text, and
    most of it reached the model while the payload's ``resource`` said ``[redacted]``."""
    secret = plant("host")
    h = Host(tmp_path, secret)
    path = "/private/" + "a" * pad + secret  # forbidden: the sentence names the resource
    answer = await h.call(ToolCall(tool="files.read", arguments={"path": path}))
    evidence = h.evidence()
    assert "forbidden" in answer and "[redacted]" in answer
    assert not leaked(secret, answer), f"part of the host secret in the answer: {answer[:600]}"
    assert not leaked(secret, evidence), "part of the host secret in the evidence"

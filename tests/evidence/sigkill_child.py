"""Child process for the SIGKILL test: invoke calls forever, print each returned call id.

Usage: python sigkill_child.py DB_PATH SANDBOX_ROOT
"""

from __future__ import annotations

import sys

import anyio

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost, ToolCall
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

POLICY = """
namespace files
requirement files.read { action read; resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
permit read, write on "/public/**"
forbid * on "/private/**"
"""


async def main(db: str, root: str) -> None:
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_source(POLICY, "child.sos"), registry)
    host = RuntimeHost(kernel, SqliteEvidenceStore(db))
    run = ToolPolicy(name="child", mode=RunMode.OPEN, managed=("files.*",))
    context = AccessContext(principal="child", turn_id="sigkill-turn")
    catalog = kernel.list_tools(context, run)
    i = 0
    while True:
        i += 1
        kind = i % 4
        if kind == 0:
            call = ToolCall(call_id=f"c{i}", tool="files.read", arguments={"path": "/public/a.txt"})
        elif kind == 1:
            call = ToolCall(
                call_id=f"c{i}", tool="files.read", arguments={"path": "/private/a.txt"}
            )
        elif kind == 2:
            call = ToolCall(
                call_id=f"c{i}",
                tool="files.write",
                arguments={"path": f"/public/{i}.txt", "content": "x"},
            )
        else:
            call = ToolCall(call_id=f"c{i}", tool="no.such.tool", arguments={})
        result = await host.invoke_tool(call, context, run, catalog=catalog)
        sys.stdout.write(f"{result.call_id} {result.outcome}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])

"""Child process for the SIGKILL tests: a real host with concurrent clients, calling until killed.

Usage: python sigkill_child.py DB_PATH SANDBOX_ROOT PREFIX [CLIENTS]

Each client task calls forever (public read, private read, a write whose file
names its call id, an unknown tool) and prints ``<call id> <outcome>`` the
moment ``invoke_tool`` has returned its result, i.e. what a harness would
have been told.
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


def planned(prefix: str, client: int, i: int) -> ToolCall:
    """The ``i``-th call of one client: the kinds rotate so every kind is in flight at a kill."""
    call_id = f"{prefix}-{client}-{i}"
    kind = (i + client) % 4
    if kind == 0:
        return ToolCall(call_id=call_id, tool="files.read", arguments={"path": "/public/a.txt"})
    if kind == 1:
        return ToolCall(call_id=call_id, tool="files.read", arguments={"path": "/private/a.txt"})
    if kind == 2:
        return ToolCall(
            call_id=call_id,
            tool="files.write",
            arguments={"path": f"/public/w/{call_id}.txt", "content": call_id},
        )
    return ToolCall(call_id=call_id, tool="no.such.tool", arguments={})


async def main(db: str, root: str, prefix: str, clients: int) -> None:
    registry = ToolRegistry()
    register_files_tools(registry, root)
    kernel = Kernel(compile_source(POLICY, "child.sos"), registry)
    host = RuntimeHost(kernel, SqliteEvidenceStore(db))
    run = ToolPolicy(name="child", mode=RunMode.OPEN, managed=("files.*",))
    context = AccessContext(principal="child", turn_id="sigkill-turn")
    catalog = kernel.list_tools(context, run)
    out = sys.stdout

    async def client(n: int) -> None:
        i = 0
        while True:
            i += 1
            result = await host.invoke_tool(planned(prefix, n, i), context, run, catalog=catalog)
            out.write(f"{result.call_id} {result.outcome}\n")
            out.flush()

    async with anyio.create_task_group() as tg:
        for n in range(clients):
            tg.start_soon(client, n)


if __name__ == "__main__":
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], count)

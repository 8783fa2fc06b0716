"""Fixtures for kernel tests: a real compiled policy, a real registry, a real SQLite store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sharedos.catalog import ToolDefinition, ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.kernel import AccessContext, Kernel, RuntimeHost
from sharedos.kernel.handlers import HandlerContext, HandlerResult
from sharedos.policy import compile_source
from sharedos.toolpolicy import RunMode, ToolPolicy
from sharedos.tools import register_files_tools

POLICY = """
namespace files

requirement files.read   { action read;   resource path(args.path) }
requirement files.write  { action write;  resource path(args.path) }
requirement files.list   { action list;   resource path(args.path) }
requirement files.search { action search; resource path(args.root) }
requirement files.delete { action delete; resource path(args.path) }

permit read, list, search on "/public/**"
permit read, write, list, delete on "/home/{context.principal}/**"
@id("private-admins-only")
forbid * on "/private/**" unless "admin" in context.roles
permit * on "/private/**" when "admin" in context.roles

namespace admin
requirement admin.reset { action reset; resource path(args.path) }
permit reset on "/**" when "admin" in context.roles

namespace vault
requirement vault.get { action get; resource path(args.path) }
permit get on "/**"

namespace misc
requirement misc.echo { action call; resource path(args.path) }
permit call on "/**"
"""

ALL = ToolPolicy(name="all", mode=RunMode.OPEN, managed=("files.*", "admin.*", "vault.*", "misc.*"))
NO_DELETE = ToolPolicy(
    name="no-delete",
    mode=RunMode.STRICT,
    managed=("files.read", "files.write", "files.list", "files.search", "admin.*", "misc.*"),
    harness_local=("patch",),
)

ALICE = AccessContext(principal="alice", tenant="acme", turn_id="turn-alice")
ADMIN = AccessContext(principal="root", tenant="acme", roles=("admin",), turn_id="turn-admin")


async def echo_handler(args: dict[str, Any], hctx: HandlerContext) -> HandlerResult:
    return HandlerResult.text(f"echo {hctx.resource}", structured={"resource": hctx.resource})


def misc_tool(handler: Any = echo_handler, **schema_props: Any) -> ToolDefinition:
    props: dict[str, Any] = {"path": {"type": "string"}, **schema_props}
    return ToolDefinition(
        name="misc.echo",
        description="Echo the authorized resource.",
        input_schema={"type": "object", "properties": props, "required": ["path"]},
        handler=handler,
    )


@pytest.fixture
def policy() -> Any:
    return compile_source(POLICY, "kernel-test.sos")


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for d in ("public", "private", "home/alice", "etc"):
        (root / d).mkdir(parents=True)
    (root / "public" / "a.txt").write_text("public A")
    (root / "private" / "a.txt").write_text("PRIVATE A")
    (root / "etc" / "passwd").write_text("root:x:0:0")
    (root / "public" / "link.txt").symlink_to(root / "private" / "a.txt")
    return root


@pytest.fixture
def registry(sandbox: Path) -> ToolRegistry:
    reg = ToolRegistry()
    register_files_tools(reg, sandbox)
    reg.register(
        ToolDefinition(
            name="admin.reset",
            description="Reset something (admins only).",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
            handler=echo_handler,
        )
    )
    reg.register(
        ToolDefinition(
            name="unruled.tool",
            description="Registered, but no requirement governs it.",
            input_schema={"type": "object"},
            handler=echo_handler,
        )
    )
    return reg


@pytest.fixture
def store(tmp_path: Path) -> SqliteEvidenceStore:
    return SqliteEvidenceStore(tmp_path / "evidence.db")


@pytest.fixture
def kernel(policy: Any, registry: ToolRegistry) -> Kernel:
    return Kernel(policy, registry)


@pytest.fixture
def host(kernel: Kernel, store: SqliteEvidenceStore) -> RuntimeHost:
    return RuntimeHost(kernel, store, handler_timeout_s=2.0)

"""The package's layers stay one-way: a module imports only its own layer and lower ones.

Static, over the source (``ast``): every ``import`` and ``from … import`` counts,
wherever it is written (module level, inside a function, under
``TYPE_CHECKING``), and so does a string literal that names a module for a lazy
import (``"sharedos.cli.evidence:evidence"``, ``importlib.import_module(...)``).

Layer order (docs/contracts.md, issue 15 move 2)::

    names, outcomes, toolpolicy, context, resources, identity, errors, confine, pathwalk, canonical,
    redaction, terminal, tomlpos, atomicfile, textfile, jsonrpc_id, copies
      → policy, evidence, catalog → kernel → tools, upstream → bridge, testing
      → harness → conformance → cli
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sharedos"

LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "",
        "names",
        "outcomes",
        "toolpolicy",
        "context",
        "resources",
        "identity",
        "errors",
        "_shipped",
        "compat",
        "confine",
        "pathwalk",
        "canonical",
        "redaction",
        "terminal",
        "tomlpos",
        "atomicfile",
        "textfile",
        "jsonrpc_id",
        "jsonshape",
        "pemkeys",
        "copies",
    ),
    ("policy", "evidence", "catalog", "bundles"),
    ("kernel",),
    ("tools", "upstream"),
    ("bridge", "testing"),
    ("harness",),
    ("conformance",),
    ("cli",),
)
LAYER_OF = {part: i for i, parts in enumerate(LAYERS) for part in parts}

#: Edges that break the order today, each with the issue that removes it. The test
#: fails when one of them disappears too, so the list cannot go stale.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()

_MODULE_STRING = re.compile(r"^sharedos(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_]*)?$")


def module_name(path: Path) -> str:
    """``sharedos/a/b.py`` → ``sharedos.a.b``; a package's ``__init__`` is the package."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_package: bool, level: int, target: str | None) -> str:
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join([*base, target] if target else base)


def _is_module(name: str) -> bool:
    """True when ``name`` is a module or package of this source tree."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports_of(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in ``path``, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    current = module_name(path)
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            mod = (
                _resolve(current, is_package, node.level, node.module)
                if node.level
                else node.module or ""
            )
            yield mod, node.lineno
            # `from sharedos import policy` imports the subpackage itself
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                if _is_module(sub):
                    yield sub, node.lineno
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.split(":")[0]
            if _MODULE_STRING.match(node.value) and _is_module(name):
                yield name, node.lineno


def layer(module: str) -> int:
    """The layer of a ``sharedos`` module (``KeyError`` for a subpackage with no layer)."""
    parts = module.split(".")
    return LAYER_OF[parts[1] if len(parts) > 1 else ""]


def sources() -> list[Path]:
    """Every Python file of the package."""
    return sorted(PACKAGE.rglob("*.py"))


def upward_edges() -> dict[tuple[str, str], list[str]]:
    """Every import that goes to a higher layer: (importer, imported) → ``file:line`` list."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sources():
        importer = module_name(path)
        for imported, line in imports_of(path):
            if imported != "sharedos" and not imported.startswith("sharedos."):
                continue
            if layer(imported) > layer(importer):
                where = f"{path.relative_to(PACKAGE.parent)}:{line}"
                found.setdefault((importer, imported), []).append(where)
    return found


def test_every_subpackage_has_a_layer() -> None:
    """A new top-level module or package must be placed in the order before it is used."""
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    tops = {t for t in tops if not t.startswith("__") and t not in ("py",)}
    tops.discard("__init__")
    missing = sorted(
        t
        for t in tops
        if t not in LAYER_OF and ((PACKAGE / f"{t}.py").exists() or (PACKAGE / t).is_dir())
    )
    assert not missing, f"give these a layer in tests/test_layers.py: {missing}"


def test_imports_only_go_down_the_layers() -> None:
    """No module imports a higher layer (function-level and TYPE_CHECKING imports included)."""
    edges = upward_edges()
    unexpected = {k: v for k, v in edges.items() if k not in KNOWN_EXCEPTIONS}
    assert not unexpected, "\n".join(
        f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)}) at {', '.join(w)}"
        for (a, b), w in sorted(unexpected.items())
    )


def test_known_exceptions_are_still_real() -> None:
    """An exception that was fixed must leave the list, so the list never hides a new edge."""
    edges = upward_edges()
    fixed = sorted(k for k in KNOWN_EXCEPTIONS if k not in edges)
    assert not fixed, f"remove from KNOWN_EXCEPTIONS, the edge is gone: {fixed}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import sharedos.cli.main\n", ["sharedos.cli.main"]),
        ("def f():\n    from sharedos.conformance import report\n", None),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sharedos.cli import x\n",
            ["typing", "sharedos.cli"],
        ),
        ("X = 'sharedos.cli.evidence:evidence'\n", ["sharedos.cli.evidence"]),
    ],
)
def test_the_scan_sees_every_kind_of_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: list[str] | None
) -> None:
    """The checker itself: nested, TYPE_CHECKING and string imports are all found."""
    fake = PACKAGE / "kernel" / "_layers_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: source)
    found = [m for m, _ in imports_of(fake)]
    if expected is None:
        assert "sharedos.conformance" in found and "sharedos.conformance.report" in found
    else:
        assert found == expected
    assert any(layer(m) > layer("sharedos.kernel") for m in found if m.startswith("sharedos"))

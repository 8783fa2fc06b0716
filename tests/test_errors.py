"""Every exception SharedOS defines descends from ``SharedOSError``, and the tree
drawn in ``sharedos/errors.py`` names each one in the module that defines it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import sharedos
from sharedos.errors import SharedOSError


def _defined_exceptions() -> dict[str, str]:
    """Public exception class name -> defining module, over the whole package."""
    found: dict[str, str] = {}
    for info in pkgutil.walk_packages(sharedos.__path__, "sharedos."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
            ):
                found[name] = info.name
    return found


def test_every_sharedos_exception_descends_from_sharedos_error() -> None:
    exceptions = _defined_exceptions()
    assert len(exceptions) >= 40
    strays = []
    for name, module in exceptions.items():
        if not issubclass(getattr(importlib.import_module(module), name), SharedOSError):
            strays.append(f"{module}.{name}")
    assert not strays, f"not under SharedOSError: {strays}"


def test_the_drawn_hierarchy_lists_each_class_where_it_lives() -> None:
    doc = importlib.import_module("sharedos.errors").__doc__ or ""
    drawn = dict(re.findall(r"[├└]── (\w+)(?:\(\w+\))?\s+(sharedos[\w.]*)", doc))
    defined = _defined_exceptions()
    del defined["SharedOSError"]
    assert drawn == defined


def test_a_user_error_is_still_its_builtin_kind() -> None:
    from sharedos.names import InvalidToolName
    from sharedos.policy.bundle import BundleError

    assert issubclass(InvalidToolName, ValueError)
    assert issubclass(BundleError, ValueError)


def _drawn_tree() -> list[tuple[str, str, str | None]]:
    """(class, module, drawn parent class) for every line of the tree in ``sharedos.errors``."""
    doc = importlib.import_module("sharedos.errors").__doc__ or ""
    out: list[tuple[str, str, str | None]] = []
    stack: list[tuple[int, str]] = [(-1, "SharedOSError")]
    for line in doc.splitlines():
        m = re.match(r"\s*([│ ]*)[├└]── (\w+)(?:\(\w+\))?\s+(sharedos[\w.]*)", line)
        if m is None:
            continue
        depth = len(m.group(1)) // 4
        while stack[-1][0] >= depth:
            stack.pop()
        out.append((m.group(2), m.group(3), stack[-1][1]))
        stack.append((depth, m.group(2)))
    return out


def test_each_class_descends_from_the_area_it_is_drawn_under() -> None:
    """Catch by area, httpx-style: ``except UpstreamError`` catches every upstream error."""
    errors = importlib.import_module("sharedos.errors")
    tree = _drawn_tree()
    assert len(tree) >= 60
    wrong = []
    for name, module, parent in tree:
        cls = getattr(importlib.import_module(module), name)
        base = errors.SharedOSError
        for n, m, _ in tree:
            if n == parent:
                base = getattr(importlib.import_module(m), n)
        if not issubclass(cls, base):
            wrong.append(f"{name} is drawn under {parent}")
    assert not wrong, wrong


def test_the_area_classes_keep_the_built_in_bases() -> None:
    from sharedos.errors import EvidenceError, UpstreamError
    from sharedos.evidence.store import EvidenceStoreError
    from sharedos.upstream.config import UpstreamConfigProblems

    assert issubclass(EvidenceStoreError, EvidenceError) and issubclass(
        EvidenceStoreError, RuntimeError
    )
    assert issubclass(UpstreamConfigProblems, UpstreamError) and issubclass(
        UpstreamConfigProblems, ValueError
    )

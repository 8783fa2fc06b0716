"""How deep a JSON value nests, found without recursion.

Every reader that takes a value from outside and walks it recursively (jsonschema's
checks, the SDK's serializer, ``json.dumps``) runs out of Python's recursion limit on a
deep enough value. The bridge checks a frame's values and the catalogue a tool's schema
with this one iterative walk before any of them sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["nests_deeper_than"]


def nests_deeper_than(value: Any, limit: int) -> bool:
    """True when ``value`` nests mappings and lists (or tuples) deeper than ``limit`` levels;
    the value itself is level 1, a scalar nests nothing. One iterative walk."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False

"""The rule index: rules by literal pattern prefix, and the decision walk built from it.

A pattern such as ``/projects/p1/src/**`` is indexed under its literal prefix
``projects/p1/src``. The compiler writes one ``PrefixTable`` (prefix -> rule
positions) per (namespace, action, effect, absolute or relative resource).
The runtime merges the forbid and permit tables of one (namespace, action,
resource kind) into a ``WalkNode`` tree (``build_walk``): a decision descends
it with one dict lookup per resource segment and reads the rule groups met on
the way, so rules whose literal prefix differs from the resource are never
looked at (OPA's ``ast/index.go`` does the same for Rego rules). ``TrieNode``
is the same prefix trie for other passes (the lints' shadowing check).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from sharedos.policy.ir import MalformedProgram, RuleRecord

T = TypeVar("T")
U = TypeVar("U")

#: The program's form of one trie: literal prefix (segments joined by ``/``, which
#: no segment contains; ``""`` for the root) -> rule positions.
PrefixTable = dict[str, list[int]]

#: A rule group holding more rules than this gets a per-context filtered copy.
FILTER_MIN = 8


class TrieNode(Generic[T]):
    """One node of a literal-prefix trie: the values whose prefix ends here, and the children by segment."""

    __slots__ = ("children", "values")

    def __init__(
        self, values: list[T] | None = None, children: dict[str, TrieNode[T]] | None = None
    ) -> None:
        self.values: list[T] = [] if values is None else values
        self.children: dict[str, TrieNode[T]] = {} if children is None else children

    def insert(self, prefix: Sequence[str], value: T) -> None:
        """Add ``value`` under the literal segments ``prefix``."""
        node = self
        for seg in prefix:
            nxt = node.children.get(seg)
            if nxt is None:
                nxt = node.children[seg] = TrieNode()
            node = nxt
        node.values.append(value)

    def iter_values(self) -> Iterator[T]:
        """Every value in the trie (depth-first; order is not significant)."""
        stack: list[TrieNode[T]] = [self]
        while stack:
            node = stack.pop()
            yield from node.values
            stack.extend(node.children.values())

    def along(self, segs: Sequence[str]) -> Iterator[T]:
        """The values whose prefix is a prefix of ``segs`` (root first)."""
        node: TrieNode[T] | None = self
        depth = 0
        while node is not None:
            yield from node.values
            if depth == len(segs):
                return
            node = node.children.get(segs[depth])
            depth += 1


class RuleGroup:
    """The rules of one index node, in index order.

    ``key`` is non-negative when the group is large enough to be worth
    filtering per context (only the rules whose context-only condition holds
    for that caller are kept: ``Evaluator`` caches the result under ``key``).
    """

    __slots__ = ("key", "rules")

    def __init__(self, rules: tuple[RuleRecord, ...], key: int) -> None:
        self.rules = rules
        self.key = key


class WalkNode:
    """A node of the decision walk: the forbid and permit groups from the root down to here.

    Every node carries the groups of all its ancestors (and its own), so a
    decision descends to the deepest node along the resource and reads one
    short chain: one walk instead of two, and no per-node work on the (many)
    index nodes that hold no rule.
    """

    __slots__ = ("children", "forbids", "permits")

    def __init__(self, forbids: tuple[RuleGroup, ...], permits: tuple[RuleGroup, ...]) -> None:
        self.forbids = forbids
        self.permits = permits
        self.children: dict[str, WalkNode] = {}


def decode_table(table: Any, decode: Callable[[Any], U]) -> dict[str, list[U]]:
    """A ``PrefixTable`` with each value mapped through ``decode``.

    Raise ``MalformedProgram`` when ``table`` is not one (a corrupt bundle).
    """
    if type(table) is not dict:
        raise MalformedProgram("an index entry is not a prefix table")
    out: dict[str, list[U]] = {}
    for prefix, values in table.items():
        if type(prefix) is not str or type(values) is not list:
            raise MalformedProgram("an index entry is not a prefix table")
        out[prefix] = [decode(v) for v in values]
    return out


def build_walk(
    forbids: Mapping[str, list[RuleRecord]],
    permits: Mapping[str, list[RuleRecord]],
    keys: Iterator[int] | None = None,
) -> WalkNode:
    """The decision walk of one (namespace, action, resource kind) from its forbid and
    permit prefix tables.

    ``keys`` numbers the groups worth filtering per context (unique within
    one ``PolicySet``); by default a fresh counter.
    """
    counter = keys if keys is not None else itertools.count()

    def group(values: list[RuleRecord] | None) -> tuple[RuleGroup, ...]:
        if not values:
            return ()
        return (RuleGroup(tuple(values), next(counter) if len(values) > FILTER_MIN else -1),)

    root = WalkNode(group(forbids.get("")), group(permits.get("")))
    # Ancestors first (by depth), so that every node is created with its
    # parent's groups already in place.
    prefixes = sorted({*forbids, *permits} - {""}, key=lambda p: p.count("/"))
    fget = forbids.get
    pget = permits.get
    for prefix in prefixes:
        *path, last = prefix.split("/")
        node = root
        for seg in path:
            child = node.children.get(seg)
            if child is None:
                child = node.children[seg] = WalkNode(node.forbids, node.permits)
            node = child
        fv = fget(prefix)
        pv = pget(prefix)
        node.children[last] = WalkNode(
            node.forbids + group(fv) if fv else node.forbids,
            node.permits + group(pv) if pv else node.permits,
        )
    return root


def walk_along(walk: WalkNode, segs: Sequence[str]) -> WalkNode:
    """The deepest node of ``walk`` along ``segs``: its groups hold every rule whose
    literal prefix ``segs`` starts with."""
    node = walk
    for seg in segs:
        child = node.children.get(seg)
        if child is None:
            break
        node = child
    return node


def rules_of(groups: tuple[RuleGroup, ...]) -> Iterator[RuleRecord]:
    """The rules of ``groups`` in order (root first)."""
    for group in groups:
        yield from group.rules

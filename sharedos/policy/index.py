"""The rule index: rules by literal pattern prefix, as decision walks ready to descend.

A pattern such as ``/projects/p1/src/**`` is indexed under its literal prefix
``projects / p1 / src``. For every (namespace, action, resource kind) the
compiler writes one **decision walk**: a segment trie in plain JSON form,

    node = [children, forbid_groups, permit_groups]
    children = {segment: node, ...}

where ``forbid_groups``/``permit_groups`` list the *groups* (``groups`` in
the program: lists of rule positions sharing one literal prefix) of the
node's own prefix **and of every ancestor**, root first, or are ``0`` when
there are none. A decision descends the trie with one dict lookup per
resource segment and reads the groups of the deepest node it reached: every
rule whose literal prefix the resource starts with, and no other (OPA's
``ast/index.go`` does the same for Rego rules). Listing groups rather than
rules keeps a node's size proportional to its depth, however many rules its
ancestors hold. Identical groups (the same rules at the same prefix for
several actions) are stored once.

``validate_walk`` checks a walk once, at load, before anything uses it. The
JSON form is what the program (and a bundle, and its hash) holds, and what
explanations and ``could_permit`` read; ``merged_walk`` rebuilds the walks of
one namespace, at load, as the single trie of tuples ``decide`` descends
(groups held directly, every action in its own slots). ``TrieNode`` is a
prefix trie for other passes (the lints' shadowing check).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

from sharedos.policy.ir import MalformedProgram

T = TypeVar("T")

#: One node of a decision walk (see the module docstring).
Node = list[Any]

#: A group holding more rules than this gets a per-context filtered copy.
FILTER_MIN = 8


def empty_walk() -> Node:
    """A walk with no rule (every call of its action is denied)."""
    return [{}, 0, 0]


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


# ------------------------------------------------------------------ compile time


class IndexBuilder:
    """Collects rule positions by (namespace, action, effect, resource kind, prefix)
    and writes the program's ``index`` and ``groups``."""

    def __init__(self) -> None:
        #: (ns, action) -> [forbid_abs, forbid_rel, permit_abs, permit_rel], prefix -> rules
        self._tables: dict[tuple[str, str], list[dict[tuple[str, ...], list[int]]]] = {}
        self._gids: dict[tuple[int, ...], int] = {}
        self.groups: list[list[int]] = []

    def declare(self, ns: str, action: str) -> None:
        """Make sure (ns, action) gets a walk, even with no rule."""
        if (ns, action) not in self._tables:
            self._tables[(ns, action)] = [{}, {}, {}, {}]

    def add(
        self, ns: str, action: str, forbid: bool, absolute: bool, prefix: tuple[str, ...], idx: int
    ) -> None:
        """Index rule ``idx`` under its literal ``prefix``."""
        tables = self._tables.get((ns, action))
        if tables is None:
            tables = self._tables[(ns, action)] = [{}, {}, {}, {}]
        table = tables[(0 if forbid else 2) + (0 if absolute else 1)]
        entry = table.get(prefix)
        if entry is None:
            table[prefix] = [idx]
        else:
            entry.append(idx)

    def _group(self, ids: list[int]) -> int:
        key = tuple(ids)
        gid = self._gids.get(key)
        if gid is None:
            gid = self._gids[key] = len(self.groups)
            self.groups.append(ids)
        return gid

    def _walk(
        self, forbids: dict[tuple[str, ...], list[int]], permits: dict[tuple[str, ...], list[int]]
    ) -> Node:
        root: Node = [{}, 0, 0]
        # Shallow prefixes first, so that every node is made with its ancestors'
        # groups; then by the prefix itself, so group numbers never depend on
        # set order (the process's hash seed): one policy, one program, one hash.
        for prefix in sorted({*forbids, *permits}, key=lambda p: (len(p), p)):
            node = root
            for seg in prefix[:-1]:
                kids = node[0]
                child = kids.get(seg)
                if child is None:
                    child = kids[seg] = [{}, node[1], node[2]]
                node = child
            f, p = forbids.get(prefix), permits.get(prefix)
            fg = (node[1] or []) + [self._group(f)] if f else node[1]
            pg = (node[2] or []) + [self._group(p)] if p else node[2]
            if prefix:
                node[0][prefix[-1]] = [{}, fg, pg]
            else:
                root[1], root[2] = fg, pg
        return root

    def build(self) -> dict[str, dict[str, list[Node]]]:
        """``{ns: {action: [absolute walk, relative walk]}}`` (and ``self.groups``)."""
        index: dict[str, dict[str, list[Node]]] = {}
        for (ns, action), (fa, fr, pa, pr) in self._tables.items():
            index.setdefault(ns, {})[action] = [self._walk(fa, pa), self._walk(fr, pr)]
        return index


# ---------------------------------------------------------------------- run time


def _positions_below(values: Any, bound: int) -> bool:
    """True when ``values`` is a non-empty list of ints, each in ``range(bound)``."""
    return (
        type(values) is list
        and bool(values)
        and set(map(type, values)) <= {int}
        and min(values) >= 0
        and max(values) < bound
    )


def validate_groups(groups: Any, n_rules: int) -> None:
    """Raise ``MalformedProgram`` unless ``groups`` is a list of non-empty lists of rule positions."""
    if type(groups) is not list:
        raise MalformedProgram("groups is not a list")
    for group in groups:
        if not _positions_below(group, n_rules):
            raise MalformedProgram("a rule group is not a list of rule positions")


def validate_walk(
    root: Any,
    n_groups: int,
    leaf: dict[str, Any] | None = None,
    shared: dict[tuple[int, ...], list[int]] | None = None,
) -> None:
    """Raise ``MalformedProgram`` unless ``root`` is a decision walk over ``n_groups`` groups.

    Checked once, before the walk is used, so that a decision never meets a
    malformed node (a corrupt bundle fails its load instead). With ``leaf``
    and ``shared`` it also compacts the walk in place without changing its
    JSON: every node without children gets the one empty dict ``leaf`` (which
    nothing may fill), and equal group lists become one list (``shared``,
    by content) -- most of a walk's nodes are leaves, and a node without a
    rule of its own has its parent's groups.
    """
    stack = [root]
    pop = stack.pop
    push = stack.extend
    while stack:
        node = pop()
        if type(node) is not list or len(node) != 3:
            raise MalformedProgram("a decision walk node is not [children, forbids, permits]")
        kids, f, p = node
        if type(kids) is not dict:
            raise MalformedProgram("a decision walk node's children are not a mapping")
        for at, gids in ((1, f), (2, p)):
            if gids == 0 and type(gids) is int:
                continue
            if not _positions_below(gids, n_groups):
                raise MalformedProgram("a decision walk node's groups are malformed")
            if shared is not None:
                node[at] = shared.setdefault(tuple(gids), gids)
        if kids:
            push(kids.values())
        elif leaf is not None:
            node[0] = leaf


def merged_walk(
    roots: Sequence[Node], entries: Sequence[Any], leaf: dict[str, Any], memo: dict[int, Any]
) -> tuple[Any, ...]:
    """The checked walks of several actions (one namespace, one resource kind) as one
    trie for deciding: every node a tuple ``(children, forbids_0, permits_0,
    forbids_1, permits_1, ...)`` where action ``k``'s groups sit at ``1 + 2k`` and
    ``2 + 2k`` and are the group entries themselves (``entries[gid]``), not numbers.

    A decision descends while a child exists, then reads its action's slots. Below
    the deepest node of action ``k``'s own walk, a node (there for another action)
    carries that deepest node's groups, which is exactly what descending ``k``'s walk
    alone would have read. One trie instead of one per action, and node items
    inline in a tuple instead of behind a list: at thousands of rules each
    indirection is a cache miss and each node a few hundred bytes. Nodes without
    children share ``leaf`` (which nothing fills); equal group lists share one tuple
    of entries (``memo``, by the list's identity: ``roots`` must have passed
    ``validate_walk`` with its ``shared`` map)."""

    memo_get = memo.get

    def groups(gids: Any) -> tuple[Any, ...]:
        if not gids:
            return ()
        got = memo_get(id(gids))
        if got is None:
            got = memo[id(gids)] = tuple([entries[g] for g in gids])
        return got

    def below(nodes: Sequence[Node | None]) -> list[str]:
        """The segments under a merged node: its actions' own children, in order."""
        found: Any = None
        for node in nodes:
            if node is not None and node[0]:
                if found is None:
                    found = list(node[0])
                else:
                    if type(found) is list:
                        found = dict.fromkeys(found)
                    found.update(dict.fromkeys(node[0]))
        return [] if found is None else list(found)

    slots: list[Any] = []
    for root in roots:
        slots += (groups(root[1]), groups(root[2]))
    segs = below(roots)
    top = ({} if segs else leaf, *slots)
    # (merged node, each action's own node there or None when its walk ended above,
    # the node's slots, the segments below it)
    stack: list[tuple[tuple[Any, ...], list[Node | None], list[Any], list[str]]] = [
        (top, list(roots), slots, segs)
    ]
    while stack:
        made, nodes, parent_slots, segs = stack.pop()
        kids = made[0]
        for seg in segs:
            child_nodes: list[Node | None] = []
            child_slots = list(parent_slots)  # an action without this child keeps its groups
            for k, node in enumerate(nodes):
                child = node[0].get(seg) if node is not None else None
                child_nodes.append(child)
                if child is not None:
                    child_slots[2 * k] = groups(child[1])
                    child_slots[2 * k + 1] = groups(child[2])
            child_segs = below(child_nodes)
            child_made = ({} if child_segs else leaf, *child_slots)
            kids[seg] = child_made
            if child_segs:
                stack.append((child_made, child_nodes, child_slots, child_segs))
    return top


def walk_along(walk: Node, segs: Sequence[str]) -> Node:
    """The deepest node of ``walk`` along ``segs``: its groups hold every rule whose
    literal prefix ``segs`` starts with."""
    node = walk
    for seg in segs:
        child = node[0].get(seg)
        if child is None:
            break
        node = child
    return node


def walk_groups(walk: Node) -> tuple[set[int], set[int]]:
    """Every forbid group and every permit group of a walk (for listing all its rules)."""
    forbids: set[int] = set()
    permits: set[int] = set()
    stack = [walk]
    while stack:
        node = stack.pop()
        if node[1]:
            forbids.update(node[1])
        if node[2]:
            permits.update(node[2])
        stack.extend(node[0].values())
    return forbids, permits

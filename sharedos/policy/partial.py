"""Partial evaluation of conditions: what ``could_permit`` reasons with.

Arguments, resource and the time of the call (``context.now``) are unknown;
the rest of the context and the action are known. Each
condition has a set of possible outcomes (true / false / error); rules that
test the same argument (or the same member of ``context.now``) are reasoned
about jointly (``JointSpace``), so a permit and a forbid on ``args.mode ==
"x"`` (or ``context.now.weekday == "mon"``) are seen to exclude each other.
The results agree with ``decide`` for every concrete choice of arguments,
except that conditions on ``resource`` are assumed satisfiable (documented).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from sharedos.policy.conditions import compile_expr, operands, subexpressions
from sharedos.policy.functions import EvalError, member, values_equal

T, F, E = "T", "F", "E"
_UNKNOWN = object()
_ERROR = object()


def outcomes(enc: list[Any], context: Any, action: str) -> frozenset[str]:
    """Possible results of a boolean condition when args and resource are unknown.

    Context and action are known. Atoms that read ``args``/``resource`` may be
    True, False or an error; everything else is evaluated exactly, with the
    same short-circuit order as the runtime, so the answer agrees with
    ``decide`` for every concrete choice of arguments.
    """
    kind = enc[0]
    if kind in ("and", "or"):
        # Left to right: an operand that decides (F for and, T for or) or
        # errors stops the chain; otherwise the next operand is reached.
        stop = F if kind == "and" else T
        go_on = T if kind == "and" else F
        out: set[str] = set()
        reached = True
        for operand in enc[1:]:
            a = outcomes(operand, context, action)
            out |= a & {stop, E}
            if go_on not in a:
                reached = False
                break
        if reached:
            out.add(go_on)
        return frozenset(out)
    if kind == "not":
        inner = outcomes(enc[1], context, action)
        return frozenset({T: F, F: T, E: E}[x] for x in inner)
    value = _partial_value(enc, context, action)
    if value is _UNKNOWN:
        return frozenset({T, F, E})
    if value is _ERROR:
        return frozenset({E})
    if value is True:
        return frozenset({T})
    if value is False:
        return frozenset({F})
    return frozenset({E})


def _reads_unknown(enc: list[Any]) -> bool:
    """Does ``enc`` read what listing does not know: arguments, the resource, or the
    time of the call (``context.now``, supplied per call, never at listing)?"""
    for node in subexpressions(enc):
        kind = node[0]
        if kind == "ref" or kind == "has":
            root = node[1]
            if root == "args" or root == "resource":
                return True
            if root == "context" and node[2][:1] == ["now"]:
                return True
    return False


def _partial_value(enc: list[Any], context: Any, action: str) -> Any:
    kind = enc[0]
    if kind in ("and", "or", "not"):
        outs = outcomes(enc, context, action)
        if len(outs) == 1:
            (only,) = outs
            return {T: True, F: False, E: _ERROR}[only]
        return _UNKNOWN
    if _reads_unknown(enc):
        # Every operand of a comparison, call or list is evaluated (no short
        # circuit), so an operand that certainly errors makes the whole an error.
        children = operands(enc)
        if any(_partial_value(c, context, action) is _ERROR for c in children):
            return _ERROR
        return _UNKNOWN
    try:
        return compile_expr(enc)((context, None, None, action))
    except EvalError:
        return _ERROR
    except Exception:
        return _ERROR


def permit_possible(enc: list[Any] | None, kind: str | None, context: Any, action: str) -> bool:
    """Could this permit's condition hold for some arguments?"""
    if enc is None:
        return True
    want = T if kind != "unless" else F
    return want in outcomes(enc, context, action)


def forbid_certain(enc: list[Any] | None, kind: str | None, context: Any, action: str) -> bool:
    """Does this forbid's condition hold (or fail closed) for every choice of arguments?"""
    if enc is None:
        return True
    applies = {T, E} if kind != "unless" else {F, E}
    return outcomes(enc, context, action) <= applies


# ------------------------------------------------ joint reasoning over argument atoms
#
# ``outcomes`` looks at one condition at a time. A permit and a forbid often
# test the *same* argument (permit ... when args.mode == "x" / forbid ...
# unless args.mode != "x"); deciding them independently would list a tool no
# call can use. So argument atoms are reasoned about jointly:
#
# * ``a != b`` is ``not (a == b)`` and ``a not in b`` is ``not (a in b)``
#   (identical errors), so both spellings share one atom;
# * an atom comparing one argument ``args.p`` with a value known from the
#   context/literals is a function of that argument's value; the argument
#   ranges over every value such atoms mention, a fresh value, and "missing";
# * so is an atom comparing a member of the time of the call
#   (``context.now.weekday == "mon"``): like an argument, the member has one
#   value per call, so ``when context.now.weekday == "mon"`` and ``unless
#   context.now.weekday == "tue"`` cannot both let a call through (each member
#   is a variable of its own: an over-approximation of real times, never an
#   under-one);
# * any other atom reading args/resource/time is a free true/false/error variable.
#
# Every combination is tried (bounded by ``MAX_JOINT_CASES``).

#: Beyond this many combinations, fall back to per-condition reasoning.
MAX_JOINT_CASES = 4096
#: and beyond this many over all the permits weighed for one tool's listing (each may
#: offer thousands of lists for 'VALUE in args.p': ninety permits of two such tests cost
#: 4 s of CPU per new caller), the permits not yet weighed are "possible"
MAX_LISTING_CASES = 4 * MAX_JOINT_CASES

_MISSING = object()
_FRESH = "\x00fresh\x00"  # a string no policy literal can equal
#: the first step of a ``context.now`` member's path in ``JointSpace`` (no argument name
#: can be it, so the time never shares a variable with an argument)
_NOW = "\x00now"


def _joint_path(node: list[Any]) -> tuple[str, ...] | None:
    """The variable a reference is in joint reasoning: ``args.p`` (its path) or a member
    of ``context.now`` (``(_NOW, "now", member, ...)``); None for anything else."""
    if node[0] != "ref" or not node[2]:
        return None
    if node[1] == "args":
        return tuple(node[2])
    if node[1] == "context" and node[2][:1] == ["now"] and len(node[2]) > 1:
        return (_NOW, *node[2])
    return None


def _normal(node: list[Any]) -> list[Any]:
    if node[0] == "cmp" and node[1] == "!=":
        return ["not", ["cmp", "==", node[2], node[3]]]
    if node[0] == "cmp" and node[1] == "not in":
        return ["not", ["cmp", "in", node[2], node[3]]]
    return node


def _atom_key(enc: list[Any]) -> str:
    import json

    return json.dumps(enc, sort_keys=True, separators=(",", ":"))


def condition_key(enc: list[Any]) -> str:
    """A condition's identity: the same for two rules that test the same thing."""
    return _atom_key(enc)


def _reads_args(node: list[Any]) -> bool:
    return _reads_unknown(node)


class JointSpace:
    """The argument atoms of a set of conditions and the values they range over."""

    def __init__(self, context: Any, action: str) -> None:
        self.context = context
        self.action = action
        # atom key -> (arg path, side, other value, op) for value atoms
        self.value_atoms: dict[str, tuple[tuple[str, ...], str, Any, str]] = {}
        self.domains: dict[tuple[str, ...], list[Any]] = {}
        self.free: list[str] = []
        #: argument paths compared with a value (the others are only tested with ``has``)
        self.valued: set[tuple[str, ...]] = set()
        #: the values ``VALUE in args.p`` looks for, by path: a list may hold any of them
        #: together (``_held_lists``)
        self.members: dict[tuple[str, ...], list[Any]] = {}

    def add(self, enc: list[Any] | None) -> None:
        """Register every argument atom of a condition."""
        if enc is not None:
            self._walk(enc)

    def _walk(self, node: list[Any]) -> None:
        node = _normal(node)
        kind = node[0]
        if kind in ("and", "or"):
            for operand in node[1:]:
                self._walk(operand)
            return
        if kind == "not":
            self._walk(node[1])
            return
        if not _reads_args(node):
            return
        if _partial_value(node, self.context, self.action) is _ERROR:
            return  # a certain error is a constant, not a variable
        key = _atom_key(node)
        if key in self.value_atoms or key in self.free:
            return
        if kind == "has" and node[1] == "args" and node[2]:
            # a presence test is a function of the argument too: missing or not
            path = tuple(node[2])
            self.value_atoms[key] = (path, "L", None, "has")
            self.domains.setdefault(path, [_MISSING, _FRESH])
            return
        if kind == "cmp" and node[1] in ("==", "in"):
            for side, mine, other in (("L", node[2], node[3]), ("R", node[3], node[2])):
                path_or_none = _joint_path(mine)
                if path_or_none is not None and not _reads_args(other):
                    value = _partial_value(other, self.context, self.action)
                    if value is _UNKNOWN or value is _ERROR:
                        break
                    path = path_or_none
                    self.valued.add(path)
                    self.value_atoms[key] = (path, side, value, node[1])
                    dom = self.domains.setdefault(path, [_MISSING, _FRESH])
                    if node[1] == "in" and side == "R":
                        held = self.members.setdefault(path, [])
                        if not any(_same(h, value) for h in held):
                            held.append(value)
                    for candidate in _candidates(node[1], side, value):
                        if not any(
                            c is candidate or (type(c) is type(candidate) and c == candidate)
                            for c in dom
                        ):
                            dom.append(candidate)
                    return
        self.free.append(key)

    def size(self) -> int:
        """How many combinations ``cases`` yields (at most)."""
        n: int = 3 ** len(self.free)
        # ``cases`` also offers args.a.b each value an object candidate of args.a holds
        # there (``_offer_held_values``): counted, or a context list of 1,300 objects
        # made 1.7 million combinations behind a count of 3,906
        offered: dict[tuple[str, ...], int] = {}
        for a, b in self._prefix_conflicts(list(self.domains)):
            if b in self.valued:
                held = sum(1 for c in self.domains[a] if _held(c, b[len(a) :])[0])
                offered[b] = offered.get(b, 0) + held
        for path, dom in self.domains.items():
            n *= len(dom) + _subsets(len(self.members.get(path, ()))) + offered.get(path, 0)
        return n

    def _held_lists(self) -> None:
        """A list may hold any of the values ``VALUE in args.p`` atoms look for, several
        together (``permit when "a" in args.tags`` with ``forbid unless "b" in
        args.tags`` is allowed for ``["a", "b"]``), and values none of them looks for
        (``when args.tags != [] and "b" not in args.tags``: ``["z"]``): offer every list
        of them and a fresh string."""
        for path, held in self.members.items():
            dom = self.domains[path]
            # Lists of different sets of distinct values differ from each other: each is
            # checked only against what the other atoms offered (checking each against
            # every list added before it cost 4**n comparisons: 8 s of CPU at 10 values)
            offered = list(dom)
            values = [*held, _FRESH]
            for k in range(len(values) + 1):
                for c in itertools.combinations(values, k):
                    candidate = list(c)
                    if not any(_same(d, candidate) for d in offered):
                        dom.append(candidate)
        self.members = {}

    def cases(self) -> Any:
        """Yield one assignment (atom key -> "T"/"F"/"E") per combination."""
        self._held_lists()
        paths = list(self.domains)
        prefixes = self._prefix_conflicts(paths)
        self._offer_held_values(prefixes)
        for values in itertools.product(*(self.domains[p] for p in paths)):
            chosen = dict(zip(paths, values, strict=True))
            if prefixes and not self._consistent(chosen, prefixes, self.valued):
                continue
            base: dict[str, str] = {}
            for key, (path, side, other, op) in self.value_atoms.items():
                base[key] = _value_atom(chosen[path], side, other, op)
            for free_values in itertools.product("TFE", repeat=len(self.free)):
                assign = dict(base)
                assign.update(zip(self.free, free_values, strict=True))
                yield assign

    @staticmethod
    def _prefix_conflicts(
        paths: list[tuple[str, ...]],
    ) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        return [(a, b) for a in paths for b in paths if a != b and b[: len(a)] == a]

    def _offer_held_values(self, pairs: list[tuple[tuple[str, ...], tuple[str, ...]]]) -> None:
        """When a candidate of args.a is an object holding a value at args.a.b and
        args.a.b is compared too, offer args.a.b that value (the one consistent case)."""
        for a, b in pairs:
            if b not in self.valued:
                continue
            dom = self.domains[b]
            for candidate in self.domains[a]:
                found, held = _held(candidate, b[len(a) :])
                if found and not any(_same(c, held) for c in dom):
                    dom.append(held)

    @staticmethod
    def _consistent(
        chosen: dict[tuple[str, ...], Any],
        pairs: list[tuple[tuple[str, ...], tuple[str, ...]]],
        valued: set[tuple[str, ...]],
    ) -> bool:
        # args.a and args.a.b both constrained: args.a.b present needs args.a to
        # be an object. When the candidate of args.a is an object, args.a.b is
        # what it holds there (missing, or that very value when args.a.b is
        # compared). A fresh value (equal to none compared) may be an object
        # holding anything there; any other candidate is not an object, so
        # args.a.b must be missing -- unless args.a is only ever tested with
        # 'has', where any present args.a may be that object (but a missing one
        # holds nothing).
        for a, b in pairs:
            ca, cb = chosen[a], chosen[b]
            if type(ca) is dict and a in valued:
                found, held = _held(ca, b[len(a) :])
                if not found:
                    if cb is not _MISSING:
                        return False
                elif cb is _MISSING or (b in valued and not _same(cb, held)):
                    return False
                continue
            if cb is _MISSING or ca is _FRESH:
                # a fresh args.a may be an object holding anything at args.a.b:
                # with a key of its own it still differs from every compared value
                continue
            if a in valued or ca is _MISSING:
                return False
        return True


def _held(value: Any, rest: tuple[str, ...]) -> tuple[bool, Any]:
    """What the object ``value`` holds along ``rest`` (found, value)."""
    for name in rest:
        if type(value) is not dict or name not in value:
            return False, None
        value = value[name]
    return True, value


def _same(a: Any, b: Any) -> bool:
    """The language's equality, as a candidate's identity (an error: not the same)."""
    if a is b:
        return True
    if a is _MISSING or b is _MISSING or a is _FRESH or b is _FRESH:
        return False
    try:
        return bool(values_equal(a, b))
    except Exception:
        return False


def _subsets(n: int) -> int:
    """How many lists ``_held_lists`` offers for ``n`` values (at most: some may be
    offered already)."""
    return 2 ** (n + 1) if n else 0


def _candidates(op: str, side: str, value: Any) -> list[Any]:
    if op == "==":
        return [value]
    if side == "L":  # args.p in VALUE: membership in a list (anything else errors)
        if isinstance(value, list | tuple):
            return list(value)
        return []
    # VALUE in args.p: the lists holding any of the values looked for, and a fresh
    # one, are offered by ``JointSpace._held_lists`` (a fresh value is a string, where
    # 'in' errs)
    return []


def _value_atom(mine: Any, side: str, other: Any, op: str) -> str:
    if op == "has":
        return F if mine is _MISSING else T
    if mine is _MISSING:
        return E
    try:
        if op == "==":
            return T if values_equal(mine, other) else F
        if side == "L":
            return T if member(mine, other) else F
        return T if member(other, mine) else F
    except EvalError:
        return E
    except Exception:
        return E


def outcome_under(enc: list[Any], context: Any, action: str, assign: Mapping[str, str]) -> str:
    """T/F/E of a boolean condition when each argument atom takes the value in ``assign``."""
    enc = _normal(enc)
    kind = enc[0]
    if kind in ("and", "or"):
        go_on = T if kind == "and" else F
        result = go_on
        for operand in enc[1:]:
            result = outcome_under(operand, context, action, assign)
            if result != go_on:
                return result
        return result
    if kind == "not":
        return {T: F, F: T, E: E}[outcome_under(enc[1], context, action, assign)]
    if _reads_args(enc):
        key = _atom_key(enc)
        if key in assign:
            return assign[key]
        return E  # an argument atom that certainly errors
    (only,) = outcomes(enc, context, action)
    return only


def rule_applies_under(
    enc: list[Any] | None,
    kind: str | None,
    forbid: bool,
    context: Any,
    action: str,
    assign: Mapping[str, str],
) -> bool:
    """Whether a rule applies under an atom assignment (same fail-closed rule as ``decide``)."""
    if enc is None:
        return True
    result = outcome_under(enc, context, action, assign)
    if result == E:
        return forbid
    return (result == T) is (kind != "unless")

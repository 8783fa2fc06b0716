"""The indexed pure-Python reference: the bar SharedOS's ``decide`` is held to.

Issue 14 asks for ``decide`` p50 within 1.1x of "an indexed pure-Python
reference". For that ratio to mean something, this is the best
*straightforward* decision procedure for the workloads' rule language that we
could write in plain Python, with no per-context or per-request caching:

- one trie per action over the **literal leading segments** of every pattern
  (a ``{context.principal}`` segment is a special child taken only when the
  request's segment equals the caller's principal: owner homes cost one
  string comparison, not a scan of every user's home);
- the rest of a pattern (its *tail*) is pre-classified at build time into the
  shapes that occur: end of path, ``**`` (anything below), ``*`` (exactly one
  more segment), ``pre*suf`` (one more segment, prefix/suffix test), or a
  general segment matcher for anything else;
- conditions are pre-classified too: a role membership or a tenant equality
  is an inline test on the context, anything else a closure over
  ``(context, args)``;
- a request walks the trie once along its path segments; a forbid that
  applies ends the walk (deny); otherwise any permit that applied allows.

It has the same decision semantics as SharedOS on this rule language —
default deny, forbid overrides permit, order-independent, an unsafe
interpolated principal never widens a permit and fails closed in a forbid, a
condition that cannot be evaluated (missing or mistyped argument) makes a
permit not apply and a forbid apply — and it is a complete decision procedure,
not a lookup table: it checks that the path is canonical with three C-level
string scans and canonicalises (or refuses) anything that is not, exactly as
SharedOS does. It is the labeller of the workload generator (which engine
labels does not matter: the runner fails unless every engine agrees).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from benchmarks.workload import Cond, Rule, Seg, Workload

# tail codes
_END, _ANY, _ONE, _GLOB, _GENERAL = range(5)
# condition codes
_NONE, _ROLE, _TENANT, _FUNC = range(4)

Entry = tuple[int, Any, Any, int, Any, bool]


class _Node:
    __slots__ = ("children", "forbids", "pchild", "permits")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.pchild: _Node | None = None  # the {context.principal} segment
        self.forbids: list[Entry] = []
        self.permits: list[Entry] = []


def _control(ch: str) -> bool:
    """A control character (C0, DEL, C1): what the docs call unsafe, unlike ``isprintable``,
    which also refuses spaces, format characters and separators that SharedOS accepts."""
    o = ord(ch)
    return o < 0x20 or 0x7F <= o <= 0x9F


def _canonical(path: str) -> str | None:
    """Canonical absolute form of ``path``, or None when it has none (SharedOS's rules)."""
    if not path.startswith("/") or len(path) > 4096:
        return None
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or 0xD800 <= ord(ch) <= 0xDFFF for ch in path):
        return None
    if not unicodedata.is_normalized("NFC", path):  # one spelling per name (docs, "Unicode")
        return None
    parts: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(seg)
    return "/" + "/".join(parts)


def _safe_segment(value: object) -> str | None:
    """The interpolated value when it is safe as one literal segment, else None."""
    if type(value) is int:
        try:
            value = str(value)
        except ValueError:  # more digits than Python spells: no segment is it
            return None
    if type(value) is not str or value in ("", ".", ".."):
        return None
    if "/" in value or "*" in value or any(_control(ch) for ch in value):
        return None
    if not unicodedata.is_normalized("NFC", value):  # a resource is NFC: never this one
        return None
    return value


def _cond_func(cond: Cond) -> Callable[[dict[str, Any], dict[str, Any]], bool]:
    op = cond[0]
    if op == "role":
        role = cond[1]
        return lambda c, a: role in c["roles"]
    if op == "tenant":
        tenant = cond[1]
        return lambda c, a: c["tenant"] == tenant
    if op == "arg_eq":
        name, value = cond[1], cond[2]
        return lambda c, a: a[name] == value
    if op == "arg_in":
        name, values = cond[1], frozenset(cond[2])
        return lambda c, a: _str(a[name]) in values
    if op == "arg_le":
        name, bound = cond[1], cond[2]
        return lambda c, a: _num(a[name]) <= bound
    if op == "arg_gt":
        name, bound = cond[1], cond[2]
        return lambda c, a: _num(a[name]) > bound
    if op == "and":
        left, right = _cond_func(cond[1]), _cond_func(cond[2])
        return lambda c, a: left(c, a) and right(c, a)
    raise ValueError(f"unknown condition {cond!r}")


def _str(value: object) -> str:
    if type(value) is not str:
        raise TypeError("not a string")
    return value


def _num(value: object) -> int | float:
    if type(value) not in (int, float):  # booleans are not numbers
        raise TypeError("not a number")
    return value  # type: ignore[return-value]


def _general_tail(tail: Sequence[Seg]) -> Callable[[list[str], int, str | None, bool], bool]:
    """A matcher for an arbitrary remaining pattern (rare: e.g. ``*/{principal}/x/**``)."""

    def match(segs: list[str], i: int, principal: str | None, forbid: bool) -> bool:
        return _match_from(tail, 0, segs, i, principal, forbid)

    return match


def _match_from(
    tail: Sequence[Seg], t: int, segs: list[str], i: int, principal: str | None, forbid: bool
) -> bool:
    n = len(segs)
    while t < len(tail):
        seg = tail[t]
        kind = seg[0]
        if kind == "dstar":
            return True  # only ever last
        if i >= n:
            return False
        s = segs[i]
        if kind == "lit":
            if s != seg[1]:
                return False
        elif kind == "star":
            pass
        elif kind == "glob":
            if len(s) < len(seg[1]) + len(seg[2]) or not (
                s.startswith(seg[1]) and s.endswith(seg[2])
            ):
                return False
        elif kind == "principal":
            if principal is None:
                if not forbid:
                    return False  # an unsafe value never widens a permit
            elif s != principal:
                return False
        t += 1
        i += 1
    return i == n


class ReferenceEngine:
    """Indexed pure-Python decision procedure for the benchmark's rule language."""

    name = "reference"

    def __init__(self, tools: dict[str, str], rules: Iterable[Rule]) -> None:
        self._tools = dict(tools)
        self._roots: dict[str, _Node] = {}
        self._any_principal = False
        for rule in rules:
            for action in rule.actions:
                self._insert(self._roots.setdefault(action, _Node()), rule)

    @classmethod
    def from_workload(cls, wl: Workload) -> ReferenceEngine:
        """Build the index for a workload's rules."""
        return cls(wl.tools, wl.rules)

    def _insert(self, node: _Node, rule: Rule) -> None:
        pat = rule.pattern
        i = 0
        while i < len(pat) and pat[i][0] in ("lit", "principal"):
            if pat[i][0] == "lit":
                node = node.children.setdefault(pat[i][1], _Node())
            else:
                if node.pchild is None:
                    node.pchild = _Node()
                node = node.pchild
            i += 1
        tail = pat[i:]
        if not tail:
            tcode, ta, tb = _END, None, None
        elif tail == (("dstar",),):
            tcode, ta, tb = _ANY, None, None
        elif tail == (("star",),):
            tcode, ta, tb = _ONE, None, None
        elif len(tail) == 1 and tail[0][0] == "glob":
            tcode, ta, tb = _GLOB, tail[0][1], tail[0][2]
        else:
            tcode, ta, tb = _GENERAL, _general_tail(tail), None
        if rule.cond is None:
            ccode, carg = _NONE, None
        elif rule.cond[0] == "role":
            ccode, carg = _ROLE, rule.cond[1]
        elif rule.cond[0] == "tenant":
            ccode, carg = _TENANT, rule.cond[1]
        else:
            ccode, carg = _FUNC, _cond_func(rule.cond)
        entry: Entry = (tcode, ta, tb, ccode, carg, rule.unless)
        (node.forbids if rule.effect == "forbid" else node.permits).append(entry)

    def decide(
        self,
        tool: str,
        args: dict[str, Any],
        context: dict[str, Any],
        *,
        context_key: str | None = None,
    ) -> bool:
        """True when the call is allowed: some permit applies and no forbid does.

        ``context_key`` is accepted (the call has SharedOS's shape) and ignored:
        the reference caches nothing.
        """
        action = self._tools.get(tool)
        if action is None:
            return False
        root = self._roots.get(action)
        path = args.get("path")
        if root is None or type(path) is not str:
            return False
        if not (
            path.isprintable()
            and path.startswith("/")
            and "//" not in path
            and "/." not in path
            and (path[-1] != "/" or len(path) == 1)
            and len(path) <= 4096
            and unicodedata.is_normalized("NFC", path)
        ):
            canon = _canonical(path)
            if canon is None:
                return False
            path = canon
        segs = path[1:].split("/") if len(path) > 1 else []
        n = len(segs)
        principal = _safe_segment(context.get("principal"))
        allowed = False
        stack = [(root, 0, True)]
        while stack:
            node, i, permits_ok = stack.pop()
            if node.forbids:
                for entry in node.forbids:
                    if _tail(entry, segs, i, n, principal, True) and _holds(
                        entry, context, args, True
                    ):
                        return False
            if permits_ok and not allowed and node.permits:
                for entry in node.permits:
                    if _tail(entry, segs, i, n, principal, False) and _holds(
                        entry, context, args, False
                    ):
                        allowed = True
                        break
            if i < n:
                child = node.children.get(segs[i])
                if child is not None:
                    stack.append((child, i + 1, permits_ok))
                pc = node.pchild
                if pc is not None:
                    if principal is None:
                        # an unsafe principal never widens a permit; in a forbid its
                        # segment matches any one segment (fails closed)
                        stack.append((pc, i + 1, False))
                    elif segs[i] == principal:
                        stack.append((pc, i + 1, permits_ok))
        return allowed


def _tail(
    entry: Entry, segs: list[str], i: int, n: int, principal: str | None, forbid: bool
) -> bool:
    code = entry[0]
    if code == _ANY:
        return True
    if code == _END:
        return i == n
    if code == _ONE:
        return n - i == 1
    if code == _GLOB:
        if n - i != 1:
            return False
        s = segs[i]
        pre, suf = entry[1], entry[2]
        return len(s) >= len(pre) + len(suf) and s.startswith(pre) and s.endswith(suf)
    return bool(entry[1](segs, i, principal, forbid))


def _holds(entry: Entry, context: dict[str, Any], args: dict[str, Any], forbid: bool) -> bool:
    """Does the rule's condition let it apply? Errors fail closed (forbid applies, permit not)."""
    code = entry[3]
    if code == _NONE:
        return True
    try:
        if code == _ROLE:
            value = entry[4] in context["roles"]
        elif code == _TENANT:
            value = context["tenant"] == entry[4]
        else:
            value = bool(entry[4](context, args))
    except Exception:
        return forbid
    return not value if entry[5] else value


class ReferenceAdapter:
    """The reference as an engine of the runner (built from the abstract rules, no text)."""

    name = "reference"
    version = "benchmarks.engines.reference (pure Python)"

    def __init__(self) -> None:
        self.engine: Any = None
        self.lang = False

    def native(self, wl: Workload) -> dict[str, str]:
        """No native text: the reference indexes the abstract rules directly."""
        return {}

    def load(self, files: dict[str, str], wl: Workload) -> None:
        """Build the tries (the whole language's reference for the ``random`` workload)."""
        if getattr(wl, "kind", "") == "lang":
            from benchmarks.engines.langref import LangReference

            self.engine, self.lang = LangReference.from_workload(wl), True  # type: ignore[arg-type]
        else:
            self.engine = ReferenceEngine.from_workload(wl)

    def prepare(self) -> bool:
        """Nothing to prepare."""
        return False

    def translate(self, req: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The same arguments SharedOS's ``decide`` gets (the key is accepted and ignored)."""
        return (req.tool, req.args, req.context), {"context_key": req.context_key}

    @property
    def call(self) -> Callable[..., Any]:
        """``ReferenceEngine.decide``."""
        assert self.engine is not None
        return self.engine.decide

    def allowed(self, answer: Any) -> bool:
        """The reference answers a bool (the whole language's, a reason code)."""
        return answer == "allowed" if self.lang else bool(answer)

"""The patterns that conditions on the resource amount to, for one context.

``startswith(resource, "/a/b")`` holds exactly for the resources the pattern
``/a/b*/**`` matches; ``endswith(resource, ".md")`` is ``/**/*.md``;
``contains(resource, "x")`` is ``/**/*x*/**``; ``segment(resource, 2) ==
"x"`` is ``/*/x/**`` (and the resource has a second segment: ``/*/*/**``);
``resource == "/a"`` is ``/a``. The value compared with may read the context
(``segment(resource, 2) in context.attributes.folders``): it is known once the
context is. Added to the rules' patterns, these make the resource witnesses
(``segments.witnesses``) also tell apart what the resource conditions test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sharedos.policy.analysis.atoms import ResourceAtom
from sharedos.policy.analysis.segments import SegPattern, valid_segment
from sharedos.policy.analysis.strings import Glob
from sharedos.policy.conditions import compile_expr


def atom_patterns(atoms: Iterable[ResourceAtom], context: Mapping[str, Any]) -> list[SegPattern]:
    """The patterns every resource atom amounts to in this context."""
    out: list[SegPattern] = []
    for atom in atoms:
        out.extend(translate(atom, context))
    return out


def translate(atom: ResourceAtom, context: Mapping[str, Any]) -> list[SegPattern]:
    """The patterns one resource atom amounts to in this context (empty: it tells no
    resource from another here), for absolute and relative resources alike."""
    try:
        value = compile_expr(atom.other_enc)((context, None, None, None))
    except Exception:
        return []  # the atom errors whatever the resource
    values = value if atom.many else [value]
    if not isinstance(values, list | tuple):
        return []
    out: list[SegPattern] = []
    for text in values:
        if type(text) is not str:
            continue
        for absolute in (True, False):
            pat = atom_pattern(atom.test, atom.position, text, absolute)
            if pat is not None:
                out.append(pat)
        if atom.position is not None:
            depth = abs(atom.position)
            ones: tuple[Any, ...] = tuple(("S",) for _ in range(depth))
            for absolute in (True, False):
                out.append(SegPattern(absolute, (*ones, ("D",))))
    return out


def atom_pattern(test: str, position: int | None, text: str, absolute: bool) -> SegPattern | None:
    """``startswith(resource, "/a/b")`` as the pattern ``/a/b*/**`` and so on; None when no
    canonical resource of that kind can satisfy it or every one does."""
    if position is not None:
        if "/" in text and test == "eq":
            return None
        glob = _glob(test, text)
        if test == "eq" and not valid_segment(text):
            return None
        one: tuple[Any, ...] = ("L", text) if test == "eq" else ("G", glob)
        pad: tuple[Any, ...] = tuple(("S",) for _ in range(abs(position) - 1))
        if position > 0:
            return SegPattern(absolute, (*pad, one, ("D",)))
        return SegPattern(absolute, (("D",), one, *pad))
    if absolute:
        if test in ("eq", "startswith") and not text.startswith("/"):
            return None
        body = text[1:] if test in ("eq", "startswith") else text
    else:
        if test in ("eq", "startswith") and text.startswith("/"):
            return None
        body = text
    parts = body.split("/")
    if test == "eq":
        if body == "":
            return SegPattern(absolute, ()) if absolute else None
        if not all(valid_segment(p) for p in parts):
            return None
        return SegPattern(absolute, tuple(("L", p) for p in parts))
    if test == "startswith":
        if body == "":
            return None  # every resource of this kind
        *whole, last = parts
        if not all(valid_segment(p) for p in whole):
            return None
        tail: tuple[Any, ...] = ("S",) if last == "" else ("G", Glob.prefix(last))
        return SegPattern(absolute, (*(("L", p) for p in whole), tail, ("D",)))
    if test == "endswith":
        if text == "":
            return None
        first, *rest = text.split("/")
        if rest and rest[-1] == "":
            # ends with '/': only the root of an absolute resource does
            return SegPattern(absolute, ()) if absolute and text == "/" else None
        if not all(valid_segment(p) for p in rest[:-1]):
            return None
        head: tuple[Any, ...]
        if first != "" or not rest:
            head = (("G", Glob.suffix(first)),)
        elif absolute:
            head = ()  # "/a": the root's slash may be the one before "a"
        else:
            head = (("S",),)  # a relative resource needs a segment before the slash
        return SegPattern(absolute, (("D",), *head, *(("L", p) for p in rest)))
    # contains
    if text == "":
        return None
    parts = text.split("/")
    if len(parts) == 1:
        return SegPattern(absolute, (("D",), ("G", Glob.infix(text)), ("D",)))
    if text == "/":
        # every absolute resource holds a '/'; a relative one when it has two segments
        return None if absolute else SegPattern(False, (("S",), ("S",), ("D",)))
    first, *middle, last = parts
    if not all(valid_segment(p) for p in middle):
        return None
    segs: list[Any] = [("D",)]
    if first != "":
        segs.append(("G", Glob.suffix(first)))
    elif not absolute:
        segs.append(("S",))  # a relative resource's first segment has no '/' before it
    segs += [("L", p) for p in middle]
    segs.append(("S",) if last == "" else ("G", Glob.prefix(last)))
    segs.append(("D",))
    return SegPattern(absolute, tuple(segs))


def _glob(test: str, text: str) -> Glob:
    if test == "startswith":
        return Glob.prefix(text)
    if test == "endswith":
        return Glob.suffix(text)
    if test == "contains":
        return Glob.infix(text)
    return Glob.literal(text)

"""Resource expressions at call time: arguments -> canonical resource.

A requirement's ``resource`` is either ``path(args.x)`` (canonicalized by
``sharedos.policy.paths``) or a template such as ``"{args.owner}/{args.repo}"``
whose holes must each be one safe segment. Resolvers are closures built once
per requirement; they return the canonical resource and its segments, or raise
``Unresolvable`` (the call is denied ``unresolvable_resource``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from sharedos.errors import PolicyLanguageError
from sharedos.policy.paths import UnresolvablePath, canonical_path
from sharedos.policy.patterns import Shape
from sharedos.policy.text import is_nfc

# '/', C0 controls, DEL, C1 controls, and lone surrogates: as for paths
# (``sharedos.policy.paths``), a lone surrogate is not text; an upstream that maps
# it to raw bytes (surrogateescape) would read '\udcc3\udca9' as 'é'.
_UNSAFE_HOLE_RE = re.compile(r"[/\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: what a URL parser (WHATWG: Node's ``fetch``) reads as a path separator (``\``) or as
#: the end of the path (``?``, ``#``), and the escapes it decodes (``%2e%2e`` is a ``..``
#: segment). An upstream that pastes a hole into a URL (server-github:
#: ``/repos/${owner}/${repo}/issues``) would send ``sharedos\..\security`` or
#: ``security#`` to another repository than the resource decided.
_URL_SPECIAL_RE = re.compile(r"[\\?#%]")


def _unsafe_segment(value: str) -> bool:
    """Is ``value`` not one segment that means itself, to the policy and to a URL?"""
    if value in ("", ".", "..") or _UNSAFE_HOLE_RE.search(value):
        return True
    if _URL_SPECIAL_RE.search(value) is None:
        return False
    decoded = unquote(value, errors="replace")
    return (
        "\\" in value
        or "?" in value
        or "#" in value
        or decoded in (".", "..")
        or _UNSAFE_HOLE_RE.search(decoded) is not None
        or "\\" in decoded
    )


class Unresolvable(PolicyLanguageError):
    """The arguments do not name a resource (missing, wrong type, unsafe, above '/')."""


def _lookup(args: Any, path: tuple[str, ...]) -> Any:
    value = args
    for name in path:
        if isinstance(value, Mapping) and name in value:
            value = value[name]
        else:
            raise Unresolvable(f"argument {'.'.join(('args', *path))} is missing")
    return value


Resolver = Callable[[Any], tuple[str, list[str]]]


def path_resolver(arg: tuple[str, ...]) -> Resolver:
    """Resolver for ``path(args.<arg>)``: the canonical absolute path the argument holds."""
    if len(arg) == 1:
        (name,) = arg

        def resolve_one(args: Any) -> tuple[str, list[str]]:
            if type(args) is dict:
                value = args.get(name, _lookup)
                if value is _lookup:
                    raise Unresolvable(f"argument args.{name} is missing")
            else:
                value = _lookup(args, arg)
            try:
                res = canonical_path(value)
            except UnresolvablePath as exc:
                raise Unresolvable(str(exc)) from None
            return res, (res[1:].split("/") if len(res) > 1 else [])

        return resolve_one

    def resolve_deep(args: Any) -> tuple[str, list[str]]:
        try:
            res = canonical_path(_lookup(args, arg))
        except UnresolvablePath as exc:
            raise Unresolvable(str(exc)) from None
        return res, (res[1:].split("/") if len(res) > 1 else [])

    return resolve_deep


def _hole_value(args: Any, path: tuple[str, ...]) -> str:
    if len(path) == 1 and type(args) is dict:
        value = args.get(path[0], _lookup)
        if value is _lookup:
            raise Unresolvable(f"argument args.{path[0]} is missing")
        if (
            type(value) is str
            and value.isascii()
            and value.isprintable()
            and "/" not in value
            and value not in ("", ".", "..")
            and _URL_SPECIAL_RE.search(value) is None
        ):
            return value  # printable ASCII without '/': the checks below would pass it
    else:
        value = _lookup(args, path)
    if type(value) is int:
        try:
            value = str(value)
        except ValueError:  # more digits than Python converts
            raise Unresolvable(
                f"argument {'.'.join(('args', *path))} is an integer too long to spell"
            ) from None
    if type(value) is not str:
        raise Unresolvable(f"argument {'.'.join(('args', *path))} must be a string")
    if _unsafe_segment(value):
        raise Unresolvable(
            f"argument {'.'.join(('args', *path))}={value[:60]!r} is empty, '.', '..' or contains '/', "
            "a control character or a lone surrogate, or, to a URL, a '\\', '?' or '#' or a "
            "percent-escape of one of these"
        )
    if not is_nfc(value):
        raise Unresolvable(
            f"argument {'.'.join(('args', *path))}={value[:60]!r} is not in Unicode "
            "normalization form C (NFC); send it normalized"
        )
    return value


def template_resolver(enc: Mapping[str, Any]) -> Resolver:
    """Resolver for an encoded template resource (see ``compiler.encode_resource``)."""
    absolute = bool(enc["abs"])
    segs = [[(p[0], p[1] if p[0] == "t" else tuple(p[1])) for p in seg] for seg in enc["segs"]]
    # Per segment: (0, text) a literal, (1, path) one hole, (2, parts) anything else.
    plan: list[tuple[int, Any]] = []
    for seg in segs:
        if len(seg) == 1:
            kind, text = seg[0]
            plan.append((0, str(text)) if kind == "t" else (1, text))
        else:
            plan.append((2, seg))

    def resolve_template(args: Any) -> tuple[str, list[str]]:
        out = []
        for form, value in plan:
            if form == 1:
                out.append(_hole_value(args, value))
            elif form == 0:
                out.append(value)
            else:
                seg = "".join(
                    str(text) if kind == "t" else _hole_value(args, text) for kind, text in value
                )
                if _unsafe_segment(seg):
                    # each hole is safe alone, but together ('%2' + 'e%2e') they spell one
                    raise Unresolvable(
                        f"resource segment {seg[:60]!r} is, to a URL, a '..' or holds an escaped "
                        "separator"
                    )
                out.append(seg)
        res = "/".join(out)
        if not is_nfc(res):
            # Each hole is NFC, but a hole that starts with a combining mark composes
            # with the text before it ('cafe' + '\u0301' is the NFD spelling of
            # 'café'): the resource as a whole must be NFC too, or it would reach the
            # rules under a spelling no NFC pattern names.
            raise Unresolvable(
                f"resource {res[:60]!r} is not in Unicode normalization form C (NFC); "
                "send its arguments normalized"
            )
        return ("/" + res if absolute else res), out

    return resolve_template


def resource_shape(enc: Mapping[str, Any]) -> Shape:
    """What an encoded resource expression can produce (for partial evaluation)."""
    if enc["kind"] == "path":
        return ("path",)
    segs = tuple(tuple(("t", p[1]) if p[0] == "t" else ("h",) for p in seg) for seg in enc["segs"])
    return ("template", bool(enc["abs"]), segs)

"""One representative string per way a string can satisfy a set of glob predicates.

A *glob* here is text with ``*`` wildcards matched against a whole string
(``*`` is any run of characters): a literal ``"admin"``, a prefix
``"ad*"`` (``startswith``), a suffix ``"*.md"`` (``endswith``), an infix
``"*li*"`` (``contains``), a pattern segment ``"pre*"``. ``fold`` globs
test the caseless key ``lower(s)`` is (``sharedos.policy.text.fold``:
``lower(s) == "alice"`` holds for ``"ALICE"``, ``"Ａｌｉｃｅ"``; ``lower(s) ==
"ss"`` for ``"ß"``): the walk folds character by character, which is the
key of every string whose folding does not depend on neighbouring characters
(a combining mark composing with the letter before it). ``representatives``
keeps only such strings when a fold glob is weighed (``composition_free``),
and every class of the key has one (the key itself, ``fold`` being
idempotent).

``representatives`` answers: which combinations of these predicates can a
string satisfy, and what is one (short) string for each? It walks the product
of the globs' automata breadth first over an alphabet made of every character
the globs mention plus one *fresh* character (every other character behaves
exactly like it: it can only be matched by a ``*``). Each reachable product
state is a set of strings that every glob treats alike, so one string per
state (and so per combination of answers) covers every string there is. The
answer is exact; it is cut short only past ``max_states`` product states (the
caller is told).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sharedos.policy.text import fold as _fold

#: The wildcard token of a glob (any run of characters, the empty one included).
STAR: None = None
#: The token for exactly one character, whatever it is (a template hole is never empty).
ONE = "\x00one"

#: Characters tried, in order, as the fresh character (the first one no glob mentions).
_FRESH = "xyzqjkvw0123456789_"

#: One character, ``ONE`` (any one character) or ``STAR``.
Token = str | None


@dataclass(frozen=True, slots=True)
class Glob:
    """A whole-string predicate: characters and ``STAR`` wildcards (``fold``: case-insensitive).

    ``start``/``accept`` (None: the usual ones) make a *shifted* glob: the strings
    ``s`` for which ``prefix + s + suffix`` satisfies the original (``shift``)."""

    tokens: tuple[Token, ...]
    fold: bool = False
    start: frozenset[int] | None = None
    accept: frozenset[int] | None = None

    def shift(self, prefix: str, suffix: str) -> Glob:
        """The strings ``s`` for which ``prefix + s + suffix`` satisfies this glob (a
        pattern segment ``x-{context.tenant}`` against the glob of another segment)."""
        states = self.initial()
        for ch in prefix:
            states = _step(self.tokens, self.fold, states, ch)
        accept = set()
        for i in range(len(self.tokens) + 1):
            at = _closure(self.tokens, {i})
            for ch in suffix:
                at = _step(self.tokens, self.fold, at, ch)
            if self.final(at):
                accept.add(i)
        return Glob(self.tokens, self.fold, states, frozenset(accept))

    @property
    def text(self) -> str | None:
        """The text of a plain literal glob (no wildcard, not shifted, not folded), else None."""
        if self.fold or self.start is not None or self.accept is not None:
            return None
        if any(t is STAR or t == ONE for t in self.tokens):
            return None
        return "".join(t for t in self.tokens if t is not None)

    def initial(self) -> frozenset[int]:
        """The automaton's states before any character."""
        return self.start if self.start is not None else _closure(self.tokens, {0})

    def final(self, states: frozenset[int]) -> bool:
        """Do these states accept?"""
        if self.accept is None:
            return len(self.tokens) in states
        return not self.accept.isdisjoint(states)

    @classmethod
    def literal(cls, text: str, *, fold: bool = False) -> Glob:
        """The string equals ``text`` (``lower(s) == text`` with ``fold``)."""
        return cls(tuple(text), fold)

    @classmethod
    def prefix(cls, text: str) -> Glob:
        """The string starts with ``text``."""
        return cls((*text, STAR))

    @classmethod
    def suffix(cls, text: str) -> Glob:
        """The string ends with ``text``."""
        return cls((STAR, *text))

    @classmethod
    def infix(cls, text: str) -> Glob:
        """The string contains ``text``."""
        return cls((STAR, *text, STAR))

    @classmethod
    def of_pieces(cls, pieces: Iterable[Sequence[Any]]) -> Glob:
        """From pattern pieces: ``("t", text)`` literal text, ``("w", ...)`` a wildcard,
        ``("h", ...)`` a template hole (one character or more)."""
        tokens: list[Token] = []
        for piece in pieces:
            if piece[0] == "t":
                tokens.extend(piece[1])
            elif piece[0] == "h":
                tokens += [ONE, STAR]
            elif not tokens or tokens[-1] is not STAR:
                tokens.append(STAR)
        return cls(tuple(tokens))

    def matches(self, text: str) -> bool:
        """Does ``text`` satisfy this glob? (The automaton ``representatives`` walks; a
        fold glob reads the whole string's caseless key, as ``lower`` makes it.)"""
        states = self.initial()
        for ch in _fold(text) if self.fold else text:
            states = _step(self.tokens, False, states, ch)
            if not states:
                return False
        return self.final(states)


def _closure(tokens: tuple[Token, ...], states: set[int]) -> frozenset[int]:
    """``states`` plus every position reachable by letting a ``*`` match nothing."""
    todo = list(states)
    seen = set(states)
    n = len(tokens)
    while todo:
        i = todo.pop()
        if i < n and tokens[i] is STAR and i + 1 not in seen:
            seen.add(i + 1)
            todo.append(i + 1)
    return frozenset(seen)


@lru_cache(maxsize=4096)
def fold_char(ch: str) -> str:
    """The caseless key of one character (``lower``'s, which may be several characters:
    ``ß`` is ``ss``)."""
    return _fold(ch)


def composition_free(text: str) -> bool:
    """Is ``lower(text)`` the characters' own keys end to end (no character's folding
    depends on its neighbours)?"""
    return text.isascii() or _fold(text) == "".join(fold_char(c) for c in text)


def _step(tokens: tuple[Token, ...], fold: bool, states: frozenset[int], ch: str) -> frozenset[int]:
    if fold:
        key = ch.lower() if ch.isascii() else fold_char(ch)
        if len(key) != 1:
            for part in key:  # one character whose key is several (or none)
                states = _step(tokens, False, states, part)
                if not states:
                    break
            return states
    else:
        key = ch
    n = len(tokens)
    out: set[int] = set()
    for i in states:
        if i < n:
            tok = tokens[i]
            if tok is STAR:
                out.add(i)
            elif tok in (key, ONE):
                out.add(i + 1)
    return _closure(tokens, out) if out else frozenset()


def alphabet(globs: Iterable[Glob], extra: str = "") -> str:
    """The characters worth trying: a fresh one first, then every character the globs
    mention (and, for a ``fold`` glob, its upper-case form), then ``extra``."""
    chars: set[str] = set(extra)
    for glob in globs:
        for tok in glob.tokens:
            if tok is STAR or tok == ONE:
                continue
            chars.add(tok)
            if glob.fold:
                upper = tok.upper()
                if len(upper) == 1 and upper.lower() == tok:
                    chars.add(upper)
    fresh = next((c for c in _FRESH if c not in chars), "\u2603")
    return fresh + "".join(sorted(chars))


@dataclass(frozen=True, slots=True)
class Classes:
    """The representatives found: ``(string, which globs it satisfies)``, shortest first.

    ``complete`` is False when the walk stopped at its state bound (some
    combination may then have no representative)."""

    found: tuple[tuple[str, tuple[bool, ...]], ...]
    complete: bool

    @property
    def strings(self) -> list[str]:
        """The representative strings, in the order found."""
        return [s for s, _ in self.found]


def representatives(
    globs: Sequence[Glob],
    *,
    valid: Callable[[str], bool] = bool,
    extra: str = "",
    max_states: int = 4096,
) -> Classes:
    """One ``valid`` string per combination of ``globs`` some valid string satisfies.

    Breadth first, so each representative is a shortest one, and the fresh
    character is tried first (a string no glob singles out reads ``x``).
    A state first reached by an invalid string (``""``, ``"."``) is expanded
    but stays open until a valid string reaches it.
    """
    chars = alphabet(globs, extra)
    fresh = chars[0]
    if any(g.fold for g in globs):
        plain_valid = valid

        def valid(text: str) -> bool:
            return plain_valid(text) and composition_free(text)

    # A state lists only the globs still alive, as (glob, positions): most die at their
    # first character, so a step touches few of them.
    start: _State = tuple((k, st) for k, g in enumerate(globs) if (st := g.initial()))
    # state -> reached by a valid string yet
    seen: dict[_State, bool] = {start: valid("")}
    found: dict[tuple[bool, ...], str] = {}
    queue: deque[tuple[_State, str]] = deque([(start, "")])
    complete = True
    n = len(globs)
    while queue:
        state, text = queue.popleft()
        if valid(text):
            accepted = {k for k, st in state if globs[k].final(st)}
            found.setdefault(tuple(k in accepted for k in range(n)), text)
        for ch in _distinct_chars(chars, fresh, state, globs):
            nxt: _State = tuple(
                (k, st2)
                for k, st in state
                if (st2 := _step(globs[k].tokens, globs[k].fold, st, ch))
            )
            ok = valid(text + ch)
            was = seen.get(nxt)
            if was is None or (ok and not was):
                if len(seen) >= max_states and was is None:
                    complete = False
                    continue
                seen[nxt] = ok
                queue.append((nxt, text + ch))
    return Classes(tuple((s, v) for v, s in found.items()), complete)


#: A product state: (glob index, its automaton's positions) for each live glob.
_State = tuple[tuple[int, frozenset[int]], ...]


def _distinct_chars(chars: str, fresh: str, state: _State, globs: Sequence[Glob]) -> list[str]:
    """The characters that can lead somewhere different from this state: those a live
    glob expects next (in either case for a ``fold`` glob), and the fresh one for all
    the others (which only ``*`` and ``ONE`` accept)."""
    wanted: set[str] = {fresh}
    for k, positions in state:
        glob = globs[k]
        tokens = glob.tokens
        for pos in positions:
            if pos < len(tokens):
                tok = tokens[pos]
                if tok is not STAR and tok != ONE:
                    wanted.add(tok)
                    if glob.fold:
                        wanted.add(tok.upper())
    return [c for c in chars if c in wanted]

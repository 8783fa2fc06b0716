"""Every ``sharedos`` / ``sharedos-policy`` command line in README.md and docs/*.md parses.

Command lines in code blocks (``$ sharedos ...``, continuation lines joined)
are parsed with the real click commands, exactly as the shell would pass them
(``&&`` and ``|`` split a line into commands, ``> FILE`` is a redirection): an
unknown subcommand or option, a missing required option, an extra argument or
a bad choice fails the test, naming the file and line. Example paths need not
exist (``click.Path(exists=True)`` is not checked here), and a line that
elides arguments with ``...`` is not held to its required options. Usage
synopses (``[--format text|json]``, ``PATHS...``) and inline mentions
(`` `sharedos host check FILE` ``) must name a real command and only options
it has.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"`(sharedos(?:-policy)? [^`]+)`")
_ELIDED = {"...", "…"}


@dataclass(frozen=True)
class CommandLine:
    """One command line found in a document."""

    where: str
    text: str
    inline: bool


def _programs() -> dict[str, click.Command]:
    from sharedos.cli.main import main
    from sharedos.cli.policy import main as policy_main

    return {"sharedos": main, "sharedos-policy": policy_main}


def _code_lines(path: Path) -> list[CommandLine]:
    out: list[CommandLine] = []
    fenced = False
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(raw):
            fenced = not fenced
            pending = []
            continue
        if not fenced:
            for match in _INLINE.finditer(raw):
                out.append(CommandLine(f"{path.name}:{number}", match.group(1), inline=True))
            continue
        line = raw.strip()
        if pending:
            pending.append(line)
        elif line.startswith(("$ sharedos", "sharedos")) and not line.startswith("sharedos."):
            pending = [line.removeprefix("$ ")]
            start = number
        else:
            continue
        if pending[-1].endswith("\\"):
            pending[-1] = pending[-1][:-1]
            continue
        out.append(CommandLine(f"{path.name}:{start}", " ".join(pending), inline=False))
        pending = []
    return out


def command_lines() -> list[CommandLine]:
    """Every command line of README.md and docs/*.md."""
    return [c for doc in DOCS for c in _code_lines(doc)]


def _commands(text: str) -> list[list[str]]:
    """The commands of one shell line: split at ``&&``/``||``/``;``/``|``, redirections dropped."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars="&|;<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = [[]]
    skip = False
    for word in lexer:
        if skip:
            skip = False
        elif word in ("&&", "||", ";", "|"):
            out.append([])
        elif word in (">", ">>", "<"):
            skip = True  # the redirection's target
        else:
            out[-1].append(word)
    return [c for c in out if c and c[0] in ("sharedos", "sharedos-policy")]


def _synopsis(text: str) -> bool:
    """A usage synopsis (optional groups, alternatives, repeated placeholders), not an example."""
    return "[" in text or "|" in text.replace("||", "") or re.search(r"\w\.\.\.", text) is not None


def _words(text: str) -> list[str]:
    """A synopsis's words: optional groups opened, ``-o|--out`` and ``a|b`` kept whole."""
    words = shlex.split(text, comments=True)
    return [w.strip("[]") for w in words if w.strip("[]")]


def _resolve(program: str, words: list[str]) -> tuple[click.Command, list[str], click.Context]:
    """The subcommand ``words`` name, the words left for it, and its parent context."""
    cmd = _programs()[program]
    ctx = click.Context(cmd, info_name=program)
    while isinstance(cmd, click.Group) and words and not words[0].startswith("-"):
        sub = cmd.get_command(ctx, words[0])
        if sub is None:
            raise click.UsageError(f"no such command {words[0]!r} under {ctx.command_path!r}")
        ctx = click.Context(sub, info_name=words[0], parent=ctx)
        cmd, words = sub, words[1:]
    return cmd, words, ctx


def _check_names(line: CommandLine) -> None:
    """A synopsis or an inline mention: the command exists and has every option named."""
    program, *rest = _words(line.text)
    rest = [w for w in rest if w not in _ELIDED]
    for alternative in _alternatives(rest):
        cmd, words, _ctx = _resolve(program, alternative)
        known = {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}
        known |= {"--help", "-h"}
        for word in words:
            for name in word.split("=", 1)[0].split("|"):
                if name.startswith("-") and name != "-" and name.rstrip(".") not in known:
                    raise click.NoSuchOption(name, ctx=None)


def _alternatives(words: list[str]) -> list[list[str]]:
    """``evidence counts|list`` means each of ``evidence counts`` and ``evidence list``."""
    for i, word in enumerate(words):
        if "|" in word and not word.startswith("-"):
            return [
                w
                for choice in word.split("|")
                for w in _alternatives([*words[:i], choice, *words[i + 1 :]])
            ]
    return [words]


def _parse(words: list[str]) -> dict[str, Any]:
    program, *rest = words
    elided = any(w in _ELIDED for w in rest)
    rest = [w for w in rest if w not in _ELIDED]
    cmd, args, parent = _resolve(program, rest)
    try:
        ctx = cmd.make_context(parent.info_name or program, args, parent=parent.parent)
    except click.MissingParameter:
        if elided:  # "sharedos run ... --dry-run": the rest was given on the line above
            return {}
        raise
    return dict(ctx.params)


LINES = command_lines()


def test_the_docs_have_command_lines() -> None:
    assert len([c for c in LINES if not c.inline]) >= 20
    assert any("upstream status" in c.text for c in LINES)


@pytest.mark.parametrize("line", LINES, ids=[f"{c.where}" for c in LINES])
def test_every_command_line_in_the_docs_parses(
    line: CommandLine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an example's paths need not exist on this machine; everything else is checked
    monkeypatch.setattr(
        click.Path,
        "convert",
        lambda self, value, param, ctx: Path(value) if self.type is not str else value,
    )
    try:
        if line.inline or _synopsis(line.text):
            _check_names(line)
        else:
            for words in _commands(line.text):
                _parse(words)
    except click.ClickException as exc:
        pytest.fail(f"{line.where}: `{line.text}`: {exc.format_message()}")


def _listed_choices(line: CommandLine) -> list[tuple[str, set[str], set[str]]]:
    """For each ``--opt a|b|c`` of a synopsis whose option is a choice: (option, the
    choices listed, the option's own); a placeholder (``O|interrupted``) lists none."""
    words = _words(line.text)
    program, rest = words[0], words[1:]
    path = []
    for word in rest:
        if word.startswith("-") or "|" in word or word.isupper() or word in _ELIDED:
            break
        path.append(word)
    cmd, _words_left, _ctx = _resolve(program, path)
    options = {o: p for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    out = []
    for option, listed in itertools.pairwise(words):
        param = options.get(option)
        if param is None or "|" not in listed or not isinstance(param.type, click.Choice):
            continue
        choices = set(listed.rstrip(".[]").split("|"))
        if any(c.isupper() for c in choices):
            continue
        out.append((option, choices, {str(c) for c in param.type.choices}))
    return out


def test_a_synopsis_lists_every_choice_of_an_option() -> None:
    """kernel.md's `sharedos evidence export ... [--format jsonl|json]` left out csv."""
    wrong = [
        f"{line.where}: {option} lists {sorted(listed)}, the command takes {sorted(real)}"
        for line in LINES
        if _synopsis(line.text) and not line.inline
        for option, listed, real in _listed_choices(line)
        if listed != real
    ]
    assert not wrong, wrong

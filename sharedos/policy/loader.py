"""Front door: files or text -> parse -> check -> compile -> ``PolicySet``."""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from sharedos import textfile
from sharedos.policy import ast
from sharedos.policy.checker import CheckResult, check
from sharedos.policy.compiler import compile_program
from sharedos.policy.diagnostics import Diagnostic, PolicyError, has_errors, make
from sharedos.policy.parser import parse_source
from sharedos.policy.policyset import PolicySet
from sharedos.toolpolicy import ToolPolicy

#: Diagnostics that are only noise once a syntax error has dropped a statement
#: (an action or tool the unparsed requirement would have declared).
_DEPENDENT_CODES = frozenset({"SOS201", "SOS401"})


def collect_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[Diagnostic]]:
    """Expand files and directories (recursively, ``*.sos``) into a sorted, de-duplicated list.

    A file reached twice (``rules`` and ``/abs/rules``, or through a symlinked
    directory) is compiled once: files are told apart by their resolved path.
    """
    found: dict[str, Path] = {}
    problems: list[Diagnostic] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*.sos")):
                if child.is_file():
                    found.setdefault(str(child.resolve()), child)
        elif path.is_file():
            found.setdefault(str(path.resolve()), path)
        else:
            problems.append(
                make(
                    "SOS001",
                    f"{path}: "
                    + (
                        "not a regular file or directory"
                        if path.exists()
                        else "no such file or directory"
                    ),
                    file=str(path),
                    source="",
                    line=1,
                    col=1,
                )
            )
    files = sorted(found.values(), key=str)
    return files, problems


def undecodable(path: Path, exc: UnicodeDecodeError) -> Diagnostic:
    """SOS001 at the line and column of the first byte that is not UTF-8, with its line."""
    data = bytes(exc.object)
    start = data.rfind(b"\n", 0, exc.start) + 1
    end = data.find(b"\n", exc.start)
    text = data[start : len(data) if end < 0 else end].decode("utf-8", errors="replace")
    col = len(data[start : exc.start].decode("utf-8", errors="replace")) + 1
    line = data.count(b"\n", 0, exc.start) + 1
    # the excerpt is that one line: build it as line 1 of its own text, then place it
    diag = make(
        "SOS001",
        f"{path} is not valid UTF-8 (byte {exc.start})",
        file=str(path),
        source=text,
        line=1,
        col=col,
    )
    return dataclasses.replace(diag, line=line, end_line=line)


def read_file(path: Path) -> tuple[str | None, Diagnostic | None]:
    """Read a policy file as UTF-8; a diagnostic instead of an exception on failure."""
    try:
        # never waits on a pipe nobody writes to (``check <(generate)`` works); a device
        # or socket is refused (``sharedos.textfile``)
        return textfile.decode_text(textfile.read_bytes(path)), None
    except UnicodeDecodeError as exc:
        return None, undecodable(path, exc)
    except OSError as exc:
        return None, make(
            "SOS001",
            f"cannot read {path}: {exc.strerror or exc}",
            file=str(path),
            source="",
            line=1,
            col=1,
        )


def parse_and_check(
    sources: Sequence[tuple[str, str]], *, names: Mapping[str, str] | None = None
) -> tuple[list[ast.PolicyFile], list[Diagnostic], dict[str, ToolPolicy]]:
    """Parse and check ``(filename, text)`` pairs: files, every diagnostic, valid tool policies.

    ``names`` are the names a compile records for the files (``program_names``):
    rules without ``@id`` are named by them."""
    files, diagnostics, checked = _parse_check(sources, names)
    return files, diagnostics, dict(checked.tool_policies)


def _parse_check(
    sources: Sequence[tuple[str, str]], names: Mapping[str, str] | None = None
) -> tuple[list[ast.PolicyFile], list[Diagnostic], CheckResult]:
    files: list[ast.PolicyFile] = []
    diagnostics: list[Diagnostic] = []
    for name, text in sources:
        result = parse_source(text, name)
        files.append(result.file)
        diagnostics.extend(result.diagnostics)
    syntax_failed = has_errors(diagnostics)
    checked = check(files, names)
    for diag in checked.diagnostics:
        if syntax_failed and diag.code in _DEPENDENT_CODES:
            continue
        diagnostics.append(diag)
    return files, diagnostics, checked


def compile_sources(
    sources: Sequence[tuple[str, str]], *, names: Mapping[str, str] | None = None
) -> PolicySet:
    """Compile ``(filename, text)`` pairs together; raise ``PolicyError`` listing every error.

    Diagnostics name files as given; the compiled program names them through
    ``names`` (given -> recorded name; default: as given), which is what
    decisions cite and ``bundle_hash`` covers. Files are compiled in the order
    of their recorded names, so neither the order they were given in nor the
    order a directory listed them changes the program (or its hash).
    """
    renamed = names or {}
    sources = sorted(sources, key=lambda item: (renamed.get(item[0], item[0]), item[1]))
    with gc_paused():
        files, diagnostics, checked = _parse_check(sources, renamed)
        if has_errors(diagnostics):
            raise PolicyError(diagnostics)
        program = compile_program(
            files, checked.tool_policies, checked.patterns, checked.conditions, names
        )
        from sharedos.policy.suppress import apply

        # warnings a '# sos:ignore CODE: reason' covers are not the policy's
        # warnings any more (check audits unused suppressions)
        kept = apply(files, diagnostics, audit=False).kept if diagnostics else diagnostics
        # The texts, not the syntax trees: PolicySet.files parses again if asked. The
        # trees go before the evaluator is built, so the compile's peak memory (which
        # a process keeps as resident memory) does not hold both at once.
        del files, checked
        return PolicySet(program, diagnostics=tuple(kept), texts=sources)


def program_names(files: Sequence[Path], root: str | Path | None = None) -> dict[str, str]:
    """The names a program records for ``files``: POSIX paths relative to ``root``.

    The default root is the deepest directory holding every file, so
    ``rules/``, ``./rules`` and ``/abs/checkout/rules`` give the same names,
    and the same policy the same ``bundle_hash``, wherever it is compiled
    from. A file outside an explicit root keeps its resolved absolute path.
    """
    resolved = {str(f): f.resolve() for f in files}
    if root is not None:
        base = Path(root).resolve()
    elif resolved:
        base = Path(os.path.commonpath([str(p.parent) for p in resolved.values()]))
    else:
        return {}
    out: dict[str, str] = {}
    for given, path in resolved.items():
        try:
            out[given] = path.relative_to(base).as_posix()
        except ValueError:
            out[given] = path.as_posix()
    return out


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a compile allocates its (acyclic) trees.

    Parsing allocates a few objects per character; with the collector on, a
    large host heap turns that into repeated full collections (measured: 2x
    slower on 10,000 rules). Collection resumes afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def compile_source(text: str, filename: str = "<string>") -> PolicySet:
    """Compile one policy text; raise ``PolicyError`` with every diagnostic on error."""
    return compile_sources([(filename, text)])


def compile_paths(paths: Iterable[str | Path], *, root: str | Path | None = None) -> PolicySet:
    """Compile ``.sos`` files and directories (recursively) together as one policy.

    The program names each file relative to ``root`` (default: the deepest
    directory holding them all; see ``program_names``), so the same policy
    has one ``bundle_hash`` however its paths are spelled. Raise
    ``PolicyError`` listing every problem found.
    """
    if isinstance(paths, str | Path):
        paths = [paths]
    files, problems = collect_files(paths)
    sources: list[tuple[str, str]] = []
    for path in files:
        text, problem = read_file(path)
        if problem is not None:
            problems.append(problem)
        elif text is not None:
            sources.append((str(path), text))
    if not files and not problems:
        problems.append(
            make(
                "SOS002",
                "no .sos files found in the given paths",
                file="<paths>",
                source="",
                line=1,
                col=1,
            )
        )
    if problems:
        try:
            _files, more, _ = parse_and_check(sources, names=program_names(files, root))
            problems.extend(more)
        except Exception:  # pragma: no cover - parse_and_check never raises
            pass
        raise PolicyError(problems)
    return compile_sources(sources, names=program_names(files, root))

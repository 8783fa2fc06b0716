"""Plumbing shared by the ``sharedos-policy`` subcommands.

Exit codes are a contract with scripts and CI, so they live in one place:

* ``0`` — success (no errors; warnings allowed unless ``--strict``).
* ``1`` — the policy is wrong: diagnostics of severity error, failing policy
  tests, lint warnings under ``--strict``, malformed ``eval`` input lines.
* ``2`` — usage error: unknown option, missing path, unreadable JSON passed as
  an option value (click's own usage errors already exit 2).
* ``3`` — internal error: ``sharedos-policy`` itself failed. It is reported as
  an ``SOS900`` internal-error diagnostic, never as a Python traceback.
* ``4`` — ``test`` only: the policy does not compile, so no test was run
  (CI can tell "the policy is broken" from "a test failed").
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import click

from sharedos import textfile
from sharedos.policy.jsonvalues import loads

EXIT_OK = 0
EXIT_POLICY = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_NO_COMPILE = 4

POLICY_SUFFIX = ".sos"

F = TypeVar("F", bound=Callable[..., Any])


def discover_sources(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories (recursively) into a sorted, de-duplicated list of ``.sos`` files.

    A file named explicitly is used whatever its suffix; a directory contributes
    its ``*.sos`` files (a pipe named explicitly is read to its end). A path that
    does not exist, a device or socket, or a directory holding no ``.sos`` file, is
    a usage error (exit 2).
    """
    seen: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise click.BadParameter(f"path does not exist: {raw}", param_hint="PATHS")
        if path.is_dir():
            found = sorted(p for p in path.rglob(f"*{POLICY_SUFFIX}") if p.is_file())
            if not found:
                raise click.BadParameter(
                    f"no {POLICY_SUFFIX} files under {raw}", param_hint="PATHS"
                )
            for p in found:
                seen.setdefault(p, None)
        elif path.is_file() or path.is_fifo():  # a pipe: ``check <(generate)``
            seen.setdefault(path, None)
        else:  # a device would read forever; a socket is not a policy
            raise click.BadParameter(f"not a regular file or directory: {raw}", param_hint="PATHS")
    return list(seen)


def read_json_option(value: str, what: str) -> Any:
    """Parse an option given as inline JSON or ``@file``; a bad value is a usage error (exit 2)."""
    text = value
    if value.startswith("@"):
        file = Path(value[1:])
        try:
            text = textfile.read_text(file)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {file}: {exc.strerror}", param_hint=what
            ) from None
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", param_hint=what
        ) from None
    except ValueError as exc:  # NaN/Infinity, or an integer over Python's 4,300-digit limit
        raise click.BadParameter(f"not usable JSON ({exc})", param_hint=what) from None


def read_json_file(path: Path, what: str) -> Any:
    """Load a JSON file given to an option; unreadable or malformed files are usage errors."""
    try:
        text = textfile.read_text(path)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint=what) from None
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            param_hint=what,
        ) from None
    except ValueError as exc:  # NaN/Infinity, or an integer over Python's 4,300-digit limit
        raise click.BadParameter(f"{path} is not usable JSON ({exc})", param_hint=what) from None


def internal_error_text(exc: BaseException) -> str:
    """One diagnostic line for a bug in sharedos-policy itself (no traceback unless asked)."""
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        last = tb[-1]
        where = f" (at {Path(last.filename).name}:{last.lineno})"
    return (
        f"error[SOS900]: internal error: sharedos-policy failed: {type(exc).__name__}: {exc}{where}\n"
        "  = help: this is a bug in sharedos-policy, not in your policy; "
        "set SHAREDOS_POLICY_DEBUG=1 to print the traceback"
    )


def _escape_unencodable_output() -> None:
    """Write what the output's encoding cannot carry as a backslash escape, never fail.

    A request, context or argument may hold a lone surrogate (JSON carries
    ``"\\ud800"``; so do ``--args`` and ``--context``), and explanations, listings
    and JSON documents show it back. UTF-8 cannot encode one, so ``print`` raised;
    written as ``\\ud800`` it reads as what it is, and inside a JSON string it is
    the JSON escape of the same value.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(Exception):  # a stream that cannot change: left as is
                reconfigure(errors="backslashreplace")


def guarded(func: F) -> F:
    """Turn any unexpected exception in a subcommand into an internal-error diagnostic and exit 3.

    click's own exceptions (usage errors, ``Exit``, ``Abort``) pass through
    untouched so they keep their exit codes.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _escape_unencodable_output()
        try:
            return func(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            raise
        except BrokenPipeError:
            # The reader went away (``| head``): stop quietly, as the Python
            # docs advise, instead of reporting a bug we do not have.
            with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(EXIT_POLICY) from None
        except OSError as exc:
            from sharedos.cli._output import give_up_on_stdout, stdout_refused

            if stdout_refused(exc):  # ``> /dev/full``: not a bug of ours
                raise give_up_on_stdout(exc) from None
            if os.environ.get("SHAREDOS_POLICY_DEBUG"):
                traceback.print_exc()
            click.echo(internal_error_text(exc), err=True)
            raise click.exceptions.Exit(EXIT_INTERNAL) from None
        except Exception as exc:  # the one place a bug becomes a diagnostic, not a traceback
            if os.environ.get("SHAREDOS_POLICY_DEBUG"):
                traceback.print_exc()
            click.echo(internal_error_text(exc), err=True)
            raise click.exceptions.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


def shown(text: str) -> str:
    """``text`` for a terminal, line by line: control, format (bidi) and separator
    characters spelled as escapes (``sharedos.terminal.unambiguous``). A test's
    name, a skip reason, a rule's description and a call's values come from the
    policy or the request, and must not rewrite the line they are printed on (a
    carriage return in a failing test's name printed it as "PASS")."""
    from sharedos.terminal import unambiguous

    return "\n".join(unambiguous(line) for line in text.split("\n"))


def emit_json(payload: Any) -> None:
    """Print one JSON document (sorted keys, stable output for scripts and golden files):
    UTF-8, or ``\\u`` escapes throughout when a string holds a lone surrogate (JSON
    carries one, from a context, arguments or a recorded call; UTF-8 cannot)."""
    from sharedos.terminal import json_spelled

    text = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=True)
    # the same document, with a C1 control or a bidi override (a policy's string, a call's
    # value, a source line) written as its escape: it cannot drive or reorder a terminal
    click.echo(json_spelled(text))

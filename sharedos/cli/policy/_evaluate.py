"""``compile``, ``explain``, ``eval`` and ``catalog``: the subcommands that run the compiled policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import click

from sharedos.cli.policy._common import (
    EXIT_OK,
    EXIT_POLICY,
    discover_sources,
    emit_json,
    guarded,
    read_json_option,
)
from sharedos.cli.policy._common import shown as show  # 'shown' is catalog's local
from sharedos.cli.policy._load import load_policy_set, trusted_key_option
from sharedos.cli.policy.evalio import EvalError, EvalErrorBody, decision_line, dump, parse_request
from sharedos.policy.context import complete_context

_FORMAT = click.Choice(["text", "json"])


def _run_policy(policy: Any, name: str | None) -> str | None:
    """Check that ``--policy NAME`` names a compiled toolpolicy (usage error otherwise)."""
    if name is not None and name not in policy.tool_policies:
        known = ", ".join(sorted(policy.tool_policies)) or "none"
        raise click.BadParameter(
            f"no toolpolicy {name!r} is compiled (declared: {known})", param_hint="--policy"
        )
    return name


_POLICY_OPTION = click.option(
    "--policy",
    "run",
    metavar="RUN",
    help="Decide as a run under this toolpolicy: tools outside its managed set are "
    "denied not_in_run_policy before any rule.",
)


@click.command("compile", short_help="Compile policy files into a bundle; print its hash.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(dir_okay=False, writable=True),
    help="Where to write the bundle (e.g. policy.bundle.json).",
)
@click.option(
    "--root",
    type=click.Path(file_okay=False),
    help="Directory the bundle names files relative to (default: the deepest one holding them all).",
)
@click.option(
    "--warnings",
    "show_warnings",
    is_flag=True,
    help="Print every lint warning (default: one line counting them; `check` shows them).",
)
@guarded
def compile_cmd(paths: tuple[str, ...], output: str, root: str | None, show_warnings: bool) -> None:
    """Compile PATHS into a bundle host runtimes load without re-parsing; print its hash.

    \b
    Warnings do not stop the compile: one line on stderr counts them (with
    --warnings, each is printed, as `check` prints it). The hash depends only
    on the policy's content and its files' names relative to the root, so the
    same policy has the same hash wherever it is built.
    """
    from sharedos.policy import PolicyError, compile_paths, suppress
    from sharedos.policy.checker import check
    from sharedos.policy.diagnostics import sort_key
    from sharedos.policy.lints import lint

    files = discover_sources(paths)
    try:
        policy = compile_paths(files, root=root)
    except PolicyError as exc:
        click.echo(str(exc), err=True)
        raise click.exceptions.Exit(EXIT_POLICY) from None
    # policy.diagnostics already leave suppressed warnings out; the audit of the
    # suppressions (unused, malformed) needs every warning, the lints' included
    files_ = policy.files
    found = suppress.apply(files_, [*check(files_).diagnostics, *lint(files_)])
    warnings = sorted(found.kept, key=sort_key)
    if show_warnings:
        for diag in warnings:
            click.echo(diag.render() + "\n", err=True)
    elif warnings:
        shown = " ".join(paths)
        click.echo(
            f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''} "
            f"(`sharedos-policy check {shown}` shows them; compile --warnings prints them here)",
            err=True,
        )
    try:
        policy.save_bundle(Path(output))
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write {output}: {exc.strerror}", param_hint="-o"
        ) from None
    click.echo(f"{policy.bundle_hash}  {output}")


def _complete(context: dict[str, Any], policy: Any, what: str) -> dict[str, Any]:
    """The context after the kernel's defaults; a policy that reads the time gets this
    moment (UTC) when the context does not say ``now``, as the kernel gives it."""
    from sharedos.policy.clock import ClockError

    zone = "UTC" if getattr(policy, "reads_clock", False) else None
    try:
        return complete_context(context, clock_zone=zone)
    except ClockError as exc:
        raise click.BadParameter(f"now: {exc}", param_hint=what) from None


def _json_object(value: str, what: str) -> dict[str, Any]:
    data = read_json_option(value, what)
    if not isinstance(data, dict):
        raise click.BadParameter(
            f"expected a JSON object, got {type(data).__name__}", param_hint=what
        )
    return data


@click.command("explain", short_help="Show the decision path of one call, rule by rule.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--tool", required=True, help="The raw tool name of the call.")
@click.option(
    "--args",
    "args_json",
    default="{}",
    show_default=True,
    help="Call arguments: JSON object or @file.",
)
@click.option(
    "--context",
    "context_json",
    default="{}",
    show_default=True,
    help="Context: JSON object or @file (the kernel's defaults fill what it leaves out).",
)
@_POLICY_OPTION
@trusted_key_option
@click.option("--format", "fmt", type=_FORMAT, default="text", show_default=True)
@guarded
def explain_cmd(
    paths: tuple[str, ...],
    tool: str,
    args_json: str,
    context_json: str,
    run: str | None,
    trusted_keys: tuple[str, ...],
    fmt: str,
) -> None:
    """Show the decision path for one call: the context after defaults, requirement,
    resource, every rule (patterns as instantiated, each sub-expression's value) and the winner.

    Exit 0 whatever the decision (an explanation of a denial is a successful
    explanation); 1 if the policy does not compile; 2 for bad options.
    """
    args = _json_object(args_json, "--args")
    raw_context = _json_object(context_json, "--context")
    policy = load_policy_set(paths, trusted_keys)
    context = _complete(raw_context, policy, "--context")
    explanation = policy.explain(tool, args, context, run_policy=_run_policy(policy, run))
    if fmt == "json":
        emit_json(explanation.to_dict())
    else:
        click.echo(show(explanation.render()))


@click.command("catalog", short_help="Which tools a context sees under a run policy, and why.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--context",
    "context_json",
    default="{}",
    show_default=True,
    help="Context: JSON object or @file (the kernel's defaults fill what it leaves out).",
)
@_POLICY_OPTION
@click.option("--tool", "tools", multiple=True, help="Explain only this tool (repeatable).")
@trusted_key_option
@click.option("--format", "fmt", type=_FORMAT, default="text", show_default=True)
@guarded
def catalog_cmd(
    paths: tuple[str, ...],
    context_json: str,
    run: str | None,
    tools: tuple[str, ...],
    trusted_keys: tuple[str, ...],
    fmt: str,
) -> None:
    """List every tool a requirement declares, listed or hidden for this context, and why.

    \b
    A tool is listed when it is in the run's managed set (with --policy) and
    some call of it could be permitted (partial evaluation, as the kernel
    lists a turn's catalogue). With --tool, say why that tool is or is not
    there, permit by permit. Exit 0.
    """
    from sharedos.policy.cases import run_policy_denial

    raw_context = _json_object(context_json, "--context")
    policy = load_policy_set(paths, trusted_keys)
    context = _complete(raw_context, policy, "--context")
    run_name = _run_policy(policy, run)
    names = list(tools) or sorted(policy.requirements)
    entries: list[dict[str, Any]] = []
    texts: list[str] = []
    for name in names:
        denial = run_policy_denial(policy, run_name, name)
        if denial is not None:
            entries.append({"tool": name, "listed": False, "reason": denial.detail, "permits": []})
            texts.append(f"hidden {name}: {denial.detail}")
            continue
        listing = policy.explain_listing(name, context)
        entry = listing.to_dict()
        if not tools:  # the overview: one line per tool
            entry["permits"] = []
        entries.append(entry)
        texts.append(listing.render() if tools else listing.render().splitlines()[0])
        if name not in policy.requirements:
            from difflib import get_close_matches

            close = get_close_matches(name, list(policy.requirements), n=1)
            if close:
                texts[-1] += f" (did you mean {close[0]}?)"
    if fmt == "json":
        emit_json({"context": context, "run_policy": run_name, "tools": entries})
    else:
        shown = json.dumps(context, ensure_ascii=False, sort_keys=True, default=repr)
        click.echo(show(f"context (after defaults): {shown}"))
        if run_name is not None:
            click.echo(f"run policy: {run_name}")
        for text in texts:
            click.echo(show(text))


@click.command("eval", short_help="Batch decisions: JSONL requests in, JSONL decisions out.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--input",
    "input_file",
    type=click.File("rb"),
    default="-",
    show_default=True,
    help='JSONL requests {"tool", "args", "context"}; "-" reads stdin.',
)
@_POLICY_OPTION
@trusted_key_option
@guarded
def eval_cmd(
    paths: tuple[str, ...], input_file: BinaryIO, run: str | None, trusted_keys: tuple[str, ...]
) -> None:
    """Batch decisions: JSONL requests in, one JSONL decision (or error) per line out.

    \b
    Blank lines are skipped. A malformed line yields {"line": N, "error": ...}
    and the batch continues; the exit code is then 1 (0 if every line was a
    valid request, whatever the decisions).
    """
    policy = load_policy_set(paths, trusted_keys)
    bad = _run_batch(policy, input_file, sys.stdout, _run_policy(policy, run))
    raise click.exceptions.Exit(EXIT_POLICY if bad else EXIT_OK)


def _run_batch(policy: Any, source: BinaryIO, sink: TextIO, run: str | None = None) -> int:
    """Evaluate every request line of ``source`` into ``sink``; return how many lines were bad."""
    from sharedos.policy.cases import run_policy_denial

    bad = 0
    for number, data in enumerate(source, start=1):
        # each line decoded on its own: bytes that are not UTF-8 make that line
        # invalid JSON (RFC 8259), and the batch goes on
        try:
            # a byte-order mark opens the input, as it may a policy file or a
            # --context file (both read it as nothing): not part of the first request
            line = data.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            bad += 1
            body = EvalErrorBody(
                code="invalid_json", message=f"not UTF-8 text (byte {exc.start + 1} of the line)"
            )
            sink.write(dump(EvalError(line=number, error=body)) + "\n")
            sink.flush()
            continue
        if not line.strip():
            continue
        parsed = parse_request(line)
        if isinstance(parsed, EvalErrorBody):
            bad += 1
            out = dump(EvalError(line=number, error=parsed))
        else:
            try:
                zone = "UTC" if getattr(policy, "reads_clock", False) else None
                context = complete_context(parsed.context, clock_zone=zone)
            except ValueError as exc:  # a 'now' that is not a time
                bad += 1
                body = EvalErrorBody(code="invalid_request", message=f"context.now: {exc}")
                sink.write(dump(EvalError(line=number, error=body)) + "\n")
                sink.flush()
                continue
            try:
                decision = run_policy_denial(policy, run, parsed.tool) or policy.decide(
                    parsed.tool, parsed.args, context
                )
                out = dump(decision_line(number, decision))
            # decide must not raise; if it does, report it for this line only
            except Exception as exc:
                bad += 1
                body = EvalErrorBody(code="internal_error", message=f"{type(exc).__name__}: {exc}")
                out = dump(EvalError(line=number, error=body))
        sink.write(out + "\n")
        sink.flush()
    return bad

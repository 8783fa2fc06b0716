"""``compile``, ``explain`` and ``eval``: the subcommands that run the compiled policy."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import click

from sharedos.cli.policy._common import (
    EXIT_OK,
    EXIT_POLICY,
    emit_json,
    guarded,
    iter_lines,
    read_json_option,
)
from sharedos.cli.policy._load import load_policy_set
from sharedos.cli.policy.evalio import EvalError, EvalErrorBody, decision_line, dump, parse_request
from sharedos.policy.context import complete_context

_FORMAT = click.Choice(["text", "json"])


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
@guarded
def compile_cmd(paths: tuple[str, ...], output: str) -> None:
    """Compile PATHS into a bundle host runtimes load without re-parsing; print its hash."""
    policy = load_policy_set(paths)
    try:
        policy.save_bundle(Path(output))
    except OSError as exc:
        raise click.BadParameter(
            f"cannot write {output}: {exc.strerror}", param_hint="-o"
        ) from None
    click.echo(f"{policy.bundle_hash}  {output}")


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
    help="Context: JSON object or @file.",
)
@click.option("--format", "fmt", type=_FORMAT, default="text", show_default=True)
@guarded
def explain_cmd(
    paths: tuple[str, ...], tool: str, args_json: str, context_json: str, fmt: str
) -> None:
    """Show the decision path for one call: requirement, resource, action, every rule and why.

    Exit 0 whatever the decision (an explanation of a denial is a successful
    explanation); 1 if the policy does not compile; 2 for bad options.
    """
    args = _json_object(args_json, "--args")
    context = complete_context(_json_object(context_json, "--context"))
    policy = load_policy_set(paths)
    explanation = policy.explain(tool, args, context)
    if fmt == "json":
        emit_json(explanation.to_dict())
    else:
        click.echo(explanation.render())


@click.command("eval", short_help="Batch decisions: JSONL requests in, JSONL decisions out.")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "--input",
    "input_file",
    type=click.File("r", encoding="utf-8"),
    default="-",
    show_default=True,
    help='JSONL requests {"tool", "args", "context"}; "-" reads stdin.',
)
@guarded
def eval_cmd(paths: tuple[str, ...], input_file: TextIO) -> None:
    """Batch decisions: JSONL requests in, one JSONL decision (or error) per line out.

    Blank lines are skipped. A malformed line yields ``{"line": N, "error": ...}``
    and the batch continues; the exit code is then 1 (0 if every line was a
    valid request, whatever the decisions).
    """
    policy = load_policy_set(paths)
    bad = _run_batch(policy, input_file, sys.stdout)
    raise click.exceptions.Exit(EXIT_POLICY if bad else EXIT_OK)


def _run_batch(policy: Any, source: TextIO, sink: TextIO) -> int:
    """Evaluate every request line of ``source`` into ``sink``; return how many lines were bad."""
    bad = 0
    for number, line in iter_lines(source):
        if not line.strip():
            continue
        parsed = parse_request(line)
        if isinstance(parsed, EvalErrorBody):
            bad += 1
            out = dump(EvalError(line=number, error=parsed))
        else:
            try:
                decision = policy.decide(parsed.tool, parsed.args, complete_context(parsed.context))
                out = dump(decision_line(number, decision))
            # decide must not raise; if it does, report it for this line only
            except Exception as exc:
                bad += 1
                body = EvalErrorBody(code="internal_error", message=f"{type(exc).__name__}: {exc}")
                out = dump(EvalError(line=number, error=body))
        sink.write(out + "\n")
        sink.flush()
    return bad

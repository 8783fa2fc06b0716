"""``sharedos-policy``: check, format, compile, test, explain and batch-evaluate policies.

Exit codes (see ``_common``): 0 ok, 1 policy errors / failing tests,
2 usage errors, 3 internal error (reported as a diagnostic, never a traceback).
"""

from __future__ import annotations

import click

from sharedos.cli._errors import SpelledErrorsGroup
from sharedos.cli._help import with_short_help
from sharedos.cli.policy._check import check_cmd
from sharedos.cli.policy._diff import diff_cmd
from sharedos.cli.policy._evaluate import catalog_cmd, compile_cmd, eval_cmd, explain_cmd
from sharedos.cli.policy._fmt import fmt_cmd
from sharedos.cli.policy._query import query_cmd
from sharedos.cli.policy._sign import keygen_cmd, sign_cmd, verify_cmd
from sharedos.cli.policy._test import test_cmd


@click.group(cls=SpelledErrorsGroup)
@click.version_option(package_name="sharedos", prog_name="sharedos-policy")
def main() -> None:
    """Tools for SharedOS policy files (.sos): requirements, permit/forbid rules, run policies.

    \b
    Exit codes: 0 ok; 1 policy errors, failing tests or (with --strict) lint
    warnings; 2 usage errors; 3 internal error in sharedos-policy itself;
    6 standard output could not be written (a full disk, an I/O error).
    """


main.add_command(check_cmd)
main.add_command(fmt_cmd)
main.add_command(compile_cmd)
main.add_command(test_cmd)
main.add_command(explain_cmd)
main.add_command(eval_cmd)
main.add_command(catalog_cmd)
main.add_command(query_cmd)
main.add_command(diff_cmd)
main.add_command(keygen_cmd)
main.add_command(sign_cmd)
main.add_command(verify_cmd)
with_short_help(main)

__all__ = ["main"]

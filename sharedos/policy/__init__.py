"""The SharedOS policy language: parse, check, compile, decide, explain, bundle.

Public API (docs/contracts.md, "policy -> kernel")::

    compile_paths(paths) / compile_source(text, filename) -> PolicySet
    load_bundle(path) -> PolicySet;  PolicySet.save_bundle(path)
    PolicySet.decide / could_permit / explain / requirements / tool_policies / bundle_hash

Importing the package imports none of these modules: each name is imported
from its module on first use (PEP 562), so a host that only loads a bundle
and decides never pays for the parser, the checker or Lark (issue 14's cold
load).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sharedos.policy.bundle import COMPILER_VERSION, BundleError, load_bundle, save_bundle
    from sharedos.policy.cases import CaseResult, run_case, run_cases
    from sharedos.policy.decision import (
        Decision,
        Explanation,
        Requirement,
        RuleRef,
        RuleTrace,
        SourceSpan,
    )
    from sharedos.policy.diagnostics import CODES, Diagnostic, PolicyError
    from sharedos.policy.loader import (
        compile_paths,
        compile_source,
        compile_sources,
        parse_and_check,
    )
    from sharedos.policy.parser import parse_source
    from sharedos.policy.paths import UnresolvablePath, canonical_path
    from sharedos.policy.policyset import PolicySet

#: Public name -> the module that defines it.
_HOMES: dict[str, str] = {
    "COMPILER_VERSION": "bundle",
    "BundleError": "bundle",
    "load_bundle": "bundle",
    "save_bundle": "bundle",
    "CaseResult": "cases",
    "run_case": "cases",
    "run_cases": "cases",
    "Decision": "decision",
    "Explanation": "decision",
    "Requirement": "decision",
    "RuleRef": "decision",
    "RuleTrace": "decision",
    "SourceSpan": "decision",
    "CODES": "diagnostics",
    "Diagnostic": "diagnostics",
    "PolicyError": "diagnostics",
    "compile_paths": "loader",
    "compile_source": "loader",
    "compile_sources": "loader",
    "parse_and_check": "loader",
    "parse_source": "parser",
    "UnresolvablePath": "paths",
    "canonical_path": "paths",
    "PolicySet": "policyset",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is used."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__all__ = [
    "CODES",
    "COMPILER_VERSION",
    "BundleError",
    "CaseResult",
    "Decision",
    "Diagnostic",
    "Explanation",
    "PolicyError",
    "PolicySet",
    "Requirement",
    "RuleRef",
    "RuleTrace",
    "SourceSpan",
    "UnresolvablePath",
    "canonical_path",
    "compile_paths",
    "compile_source",
    "compile_sources",
    "load_bundle",
    "parse_and_check",
    "parse_source",
    "run_case",
    "run_cases",
    "save_bundle",
]

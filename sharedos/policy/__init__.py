"""The SharedOS policy language: parse, check, compile, decide, explain, bundle.

Public API (docs/contracts.md, "policy -> kernel")::

    compile_paths(paths) / compile_source(text, filename) -> PolicySet
    load_bundle(path) -> PolicySet;  PolicySet.save_bundle(path)
    PolicySet.decide / could_permit / explain / requirements / tool_policies / bundle_hash
"""

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
from sharedos.policy.loader import compile_paths, compile_source, compile_sources, parse_and_check
from sharedos.policy.parser import parse_source
from sharedos.policy.paths import UnresolvablePath, canonical_path
from sharedos.policy.policyset import PolicySet

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

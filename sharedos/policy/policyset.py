"""PolicySet: the compiled policy and its public API (docs/contracts.md, "policy -> kernel").

A ``PolicySet`` is an ``Evaluator`` (``decide`` is the evaluator's own method,
with no extra call on the hot path) plus the partial evaluator
(``could_permit``), the explainer (``explain``) and what bundles and reports
need: the packed program, its hash, the rules and the source files' tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharedos.policy.decision import Explanation, ListingExplanation, RuleRef
from sharedos.policy.evaluator import CONTEXT_CACHE_SIZE, DECISION_CACHE_SIZE, Evaluator

if TYPE_CHECKING:
    from sharedos.policy import ast
    from sharedos.policy.diagnostics import Diagnostic
    from sharedos.policy.partial_eval import PartialEvaluator

__all__ = [
    "CONTEXT_CACHE_SIZE",
    "DECISION_CACHE_SIZE",
    "PolicySet",
    "canonical_program",
    "program_hash",
]


class PolicySet(Evaluator):
    """A compiled policy. Build with ``compile_paths``/``compile_source``/``load_bundle``."""

    def __init__(
        self,
        program: dict[str, Any],
        *,
        files: tuple[ast.PolicyFile, ...] = (),
        diagnostics: tuple[Diagnostic, ...] = (),
        bundle_hash: str | None = None,
        texts: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(program)
        self._program = program
        self._files: tuple[ast.PolicyFile, ...] | None = files or None
        self._texts = tuple(texts)
        #: warnings found while compiling (errors raise ``PolicyError`` instead)
        self.diagnostics = diagnostics
        self._bundle_hash = bundle_hash
        self._partial_ev: PartialEvaluator | None = None

    # ------------------------------------------------------------ properties

    @property
    def _partial(self) -> PartialEvaluator:
        # Built (and its module imported) on first use: deciding never needs it.
        partial = self._partial_ev
        if partial is None:
            from sharedos.policy.partial_eval import PartialEvaluator

            partial = self._partial_ev = PartialEvaluator(self)
        return partial

    @property
    def program(self) -> dict[str, Any]:
        """The compiled program (what bundles store, and what ``bundle_hash`` covers).

        Plain JSON data that decisions read as it is: do not mutate."""
        return self._program

    @property
    def bundle_hash(self) -> str:
        """SHA-256 hex of the canonical JSON of the packed program."""
        if self._bundle_hash is None:
            self._bundle_hash = program_hash(self.program)
        return self._bundle_hash

    @property
    def reads_clock(self) -> bool:
        """True when some condition reads ``context.now``: the host must then supply it
        with every call (``sharedos.policy.clock.current``; the kernel does)."""
        return bool(self._program.get("reads_clock", False))

    @property
    def reads_turn_id(self) -> bool:
        """True when some condition or pattern reads ``context.turn_id``: what such a
        policy permits may differ from turn to turn of one user, so nothing decided for
        one turn is kept for another (``AccessContext.cache_key`` leaves the turn out)."""
        return bool(self._program.get("reads_turn_id", True))

    @property
    def sources(self) -> Mapping[str, str]:
        """file -> SHA-256 of the source text compiled."""
        return dict(self._program["sources"])

    @property
    def rules(self) -> tuple[RuleRef, ...]:
        """Every rule, in compile order (for coverage reports); approval rules last."""
        refs = tuple(self.rule(i).ref for i in range(self.rule_count))
        if self.approvals is not None:
            refs += tuple(r.ref for r in self.approvals.all_rules())
        return refs

    @property
    def files(self) -> tuple[ast.PolicyFile, ...]:
        """The parsed source files (empty for a PolicySet loaded from a bundle).

        A compile keeps the source texts, not their syntax trees (deciding
        never reads those: at 10,000 rules they are a third of the memory),
        and parses them again the first time this is asked for.
        """
        files = self._files
        if files is None:
            from sharedos.policy.parser import parse_source

            files = self._files = tuple(parse_source(text, name).file for name, text in self._texts)
        return files

    @property
    def tests(self) -> tuple[ast.TestBlock, ...]:
        """Test blocks of the compiled files (empty for a PolicySet loaded from a bundle)."""
        return tuple(t for f in self.files for t in f.tests)

    def prepare(self) -> PolicySet:
        """Decode every rule record and build every tool plan now; returns self.

        Never needed for speed: the load already compiled every condition and
        matcher a decision uses, so the first decisions after a compile or a
        bundle load are fast. This adds what explanations, listings and
        ``could_permit`` read (the rule records, every ``could_permit`` plan).
        Decisions are unchanged.
        """
        self.prepare_all()
        for name in self.requirements:
            t = self.tool(name)
            assert t is not None
            self._partial.plan(t)
        return self

    def save_bundle(self, path: str | Path) -> None:
        """Write this policy as a bundle (see ``sharedos.policy.bundle``)."""
        from sharedos.policy.bundle import save_bundle

        save_bundle(self, path)

    # -------------------------------------------------- partial evaluation, explain

    def could_permit(
        self, tool: str, context: Mapping[str, Any], *, context_key: str | None = None
    ) -> bool:
        """Partial evaluation: True iff some arguments exist for which ``decide`` allows.

        Arguments and resource are unknown, context is known. A permit counts
        when its condition can hold and its pattern meets the tool's resource
        shape; it is cancelled by a forbid whose condition holds whatever the
        arguments (unconditional or context-only) and whose pattern covers
        every resource the permit could match. See ``partial_eval``.
        """
        return self._partial.could_permit(tool, context, context_key=context_key)

    def explain_listing(self, tool: str, context: Mapping[str, Any]) -> ListingExplanation:
        """Why ``tool`` is (or is not) listed for ``context``: ``could_permit`` and its reasons."""
        return self._partial.explain(tool, context)

    def explain(
        self,
        tool: str,
        args: Mapping[str, Any],
        context: Mapping[str, Any],
        *,
        run_policy: str | None = None,
    ) -> Explanation:
        """The decision path of one call: requirement, canonical resource, every rule and why
        (under toolpolicy ``run_policy`` when given)."""
        from sharedos.policy.explainer import explain

        return explain(self, tool, args, context, run_policy=run_policy)


def program_hash(program: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of a program."""
    return hashlib.sha256(canonical_program(program)).hexdigest()


def canonical_program(program: Mapping[str, Any]) -> bytes:
    """The canonical JSON of a program, UTF-8 (sorted keys, no spaces): what the hash covers."""
    import json

    # allow_nan=False: a program holding NaN or an infinity is not JSON (no compile makes one)
    text = json.dumps(
        program, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8", "surrogatepass")

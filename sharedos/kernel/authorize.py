"""The authorization step of a call: ``Authorizer.authorize(...) -> Authorization``, a value.

It reads the call, the trusted context, the run policy, the turn catalogue
and the kernel's policy and registry, and returns what it found. It writes
nothing, runs nothing and records nothing (the caches it keeps — each tool's
redactor, each view's secret argument names — change how fast it answers,
never what). ``RuntimeHost.invoke_tool`` builds the evidence row from the
value, commits it, runs the handler and answers (``sharedos.kernel.runtime``).

Steps, in order; the first refusal is final and later steps do not run:

1. lookup: the raw name must name a tool of the context's view (the turn's
   snapshot when the call carries its catalogue) that a requirement governs
   -> denied ``tool_unavailable``;
2. run policy: the tool is in the run's managed set -> denied ``not_in_run_policy``;
3. turn catalogue (when given): the tool was published this turn
   -> denied ``not_in_turn_catalog``;
4. arguments: absent means ``{}``; otherwise a JSON object, at most 64 deep,
   no non-finite number, valid for ``inputSchema`` -> failed ``invalid_arguments``;
5. decision: ``policy.decide`` (requirement, canonical resource, rules)
   -> denied ``unresolvable_resource`` / ``no_matching_permit`` / ``forbidden``
   / ``approval_required`` (a permit allows the call and an approval rule
   applies: ``RuntimeHost`` then runs the approval step,
   ``sharedos.kernel.approvals.settle``, which maps this value to an allowed
   one or to the refusal naming an approval).

Whatever the verdict, the value carries the call's ``Redactor``: built once,
from the host's secrets, the tool's credentials and the values of the
arguments the tool declares secret (for a name that resolves to no tool,
every secret argument name of every tool in the view: conservative).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sharedos import canonical
from sharedos.catalog.definition import ToolDefinition
from sharedos.kernel.arguments import arguments_problem
from sharedos.kernel.context import AccessContext, ToolCall
from sharedos.kernel.kernel import Kernel, TurnCatalog
from sharedos.kernel.policy_api import DecisionLike
from sharedos.outcomes import DENIAL_REASONS, Effect, ReasonCode
from sharedos.redaction import Redactor, secret_text, secret_values
from sharedos.toolpolicy import ToolPolicy

__all__ = ["Authorization", "Authorizer"]

_ALLOWED = ReasonCode.ALLOWED
_NO_NAMES: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Authorization:
    """What the authorization step found for one call: the verdict and everything the
    record and the answer are made from. ``reason`` is ``allowed`` when the call may run."""

    #: ``allowed``, or the refusal's reason
    reason: ReasonCode
    #: the refusal's detail (as found: the record scrubs and caps it)
    detail: str | None
    #: the tool the name resolved to (None: no such tool in the view)
    tool: ToolDefinition | None
    #: the arguments as received (None when absent)
    arguments: Any
    #: the validated arguments (``{}`` for absent ones), once step 4 passed
    args: dict[str, Any] | None
    #: their RFC 8785 bytes and its ``sha256:`` tag, when the fast encoder could make them
    encoded: tuple[bytes, str] | None
    #: the policy's decision, once step 5 ran
    decision: DecisionLike | None
    #: argument names whose values are redacted whole in the record
    secret_names: frozenset[str]
    #: everything secret for this call (host, tool credentials, secret argument values)
    redactor: Redactor
    #: the tool declares an ``outputSchema``: a refusal carries its payload folded into
    #: the text (``sharedos.kernel.messages.folded_refusal``), never as structuredContent
    folds: bool
    #: an ``approval_required`` refusal's approval fields (``sharedos.kernel.approvals``:
    #: the approval id, its status, who may approve, whether a retry can run)
    approval: dict[str, Any] | None = None
    #: the ``context.now`` the decision saw, when the policy reads the time (the record
    #: keeps it, so a replay decides the call at the moment it was decided)
    now: Mapping[str, Any] | None = None


class Authorizer:
    """Authorizes calls against one kernel, for one host's secrets."""

    def __init__(self, kernel: Kernel, host_secrets: Redactor) -> None:
        self.kernel = kernel
        self.host_secrets = host_secrets
        #: per set of credential values: the host's secrets plus those credentials. Keyed by
        #: the values, not the tool: an upstream's tools share one credential set, and a
        #: union per tool (some 150 KB and milliseconds each) would be built and kept again
        #: for every tool of a large catalogue a turn calls
        self._tool_secrets: dict[frozenset[str], Redactor] = {}
        #: the secret argument names of every shared tool, per registry version
        self._view_secret_names: tuple[int, frozenset[str]] | None = None
        #: a turn's secrets -> {id of a call's redactor: (it, their union)}: a turn's calls
        #: meet the same few redactors, and a union costs more than a call. Keyed weakly by
        #: the turn's redactor, so a closed turn's entry (some 150 KB: every encoding of its
        #: token, and their cuts) goes with it instead of waiting for the host to evict it.
        #: A union that is the turn's own redactor is kept as None (a value holding its key
        #: would keep the entry alive).
        self._turn_unions: weakref.WeakKeyDictionary[
            Redactor, dict[int, tuple[Redactor, Redactor | None]]
        ] = weakref.WeakKeyDictionary()

    def authorize(
        self,
        call: ToolCall,
        context: AccessContext,
        tool_policy: ToolPolicy,
        catalog: TurnCatalog | None,
    ) -> Authorization:
        """Steps 1-5 (module docstring) for ``call``: the verdict and what it rests on."""
        raw = getattr(call, "arguments", None)
        name = getattr(call, "tool", None)
        kernel = self.kernel
        # 1-3. lookup, run policy, turn catalogue (a registered name is valid by
        # construction: a string that is not one misses)
        if type(name) is not str:
            return self.refused(call, context, catalog, ReasonCode.TOOL_UNAVAILABLE, looked_up=True)
        tool, refusal = kernel.resolve(name, context, catalog, tool_policy)
        if tool is None:
            return self.refused(call, context, catalog, ReasonCode.TOOL_UNAVAILABLE, looked_up=True)
        names = tool.secret_arguments
        redactor = self._redactor(tool, names, raw)
        folds = tool.output_schema is not None
        if refusal is not None:
            return Authorization(refusal, None, tool, raw, None, None, None, names, redactor, folds)
        # 4. arguments
        args: Any = {} if raw is None else raw
        problem = arguments_problem(tool, args)
        if problem is not None:
            return Authorization(
                ReasonCode.INVALID_ARGUMENTS,
                problem,
                tool,
                raw,
                None,
                None,
                None,
                names,
                redactor,
                folds,
            )
        encoded = canonical.fast_tagged(args)
        # 5. the decision
        decided_in = kernel.decision_context(context)
        decision = kernel.decide(tool, args, context, decided_in=decided_in)
        if decision.effect is Effect.ALLOW:
            reason, detail = _ALLOWED, None
        else:
            reason = (
                decision.reason
                if decision.reason in DENIAL_REASONS
                else ReasonCode.NO_MATCHING_PERMIT
            )
            if (reason is ReasonCode.APPROVAL_REQUIRED) != (
                decision.effect is Effect.APPROVAL_REQUIRED
            ):
                reason = ReasonCode.NO_MATCHING_PERMIT  # a decision that contradicts itself
            detail = decision.detail or None
        return Authorization(
            reason,
            detail,
            tool,
            raw,
            args,
            encoded,
            decision,
            names,
            redactor,
            folds,
            now=decided_in.get("now"),  # present only when the policy reads the time
        )

    def refused(
        self,
        call: ToolCall,
        context: AccessContext,
        catalog: TurnCatalog | None,
        reason: ReasonCode,
        detail: str | None = None,
        *,
        looked_up: bool = False,
    ) -> Authorization:
        """A refusal decided without (or before) a decision: ``reason`` for ``call``, with the
        call's secrets learnt as far as the name allows (a bridge's ``turn_closed``, an
        unknown tool, an internal error). ``looked_up``: the name is known to resolve to no
        tool. Never raises: when even the view cannot be read, the arguments are not kept
        at all."""
        raw = getattr(call, "arguments", None)
        name = getattr(call, "tool", None)
        tool: ToolDefinition | None = None
        try:
            if type(name) is str and not looked_up:
                tool = self.kernel.lookup(name, context, catalog)
            names = (
                tool.secret_arguments if tool is not None else self._view_names(context, catalog)
            )
            redactor = self._redactor(tool, names, raw)
        except Exception:  # cannot tell what is secret: keep no arguments
            tool, names, redactor, raw = None, _NO_NAMES, self.host_secrets, None
        folds = tool.output_schema is not None if tool is not None else _folds(catalog, name)
        return Authorization(reason, detail, tool, raw, None, None, None, names, redactor, folds)

    # -- secrets ------------------------------------------------------------------------

    def _redactor(self, tool: ToolDefinition | None, names: frozenset[str], raw: Any) -> Redactor:
        """The call's redactor: the host's secrets, the tool's credentials, secret argument values."""
        redactor = self.host_secrets
        if tool is not None and tool.credentials:
            redactor = self._with_credentials(tool)
        if names and isinstance(raw, Mapping):
            try:
                values = [v for n in names if raw.get(n) is not None for v in secret_values(raw[n])]
            except Exception:  # a hostile mapping: its values cannot be read, nor recorded
                values = []
            if values:
                redactor = redactor.union(values)
        return redactor

    def with_turn_secrets(self, auth: Authorization, turn_secrets: Redactor) -> Authorization:
        """``auth`` whose redactor also scrubs what the caller's turn knows is secret."""
        if not turn_secrets.values:
            return auth
        base = auth.redactor
        unions = self._turn_unions.get(turn_secrets)
        if unions is None:
            unions = self._turn_unions[turn_secrets] = {}
        hit = unions.get(id(base))
        if hit is not None and hit[0] is base:
            return replace(auth, redactor=turn_secrets if hit[1] is None else hit[1])
        made = base.union(turn_secrets)
        if len(unions) >= 64:  # a turn whose calls each bring secret arguments of their own
            unions.clear()
        unions[id(base)] = (base, None if made is turn_secrets else made)
        return replace(auth, redactor=made)

    def _with_credentials(self, tool: ToolDefinition) -> Redactor:
        key = frozenset(t for t in map(secret_text, tool.credentials.values()) if t)
        made = self._tool_secrets.get(key)
        if made is not None:
            return made
        made = self.host_secrets.union(Redactor(key))
        if len(self._tool_secrets) >= 256:
            self._tool_secrets.clear()
        self._tool_secrets[key] = made
        return made

    def _view_names(self, context: AccessContext, catalog: TurnCatalog | None) -> frozenset[str]:
        """The secret argument names of every tool in the view the call was looked up in."""
        kernel = self.kernel
        view = kernel.view_for(context, catalog)
        if view.overlay:
            return view.secret_argument_names()  # computed once per view (per turn)
        version = kernel.registry.version
        cached = self._view_secret_names
        if cached is not None and cached[0] == version:
            return cached[1]
        names = view.secret_argument_names()
        self._view_secret_names = (version, names)
        return names


def _folds(catalog: TurnCatalog | None, name: object) -> bool:
    """True when the turn's catalogue lists ``name`` with an ``outputSchema``."""
    if catalog is None or not isinstance(name, str) or name not in catalog.names:
        return False
    return any(t.name == name and t.output_schema is not None for t in catalog.tools)

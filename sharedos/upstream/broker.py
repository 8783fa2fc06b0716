"""``UpstreamBroker``: brokered upstream MCP servers as one ``ContextToolProvider``.

Lifecycle::

    async with UpstreamBroker(host_config.upstream, pins=load_pins(path)) as broker:
        broker.attach(registry, policy)                # adds the provider; policy for resources
        async with broker.turn(context) as upstreams:  # lists every upstream for this turn
            print(upstreams.report())                  # down upstreams, quarantined tools ...
            async with open_turn(host, context, run_policy) as turn:
                ...                                    # brokered tools are in turn.catalog

Per turn, not globally: ``turn(context)`` lists each upstream through a pooled
session (keyed by upstream id and credential-set fingerprint, never by who
asks), keeps only tools whose definition matches the pin file, and fixes the
result as that turn's snapshot: ``tools_for(context)`` returns exactly it for
``context.turn_id`` (and nothing for a turn it did not prepare, nor for another
principal's context carrying the same turn id), so the
catalogue stays fixed for the turn even if an upstream announces
``list_changed`` mid-turn; the change is seen at the next turn, after
approval. No user's catalogue mutates anything shared: the snapshot belongs
to the turn and is dropped when it ends. An upstream that is down is reported
and left out; the others and the built-in tools are unaffected.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import IO, Any, Literal

import anyio
from anyio.abc import TaskGroup
from cachetools import LRUCache
from pydantic import SecretStr

from sharedos.catalog.collisions import NameCollision, find_name_collisions
from sharedos.catalog.definition import ToolDefinition
from sharedos.context import AccessContext
from sharedos.outcomes import ReasonCode
from sharedos.pathwalk import SandboxError
from sharedos.redaction import NO_SECRETS, Redactor
from sharedos.terminal import printable
from sharedos.upstream.config import UpstreamConfig
from sharedos.upstream.connection import UpstreamConnection, UpstreamFailure, default_stderr
from sharedos.upstream.credentials import Binding, NoCredential, resolve_static, select
from sharedos.upstream.definitions import RawTool, Refusal, build_definition
from sharedos.upstream.forward import ForwardHandler
from sharedos.upstream.localpaths import UNCHECKED, LocalPaths
from sharedos.upstream.oauth import TokenSource
from sharedos.upstream.pins import Drift, PinFile, compare
from sharedos.upstream.pool import SessionPool, Slot
from sharedos.upstream.sandbox import (
    UpstreamConfinementPolicy,
    UpstreamPlacement,
    decide,
    upstream_imports,
    upstream_programs,
)
from sharedos.upstream.secrets import (
    CredentialError,
    CredentialSet,
    fingerprint_of,
)

#: ``no-credential``: the turn's principal has none for an upstream that requires one;
#: ``unauthorized``: the upstream refused the one it has (both: its tools are absent)
State = Literal["ok", "unavailable", "disabled", "no-credential", "unauthorized"]
#: what a principal without per-person credentials is told by the operator views
_NO_CONTEXT = AccessContext(principal="sharedos-operator")
#: definitions still to build for a listing up to which building stays on the event loop
#: (a few ms at most; more go to a worker thread)
_INLINE_BUILDS = 8
#: tools in a turn's snapshot up to which pins are compared on the event loop (~50 us each)
_INLINE_ASSEMBLE = 64
#: refusals shown one per line in a report (all of them are in ``as_dict``)
_SHOWN_REFUSALS = 20
#: (upstream, credential set) sessions whose latest definitions are kept for the next listing
_SESSIONS_KEPT = 256
#: worker threads that validate results against output schemas at once (``result_checks``)
_RESULT_CHECK_THREADS = 4
#: ``path(args.X)`` or ``path(args.X.Y...)``: the (dotted) argument holding a path resource
_PATH_ARG = re.compile(r"^path\(args\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\)$")


@dataclass(frozen=True)
class UpstreamStatus:
    """What one upstream contributed to one turn, and why not more."""

    upstream: str
    namespace: str
    state: State
    message: str = ""
    published: tuple[str, ...] = ()
    refused: tuple[Refusal, ...] = ()
    drift: tuple[Drift, ...] = ()
    server: Mapping[str, Any] = field(default_factory=dict)
    listed: int = 0
    elapsed_ms: float = 0.0
    #: the credential identity the turn's calls carry (``principal:alice``), names only
    credential: str | None = None

    def lines(self) -> list[str]:
        """Human lines for a report (no credential values: they never reach a status)."""
        head = f"upstream {self.upstream} ({self.namespace}.*): "
        if self.state == "disabled":
            return [head + "disabled in the host configuration"]
        if self.state == "unavailable":
            return [head + f"unavailable, its tools are absent this turn: {self.message}"]
        if self.state == "no-credential":
            return [head + f"no credential, its tools are absent this turn: {self.message}"]
        if self.state == "unauthorized":
            return [head + f"credential refused, its tools are absent this turn: {self.message}"]
        server = ""
        if self.server.get("name"):
            server = f" [{self.server.get('name')} {self.server.get('version', '')}]".rstrip()
        as_who = f" as {self.credential}" if self.credential else ""
        out = [head + f"{len(self.published)} of {self.listed} tools published{server}{as_who}"]
        out.extend(f"  refused: {r.describe()}" for r in self.refused[:_SHOWN_REFUSALS])
        if len(self.refused) > _SHOWN_REFUSALS:
            # an upstream listing 10,001 tools must not print 9,000 lines into a run
            more = len(self.refused) - _SHOWN_REFUSALS
            out.append(
                f"  refused: {more} more tool(s) (`sharedos upstream status --json` lists every one)"
            )
        out.extend(f"  held back: {d.describe()}" for d in self.drift)
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "upstream": self.upstream,
            "namespace": self.namespace,
            "state": self.state,
            "message": self.message,
            "published": list(self.published),
            "listed": self.listed,
            "refused": [{"tool": r.tool, "reason": r.reason} for r in self.refused],
            "drift": [d.as_dict() for d in self.drift],
            "server": dict(self.server),
            "elapsedMs": self.elapsed_ms,
            "credential": self.credential,
        }


@dataclass
class TurnUpstreams:
    """One turn's brokered tools: fixed when the turn opened, dropped when it ends."""

    turn_id: str
    tools: dict[str, ToolDefinition]
    statuses: tuple[UpstreamStatus, ...]
    #: published tool name -> digest of the upstream definition it was published from
    expected: dict[str, str]
    #: upstream id -> the credential set its calls in this turn use
    credentials: dict[str, CredentialSet]
    opened_ms: float = 0.0
    #: upstream id -> how its process ran (``confined by …`` / ``not confined: …``)
    placements: dict[str, str] = field(default_factory=dict)
    #: upstream id -> the session this turn's calls were last checked against, and the
    #: digests (published name -> digest) that session lists; None: the session the turn
    #: was published from. A call through any other session lists it first
    #: (``UpstreamBroker.connection_for_call``).
    sessions: dict[str, tuple[UpstreamConnection, dict[str, str] | None]] = field(
        default_factory=dict
    )
    #: whose turn it is: what chose its credentials (``owner_of`` the context it was
    #: prepared for). Another context carrying the same turn id gets none of it.
    owner: tuple[str, str, tuple[str, ...]] | None = None

    def serves(self, context: AccessContext) -> bool:
        """True when ``context`` is the one this snapshot was prepared for (its turn, and
        the principal, tenant and roles its credentials were chosen by)."""
        return context.turn_id == self.turn_id and self.owner == owner_of(context)

    def confinement(self) -> dict[str, str]:
        """Upstream id → how it was confined, for the turn's identity (docs/confinement.md)."""
        return dict(self.placements)

    def report(self) -> list[str]:
        """Human lines: one per upstream plus its refusals and drift (control characters
        escaped: names and messages come from the upstreams, and the lines go to a terminal)."""
        out: list[str] = []
        for status in self.statuses:
            out.extend(printable(line) for line in status.lines())
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "turnId": self.turn_id,
            "tools": sorted(self.tools),
            "upstreams": [s.as_dict() for s in self.statuses],
            "confinement": dict(self.placements),
            "openedMs": self.opened_ms,
        }


@dataclass
class Listing:
    """One upstream listed through one session, turned into definitions."""

    config: UpstreamConfig
    credentials: CredentialSet | None
    raw: list[RawTool] = field(default_factory=list)
    tools: list[tuple[ToolDefinition, RawTool]] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    elapsed_ms: float = 0.0
    #: with ``failure``: ``unavailable``, ``no-credential`` or ``unauthorized``
    state: State = "unavailable"
    #: the session the listing was read through
    connection: UpstreamConnection | None = None


class UpstreamBroker:
    """Brokers configured upstreams for many concurrent turns (see the module docstring)."""

    def __init__(
        self,
        upstreams: Mapping[str, UpstreamConfig],
        *,
        pins: PinFile | None = None,
        environ: Mapping[str, str] | None = None,
        stderr: IO[str] | None = None,
        confinement: UpstreamConfinementPolicy | None = None,
        tokens: Any = None,
        subject_tokens: Callable[[AccessContext, str], str | None] | None = None,
    ) -> None:
        """``tokens``: the token store (a ``TokenStore``, or a zero-argument callable that
        opens it, raising ``TokenStoreError``), needed by OAuth and ``store`` references.
        ``subject_tokens(context, upstream_id)``: a host-provided subject token for RFC 8693
        token exchange (else the host file's ``oauth.subject_tokens``)."""
        import os

        self.upstreams = dict(upstreams)
        self._tokens = tokens
        self._store: Any = None
        self._subject_tokens = subject_tokens
        #: (upstream, tenant, principal) -> that principal's OAuth tokens for the upstream
        self._sources: dict[tuple[str, str, str], TokenSource] = {}
        self.pool = SessionPool()
        self._environ = dict(environ if environ is not None else os.environ)
        #: how stdio upstreams run (their own sandbox, or supervised); see upstream.sandbox.
        #: No upstream's sandbox may write another's program (or its own): it runs next
        policy = confinement or UpstreamConfinementPolicy()
        self.confinement = replace(
            policy,
            never_writable=tuple(
                dict.fromkeys(
                    (
                        *policy.never_writable,
                        *upstream_programs(self.upstreams.values(), self._environ),
                    )
                )
            ),
            # and what an unconfined one imports by name (its PYTHONPATH, the cwd of its
            # ``python -m``): no sandbox may plant a module there either
            never_held=tuple(
                dict.fromkeys((*policy.never_held, *upstream_imports(self.upstreams.values())))
            ),
        )
        self._placements: dict[str, UpstreamPlacement] = {}
        self.pins = pins if pins is not None else PinFile()
        self._stderr = stderr if stderr is not None else default_stderr()
        #: the host's own secrets (``sharedos run``: every secret the run holds), scrubbed
        #: from every upstream's stderr as well as its own credentials; set it any time
        self.host_secrets: Redactor = NO_SECRETS
        self._turns: dict[str, TurnUpstreams] = {}
        #: turn ids being prepared (``turn``): reserved before the first await, so a second
        #: turn opened with the same id meanwhile is refused rather than replacing the first
        self._opening: set[str] = set()
        #: (upstream id, credential identity, fingerprint) -> the definitions built from its latest
        #: listing, by the digest of the listed tool. Replaced by each listing (so it never
        #: holds more than one listing's tools per session), reused by the next one: an item
        #: cache smaller than a catalogue would miss on every item of every turn.
        self._definitions: LRUCache[tuple[str, str, str], dict[str, ToolDefinition | Refusal]] = (
            LRUCache(_SESSIONS_KEPT)
        )
        #: the map is read and replaced from worker threads (one per upstream listing at once)
        self._definitions_lock = threading.Lock()
        self._last_collisions: tuple[frozenset[str], list[NameCollision]] | None = None
        self._tg: TaskGroup | None = None
        self._exit: contextlib.AsyncExitStack | None = None
        self._reserved: frozenset[str] = frozenset()
        self._registry: Any = None
        self._policy: Any = None
        self._resource_args: dict[str, str | None] = {}
        self._path_tools: dict[str, bool] = {}
        self._local_paths = LocalPaths()
        #: worker threads validating results against output schemas (``ForwardHandler``):
        #: their own few, so a flood of large results never takes the shared thread pool
        #: the evidence store and the listings use
        self.result_checks: anyio.CapacityLimiter | None = None

    # -- lifecycle ----------------------------------------------------------
    async def __aenter__(self) -> UpstreamBroker:
        stack = contextlib.AsyncExitStack()
        self.result_checks = anyio.CapacityLimiter(_RESULT_CHECK_THREADS)
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._exit = stack
        self._tg.start_soon(self._sweeper)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.pool.close_all()
        self._turns.clear()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
        if self._exit is not None:
            await self._exit.__aexit__(None, None, None)
            self._exit = None
        self._tg = None

    def attach(self, registry: Any, policy: Any = None) -> None:
        """Add this broker to ``registry`` as a provider; ``policy`` tells which argument
        of a brokered tool holds its path resource (forwarded in canonical form)."""
        self._registry = registry
        self._policy = policy
        self._resource_args.clear()
        self._path_tools.clear()
        registry.add_provider(self)

    # -- ContextToolProvider ----------------------------------------------------
    def tools_for(self, context: AccessContext) -> Iterable[ToolDefinition]:
        """The brokered tools of ``context``'s turn: its fixed snapshot, or none (also for
        a context of another principal, tenant or roles that carries the same turn id)."""
        state = self.state_for(context)
        if state is None:
            return ()
        return state.tools.values()

    def turn_state(self, turn_id: str) -> TurnUpstreams | None:
        """The snapshot of an open turn (None when the turn was not opened here or has ended)."""
        return self._turns.get(turn_id)

    def state_for(self, context: AccessContext) -> TurnUpstreams | None:
        """The snapshot of ``context``'s open turn, or None: not opened here, ended, or
        prepared for another context with the same turn id (its tools, sessions and
        credentials are that context's, never this one's)."""
        state = self._turns.get(context.turn_id)
        if state is None or not state.serves(context):
            return None
        return state

    async def _sweeper(self) -> None:
        """Close pooled sessions idle past their upstream's ``sessions.idle_s``."""
        idle_of = {uid: c.sessions.idle_s for uid, c in self.upstreams.items()}
        if not idle_of:
            return
        interval = min(30.0, max(0.05, min(idle_of.values()) / 4))
        while True:
            await anyio.sleep(interval)
            await self.pool.sweep(idle_of)

    def token_store(self) -> Any:
        """The token store, opened on first use (``TokenStoreError`` when it cannot be)."""
        if self._store is None:
            from sharedos.upstream.tokenstore import TokenStoreError

            if self._tokens is None:
                raise TokenStoreError("no token store is configured ([tokens] in the host file)")
            self._store = self._tokens() if callable(self._tokens) else self._tokens
        return self._store

    # -- turns -----------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def turn(self, context: AccessContext) -> AsyncIterator[TurnUpstreams]:
        """Prepare ``context``'s turn: list every upstream, apply pins, fix the snapshot."""
        turn_id = context.turn_id
        if turn_id in self._turns or turn_id in self._opening:
            raise ValueError(f"turn {turn_id!r} is already open with this broker")
        # reserved now, before the listings are awaited: checked only against the turns
        # already registered, two turns opened at once with one id both passed, and the
        # second's snapshot (its principal's credentials) replaced the first's
        self._opening.add(turn_id)
        try:
            state = await self.prepare(context, hold=True)
            self._turns[turn_id] = state
            self._opening.discard(turn_id)
            yield state
        finally:
            self._opening.discard(turn_id)
            self._turns.pop(turn_id, None)
            self.pool.release(turn_id)

    async def prepare(self, context: AccessContext, *, hold: bool = False) -> TurnUpstreams:
        """Build a turn snapshot without registering it (``turn`` registers it); ``hold``:
        the sessions listed through stay held by ``context.turn_id`` (``turn`` releases them)."""
        started = time.perf_counter()
        listings: dict[str, Listing] = {}
        holder = context.turn_id if hold else None

        async def one(config: UpstreamConfig) -> None:
            listings[config.id] = await self.list_upstream(config, context, holder=holder)

        async with anyio.create_task_group() as tg:
            for config in self.upstreams.values():
                if config.enabled:
                    tg.start_soon(one, config)
        # pins compared (an RFC 8785 digest per tool) and collisions found off the loop too,
        # unless there are so few tools that a thread hop would cost more
        if sum(len(x.tools) for x in listings.values()) > _INLINE_ASSEMBLE:
            await anyio.to_thread.run_sync(self._hold_back_foreign, listings)
            state = await anyio.to_thread.run_sync(self._assemble, context, listings)
        else:
            self._hold_back_foreign(listings)
            state = self._assemble(context, listings)
        state.opened_ms = round((time.perf_counter() - started) * 1000, 3)
        return state

    def _hold_back_foreign(self, listings: Mapping[str, Listing]) -> None:
        """Hold back every listed tool whose definition holds another upstream's credential
        (of the same listing round) or one of the host's secrets, as one holding its own
        upstream's is (``build_definition``): not published, not pinned, reported by field.

        An upstream sees only its own credentials, but one that learned another's (an
        unconfined server runs as the operator; a model may pass one into its calls) could
        otherwise hand it to the model in a description, and to the pin file and the
        operator's commands; its results are scrubbed of them by the kernel already."""
        owned: dict[str, Redactor] = {}
        for uid, listing in listings.items():
            if listing.credentials is not None and listing.tools:
                owned[uid] = Redactor(listing.credentials.secrets())
        for uid, listing in listings.items():
            if not listing.tools:
                continue
            others = [(o, r) for o, r in owned.items() if o != uid and r]
            if self.host_secrets:
                others.append(("", self.host_secrets))
            if not others:
                continue
            kept: list[tuple[ToolDefinition, RawTool]] = []
            for tool, raw in listing.tools:
                whose, found = next(
                    ((o, f) for o, r in others if (f := r.find(dict(raw.wire)))), ("", [])
                )
                if not found:
                    kept.append((tool, raw))
                    continue
                scrub = owned.get(whose, self.host_secrets)
                shown = ", ".join(found[:10]) + (
                    f" and {len(found) - 10} more" if len(found) > 10 else ""
                )
                owner = f"upstream {whose}" if whose else "this host"
                listing.refused.append(
                    Refusal(
                        uid,
                        scrub.scrub(raw.name),
                        f"its definition contains a credential of {owner} (in {shown}); held "
                        "back: not published, not pinned",
                    )
                )
            listing.tools = kept

    def _assemble(self, context: AccessContext, listings: Mapping[str, Listing]) -> TurnUpstreams:
        reserved = self._reserved_names()
        statuses: list[UpstreamStatus] = []
        candidates: dict[str, tuple[ToolDefinition, RawTool, str]] = {}
        per_upstream: dict[str, tuple[list[Refusal], list[Drift]]] = {}
        credentials: dict[str, CredentialSet] = {}
        sessions: dict[str, tuple[UpstreamConnection, dict[str, str] | None]] = {}
        for uid, config in self.upstreams.items():
            if not config.enabled:
                statuses.append(UpstreamStatus(uid, config.namespace, "disabled"))
                continue
            listing = listings[uid]
            if listing.failure is not None or listing.credentials is None:
                statuses.append(
                    UpstreamStatus(
                        uid,
                        config.namespace,
                        listing.state,
                        message=listing.failure or "no session",
                        elapsed_ms=listing.elapsed_ms,
                        credential=listing.credentials.identity if listing.credentials else None,
                    )
                )
                continue
            credentials[uid] = listing.credentials
            if listing.connection is not None:
                sessions[uid] = (listing.connection, None)
            refused = list(listing.refused)
            if config.pinning == "required":
                ok, drift = compare(uid, self.pins.for_upstream(uid), listing.tools)
            else:
                ok, drift = {t.name for t, _ in listing.tools}, []
            for tool, raw in listing.tools:
                if tool.name not in ok:
                    continue
                if tool.name in reserved:
                    refused.append(
                        Refusal(uid, raw.name, f"{tool.name!r} is already a SharedOS tool")
                    )
                    continue
                candidates[tool.name] = (tool, raw, uid)
            per_upstream[uid] = (refused, drift)
        # names that collide after the harness alias sanitization, with each other or
        # with a shared tool, are all refused: a clash is reported, never resolved
        clash = self._name_collisions(frozenset([*candidates, *reserved]))
        for collision in clash:
            for name in collision.names:
                hit = candidates.pop(name, None)
                if hit is not None:
                    tool, raw, uid = hit
                    per_upstream[uid][0].append(Refusal(uid, raw.name, collision.describe()))
        tools = {name: hit[0] for name, hit in sorted(candidates.items())}
        expected = {name: hit[1].digest for name, hit in candidates.items()}
        for uid, config in self.upstreams.items():
            if uid not in per_upstream:
                continue
            refused, drift = per_upstream[uid]
            listing = listings[uid]
            statuses.append(
                UpstreamStatus(
                    uid,
                    config.namespace,
                    "ok",
                    published=tuple(n for n, h in candidates.items() if h[2] == uid),
                    refused=tuple(refused),
                    drift=tuple(drift),
                    server=listing.server,
                    listed=sum(item.count for item in listing.raw),
                    elapsed_ms=listing.elapsed_ms,
                    credential=listing.credentials.identity if listing.credentials else None,
                )
            )
        order = {uid: i for i, uid in enumerate(self.upstreams)}
        statuses.sort(key=lambda s: order.get(s.upstream, 0))
        return TurnUpstreams(
            turn_id=context.turn_id,
            owner=owner_of(context),
            tools=tools,
            statuses=tuple(statuses),
            expected=expected,
            credentials=credentials,
            sessions=sessions,
            placements={
                uid: self.placement(config).record
                for uid, config in self.upstreams.items()
                if config.enabled
            },
        )

    def placement(self, config: UpstreamConfig) -> UpstreamPlacement:
        """How ``config``'s upstream runs (decided once per broker: its sandbox, or why not)."""
        placed = self._placements.get(config.id)
        if placed is None:
            placed = self._placements[config.id] = decide(config, self.confinement, self._environ)
        return placed

    def _name_collisions(self, names: frozenset[str]) -> list[NameCollision]:
        """``find_name_collisions(names)``; the last answer is kept (turn after turn, the
        same listings give the same names, and sanitizing 10,000 names costs more than
        hashing them)."""
        last = self._last_collisions
        if last is not None and last[0] == names:
            return last[1]
        found = find_name_collisions(names)
        self._last_collisions = (names, found)
        return found

    def _reserved_names(self) -> frozenset[str]:
        registry = self._registry
        if registry is None:
            return frozenset()
        return frozenset(t.name for t in registry.tools())

    # -- listing -------------------------------------------------------------------
    async def list_upstream(
        self,
        config: UpstreamConfig,
        context: AccessContext | None = None,
        *,
        holder: str | None = None,
    ) -> Listing:
        """List one upstream through the pooled session of ``context``'s credential (the
        operator's, for an upstream whose identity is shared); failures are in
        ``Listing.failure`` and ``Listing.state``."""
        started = time.perf_counter()
        listing = Listing(config=config, credentials=None)
        refusal = self.placement(config).refusal
        if refusal is not None:  # fail closed: an upstream a strict run cannot confine
            listing.failure = refusal
            return listing
        binding = select(config, context or _NO_CONTEXT)
        if isinstance(binding, NoCredential):
            listing.failure, listing.state = binding.message, "no-credential"
            return listing
        try:
            creds = await self.credentials_for(config, binding)
        except CredentialError as exc:
            listing.failure = str(exc)
            return listing
        if creds.auth is not None and await creds.auth.current() is None:
            if config.identity == "per-person-or-shared" and creds.auth.signed_out():
                # a principal that never signed in has no credential of its own: it gets
                # the shared one (its tokens unusable, or refused, are not replaced by it)
                try:
                    creds = await self.credentials_for(
                        config, Binding("shared", config.credentials)
                    )
                except CredentialError as exc:
                    listing.failure = str(exc)
                    return listing
            else:
                listing.credentials = creds
                listing.failure, listing.state = creds.auth.problem or "no token", "no-credential"
                return listing
        listing.credentials = creds
        try:
            slot, conn = await self._connection(config, creds, holder=holder)
            try:
                raw = await self._listing(slot, conn)
            except UpstreamFailure:
                if not conn.session_lost:
                    raise
                # the upstream lost the session it had (restarted): one new session
                slot, conn = await self._connection(config, creds, holder=holder)
                raw = await self._listing(slot, conn)
        except UpstreamFailure as exc:
            listing.failure = exc.message
            if exc.reason is ReasonCode.UPSTREAM_UNAUTHORIZED:
                listing.state = "unauthorized"
            listing.elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
            return listing
        listing.raw = raw
        listing.connection = conn
        listing.server = dict(conn.server_info)
        if conn.protocol_version:
            listing.server["protocolVersion"] = conn.protocol_version
        # definitions are built (schemas checked: ~2 ms a tool) in a worker thread, so a
        # large listing never stalls the event loop every turn of the process runs on;
        # a listing whose definitions are all cached but a few is cheaper inline
        with self._definitions_lock:
            known = self._definitions.get(_key(config, creds)) or {}
        misses = sum(1 for r in raw if r.digest not in known)
        if misses > _INLINE_BUILDS:
            await anyio.to_thread.run_sync(self._build, listing, creds, conn.scrubber)
        else:
            self._build(listing, creds, conn.scrubber)
        listing.elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
        return listing

    async def credentials_for(self, config: UpstreamConfig, binding: Binding) -> CredentialSet:
        """The credential set of ``binding`` (read now; OAuth: its principal's token source)."""
        if binding.oauth is None:
            return resolve_static(config, binding, self._environ, store=self.token_store)
        tenant, principal = binding.oauth
        key = (config.id, tenant, principal)
        source = self._sources.get(key)
        if source is None:
            subject = None
            if self._subject_tokens is not None:
                hook, ctx = self._subject_tokens, AccessContext(principal=principal, tenant=tenant)

                def subject() -> str | None:
                    return hook(ctx, config.id)

            source = self._sources[key] = TokenSource(
                config, tenant, principal, self.token_store, self._environ, subject_token=subject
            )
        return CredentialSet(
            fingerprint=fingerprint_of({}, "oauth", config.id, tenant, principal),
            identity=binding.identity,
            via="oauth",
            auth=source,
        )

    def _build(self, listing: Listing, creds: CredentialSet, scrubber: Redactor) -> None:
        """Turn ``listing.raw`` into definitions and refusals (runs in a worker thread)."""
        config = listing.config
        secrets = _credential_map(creds)
        slot_key = _key(config, creds)
        served = {"upstream": config.id, "credential": creds.identity, "via": creds.via}
        with self._definitions_lock:
            known = self._definitions.get(slot_key) or {}
        fresh: dict[str, ToolDefinition | Refusal] = {}
        for item in listing.raw:
            built = (known.get(item.digest) or fresh.get(item.digest)) if item.digest else None
            if built is None:
                built = build_definition(
                    config,
                    item,
                    ForwardHandler(self, config.id, item.name),
                    secrets,
                    scrubber,
                    served,
                )
            if item.digest:
                fresh[item.digest] = built
            if isinstance(built, Refusal):
                listing.refused.append(built)
            else:
                listing.tools.append((built, item))
        with self._definitions_lock:
            self._definitions[slot_key] = fresh
        # a name listed twice is refused whole, whatever became of each copy: counting
        # only the copies that could be published let a second, refused copy (over a
        # limit, a regex RE2 refuses, a credential) leave the other one published, while
        # the upstream may run either (and calls were checked against the last copy)
        counts = Counter(item.name for item in listing.raw)
        dupes = {n for n, k in counts.items() if k > 1}
        if dupes:
            listing.refused.extend(
                Refusal(config.id, n, "the upstream lists this name twice") for n in sorted(dupes)
            )
            listing.tools = [(t, r) for t, r in listing.tools if r.name not in dupes]

    async def _listing(
        self, slot: Slot, conn: UpstreamConnection, *, since: float | None = None
    ) -> list[RawTool]:
        """The upstream's tools now; turns opening together share one tools/list, and its
        failure: a turn that waited for a listing that failed is told that failure.
        ``since``: a listing begun after that time (the change a call waits for was
        announced then) is fresh enough too."""
        asked = time.monotonic()
        async with slot.list_lock:
            _shared_failure(slot.list_failure, asked)
            cached = slot.listing
            # a listing that started after this turn (or call) asked is as fresh as a new
            # one, whatever the upstream announced since: a change announced after it asked
            # is no older than its own request. Listing again for it let an upstream that
            # announces changes every few ms make each of N waiting calls list in turn (the
            # N-th waited out N listings). So is one begun after the change a call waits
            # for. An operator may also accept a listing up to list_cache_s old, while no
            # change is announced
            if cached is not None and (
                cached[0] >= asked
                or (since is not None and cached[0] > since)
                or (not slot.list_changed and asked - cached[0] < conn.config.list_cache_s)
            ):
                return cached[1]
            # a change announced from now on is after this listing began: ``list_changed``
            # stays true until a listing begun after it finishes (one that fails, or is
            # cancelled, leaves it true: a later turn or call lists again, rather than take
            # the listing from before the change as current and check its calls against it)
            began = time.monotonic()
            try:
                raw = await conn.list_tools()
            except UpstreamFailure as exc:
                slot.list_failure = (time.monotonic(), exc)
                raise
            slot.listing = (began, raw)
            return raw

    async def _connection(
        self, config: UpstreamConfig, creds: CredentialSet, *, holder: str | None = None
    ) -> tuple[Slot, UpstreamConnection]:
        """The pooled session for (upstream, credential set), opened or re-opened as needed
        (``holder``: the turn that holds it from now on)."""
        if self._tg is None:
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_UNAVAILABLE, "the upstream broker is not running"
            )
        slot = await self.pool.slot(config, _key(config, creds))
        if holder is not None:
            self.pool.hold(slot, holder)
        slot.touch()
        conn = slot.connection
        if conn is not None and conn.usable:
            return slot, conn
        asked = time.monotonic()
        async with slot.lock:
            conn = slot.connection
            if conn is not None and conn.usable:
                return slot, conn
            # an attempt this turn waited for failed: its failure, not another attempt
            _shared_failure(slot.open_failure, asked)
            if conn is not None:
                # ended beside this call, not waited for: ending a hung stdio upstream
                # takes the SDK seconds (stdin closed, 2 s to exit, then its tree killed),
                # which the call re-opening it paid, past a handler deadline fitted to the
                # hung call and its ping
                conn.end()
                slot.connection = None
                slot.listing = None

            fresh = UpstreamConnection(
                config,
                creds,
                stderr=self._stderr,
                on_list_changed=slot.announce,
                wrap=self.placement(config).wrap,
                host_secrets=lambda: self.host_secrets,
            )
            try:
                await fresh.start(self._tg)
            except UpstreamFailure as exc:
                slot.open_failure = (time.monotonic(), exc)
                raise
            if slot.closed:  # the pool closed this slot while it opened: do not leak it
                await fresh.close()
                raise UpstreamFailure(
                    ReasonCode.UPSTREAM_UNAVAILABLE,
                    f"upstream {config.id!r}: its session was closed by the pool while it opened",
                )
            slot.connection = fresh
            return slot, fresh

    # -- calls (used by ForwardHandler) ------------------------------------------------
    async def connection_for_call(
        self, context: AccessContext, upstream_id: str, tool: str
    ) -> UpstreamConnection:
        """The session a call of ``tool`` in ``context``'s turn goes to; re-opened if it broke.
        None for a context the turn was not prepared for (``state_for``).

        A session other than the one this turn was published from -- re-opened by
        this call, by an earlier call of the turn, or by another turn sharing the
        pooled session -- is listed once for the turn, and every call through it
        is refused (``upstream_unavailable``) when its tool's definition there is
        no longer the one this turn published: a restarted upstream cannot change
        under a turn, whichever call or turn re-opened it. Nor can one that changes
        its tools in place: a session that announced a change is listed again before
        the call, and the session's latest listing (this turn's, or any later turn's)
        is the one a call's tool is checked against.
        """
        turn_id = context.turn_id
        state = self.state_for(context)
        config = self.upstreams.get(upstream_id)
        if state is None or config is None or upstream_id not in state.credentials:
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_UNAVAILABLE,
                f"upstream {upstream_id!r} has no session for this turn (the turn was not "
                "opened through the upstream broker for this principal, or it has ended)",
            )
        creds = state.credentials[upstream_id]
        want = state.expected.get(tool)
        slot = self.pool.get(_key(config, creds))
        seen = state.sessions.get(upstream_id)
        conn: UpstreamConnection | None = slot.connection if slot is not None else None
        digests_now: dict[str, str] | None
        if slot is not None and conn is not None and conn.usable and seen and seen[0] is conn:
            slot.touch()
            if slot.list_changed:
                # the upstream announced a change (or a listing begun after it is still in
                # flight): listed again before a call goes through
                await self._listing(slot, conn, since=slot.changed_at)
            # the session's latest listing: this turn's own, or a later one of any turn
            latest = _digests(config, slot)
            digests_now = latest if latest is not None else seen[1]
        else:
            slot, conn = await self._connection(config, creds, holder=turn_id)
            seen = state.sessions.get(upstream_id)
            if seen is None or seen[0] is not conn:
                await self._listing(slot, conn)
                state.sessions[upstream_id] = seen = (conn, _digests(config, slot))
            digests_now = seen[1]
        if want is None or (digests_now is not None and digests_now.get(tool) != want):
            raise UpstreamFailure(
                ReasonCode.UPSTREAM_UNAVAILABLE,
                f"upstream {upstream_id!r} now lists a definition of {tool} that is not "
                "the one this turn was given (it changed, or the upstream restarted, since the "
                "turn opened); the change takes effect at a later turn, after "
                "`sharedos upstream approve`",
            )
        return conn

    def resource_argument(self, tool: str) -> str | None:
        """The argument holding ``tool``'s path resource (``path(args.X)``, or a dotted
        ``path(args.X.Y)`` for one nested in objects), if any: ``X`` or ``X.Y``."""
        if tool in self._resource_args:
            return self._resource_args[tool]
        arg: str | None = None
        policy = self._policy
        if policy is not None:
            requirement = policy.requirements.get(tool)
            expr = getattr(requirement, "resource", None)
            if isinstance(expr, str):
                m = _PATH_ARG.match(expr.strip())
                arg = m.group(1) if m else None
        self._resource_args[tool] = arg
        return arg

    def path_resource(self, tool: str) -> bool:
        """True when ``tool``'s requirement computes its resource with ``path(...)``: the
        canonical resource is a host path the upstream will open."""
        known = self._path_tools.get(tool)
        if known is not None:
            return known
        requirement = self._policy.requirements.get(tool) if self._policy is not None else None
        expr = getattr(requirement, "resource", None)
        found = isinstance(expr, str) and expr.strip().startswith("path(")
        self._path_tools[tool] = found
        return found

    async def check_path(self, config: UpstreamConfig, resource: str) -> str | None:
        """Why the path ``resource`` must not be forwarded to ``config``'s upstream, or None.

        ``LocalPaths`` on this host (``path_check`` local), nothing (``off``), or a
        refusal for an upstream on another host with ``path_check`` unset. The
        sentence names the canonical path and ends with the check's code.
        """
        if config.links == "off":
            return None
        if config.links == "unchecked":
            return (
                f"{resource} cannot be checked for links: upstream {config.id!r} is on another "
                'host, and its path_check is not set (set path_check = "off" once that host '
                f"keeps its own links in check) ({UNCHECKED})"
            )
        try:
            # inline: a few syscalls per component (a thread hop would cost more)
            git_directory = self._local_paths.check(resource)
            if git_directory is not None:
                await anyio.to_thread.run_sync(self._local_paths.walk_git, git_directory)
        except SandboxError as exc:
            return f"{exc}; SharedOS did not forward the call to upstream {config.id!r}"
        return None

    # -- operator views (sharedos upstream ...) -------------------------------------------
    async def list_all(self, context: AccessContext | None = None) -> dict[str, Listing]:
        """Every enabled upstream listed now (no pins applied) with ``context``'s credentials
        (the operator's when None): what pin/diff/approve read."""
        out: dict[str, Listing] = {}

        async def one(config: UpstreamConfig) -> None:
            out[config.id] = await self.list_upstream(config, context)

        async with anyio.create_task_group() as tg:
            for config in self.upstreams.values():
                if config.enabled:
                    tg.start_soon(one, config)
        await anyio.to_thread.run_sync(self._hold_back_foreign, out)
        return {uid: out[uid] for uid in self.upstreams if uid in out}


def owner_of(context: AccessContext) -> tuple[str, str, tuple[str, ...]]:
    """What chooses a context's credentials at an upstream (``credentials.select``): its
    tenant, principal and roles."""
    return (context.tenant, context.principal, tuple(context.roles))


def _shared_failure(failure: tuple[float, UpstreamFailure] | None, asked: float) -> None:
    """Raise ``failure`` again when it came after ``asked``: the caller waited for the
    attempt that failed, and trying again would make it wait out another timeout."""
    if failure is not None and failure[0] >= asked:
        raise UpstreamFailure(failure[1].reason, failure[1].message)


def _digests(config: UpstreamConfig, slot: Slot) -> dict[str, str] | None:
    """Published name -> digest of each tool in ``slot``'s latest listing (None: none yet;
    "", which no published tool has, for a name listed twice); computed once per listing,
    however many calls ask."""
    listing = slot.listing
    if listing is None:
        return None
    known = slot.digests
    if known is not None and known[0] is listing:
        return known[1]
    digests: dict[str, str] = {}
    for r in listing[1]:
        name = f"{config.namespace}.{r.name}"
        # a name listed twice has no one definition the upstream runs: it matches none
        # (the last copy may be the one a turn published, while the upstream runs another)
        digests[name] = "" if name in digests else r.digest
    slot.digests = (listing, digests)
    return digests


def _credential_map(creds: CredentialSet) -> dict[str, SecretStr]:
    """Every secret of a credential set under a distinct key (what the kernel scrubs errors of)."""
    out = dict(creds.values)
    for i, value in enumerate(creds.bare):
        out[f"#bare{i}"] = value
    if creds.auth is not None:  # the tokens held now (the forwarder scrubs the live ones)
        for i, token in enumerate(creds.auth.secrets()):
            out[f"#token{i}"] = SecretStr(token)
    return out


def _key(config: UpstreamConfig, creds: CredentialSet) -> tuple[str, str, str]:
    """The pool (and definitions) key: never shared by credentials that differ."""
    return (config.id, creds.identity, creds.fingerprint)

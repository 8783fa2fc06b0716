"""Seeded, engine-neutral workloads for the peer benchmark (issue 14).

A workload is a set of abstract rules (``Rule``) plus a list of requests
(``Request``). Every engine adapter in ``benchmarks/engines/`` translates the
same abstract rules into its own native policy (SharedOS ``.sos``, Cedar,
Casbin model + policy, Rego) and the same requests into its own request shape,
so the engines are compared on one decision problem.

Two workloads:

``acl``
    A path ACL: owner homes (``/home/{context.principal}/**``), a forbid unless
    the caller is an admin (``/private/**``), and per project five rules over
    many prefixes: role-gated read and write permits, a forbid on releases
    unless the caller holds the release role (it overrides the write permit),
    a tenant-gated single-segment permit (``shared/*``) and a suffix glob
    (``docs/*.md``). Default deny.

``interp``
    ``{context.principal}`` interpolation (also after a ``*`` segment) and
    conditions over the call's arguments: ``args.mode in [...]``,
    ``args.mode == ...``, a forbid *unless* an argument has a value, and — when
    the SharedOS language on this branch has ordering operators — a size
    bound ``args.size <= N`` (see ``ordering_supported``: the second workload
    switches it on by itself when ``compile_source`` accepts ``<=``).

Requests are balanced: exactly half are allowed, half denied (labelled by the
reference engine, then checked against every engine), and a large share of the
denies are *near misses*: ``/projects/p1`` vs ``/projects/p10``, ``/home/user1``
vs ``/home/user12``, a second segment under ``shared/*``, ``a.mdx`` under
``*.md``, ``/privateer`` next to ``/private``, the right path with the wrong
role, tenant, mode or size.

**Every request path is canonical** (absolute, no ``.``/``..``/empty segment,
no trailing ``/``). That is deliberate: raw-string prefix engines (Cedar
``like``, Rego ``startswith``/``glob.match``, Casbin ``globMatch``) disagree
with SharedOS on non-canonical paths such as ``/public/../private/a`` — they
match the raw string, SharedOS canonicalises first and matches
``/private/a`` — and SharedOS is the one that is right. A benchmark of
decision procedures must not count a canonicaliser's absence as a
disagreement, so the workload gives every engine paths on which canonical and
raw matching coincide.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# ---------------------------------------------------------------- the model
# Pattern segments (a pattern is a tuple of them, matched segment by segment):
#   ("lit", "projects")      exactly that segment
#   ("star",)                exactly one segment
#   ("glob", "pre", "suf")   one segment that starts with pre and ends with suf
#   ("principal",)           exactly the segment context.principal
#   ("dstar",)               any number of segments, zero included (last only)
Seg = tuple[str, ...]

# Conditions (a tiny closed AST every adapter translates):
#   ("role", r)              r in context.roles
#   ("tenant", t)            context.tenant == t
#   ("arg_eq", name, v)      args.name == v            (v a string)
#   ("arg_in", name, vs)     args.name in [vs...]      (strings)
#   ("arg_le", name, n)      args.name <= n            (integers; ordering)
#   ("arg_gt", name, n)      args.name > n             (integers; ordering)
#   ("and", c1, c2)
Cond = tuple[Any, ...]


@dataclass(frozen=True)
class Rule:
    """One permit or forbid: actions x pattern, optionally ``when``/``unless`` a condition."""

    rule_id: str
    effect: str  # "permit" | "forbid"
    actions: tuple[str, ...]  # explicit actions, also when written as "*"
    star: bool  # written as "*" (every action of the namespace)
    pattern: tuple[Seg, ...]
    cond: Cond | None = None
    unless: bool = False  # the condition is an `unless` (the rule applies when it is false)


@dataclass(frozen=True)
class Request:
    """One call: tool, arguments, context, and what shape produced it (for diagnostics)."""

    tool: str
    args: dict[str, Any]
    context: dict[str, Any]
    context_key: str
    shape: str
    near_miss: bool = False


@dataclass
class Workload:
    """Rules and requests of one benchmark run, engine-neutral."""

    name: str
    namespace: str
    tools: dict[str, str]  # tool -> action
    actions: tuple[str, ...]
    arg_names: tuple[str, ...]  # every request carries exactly these arguments
    rules: list[Rule]
    requests: list[Request] = field(default_factory=list)
    seed: int = 0
    features: dict[str, bool] = field(default_factory=dict)

    @property
    def n_rules(self) -> int:
        """Number of permit/forbid rules."""
        return len(self.rules)

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (what the JSON report records about the workload)."""
        allowed = sum(1 for r in self.requests if r.shape.startswith("allow"))
        return {
            "name": self.name,
            "rules": self.n_rules,
            "requests": len(self.requests),
            "labelled_allow": allowed,
            "near_misses": sum(1 for r in self.requests if r.near_miss),
            "seed": self.seed,
            "features": dict(self.features),
            "paths": "canonical",
        }


def pattern_text(pattern: Sequence[Seg]) -> str:
    """The SharedOS glob spelling of a pattern (``/projects/p1/**``)."""
    out = []
    for seg in pattern:
        kind = seg[0]
        if kind == "lit":
            out.append(seg[1])
        elif kind == "star":
            out.append("*")
        elif kind == "glob":
            out.append(f"{seg[1]}*{seg[2]}")
        elif kind == "principal":
            out.append("{context.principal}")
        elif kind == "dstar":
            out.append("**")
        else:  # pragma: no cover - the generators only build the kinds above
            raise ValueError(f"unknown segment {seg!r}")
    return "/" + "/".join(out)


def parse_pattern(text: str) -> tuple[Seg, ...]:
    """Inverse of ``pattern_text`` for the forms the generators use."""
    segs: list[Seg] = []
    for part in text.strip("/").split("/"):
        if part == "**":
            segs.append(("dstar",))
        elif part == "*":
            segs.append(("star",))
        elif part == "{context.principal}":
            segs.append(("principal",))
        elif "*" in part:
            pre, suf = part.split("*", 1)
            segs.append(("glob", pre, suf))
        else:
            segs.append(("lit", part))
    return tuple(segs)


# ------------------------------------------------------------- ordering hook


def ordering_supported() -> bool:
    """Does this branch's SharedOS language accept ``<=`` / ``>`` over arguments?

    The ``interp`` workload adds size bounds only when it does (the policy
    helper is adding ``< <= > >=``); on a branch without them the workload
    still runs, with the bound left out, and the report says so.
    """
    try:
        from sharedos.policy import PolicyError, compile_source
    except ImportError:  # pragma: no cover - sharedos is a dependency
        return False
    probe = (
        "namespace probe\n"
        "requirement probe.w { action w; resource path(args.path) }\n"
        'permit w on "/p/**" when args.size <= 10 and args.size > 1\n'
    )
    try:
        policy = compile_source(probe, "probe.sos")
    except PolicyError:
        return False
    except Exception:  # an unexpected failure is "not supported", never a crash here
        return False
    # Accepting the text is not enough: it must also decide like an ordering.
    ok = policy.decide("probe.w", {"path": "/p/a", "size": 5}, {}).allowed
    too_big = policy.decide("probe.w", {"path": "/p/a", "size": 11}, {}).allowed
    return bool(ok and not too_big)


# ------------------------------------------------------------------- users


def _cache_key(ctx: dict[str, Any]) -> str:
    # Same shape as AccessContext.cache_key (the kernel's per-context key).
    import json

    return json.dumps(
        [ctx["principal"], ctx["tenant"], sorted(ctx["roles"]), ctx["attributes"]],
        sort_keys=True,
        separators=(",", ":"),
    )


def _context(principal: str, tenant: str, roles: Iterable[str]) -> dict[str, Any]:
    return {
        "principal": principal,
        "tenant": tenant,
        "roles": sorted(set(roles)),
        "attributes": {},
        "turn_id": "bench-turn",
    }


# --------------------------------------------------------------- workload 1

ACL_ACTIONS = ("read", "write", "list", "delete")
ACL_TOOLS = {f"files.{a}": a for a in ACL_ACTIONS}
N_TENANTS = 7


def acl_rules(n_rules: int) -> tuple[list[Rule], int]:
    """Exactly ``n_rules`` rules of the ``acl`` workload and the number of projects they cover."""
    if n_rules < 3:
        raise ValueError("the acl workload needs at least 3 rules")
    P = parse_pattern
    rules = [
        Rule("home-owner", "permit", ACL_ACTIONS, True, P("/home/{context.principal}/**")),
        Rule(
            "private-auditors",
            "permit",
            ("read", "list"),
            False,
            P("/private/**"),
            ("role", "auditor"),
        ),
        Rule(
            "private-admins-only",
            "forbid",
            ACL_ACTIONS,
            True,
            P("/private/**"),
            ("role", "admin"),
            unless=True,
        ),
    ]
    p = 0
    while len(rules) < n_rules:
        pr = f"p{p}"
        block = [
            Rule(
                f"{pr}-read",
                "permit",
                ("read", "list"),
                False,
                P(f"/projects/{pr}/**"),
                ("role", f"{pr}-reader"),
            ),
            Rule(
                f"{pr}-write",
                "permit",
                ("write", "delete"),
                False,
                P(f"/projects/{pr}/**"),
                ("role", f"{pr}-dev"),
            ),
            Rule(
                f"{pr}-releases",
                "forbid",
                ("write", "delete"),
                False,
                P(f"/projects/{pr}/releases/**"),
                ("role", f"{pr}-release"),
                unless=True,
            ),
            Rule(
                f"{pr}-shared",
                "permit",
                ACL_ACTIONS,
                True,
                P(f"/projects/{pr}/shared/*"),
                ("tenant", f"t{p % N_TENANTS}"),
            ),
            Rule(f"{pr}-docs", "permit", ("read",), False, P(f"/projects/{pr}/docs/*.md")),
        ]
        rules.extend(block[: n_rules - len(rules)])
        p += 1
    return rules, p


def _acl_users(rng: random.Random, n_projects: int, n_users: int) -> list[dict[str, Any]]:
    users = []
    for u in range(n_users):
        roles: set[str] = set()
        for _ in range(rng.randrange(1, 4)):
            roles.add(f"p{rng.randrange(n_projects)}-reader")
        for _ in range(rng.randrange(0, 3)):
            roles.add(f"p{rng.randrange(n_projects)}-dev")
        if rng.random() < 0.3:
            roles.add(f"p{rng.randrange(n_projects)}-release")
        if u % 10 == 0:
            roles.add("admin")
        if u % 4 == 0:
            roles.add("auditor")
        users.append(_context(f"user{u}", f"t{u % N_TENANTS}", roles))
    return users


def _projects_of(ctx: dict[str, Any], suffix: str) -> list[int]:
    out = []
    for role in ctx["roles"]:
        if role.startswith("p") and role.endswith(suffix):
            out.append(int(role[1 : -len(suffix)]))
    return sorted(out)


def acl_candidates(
    rng: random.Random, n_projects: int, users: list[dict[str, Any]]
) -> Iterable[tuple[str, str, dict[str, Any], str, bool]]:
    """Endless (tool action, path, context, shape, near_miss) candidates of the acl workload."""
    names = [u["principal"] for u in users]
    while True:
        ctx = rng.choice(users)
        me = ctx["principal"]
        reads = _projects_of(ctx, "-reader") or [0]
        devs = _projects_of(ctx, "-dev") or [0]
        act = rng.choice(ACL_ACTIONS)
        f = rng.randrange(1000)
        shape = rng.randrange(16)
        if shape == 0:
            yield act, f"/home/{me}/notes/n{f}.md", ctx, "home-own", False
        elif shape == 1:
            yield act, f"/home/{me}", ctx, "home-own-root", False
        elif shape == 2:
            other = rng.choice(names)
            near = other != me and other.startswith(me)
            yield act, f"/home/{other}/n{f}.md", ctx, "home-other", near
        elif shape == 3:
            # /home/user1 vs /home/user12: a raw-prefix matcher would allow this
            yield act, f"/home/{me}{rng.randrange(10)}/n{f}.md", ctx, "home-prefix-miss", True
        elif shape == 4:
            p = rng.choice(reads)
            yield (
                rng.choice(("read", "list")),
                f"/projects/p{p}/src/m{f}.py",
                ctx,
                "read-own",
                False,
            )
        elif shape == 5:
            p = rng.choice(reads)
            # p1 vs p10: the near miss of a raw string prefix
            q = int(f"{p}{rng.randrange(10)}")
            yield "read", f"/projects/p{q}/src/m{f}.py", ctx, "read-prefix-miss", True
        elif shape == 6:
            p = rng.choice(devs)
            yield (
                rng.choice(("write", "delete")),
                f"/projects/p{p}/src/m{f}.py",
                ctx,
                "dev-write",
                False,
            )
        elif shape == 7:
            p = rng.choice(devs)
            yield "write", f"/projects/p{p}/releases/v{f % 9}/app.tar", ctx, "release-write", True
        elif shape == 8:
            p = rng.randrange(n_projects)
            yield act, f"/projects/p{p}/shared/x{f}", ctx, "shared-one", False
        elif shape == 9:
            p = rng.randrange(n_projects)
            yield act, f"/projects/p{p}/shared/x{f}/deeper", ctx, "shared-deep-miss", True
        elif shape == 10:
            p = rng.randrange(n_projects)
            yield "read", f"/projects/p{p}/docs/guide{f}.md", ctx, "docs-md", False
        elif shape == 11:
            p = rng.randrange(n_projects)
            bad = rng.choice((f"guide{f}.mdx", f"guide{f}.md.txt", f"sub/guide{f}.md"))
            yield "read", f"/projects/p{p}/docs/{bad}", ctx, "docs-glob-miss", True
        elif shape == 12:
            yield rng.choice(("read", "list")), f"/private/r{f}.csv", ctx, "private", False
        elif shape == 13:
            yield "read", f"/privateer/r{f}.csv", ctx, "private-prefix-miss", True
        elif shape == 14:
            p = rng.randrange(n_projects)
            yield "write", f"/projects/p{p}/src/m{f}.py", ctx, "write-no-role", True
        else:
            yield act, f"/projects/p{n_projects + 1 + f % 5}/a{f}", ctx, "unknown-project", True


# --------------------------------------------------------------- workload 2

INTERP_ACTIONS = ("read", "write", "delete")
INTERP_TOOLS = {f"docs.{a}": a for a in INTERP_ACTIONS}
MODES = ("create", "append", "overwrite")


def interp_rules(n_rules: int, ordering: bool) -> tuple[list[Rule], int]:
    """Exactly ``n_rules`` rules of the ``interp`` workload and the number of teams."""
    if n_rules < 3:
        raise ValueError("the interp workload needs at least 3 rules")
    P = parse_pattern
    rules = [
        Rule("user-own", "permit", ("read", "write"), False, P("/users/{context.principal}/**")),
        Rule(
            "quarantine",
            "forbid",
            INTERP_ACTIONS,
            True,
            P("/teams/*/{context.principal}/quarantine/**"),
        ),
    ]
    if ordering:
        rules.append(
            Rule(
                "size-cap",
                "forbid",
                ("write",),
                False,
                P("/teams/**"),
                ("arg_gt", "size", 10_000_000),
            )
        )
    else:
        rules.append(
            Rule(
                "no-overwrite-team-roots",
                "forbid",
                ("write",),
                False,
                P("/teams/*"),
                ("arg_eq", "mode", "overwrite"),
            )
        )
    k = 0
    while len(rules) < n_rules:
        t = f"team{k}"
        member = ("role", t)
        write_cond: Cond = ("and", member, ("arg_in", "mode", ("create", "append")))
        shared_cond: Cond = ("and", ("role", f"{t}-editor"), ("arg_eq", "mode", "append"))
        if ordering:
            write_cond = ("and", write_cond, ("arg_le", "size", 1_000_000 + 1000 * (k % 50)))
            shared_cond = ("and", shared_cond, ("arg_le", "size", 65_536))
        block = [
            Rule(
                f"{t}-own-read",
                "permit",
                ("read",),
                False,
                P(f"/teams/{t}/{{context.principal}}/**"),
                member,
            ),
            Rule(
                f"{t}-own-write",
                "permit",
                ("write",),
                False,
                P(f"/teams/{t}/{{context.principal}}/**"),
                write_cond,
            ),
            Rule(
                f"{t}-shared-read", "permit", ("read",), False, P(f"/teams/{t}/shared/**"), member
            ),
            Rule(
                f"{t}-shared-write",
                "permit",
                ("write",),
                False,
                P(f"/teams/{t}/shared/**"),
                shared_cond,
            ),
            Rule(
                f"{t}-keep",
                "forbid",
                ("write", "delete"),
                False,
                P(f"/teams/{t}/{{context.principal}}/keep/**"),
                ("arg_eq", "mode", "append"),
                unless=True,
            ),
            Rule(
                f"{t}-own-delete",
                "permit",
                ("delete",),
                False,
                P(f"/teams/{t}/{{context.principal}}/**"),
                member,
            ),
        ]
        rules.extend(block[: n_rules - len(rules)])
        k += 1
    return rules, k


def _interp_users(rng: random.Random, n_teams: int, n_users: int) -> list[dict[str, Any]]:
    users = []
    for u in range(n_users):
        roles: set[str] = set()
        for _ in range(rng.randrange(1, 4)):
            t = rng.randrange(n_teams)
            roles.add(f"team{t}")
            if rng.random() < 0.4:
                roles.add(f"team{t}-editor")
        users.append(_context(f"user{u}", "default", roles))
    return users


def _teams_of(ctx: dict[str, Any]) -> list[int]:
    return sorted(int(r[4:]) for r in ctx["roles"] if r.startswith("team") and r[4:].isdigit())


def interp_candidates(
    rng: random.Random, n_teams: int, users: list[dict[str, Any]], ordering: bool
) -> Iterable[tuple[str, str, dict[str, Any], str, bool, dict[str, Any]]]:
    """Endless (action, path, context, shape, near_miss, extra args) candidates of ``interp``."""
    names = [u["principal"] for u in users]
    while True:
        ctx = rng.choice(users)
        me = ctx["principal"]
        teams = _teams_of(ctx) or [0]
        t = rng.choice(teams)
        f = rng.randrange(1000)
        mode = rng.choice(MODES)
        size = rng.choice((100, 4096, 65_536, 65_537, 1_000_000, 1_000_001, 2_000_000, 20_000_000))
        extra = {"mode": mode, "size": size}
        shape = rng.randrange(12)
        if shape == 0:
            yield (
                rng.choice(("read", "write")),
                f"/users/{me}/d{f}.txt",
                ctx,
                "user-own",
                False,
                extra,
            )
        elif shape == 1:
            other = rng.choice(names)
            yield "read", f"/users/{other}/d{f}.txt", ctx, "user-other", other != me, extra
        elif shape == 2:
            yield "read", f"/teams/team{t}/{me}/d{f}.txt", ctx, "team-own-read", False, extra
        elif shape == 3:
            yield (
                "write",
                f"/teams/team{t}/{me}/d{f}.txt",
                ctx,
                "team-own-write",
                mode == "overwrite",
                extra,
            )
        elif shape == 4:
            other = rng.choice(names)
            yield (
                "write",
                f"/teams/team{t}/{other}/d{f}.txt",
                ctx,
                "team-other-write",
                other != me,
                extra,
            )
        elif shape == 5:
            yield (
                "write",
                f"/teams/team{t}/{me}{rng.randrange(10)}/d{f}.txt",
                ctx,
                "team-prefix-miss",
                True,
                extra,
            )
        elif shape == 6:
            yield (
                rng.choice(("read", "write")),
                f"/teams/team{t}/shared/s{f}.md",
                ctx,
                "team-shared",
                False,
                extra,
            )
        elif shape == 7:
            act = rng.choice(("write", "delete"))
            yield (
                act,
                f"/teams/team{t}/{me}/keep/k{f}.txt",
                ctx,
                "team-keep",
                mode != "append",
                extra,
            )
        elif shape == 8:
            yield (
                rng.choice(INTERP_ACTIONS),
                f"/teams/team{t}/{me}/quarantine/q{f}",
                ctx,
                "quarantine",
                True,
                extra,
            )
        elif shape == 9:
            yield "delete", f"/teams/team{t}/{me}/d{f}.txt", ctx, "team-own-delete", False, extra
        elif shape == 10:
            nt = rng.randrange(n_teams)
            yield "read", f"/teams/team{nt}/{me}/d{f}.txt", ctx, "team-not-member", True, extra
        else:
            yield "write", f"/teams/team{t}", ctx, "team-root-write", True, extra


# ---------------------------------------------------------------- balancing


def _balanced(
    candidates: Iterable[tuple[str, dict[str, Any], dict[str, Any], str, bool]],
    n: int,
    label: Callable[[str, dict[str, Any], dict[str, Any]], bool],
    rng: random.Random,
) -> list[Request]:
    want_allow = n // 2
    want_deny = n - want_allow
    allows: list[Request] = []
    denies: list[Request] = []
    seen: set[tuple[str, str, str]] = set()
    tries = 0
    for tool, args, ctx, shape, near in candidates:
        tries += 1
        if tries > 200 * n + 10_000:
            raise RuntimeError(
                f"could not balance the workload: {len(allows)} allows, {len(denies)} denies"
            )
        key = (tool, repr(sorted(args.items())), ctx["principal"])
        if key in seen:
            continue
        seen.add(key)
        allowed = label(tool, args, ctx)
        req = Request(
            tool,
            args,
            ctx,
            _cache_key(ctx),
            ("allow:" if allowed else "deny:") + shape,
            near and not allowed,
        )
        if allowed and len(allows) < want_allow:
            allows.append(req)
        elif not allowed and len(denies) < want_deny:
            denies.append(req)
        if len(allows) == want_allow and len(denies) == want_deny:
            break
    out = allows + denies
    rng.shuffle(out)
    return out


def build(name: str, n_rules: int, n_requests: int, seed: int = 14) -> Workload:
    """The workload ``name`` (``acl``, ``interp`` or ``random``) with ``n_rules`` rules and
    balanced requests.

    Deterministic for a given (name, n_rules, n_requests, seed) and SharedOS
    branch (the ``interp`` size bounds depend on ``ordering_supported()``);
    ``random`` (``workload_random``) is a different policy for every seed.
    """
    if name == "random":
        from benchmarks.workload_random import build_random

        return build_random(n_rules, n_requests, seed)  # type: ignore[return-value]
    # Imported here: the reference is the labeller, and it imports this module.
    from benchmarks.engines.reference import ReferenceEngine

    rng = random.Random(f"{name}:{n_rules}:{n_requests}:{seed}")
    if name == "acl":
        rules, n_projects = acl_rules(n_rules)
        wl = Workload(name, "files", dict(ACL_TOOLS), ACL_ACTIONS, ("path",), rules, seed=seed)
        users = _acl_users(rng, n_projects, 120)

        def cands() -> Iterable[tuple[str, dict[str, Any], dict[str, Any], str, bool]]:
            for act, path, ctx, shape, near in acl_candidates(rng, n_projects, users):
                yield f"files.{act}", {"path": path}, ctx, shape, near

    elif name == "interp":
        ordering = ordering_supported()
        rules, n_teams = interp_rules(n_rules, ordering)
        wl = Workload(
            name,
            "docs",
            dict(INTERP_TOOLS),
            INTERP_ACTIONS,
            ("path", "mode", "size"),
            rules,
            seed=seed,
            features={"ordering": ordering},
        )
        users = _interp_users(rng, n_teams, 120)

        def cands() -> Iterable[tuple[str, dict[str, Any], dict[str, Any], str, bool]]:
            for act, path, ctx, shape, near, extra in interp_candidates(
                rng, n_teams, users, ordering
            ):
                yield f"docs.{act}", {"path": path, **extra}, ctx, shape, near

    else:
        raise ValueError(f"unknown workload {name!r} (acl, interp, random)")
    ref = ReferenceEngine.from_workload(wl)
    wl.requests = _balanced(cands(), n_requests, ref.decide, rng)
    return wl


WORKLOADS = ("acl", "interp", "random")

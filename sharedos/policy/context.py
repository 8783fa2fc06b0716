"""The ``context`` object a policy reads, and the defaults a hand-written one gets.

The kernel always hands a policy a complete context
(``AccessContext.policy_input``: principal, tenant, roles, attributes,
turn_id). A context written by hand — in a ``test`` block, for
``sharedos-policy explain`` or ``eval`` — gets the same defaults for the keys
it leaves out, so that it decides exactly as the kernel would decide for the
same person: ``roles`` absent means no roles, not an error. ``now`` (the
time of the call, ``sharedos.policy.clock``) may be written as an ISO-8601
time and is expanded here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Defaults of ``AccessContext`` for the keys a policy may read (turn_id excepted:
#: a hand-written context has no turn, and a policy reading it sees it undefined).
CONTEXT_DEFAULTS: Mapping[str, Any] = {"tenant": "default", "roles": (), "attributes": {}}


def complete_context(
    context: Mapping[str, Any], *, clock_zone: str | None = None
) -> dict[str, Any]:
    """``context`` with ``CONTEXT_DEFAULTS`` filled in for the keys it lacks (a new dict).

    A ``now`` written as an ISO-8601 time or a timestamp is expanded to the
    object the host gives (``clock.expand``; raise ``clock.ClockError`` when it
    cannot be read). With ``clock_zone``, a context without ``now`` gets this
    moment in that zone, as the kernel gives it; without, it has no ``now``
    (a ``test`` never reads the machine's clock).
    """
    completed = dict(context)
    now = completed.get("now")
    if now is not None and not isinstance(now, Mapping):
        from sharedos.policy.clock import expand

        completed["now"] = expand(now)
    elif now is None and "now" not in completed and clock_zone is not None:
        from sharedos.policy.clock import current

        completed["now"] = current(clock_zone)
    for key, value in CONTEXT_DEFAULTS.items():
        if key not in completed:
            # fresh containers: a caller mutating its context must not change the defaults
            if isinstance(value, tuple):
                completed[key] = list(value)
            elif isinstance(value, Mapping):
                completed[key] = dict(value)
            else:
                completed[key] = value
    return completed

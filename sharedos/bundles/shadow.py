"""The shadow policy: a candidate the host decides every call with too, and never enforces.

``[policy] shadow = "PATH or bundle"`` in the host file names it:

* a ``.sos`` file, or a directory of them (no ``bundle.json`` in it): compiled
  from source, as ``sharedos-policy check`` compiles it;
* a bundle: a compiled bundle file, a directory holding ``bundle.json``, or an
  ``http(s)`` URL, fetched once and verified with the policy package's own
  checks (``BundleVerifier``), with the host's ``[policy] keys`` when there
  are any: then only a bundle one of them signed is used.

``load_shadow`` never raises: a candidate that cannot be read, does not
compile, or fails verification gives a ``ShadowLoad`` with no policy and the
reason, the host says so once and runs exactly as without a shadow
(enforcement never depends on the candidate).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sharedos.bundles.source import is_url, shown_location

__all__ = ["ShadowLoad", "ShadowPolicy", "load_shadow"]


@dataclass(frozen=True)
class ShadowPolicy:
    """A loaded shadow policy: the compiled candidate and what it is."""

    policy: Any  # sharedos.policy.PolicySet
    bundle_hash: str
    origin: str
    #: the bundle's revision (sources: None)
    revision: str | None = None
    signed_by: str | None = None

    def describe(self) -> str:
        """One line: what the candidate is and where it came from."""
        if self.revision is None:
            return f"sources {self.origin} (bundle hash {self.bundle_hash[:16]}…)"
        signer = f", signed by key {self.signed_by[:16]}…" if self.signed_by else ", unsigned"
        return (
            f"bundle {self.origin} (revision {self.revision}, bundle hash "
            f"{self.bundle_hash[:16]}…{signer})"
        )


@dataclass(frozen=True)
class ShadowLoad:
    """What loading the shadow policy gave: the policy, or why there is none."""

    shadow: ShadowPolicy | None
    problem: str | None = None

    def line(self) -> str:
        """What the host says about its shadow policy (one line)."""
        if self.shadow is not None:
            return f"shadow policy: {self.shadow.describe()}: every call is also decided by it"
        return (
            f"shadow policy not loaded: {self.problem}; enforcement is unchanged and no "
            "shadow decision is recorded"
        )


def load_shadow(
    location: str, keys: Sequence[str | Path] = (), hidden: Iterable[str] = ()
) -> ShadowLoad:
    """Load the candidate at ``location`` (a path, already resolved, or a URL); ``keys``:
    the public keys (PEM files) a bundle must be signed by, when any; ``hidden``: what the
    URL's messages and records mask (``HostConfig.bundle_hidden``). Never raises."""
    hidden = tuple(hidden)
    try:
        return ShadowLoad(_load(location, keys, hidden))
    except Exception as exc:  # a shadow never stops the host: say why, and run without it
        lines = (str(exc).strip() or type(exc).__name__).splitlines()
        more = f" (and {len(lines) - 1} more lines)" if len(lines) > 1 else ""
        return ShadowLoad(None, f"{shown_location(location, hidden)}: {lines[0]}{more}")


def _load(location: str, keys: Sequence[str | Path], hidden: Sequence[str]) -> ShadowPolicy:
    from sharedos.bundles.source import BUNDLE_NAME, open_source

    path = Path(location)
    if not is_url(location):
        if not path.exists():
            raise FileNotFoundError("no such file or directory")
        sources = path.suffix == ".sos" if path.is_file() else not (path / BUNDLE_NAME).exists()
        if sources:
            from sharedos.policy import compile_paths

            policy = compile_paths([path])
            return ShadowPolicy(policy, str(policy.bundle_hash), location)
    from sharedos.bundles.source import NotModified
    from sharedos.bundles.verify import BundleVerifier

    verifier = BundleVerifier(keys)
    fetched = open_source(location, hidden).fetch(None)
    if isinstance(fetched, NotModified):  # cannot happen without a tag; fail closed anyway
        raise ValueError("the source answered 'not modified' to a first fetch")
    loaded = verifier.verify(fetched)
    return ShadowPolicy(
        loaded.policy,
        loaded.bundle_hash,
        shown_location(location, hidden),
        loaded.revision,
        loaded.signed_by,
    )

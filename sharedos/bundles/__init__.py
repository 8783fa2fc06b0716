"""Policy bundles distributed to a fleet: fetched from a source, verified, then used for new turns.

``BundleManager`` polls a ``DirectorySource`` or an ``HttpSource`` (ETag /
If-None-Match), verifies what it gets (``BundleVerifier``: the policy
package's own checks — content hash, and an Ed25519 signature by a
configured key when there are keys) and only then makes it
``current()``. A turn takes ``current()`` once, when it opens, so a new
bundle applies to turns opened after it loaded and never to one already
open; a bundle that fails verification is refused and the last good one
stays in force, with one line saying so.
"""

from sharedos.bundles.manager import BundleManager, PollResult
from sharedos.bundles.source import DirectorySource, Fetched, HttpSource, NotModified, open_source
from sharedos.bundles.verify import BundledPolicy, BundleRejected, BundleVerifier, LoadedBundle

__all__ = [
    "BundleManager",
    "BundleRejected",
    "BundleVerifier",
    "BundledPolicy",
    "DirectorySource",
    "Fetched",
    "HttpSource",
    "LoadedBundle",
    "NotModified",
    "PollResult",
    "open_source",
]

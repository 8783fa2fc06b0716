"""``sharedos bridge``: mounted from ``sharedos.bridge.command`` (the bridge owns its entry point)."""

from sharedos.bridge.command import bridge
from sharedos.cli._help import with_short_help

__all__ = ["bridge"]

with_short_help(bridge)

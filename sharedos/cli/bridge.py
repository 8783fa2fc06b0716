"""``sharedos bridge``: mounted from ``sharedos.bridge.command`` (the bridge owns its entry point)."""

from sharedos.bridge.command import bridge

__all__ = ["bridge"]

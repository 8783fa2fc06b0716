"""``python -m sharedos.bridge --stdio --turn FILE`` (same as ``sharedos bridge``)."""

from sharedos.bridge.command import bridge

if __name__ == "__main__":
    bridge()

"""``python -m sharedos.bridge --stdio --turn FILE`` (same as ``sharedos bridge``)."""

from sharedos.cli.bridge import bridge

if __name__ == "__main__":
    bridge()

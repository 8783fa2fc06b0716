"""The kernel: trusted context, calls, decisions and the RuntimeHost that re-authorizes every call."""

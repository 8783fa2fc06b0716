"""SharedOS: canonical tool catalogue and authorization broker for agent harnesses."""

__version__ = "0.1.0"

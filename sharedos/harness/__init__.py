"""Harnesses: one adapter per CLI, the MCP harness runtime, the scripted model endpoint,
host configuration and host-secret scrubbing.

``sharedos.harness.adapters`` holds one ``HarnessAdapter`` module per CLI (Claude
Code, Codex, Pi, pi-mcp-adapter, dsh) and the registry; ``sharedos.harness.shapes``
and ``sharedos.harness.driver`` are the scripted column's vendor wire shapes and
HarnessDriver. Nothing here imports ``sharedos.conformance`` (tests/test_layers.py).
Everything is imported lazily by its users: importing ``sharedos.harness`` costs nothing.
"""

"""Harnesses: the scripted model endpoint, host configuration and the MCP harness runtime.

``sharedos.harness.shapes`` and ``sharedos.harness.driver`` (the scripted column's
vendor wire shapes and HarnessDriver) live beside these modules. Everything here
is imported lazily by its users: importing ``sharedos.harness`` costs nothing.
"""

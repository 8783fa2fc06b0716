"""Conformance: the manifest of kernel rows, columns that exercise them, grading,
SystemIdentity, and reports (ADR 0014, "The MCP conformance column").

The package is imported lazily by the CLI; nothing here is needed on a
bridge's hot path.
"""

"""Conformance columns: ``scripted`` (vendor wire shapes), ``live`` and ``mcp``.

Each column is a module ``sharedos.conformance.columns.<kind>`` exposing
``async def run(options: ColumnOptions) -> list[ColumnRun]`` (see ``base.py``).
"""

"""Fences around vendor internals: one module per vendor, each with a version check."""

"""Command-line entry points (click)."""

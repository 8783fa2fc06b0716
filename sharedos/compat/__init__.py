"""Fenced vendor internals: one module per vendor, each for the exact version it was written for.

Everything SharedOS does with a dependency's *undocumented* state — private
attributes, subclassed internals, a class found by name — lives in
``sharedos.compat.<vendor>`` and nowhere else. Each module checks, when it is
imported, that the installed version is the one it was written and tested
for, and refuses to load on any other (``VendorVersionError``): a silent
change in someone else's private state must stop the bridge with one clear
line, not quietly turn a safeguard off. ``pyproject.toml`` pins those
dependencies exactly, so this only fires when an environment overrides the
pin; moving a pin means re-reading the module against the new release and
updating its ``WRITTEN_FOR``.
"""

from __future__ import annotations

from sharedos.errors import SharedOSError


class VendorVersionError(SharedOSError, ImportError):
    """The installed version of a dependency is not the one a compat module was written for."""


def require_version(distribution: str, written_for: str, module: str) -> str:
    """The installed version of ``distribution``; raises unless it is exactly ``written_for``."""
    # imported here: importlib.metadata costs a policy check a few ms it needs no part of
    # (sharedos.compat.lark reads lark's own __version__)
    from importlib import metadata

    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise VendorVersionError(
            f"{module} needs {distribution}=={written_for}; it is not installed"
        ) from None
    if installed != written_for:
        raise VendorVersionError(
            f"{module} reaches into private state of {distribution} {written_for}, "
            f"but {distribution} {installed} is installed; re-check {module} against "
            f"{installed} (and update WRITTEN_FOR and the pin in pyproject.toml)"
        )
    return installed

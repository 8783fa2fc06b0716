"""What a command does when its standard output refuses a write (a full disk, an I/O error).

``sharedos run > /dev/full`` ran its turn, then died on the answer with a
traceback and exit 1, which ``run`` documents as "nothing ran";
``sharedos-policy`` called the same failure a bug of its own. Both entry points
now say in one line that the output could not be written, and exit
``EXIT_OUTPUT``, whatever the command had done before.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import types

import click

__all__ = ["EXIT_OUTPUT", "give_up_on_stdout", "stdout_refused"]

#: the exit status of a command whose standard output could not be written
EXIT_OUTPUT = 6


def stdout_refused(exc: BaseException) -> bool:
    """True when ``exc`` is standard output refusing a write: an ``OSError`` raised where
    the innermost frame of its traceback was writing to ``sys.stdout`` (its text stream or
    its buffer), itself or through a writer that holds it (the CSV export's row writer,
    whose frame has only ``self``). Any other ``OSError`` (a file the command reads or
    writes) is not this one."""
    if not isinstance(exc, OSError) or isinstance(exc, BrokenPipeError):
        return False
    streams = [s for s in (sys.stdout, sys.__stdout__) if s is not None]
    streams += [b for b in (getattr(s, "buffer", None) for s in list(streams)) if b is not None]
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    values = list(tb.tb_frame.f_locals.values())
    # one level down: a writer wrapping the stream (``self.out``) writes to it too
    # (an instance's attributes only: a module's, ``sys`` imported in the frame, hold
    # ``stdout`` whatever the frame writes to)
    values += [
        v
        for value in list(values)
        if not isinstance(value, (type, types.ModuleType))
        for v in getattr(value, "__dict__", {}).values()
    ]
    return any(value is stream for value in values for stream in streams)


def give_up_on_stdout(exc: OSError) -> click.exceptions.Exit:
    """Say on stderr that the output could not be written, point descriptor 1 at
    ``/dev/null`` (so the interpreter's last flush does not fail, and print, again),
    and return the ``Exit`` to raise."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    click.echo(f"error: cannot write to standard output: {exc.strerror or exc}", err=True)
    return click.exceptions.Exit(EXIT_OUTPUT)

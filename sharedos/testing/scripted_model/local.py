"""Harness-local attempts: the model uses the CLI's OWN shell, file-read or file-write tool.

A conformance row (``local = {...}`` in the manifest) asks the harness to reach a
managed resource without the SharedOS catalogue: read a managed secret, write a
managed file, open a connection. A confined harness must fail; an unconfined one
shows what the strict claim would otherwise hide. The scripted model finds the
CLI's built-in tool of the right kind among the tools the request offered, by
name and by its argument schema, never from a table of expected calls. Measured
with the pinned CLIs (their model requests, docs/harnesses.md):

================  =======================  ========================  =============================
CLI               shell                    read                      write
================  =======================  ========================  =============================
Claude Code 2.1   ``Bash {command}``       ``Read {file_path}``      ``Write {file_path, content}``
Codex 0.171       ``exec_command {cmd}``   none: ``cat`` in exec     none: ``apply_patch`` in exec
Pi 1.6 (both)     ``bash {command}``       ``read {path}``           ``write {path, content}``
dsh 0.2.1-rc.2    ``bash {description,     ``read {file_path}``      ``write {file_path, content}``
                  command}``
================  =======================  ========================  =============================

Codex 0.171 offers no file tool to a model it has no metadata for; its
instructions tell the model to edit with ``apply_patch`` run through the shell
tool, which Codex intercepts and applies itself. A read falls back to the shell
(``cat``) wherever the CLI offers no read tool; a network attempt is always a
shell command (bash's ``/dev/tcp``), to the canary the column listens with.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The CLIs' built-in tools by kind, in order of preference (measured, see above).
SHELL_TOOLS = ("Bash", "exec_command", "bash", "shell", "local_shell")
READ_TOOLS = ("Read", "read", "read_file")
WRITE_TOOLS = ("Write", "write", "write_file")
#: Argument names a built-in tool may use for each of our fields (first present wins).
COMMAND_KEYS = ("command", "cmd")
PATH_KEYS = ("file_path", "path", "filePath")
CONTENT_KEYS = ("content", "contents", "text")
#: What the script writes into a required string argument it has no value for (dsh's
#: ``bash`` requires a ``description``).
FILLER = "SharedOS conformance probe"
#: What a network attempt writes to the canary.
CANARY_PAYLOAD = "sharedos-canary"


@dataclass(frozen=True)
class LocalCall:
    """One harness-local attempt, placeholders resolved (``kind``: shell, read, write, network)."""

    kind: str
    command: str | None = None
    path: str | None = None
    content: str | None = None
    #: network: the canary's port on 127.0.0.1
    port: int | None = None

    def shell_command(self, *, patch: bool = False) -> str:
        """The command a shell runs for this attempt (``patch``: write with Codex's apply_patch)."""
        if self.kind == "shell":
            return self.command or ""
        if self.kind == "network":
            inner = f"echo {CANARY_PAYLOAD} >/dev/tcp/127.0.0.1/{self.port}"
            return f"bash -c {shlex.quote(inner)} && echo connected"
        path = shlex.quote(self.path or "")
        if self.kind == "read":
            return f"cat -- {path}"
        content = self.content or ""
        if patch:
            added = "".join(f"+{line}\n" for line in content.splitlines())
            return (
                "apply_patch <<'SHAREDOS_PATCH'\n*** Begin Patch\n"
                f"*** Add File: {self.path}\n{added}*** End Patch\nSHAREDOS_PATCH"
            )
        return f"printf '%s' {shlex.quote(content)} > {path}"


@dataclass(frozen=True)
class LocalShape:
    """How one built-in tool takes a local attempt.

    ``via`` is the kind of built-in used (``shell``, ``read`` or ``write``: a read
    may go through the shell); ``keys`` maps our fields (``command``, ``path``,
    ``content``) to the tool's argument names; ``fill`` names required string
    arguments the script fills with ``FILLER``; ``patch`` writes through
    ``apply_patch`` run by the shell tool (Codex).
    """

    via: str
    keys: tuple[tuple[str, str], ...]
    fill: tuple[str, ...] = ()
    patch: bool = False


def _properties(schema: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    if not isinstance(schema, Mapping):
        return {}, []
    props = schema.get("properties")
    required = schema.get("required")
    return (
        dict(props) if isinstance(props, Mapping) else {},
        [r for r in required if isinstance(r, str)] if isinstance(required, list) else [],
    )


def _shape(
    names: tuple[str, ...], schemas: Mapping[str, Any], wanted: dict[str, tuple[str, ...]], via: str
) -> tuple[str, LocalShape] | None:
    """The first offered tool of ``names`` whose schema has an argument for every wanted field."""
    for name in names:
        if name not in schemas:
            continue
        props, required = _properties(schemas[name])
        keys: list[tuple[str, str]] = []
        for field_name, candidates in wanted.items():
            key = next((k for k in candidates if k in props), None)
            if key is None:
                break
            keys.append((field_name, key))
        else:
            used = {k for _, k in keys}
            fill = tuple(
                r
                for r in required
                if r not in used and (props.get(r) or {}).get("type") == "string"
            )
            return name, LocalShape(via=via, keys=tuple(keys), fill=fill)
    return None


def find_local_tool(call: LocalCall, schemas: Mapping[str, Any]) -> tuple[str, LocalShape] | None:
    """The CLI's built-in tool (name, shape) for ``call``, from the tools a request offered.

    ``schemas`` maps each plain function tool the request offered to its argument
    schema. ``None`` when the CLI offered nothing that can make the attempt.
    """
    shell = _shape(SHELL_TOOLS, schemas, {"command": COMMAND_KEYS}, "shell")
    if call.kind == "read":
        found = _shape(READ_TOOLS, schemas, {"path": PATH_KEYS}, "read")
        return found or shell
    if call.kind == "write":
        found = _shape(WRITE_TOOLS, schemas, {"path": PATH_KEYS, "content": CONTENT_KEYS}, "write")
        if found is not None:
            return found
        if shell is not None and shell[0] == "exec_command":
            # Codex: no write tool; its instructions say to run apply_patch in the shell
            name, shape = shell
            return name, LocalShape(shape.via, shape.keys, shape.fill, patch=True)
        return shell
    return shell


def local_arguments(call: LocalCall, shape: LocalShape) -> dict[str, Any]:
    """The arguments the built-in tool gets for ``call``."""
    keys = dict(shape.keys)
    args: dict[str, Any] = {k: FILLER for k in shape.fill}
    if shape.via == "shell":
        args[keys["command"]] = call.shell_command(patch=shape.patch)
    elif shape.via == "read":
        args[keys["path"]] = call.path
    else:
        args[keys["path"]] = call.path
        args[keys["content"]] = call.content
    return args

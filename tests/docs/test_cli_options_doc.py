"""Every ``sharedos`` command and every option of it is documented (README.md, docs/*.md).

``tests/policy/test_cli_docs.py`` holds ``sharedos-policy`` to docs/policy-language.md;
this holds the ``sharedos`` commands to the pages: an option a ``--help`` offers and no
page mentions (``sharedos upstream status --upstream``) is behaviour a reader of the
docs cannot know about.
"""

from __future__ import annotations

from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[2]
TEXT = "\n".join(
    p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted(REPO.glob("docs/*.md"))]
)


def _leaves(cmd: click.Command, path: tuple[str, ...]) -> list[tuple[str, click.Command]]:
    if not isinstance(cmd, click.Group):
        return [(" ".join(path), cmd)]
    ctx = click.Context(cmd, info_name=path[-1])
    out: list[tuple[str, click.Command]] = []
    for name in cmd.list_commands(ctx):
        sub = cmd.get_command(ctx, name)
        assert sub is not None
        out += _leaves(sub, (*path, name))
    return out


def test_every_sharedos_option_is_documented() -> None:
    from sharedos.cli.main import main

    missing = []
    for name, command in _leaves(main, ("sharedos",)):
        words = name.split()[1:]
        if f"sharedos {' '.join(words)}" not in TEXT and f"`{' '.join(words[-2:])}" not in TEXT:
            missing.append(name)
        for param in command.params:
            if isinstance(param, click.Option):
                names = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
                if not any(o in TEXT for o in names):
                    missing.append(f"{name} {'/'.join(names)}")
    assert not missing, f"not in README.md or docs/*.md: {missing}"

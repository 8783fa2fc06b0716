"""A brokered tool whose requirement reads a *nested* argument, ``path(args.opts.path)``.

docs/upstreams.md, step 4: "The forwarder replaces the path argument with the
canonical resource that was authorized", and the link check is made on that
canonical path. ``UpstreamBroker.resource_argument`` only recognises a
top-level ``path(args.X)``: for ``path(args.opts.path)`` the raw argument is
forwarded unchanged. The kernel resolves ``..`` lexically; the upstream's OS
resolves it *after* following a symbolic link, so ``public/sub/../salaries.csv``
(decided and link-checked as ``public/salaries.csv``, which does not exist)
opens ``private/salaries.csv`` when ``public/sub`` links into ``private/``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.adversarial.planted import plant
from tests.upstream.conftest import PY, brokered, stdio_upstream, text_of

pytestmark = pytest.mark.anyio

READER = Path(__file__).parents[1] / "data" / "upstream" / "reader_server.py"


def rules(public: Path, private: Path) -> str:
    return (
        "namespace rd\n"
        "requirement rd.read { action read; resource path(args.opts.path) }\n"
        f'permit read on "{public}/**"\n'
        f'forbid * on "{private}/**"\n'
        "toolpolicy run { mode open\n managed rd.* }\n"
    )


async def test_a_nested_path_argument_is_forwarded_as_decided(tmp_path: Path) -> None:
    secret = plant("salary")
    share = tmp_path / "share"
    public, private = share / "public", share / "private"
    (private / "inner").mkdir(parents=True)
    public.mkdir()
    (public / "readme.txt").write_text("public words\n", encoding="utf-8")
    (private / "salaries.csv").write_text(f"alice,{secret}\n", encoding="utf-8")
    # what bob (or anything writing the public share) planted: a link into private/
    os.symlink(private / "inner", public / "sub")
    toml = stdio_upstream(
        "rd", PY, ["-c", f"import runpy; runpy.run_path({str(READER)!r}, run_name='__main__')"]
    )
    async with (
        brokered(tmp_path, toml, rules(public, private)) as env,
        env.turn(env.context("bob"), run_policy="run") as t,
    ):
        ok = await t.call("rd.read", {"opts": {"path": str(public / "readme.txt")}})
        assert "public words" in text_of(ok)  # the tool works
        denied = await t.call("rd.read", {"opts": {"path": str(private / "salaries.csv")}})
        assert secret not in text_of(denied)  # and the forbid holds for the plain path
        # decided (and link-checked) as <public>/salaries.csv; opened as <private>/salaries.csv
        trick = await t.call("rd.read", {"opts": {"path": f"{public}/sub/../salaries.csv"}})
    assert secret not in text_of(trick), "a forbidden file was read through a nested path argument"

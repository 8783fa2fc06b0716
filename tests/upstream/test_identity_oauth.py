"""Each person's own identity at an OAuth upstream, with real parts on both sides.

Two real processes on 127.0.0.1 (``tests/data/upstream/oauth_servers.py``, both
built on the SDK's ``mcp.server.auth``): an authorization server (metadata,
dynamic registration, PKCE, refresh with rotation, revocation, introspection,
RFC 8693 token exchange) and an MCP server over streamable HTTP that accepts
only its bearer tokens and logs, for every call, the user the token belongs to:
what the upstream saw, from its side.

SharedOS signs principals in with the real ``sharedos upstream login`` command
(the test is the browser: it follows the printed address with an HTTP client,
consents as the principal, and the redirect lands on the command's loopback
listener), then runs turns through the real broker, kernel, bridge and SDK client.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest

from sharedos.catalog import ToolRegistry
from sharedos.evidence import SqliteEvidenceStore
from sharedos.harness.hostconfig import load_host_config
from sharedos.kernel import Kernel, RuntimeHost
from sharedos.policy import compile_source
from sharedos.upstream.broker import UpstreamBroker
from sharedos.upstream.tokenstore import TokenStore, TokenStoreError, generate_key, store_opener
from tests.adversarial.planted import SecretScan
from tests.mounts import MountFn, fill
from tests.upstream.conftest import (
    DATA,
    PY,
    Brokered,
    free_port,
    http_process,
    read_log,
    structured,
    text_of,
)

pytestmark = pytest.mark.anyio

SERVERS = DATA / "oauth_servers.py"
SHAREDOS = str(Path(PY).parent / "sharedos")
#: every token the authorization server issues starts with this (grep for it)
PREFIX = "PLANTEDTOK"
#: host-provided subject tokens the AS accepts for token exchange (subject -> user)
SUBJECT_TOKEN = "SUBJ-dave-4be1c9f07a2d"
SUBJECT_TOKEN_EVA = "SUBJ-eva-77c0d1e2f3a4"
#: a confidential client registered at the AS beforehand (oauth.client_id / client_secret)
CLIENT_ID, CLIENT_SECRET = "sharedos-exchanger", "exchanger-secret-5d1f0c2b"
#: a confidential client whose secret a test rotates at the AS
ROTATING_ID = "sharedos-rotating"

RULES = """
namespace docs
requirement docs.whoami { action read;  resource "doc:{args.path}" }
requirement docs.note   { action write; resource "doc:{args.path}" }
requirement docs.leak   { action read;  resource "doc:{args.path}" }
permit read, write on "doc:*"

toolpolicy run {
  mode strict
  managed docs.*
  harness_local "shell"
}
"""


@dataclass
class Servers:
    """The running authorization server and protected MCP server."""

    issuer: str
    url: str
    as_log: Path
    rs_log: Path

    def saw(self, user: str | None = None) -> list[dict[str, Any]]:
        """The MCP server's log of calls (of ``user``'s tokens)."""
        return [
            e
            for e in read_log(self.rs_log)
            if e["event"] == "call" and (user is None or e["subject"] == user)
        ]

    def issued(self, user: str) -> list[str]:
        """How each token the AS issued to ``user`` was obtained, in order."""
        return [
            e["via"] for e in read_log(self.as_log) if e["event"] == "issued" and e["user"] == user
        ]

    def admin(self, what: str, user: str, **params: str) -> None:
        """Expire or revoke ``user``'s tokens at the authorization server."""
        httpx2.post(f"{self.issuer}/admin/{what}", params={"user": user, **params}, trust_env=False)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    tmp = tmp_path_factory.mktemp("oauth")
    exchange = tmp / "subjects.json"
    exchange.write_text(
        json.dumps({SUBJECT_TOKEN: "dave", SUBJECT_TOKEN_EVA: "eva"}), encoding="utf-8"
    )
    as_port, rs_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    as_argv = [PY, str(SERVERS), "as", "--port", str(as_port), "--log", str(tmp / "as.log")]
    as_argv += ["--token-prefix", PREFIX, "--exchange", str(exchange)]
    as_argv += ["--client", f"{CLIENT_ID}={CLIENT_SECRET}"]
    as_argv += ["--client", f"{ROTATING_ID}=rotating-secret-one-4c9e1a"]
    rs_argv = [PY, str(SERVERS), "rs", "--port", str(rs_port), "--issuer", issuer]
    rs_argv += ["--log", str(tmp / "rs.log"), "--slow", "0.2"]
    with http_process(as_argv, as_port), http_process(rs_argv, rs_port):
        yield Servers(issuer, f"http://127.0.0.1:{rs_port}/mcp", tmp / "as.log", tmp / "rs.log")


def write_host(tmp: Path, servers: Servers, *, oauth_extra: str = "", extra: str = "") -> Path:
    """A host file with the OAuth upstream ``docs``, its token store and a key beside it."""
    key = tmp / "token.key"
    if not key.exists():
        key.write_text(generate_key() + "\n", encoding="utf-8")
        key.chmod(0o600)
    host = tmp / "host.toml"
    host.write_text(
        f"""[tokens]
path = "store"
key = {{ file = "token.key" }}

[upstream.docs]
url = "{servers.url}"
pinning = "off"
{extra}
[upstream.docs.oauth]
scopes = ["docs"]
{oauth_extra}
""",
        encoding="utf-8",
    )
    return host


@dataclass
class Login:
    """What ``sharedos upstream login`` did."""

    rc: int
    out: str
    err: str
    url: str


def login(host: Path, principal: str, *, deny: bool = False, stray: bool = False) -> Login:
    """Run ``sharedos upstream login docs --principal P`` and act as P's browser (``stray``:
    another local process hits the loopback callback first, with a state of its own)."""
    proc = subprocess.Popen(
        [
            *(SHAREDOS, "upstream", "login", "docs", "--host-config", str(host)),
            *("--principal", principal, "--no-browser", "--wait", "60"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    url, err = "", []
    for line in proc.stderr:
        err.append(line)
        found = re.search(r"(http://127\.0\.0\.1:\d+/authorize\S+)", line)
        if found:
            url = found.group(1)
            break
    if url:
        with httpx2.Client(trust_env=False, timeout=30) as browser:
            if stray:
                port = re.search(r"redirect_uri=http%3A%2F%2F127\.0\.0\.1%3A(\d+)", url)
                assert port is not None, url
                forged = f"http://127.0.0.1:{port.group(1)}/callback?code=forged&state=guess"
                assert browser.get(forged).status_code == 400
            page = browser.get(url, follow_redirects=True)  # the AS's sign-in page
            assert page.status_code == 200 and "/consent" in str(page.url), page.text
            consent = f"{page.url}&user={principal}" + ("&deny=1" if deny else "")
            back = browser.get(consent)
            assert back.status_code == 302  # to the command's loopback listener
            landed = browser.get(back.headers["location"])
            assert landed.status_code == 200
    out, rest = proc.communicate(timeout=60)
    return Login(proc.returncode, out, "".join(err) + rest, url)


@contextlib.asynccontextmanager
async def brokered_host(
    tmp: Path, host: Path, environ: dict[str, str] | None = None, rules: str = RULES
) -> AsyncIterator[Brokered]:
    """A real kernel and broker for ``host`` (its token store opened as ``sharedos run`` does)."""
    config = load_host_config(host)
    policy = compile_source(rules, "rules.sos")
    registry = ToolRegistry()
    store = SqliteEvidenceStore(tmp / "evidence.sqlite")
    runtime = RuntimeHost(Kernel(policy, registry), store)
    stderr = io.StringIO()
    env = environ or {}
    tokens = store_opener(config.tokens, env, config.base_dir)
    try:
        async with UpstreamBroker(
            config.upstream, environ=env, stderr=stderr, tokens=tokens
        ) as broker:
            broker.attach(registry, policy)
            yield Brokered(tmp, runtime, registry, policy, broker, store, stderr)
    finally:
        store.close()


def open_store(tmp: Path, key: str | None = None) -> TokenStore:
    """The test's token store with its key (or another one)."""
    from sharedos.upstream.tokenstore import decode_key

    text = key or (tmp / "token.key").read_text(encoding="utf-8")
    return TokenStore(tmp / "store", decode_key(text, "test"))


async def test_login_runs_pkce_and_the_upstream_serves_alice_as_alice(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    done = await anyio.to_thread.run_sync(lambda: login(host, "alice"))
    assert done.rc == 0, done.err
    assert "signed in: alice at upstream docs" in done.out and "refreshable" in done.out
    # the authorization request: PKCE S256 and the resource indicator of the MCP server
    assert "code_challenge_method=S256" in done.url and "code_challenge=" in done.url
    assert "resource=" + servers.url.replace(":", "%3A").replace("/", "%2F") in done.url
    assert servers.issued("alice")[-1] == "authorization_code"
    stored = list((tmp_path / "store" / "docs").iterdir())
    assert len(stored) == 1 and stored[0].stat().st_mode & 0o777 == 0o600
    assert PREFIX.encode() not in stored[0].read_bytes()  # encrypted at rest

    async with brokered_host(tmp_path, host) as b:
        ctx = b.context("alice")
        async with b.turn(ctx) as t:
            assert await t.names() == ["docs.leak", "docs.note", "docs.whoami"]
            got = await t.call("docs.whoami", {"path": "a"})
        assert got.is_error is False and structured(got)["subject"] == "alice"
        [rec] = b.records(ctx.turn_id)
    assert [e["subject"] for e in servers.saw("alice")][-1:] == ["alice"]
    assert rec.served_by == "docs:oauth:alice"
    # sharedos evidence list shows which credential served the call
    listed = subprocess.run(
        [SHAREDOS, "evidence", "list", "--db", str(tmp_path / "evidence.sqlite")],
        capture_output=True,
        text=True,
    )
    assert "docs:oauth:alice" in listed.stdout, listed.stdout + listed.stderr


async def test_a_stray_callback_with_another_state_does_not_end_the_sign_in(
    tmp_path: Path, servers: Servers
) -> None:
    """Another process that finds the login's loopback port cannot abort the sign-in: its
    callback (any code, a state it guessed) is answered 400 and the real one completes."""
    host = write_host(tmp_path, servers)
    done = await anyio.to_thread.run_sync(lambda: login(host, "alice", stray=True))
    assert done.rc == 0, done.err
    assert "signed in: alice at upstream docs" in done.out
    assert servers.issued("alice")[-1] == "authorization_code"


async def test_two_principals_in_concurrent_turns_each_reach_the_upstream_as_themselves(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    for who in ("ann", "ben"):
        done = await anyio.to_thread.run_sync(lambda who=who: login(host, who))
        assert done.rc == 0, done.err
    async with brokered_host(tmp_path, host) as b:

        async def turn_of(who: str) -> None:
            async with b.turn(b.context(who)) as t, anyio.create_task_group() as tg:
                for i in range(4):
                    tg.start_soon(t.call, "docs.note", {"path": f"{who}-{i}", "text": who})

        async with anyio.create_task_group() as tg:
            tg.start_soon(turn_of, "ann")
            tg.start_soon(turn_of, "ben")
        keys = sorted(s.key[1] for s in b.broker.pool if s.key[0] == "docs")
    assert keys == ["oauth:ann", "oauth:ben"]  # one session per credential, never shared
    for who in ("ann", "ben"):
        calls = [e for e in servers.saw() if e["args"].get("text") == who]
        assert len(calls) == 4 and {e["subject"] for e in calls} == {who}


async def test_a_principal_without_a_credential_does_not_see_the_tools_and_is_told_why(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    before = len(read_log(servers.rs_log))
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("mallory")) as t:
        assert await t.names() == []
        report = "\n".join(t.upstreams.report())
    assert "no credential" in report and "mallory" in report
    assert "sharedos upstream login docs" in report and "--principal mallory" in report
    # not one HTTP request reached the upstream in mallory's name (it logs every request)
    assert len(read_log(servers.rs_log)) == before
    # the operator view says the same, and fails
    status = subprocess.run(
        [SHAREDOS, "upstream", "status", str(host), "--principal", "mallory"],
        capture_output=True,
        text=True,
    )
    assert status.returncode == 1 and "no credential" in status.stdout, status.stdout


async def test_an_expired_token_is_refreshed_and_the_new_one_stored(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "erin"))).rc == 0
    # 1. the stored expiry has passed: renewed before the call (refresh grant)
    store = open_store(tmp_path)
    rec = store.load("docs", "default", "erin")
    assert rec is not None and rec.obtained_via == "authorization_code"
    store.save("docs", "default", "erin", rec.model_copy(update={"expires_at": 1.0}))
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("erin")) as t:
        first = await t.call("docs.whoami", {"path": "a"})
        assert structured(first).get("subject") == "erin", text_of(first)
        # 2. the server expires it early: the 401 is answered by one refresh and a retry
        servers.admin("expire", "erin")
        second = await t.call("docs.whoami", {"path": "b"})
        assert second.is_error is False, text_of(second)
        assert structured(second)["subject"] == "erin"
    assert servers.issued("erin") == ["authorization_code", "refresh_token", "refresh_token"]
    now = store.load("docs", "default", "erin")
    assert now is not None and now.obtained_via == "refresh_token"
    assert now.access_token != rec.access_token and now.refresh_token != rec.refresh_token


async def test_a_revoked_grant_fails_upstream_unauthorized_naming_the_login_command(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "rita"))).rc == 0
    async with brokered_host(tmp_path, host) as b:
        ctx = b.context("rita")
        async with b.turn(ctx) as t:
            ok = await t.call("docs.whoami", {"path": "a"})
            assert ok.is_error is False
            servers.admin("revoke", "rita")  # access and refresh token gone at the AS
            refused = await t.call("docs.whoami", {"path": "b"})
        assert refused.is_error is True
        data = structured(refused)
        assert (data.get("outcome"), data.get("reason")) == ("failed", "upstream_unauthorized")
        assert "sharedos upstream login docs" in text_of(refused) and "rita" in text_of(refused)
        recs = b.records(ctx.turn_id)
        assert [(str(r.outcome), str(r.reason)) for r in recs][-1] == (
            "failed",
            "upstream_unauthorized",
        )
        # the next turn: the listing is refused, the tools are absent, the report says why
        async with b.turn(b.context("rita")) as t2:
            assert await t2.names() == []
            report = "\n".join(t2.upstreams.report())
        assert "sharedos upstream login docs" in report, report


async def test_logout_revokes_at_the_server_and_forgets_the_tokens(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "lou"))).rc == 0
    out = subprocess.run(
        [SHAREDOS, "upstream", "logout", "docs", "--host-config", str(host), "--principal", "lou"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "logged out" in out.stdout, out.stdout + out.stderr
    assert "refresh_token revoked" in out.stdout and "access_token revoked" in out.stdout
    revoked = [
        e for e in read_log(servers.as_log) if e["event"] == "revoked" and e["user"] == "lou"
    ]
    assert len(revoked) == 2
    assert open_store(tmp_path).load("docs", "default", "lou") is None
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("lou")) as t:
        assert await t.names() == []


async def test_a_stolen_token_file_is_useless_without_the_key(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "sam"))).rc == 0
    [stolen] = list((tmp_path / "store" / "docs").iterdir())
    assert PREFIX.encode() not in stolen.read_bytes()
    # another key (the thief's guess) does not open it
    with pytest.raises(TokenStoreError):
        open_store(tmp_path, generate_key()).load("docs", "default", "sam")
    # copied under another principal's name, with the right key, it does not open either
    own = open_store(tmp_path)
    victim = own.load("docs", "default", "sam")
    assert victim is not None
    own.save("docs", "default", "eve", victim)
    eve_file = next(p for p in (tmp_path / "store" / "docs").iterdir() if p != stolen)
    shutil.copyfile(stolen, eve_file)
    with pytest.raises(TokenStoreError):
        own.load("docs", "default", "eve")
    # a host whose key is not the one the store was sealed with: sam's tools are absent
    other = tmp_path / "other"
    other.mkdir()
    shutil.copytree(tmp_path / "store", other / "store")
    other_host = write_host(other, servers)
    before = len(read_log(servers.rs_log))
    async with brokered_host(other, other_host) as b, b.turn(b.context("sam")) as t:
        assert await t.names() == []
        report = "\n".join(t.upstreams.report())
    assert "sam" in report and PREFIX not in report
    assert len(read_log(servers.rs_log)) == before  # not one HTTP request reached the upstream


async def test_token_exchange_gets_dave_a_token_from_his_host_provided_subject_token(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(
        tmp_path, servers, oauth_extra='subject_tokens = { dave = { env = "DAVE_SUBJECT" } }\n'
    )
    async with brokered_host(tmp_path, host, {"DAVE_SUBJECT": SUBJECT_TOKEN}) as b:
        async with b.turn(b.context("dave")) as t:
            got = await t.call("docs.whoami", {"path": "a"})
        assert got.is_error is False and structured(got)["subject"] == "dave"
    assert servers.issued("dave") == ["token_exchange"]
    rec = open_store(tmp_path).load("docs", "default", "dave")
    assert rec is not None and rec.obtained_via == "token_exchange"
    # a principal whose subject token the AS does not accept gets nothing
    async with brokered_host(tmp_path, host, {"DAVE_SUBJECT": "SUBJ-forged-000000000"}) as b:
        open_store(tmp_path).delete("docs", "default", "dave")
        async with b.turn(b.context("dave")) as t:
            assert await t.names() == []
            assert "refused the token exchange" in "\n".join(t.upstreams.report())


async def test_no_token_appears_in_any_artifact(
    tmp_path: Path, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    """Every token the AS issued to pia (all start with PREFIX) is searched for, in every
    form, in everything SharedOS printed, returned, recorded or wrote."""
    import logging

    from tests.upstream.test_credentials import grep_bytes, grep_tree, process_command_lines

    caplog.set_level(logging.DEBUG)
    host = write_host(tmp_path, servers)
    seen: list[bytes] = []
    done = await anyio.to_thread.run_sync(lambda: login(host, "pia"))
    assert done.rc == 0, done.err
    seen.append((done.out + done.err).encode())
    tokens: set[str] = set()

    def held() -> None:
        rec = open_store(tmp_path).load("docs", "default", "pia")
        if rec is not None:
            tokens.update(t for t in (rec.access_token, rec.refresh_token) if t)

    held()
    async with brokered_host(tmp_path, host) as b:
        async with b.turn(b.context("pia")) as t:
            seen.append(
                json.dumps(
                    [x.model_dump(by_alias=True) for x in (await t.client.list_tools()).tools]
                ).encode()
            )
            results = [
                await t.call("docs.whoami", {"path": "a"}),
                await t.call("docs.leak", {"path": "b"}),
                await t.call("docs.leak", {"path": "c", "as_error": True}),
            ]
            # (the AS's own command line names the prefix: only whole tokens are looked for)
            argvs = process_command_lines()
            servers.admin("expire", "pia")  # the next call refreshes: new tokens to look for
            results.append(await t.call("docs.leak", {"path": "d"}))
            held()
            servers.admin("revoke", "pia")
            results.append(await t.call("docs.whoami", {"path": "e"}))  # upstream_unauthorized
            seen.append("\n".join(t.upstreams.report()).encode())
            seen.append(json.dumps(t.upstreams.as_dict(), default=str).encode())
        async with b.turn(b.context("pia")) as t2:  # listing refused: the report says why
            seen.append("\n".join(t2.upstreams.report()).encode())
        seen.append(b.stderr.getvalue().encode())
    for r in results:
        seen.append(json.dumps(r.model_dump(by_alias=True, mode="json")).encode())
    # the upstream really sent tokens back (so the test can fail) and SharedOS removed them
    assert "[redacted]" in text_of(results[1]) and structured(results[1])["token"] == "[redacted]"
    assert structured(results[4])["reason"] == "upstream_unauthorized"
    for argv in (
        ["evidence", "export", "--db", str(tmp_path / "evidence.sqlite")],
        ["evidence", "list", "--db", str(tmp_path / "evidence.sqlite")],
        ["host", "check", str(host)],
        ["upstream", "status", str(host), "--principal", "pia"],
        ["upstream", "logout", "docs", "--host-config", str(host), "--principal", "pia"],
    ):
        out = subprocess.run([SHAREDOS, *argv], capture_output=True, timeout=120)
        seen.append(out.stdout + out.stderr)
    seen.append(caplog.text.encode())
    assert len(tokens) >= 3 and all(tok.startswith(PREFIX) for tok in tokens)
    assert [tok for tok in tokens if grep_bytes(argvs, tok)] == []
    for blob in seen:
        assert [tok for tok in tokens if grep_bytes(blob, tok)] == []
        assert PREFIX.encode() not in blob
    assert grep_tree(tmp_path, PREFIX) == {}  # evidence db, token store (encrypted), host file


async def test_a_token_without_the_needed_scope_fails_upstream_unauthorized(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "ivy"))).rc == 0
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("ivy")) as t:
        servers.admin("downscope", "ivy")  # the MCP server now answers 403 insufficient_scope
        refused = await t.call("docs.whoami", {"path": "a"})
    assert refused.is_error is True
    assert structured(refused)["reason"] == "upstream_unauthorized"
    said = text_of(refused)
    # (the SDK's server names no scope in its WWW-Authenticate, so no --scope is suggested)
    assert "the credential oauth:ivy lacks the scope it needs" in said
    # the exact command, host file included, to copy and run
    assert f"`sharedos upstream login docs --host-config {host.resolve()} --principal ivy`" in said
    assert not [e for e in servers.saw("ivy")]  # the call never ran at the upstream


async def test_a_refused_sign_in_stores_nothing_and_says_so(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    done = await anyio.to_thread.run_sync(lambda: login(host, "nina", deny=True))
    assert done.rc == 1
    assert "did not authorize 'nina' (access_denied)" in done.err, done.err
    assert "Traceback" not in done.err, done.err
    assert open_store(tmp_path).load("docs", "default", "nina") is None


def _run(host: Path, rules: Path, principal: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [SHAREDOS, "run", "--host-config", str(host), "--rules", str(rules)]
    argv += ["--policy", "run", "--principal", principal, *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_sharedos_run_reports_whose_identity_serves_the_turn(
    tmp_path: Path, servers: Servers
) -> None:
    host = write_host(tmp_path, servers)
    rules = tmp_path / "rules.sos"
    rules.write_text(RULES, encoding="utf-8")
    assert login(host, "quinn").rc == 0
    quinn = _run(host, rules, "quinn", "--dry-run")
    assert quinn.returncode == 0, quinn.stderr
    assert "upstream docs (docs.*): 3 of 3 tools published" in quinn.stderr
    assert "as oauth:quinn" in quinn.stderr and "docs.whoami" in quinn.stdout
    mallory = _run(host, rules, "mallory", "--dry-run")
    assert mallory.returncode == 0, mallory.stderr
    assert "no credential, its tools are absent this turn" in mallory.stderr
    assert f"sharedos upstream login docs --host-config {host.resolve()} --principal mallory" in (
        mallory.stderr
    )
    assert "docs.whoami" not in mallory.stdout
    assert PREFIX not in quinn.stdout + quinn.stderr + mallory.stdout + mallory.stderr


@pytest.mark.harness
def test_sharedos_run_with_claude_code_calls_the_upstream_as_the_principal(
    tmp_path: Path, servers: Servers
) -> None:
    from sharedos.harness.tools import default_command

    if (
        shutil.which(default_command("claude-code")[0]) is None
        and not Path(default_command("claude-code")[0]).exists()
    ):
        pytest.skip("Claude Code is not installed: bash scripts/install-tools.sh")
    host = write_host(tmp_path, servers)
    text = host.read_text(encoding="utf-8")
    host.write_text("[harness.claude-code]\n\n" + text, encoding="utf-8")
    rules = tmp_path / "rules.sos"
    rules.write_text(RULES, encoding="utf-8")
    assert login(host, "uma").rc == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"tool": "docs.whoami", "arguments": {"path": "run"}}]))
    db = tmp_path / "evidence.sqlite"
    proc = _run(
        host,
        rules,
        "uma",
        *("--harness", "claude-code", "--evidence", str(db), "--plan", str(plan)),
        *("--workdir", str(tmp_path / "work"), "--timeout", "180", "who am I upstream?"),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "1 allowed and succeeded" in proc.stderr, proc.stderr[-3000:]
    assert [e["args"] for e in servers.saw("uma")] == [{"path": "run"}]
    listed = subprocess.run(
        [SHAREDOS, "evidence", "list", "--db", str(db)], capture_output=True, text=True
    )
    assert "docs:oauth:uma" in listed.stdout
    assert PREFIX not in proc.stdout + proc.stderr + listed.stdout


async def test_concurrent_calls_after_an_expiry_share_one_refresh(
    tmp_path: Path, servers: Servers
) -> None:
    """Refresh tokens rotate (a spent one is refused): eight calls refused at once must
    renew once, and all be retried with the one new token."""
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "cody"))).rc == 0
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("cody")) as t:
        assert (await t.call("docs.whoami", {"path": "warm"})).is_error is False
        servers.admin("expire", "cody")
        results: list[Any] = []

        async def one(i: int) -> None:
            results.append(await t.call("docs.note", {"path": f"c{i}", "text": "cody"}))

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
    assert [r.is_error for r in results] == [False] * 8, [text_of(r) for r in results]
    assert servers.issued("cody") == ["authorization_code", "refresh_token"]
    assert {e["subject"] for e in servers.saw() if e["args"].get("text") == "cody"} == {"cody"}


async def test_token_exchange_with_a_preregistered_confidential_client(
    tmp_path: Path, servers: Servers
) -> None:
    secret = tmp_path / "client.secret"
    secret.write_text(CLIENT_SECRET + "\n", encoding="utf-8")
    secret.chmod(0o600)
    host = write_host(
        tmp_path,
        servers,
        oauth_extra=f'client_id = "{CLIENT_ID}"\nclient_secret = {{ file = "client.secret" }}\n'
        'subject_tokens = { eva = { env = "EVA_SUBJECT" } }\n',
    )
    async with brokered_host(tmp_path, host, {"EVA_SUBJECT": SUBJECT_TOKEN_EVA}) as b:
        async with b.turn(b.context("eva")) as t:
            got = await t.call("docs.whoami", {"path": "a"})
        assert got.is_error is False and structured(got)["subject"] == "eva"
    issued = [e for e in read_log(servers.as_log) if e["event"] == "issued" and e["user"] == "eva"]
    assert [(e["via"], e["client"]) for e in issued] == [("token_exchange", CLIENT_ID)]
    assert [e["client"] for e in servers.saw("eva")] == [CLIENT_ID]
    # a wrong client secret: the AS refuses the client, the report says so, no token
    secret.write_text("not-the-right-secret-000\n", encoding="utf-8")
    open_store(tmp_path).delete("docs", "default", "eva")
    env = {"EVA_SUBJECT": SUBJECT_TOKEN_EVA}
    async with brokered_host(tmp_path, host, env) as b, b.turn(b.context("eva")) as t:
        assert await t.names() == []
        report = "\n".join(t.upstreams.report())
    assert "refused the token exchange" in report and "invalid_client" in report
    assert "not-the-right-secret" not in report and CLIENT_SECRET not in report


async def test_a_refresh_uses_the_client_secret_the_host_file_names_now(
    tmp_path: Path, servers: Servers
) -> None:
    """A principal signed in with the configured confidential client (oauth.client_id and
    client_secret) had that client, its secret included, copied into its stored tokens,
    and every refresh authenticated with the copy: once the operator rotated the secret
    (at the authorization server and in the host's secret file) each such principal's
    refresh was refused (invalid_client) until it signed in again, and the old secret
    stayed in the store. The refresh uses the secret the host file names now."""
    secret = tmp_path / "client.secret"
    secret.write_text("rotating-secret-one-4c9e1a\n", encoding="utf-8")
    secret.chmod(0o600)
    host = write_host(
        tmp_path,
        servers,
        oauth_extra=f'client_id = "{ROTATING_ID}"\nclient_secret = {{ file = "client.secret" }}\n',
    )
    done = await anyio.to_thread.run_sync(lambda: login(host, "rosa"))
    assert done.rc == 0, done.err
    servers.admin("rotate-client", "-", client_id=ROTATING_ID, secret="rotating-secret-two-7b2d0f")
    secret.write_text("rotating-secret-two-7b2d0f\n", encoding="utf-8")
    servers.admin("expire", "rosa")
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("rosa")) as t:
        got = await t.call("docs.whoami", {"path": "a"})
        report = "\n".join(t.upstreams.report())
    assert got.is_error is False and structured(got)["subject"] == "rosa", report
    assert servers.issued("rosa") == ["authorization_code", "refresh_token"]
    stored = open_store(tmp_path).load("docs", "default", "rosa")
    assert stored is not None and "rotating-secret" not in stored.model_dump_json()


async def test_an_authorization_server_that_echoes_a_refused_exchange_leaks_nothing(
    tmp_path: Path,
) -> None:
    """The AS's ``error_description`` is its text, and may repeat what it was sent: the
    refused subject token and the client secret. The turn report quoted it as it came."""
    forged, client_secret = "SUBJ-forged-9c41e7d2b05a", "echoed-client-secret-3e8a51"
    exchange = tmp_path / "subjects.json"
    exchange.write_text(json.dumps({SUBJECT_TOKEN: "dave"}), encoding="utf-8")
    as_port, rs_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    as_argv = [PY, str(SERVERS), "as", "--port", str(as_port), "--log", str(tmp_path / "as.log")]
    as_argv += ["--token-prefix", PREFIX, "--exchange", str(exchange), "--echo-refusals"]
    as_argv += ["--client", f"{CLIENT_ID}={client_secret}"]
    rs_argv = [PY, str(SERVERS), "rs", "--port", str(rs_port), "--issuer", issuer]
    rs_argv += ["--log", str(tmp_path / "rs.log")]
    secret = tmp_path / "client.secret"
    secret.write_text(client_secret + "\n", encoding="utf-8")
    secret.chmod(0o600)
    with http_process(as_argv, as_port), http_process(rs_argv, rs_port):
        servers = Servers(
            issuer, f"http://127.0.0.1:{rs_port}/mcp", tmp_path / "as.log", tmp_path / "rs.log"
        )
        host = write_host(
            tmp_path,
            servers,
            oauth_extra=f'client_id = "{CLIENT_ID}"\nclient_secret = {{ file = "client.secret" }}\n'
            'subject_tokens = { dave = { env = "DAVE_SUBJECT" } }\n',
        )
        async with brokered_host(tmp_path, host, {"DAVE_SUBJECT": forged}) as b:
            async with b.turn(b.context("dave")) as t:
                assert await t.names() == []
                report = "\n".join(t.upstreams.report())
            printed = b.stderr.getvalue()
    assert "refused the token exchange" in report and "invalid_grant" in report, report
    scan = SecretScan(forged, client_secret)
    scan.text("the turn report", report)
    scan.text("the broker's stderr", printed)
    scan.assert_clean()


async def test_the_login_command_a_report_names_signs_in_the_upstreams_tenant(
    tmp_path: Path, servers: Servers
) -> None:
    """An upstream of tenant ``acme`` serves the per-person credentials of acme's principals
    only. The report told tess to run ``sharedos upstream login ... --principal tess``, which
    kept her tokens under tenant ``default``: "signed in", and the next turn said again that
    she had not signed in, naming the same command."""
    host = write_host(tmp_path, servers, extra='identity = "per-person"\ntenant = "acme"\n')
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("tess", tenant="acme")) as t:
        report = "\n".join(t.upstreams.report())
    named = re.search(r"`(sharedos upstream login [^`]*)`", report)
    assert named is not None and "--principal tess" in named.group(1), report
    done = await anyio.to_thread.run_sync(lambda: login(host, "tess"))
    assert done.rc == 0, done.err
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("tess", tenant="acme")) as t:
        assert await t.names() == ["docs.leak", "docs.note", "docs.whoami"], "\n".join(
            t.upstreams.report()
        )
        got = await t.call("docs.whoami", {"path": "a"})
    assert structured(got)["subject"] == "tess"
    # another tenant's tess is not this upstream's: signing her in is refused, not kept unused
    other = subprocess.run(
        [
            *(SHAREDOS, "upstream", "login", "docs", "--host-config", str(host)),
            *("--principal", "tess", "--tenant", "default", "--no-browser", "--wait", "5"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode == 1 and "for tenant 'acme'" in other.stderr, other.stderr


async def test_a_sign_in_refused_by_an_echoing_authorization_server_leaks_nothing(
    tmp_path: Path,
) -> None:
    """``sharedos upstream login`` with a pre-registered client whose secret the AS refuses:
    a careless AS repeats what it was sent (the client secret, the authorization code and
    the PKCE verifier), and the command's one-sentence error quoted that answer."""
    client_secret, wrong = "login-client-secret-7b2e90", "typo-client-secret-c41d5a"
    as_port, rs_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    as_argv = [PY, str(SERVERS), "as", "--port", str(as_port), "--log", str(tmp_path / "as.log")]
    as_argv += ["--token-prefix", PREFIX, "--echo-refusals"]
    as_argv += ["--client", f"{CLIENT_ID}={client_secret}"]
    rs_argv = [PY, str(SERVERS), "rs", "--port", str(rs_port), "--issuer", issuer]
    rs_argv += ["--log", str(tmp_path / "rs.log")]
    secret = tmp_path / "client.secret"
    secret.write_text(wrong + "\n", encoding="utf-8")
    secret.chmod(0o600)
    with http_process(as_argv, as_port), http_process(rs_argv, rs_port):
        servers = Servers(
            issuer, f"http://127.0.0.1:{rs_port}/mcp", tmp_path / "as.log", tmp_path / "rs.log"
        )
        host = write_host(
            tmp_path,
            servers,
            oauth_extra=f'client_id = "{CLIENT_ID}"\nclient_secret = {{ file = "client.secret" }}\n',
        )
        done = await anyio.to_thread.run_sync(lambda: login(host, "olga"))
    assert done.rc == 1 and "signing in 'olga' to upstream 'docs' failed" in done.err, done.err
    assert "invalid_client" in done.err, done.err  # the refusal itself is still said
    said = done.out + done.err.split(done.url, 1)[-1]  # after the printed sign-in address
    scan = SecretScan(wrong)
    scan.text("the login command's output", said)
    scan.assert_clean()
    # the one-time code and the PKCE verifier the AS repeated are secrets of the flow too
    for echoed in re.findall(r"(?:code|code_verifier) ([^\s,)]+)", said):
        assert echoed == "[redacted]", said


async def test_a_refresh_answered_with_no_token_response_fails_that_upstream_only(
    tmp_path: Path, servers: Servers
) -> None:
    """The authorization server answers a refresh 200 with JSON that is no token response:
    an array, or an ``expires_in`` of 400 digits. The first raised out of the broker's
    listing (``AttributeError``): the whole turn failed, every upstream and built-in tool
    with it. The second raised in the session's HTTP auth (``OverflowError``), which ended
    gus's session: the call failed as a disconnect (``upstream_error``)."""
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "gus"))).rc == 0
    store = open_store(tmp_path)
    rec = store.load("docs", "default", "gus")
    assert rec is not None
    store.save("docs", "default", "gus", rec.model_copy(update={"expires_at": 1.0}))
    servers.admin("garble", "gus", answer='["not", "a", "token", "response"]')
    async with brokered_host(tmp_path, host) as b:
        async with b.turn(b.context("gus")) as t:  # renewed before its listing
            assert await t.names() == []
            report = "\n".join(t.upstreams.report())
        assert "no credential" in report and "refresh answer for 'gus' is unusable" in report
        async with b.turn(b.context("gus")) as t:  # the next refresh is answered well
            assert await t.names() == ["docs.leak", "docs.note", "docs.whoami"]
            servers.admin(
                "garble",
                "gus",
                answer='{"access_token": "PLANTEDTOK-x", '
                '"token_type": "Bearer", "expires_in": 1' + "0" * 400 + "}",
            )
            refused = await t.call("docs.whoami", {"path": "a"})
            assert structured(refused)["reason"] == "upstream_unauthorized", text_of(refused)
            # the session was not ended; the refresh token (unspent by that answer) renews
            again = await t.call("docs.whoami", {"path": "b"})
            assert structured(again).get("subject") == "gus", text_of(again)


async def test_a_principal_with_a_long_name_keeps_and_uses_its_tokens(
    tmp_path: Path, servers: Servers
) -> None:
    """A principal is up to 256 characters (an e-mail address, a directory name, an IdP
    subject URL). The token file's name held the base32 of tenant and principal, 1.6 times
    as long: past ~140 characters it was too long a file name, so the sign-in ended "the
    tokens could not be stored" and the principal could never have a credential."""
    who = "https://idp.example.com/tenants/0f8c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f/users/" + (
        "7c9e6679-7425-40de-944b-e07fc1f90ae7-" * 3
    )
    assert 150 < len(who) <= 256
    host = write_host(tmp_path, servers)
    done = await anyio.to_thread.run_sync(lambda: login(host, who))
    assert done.rc == 0, done.err
    async with brokered_host(tmp_path, host) as b, b.turn(b.context(who)) as t:
        got = await t.call("docs.whoami", {"path": "a"})
    assert structured(got).get("subject") == who, text_of(got)
    # a file copied under another long principal's name does not decrypt
    store = open_store(tmp_path)
    assert store.load("docs", "default", who) is not None
    assert store.load("docs", "default", who + "x") is None
    [kept] = list((tmp_path / "store" / "docs").iterdir())
    assert len(kept.name) < 100 and kept.stat().st_mode & 0o777 == 0o600


async def test_per_person_or_shared_gives_who_never_signed_in_the_shared_credential(
    tmp_path: Path, servers: Servers
) -> None:
    """``per-person-or-shared``: a principal without a credential of its own gets the shared
    ``credentials``. With ``oauth`` set, every principal of the tenant was given an OAuth
    binding, so one who never signed in got no credential, and never the shared one."""
    host = write_host(
        tmp_path,
        servers,
        extra='identity = "per-person-or-shared"\n'
        'credentials = { Authorization = { env = "DOCS_SHARED", prefix = "Bearer " } }\n',
    )
    for who in ("svc", "rex"):  # svc's token is the operator's shared credential
        done = await anyio.to_thread.run_sync(lambda who=who: login(host, who))
        assert done.rc == 0, done.err
    store = open_store(tmp_path)
    svc, rex = store.load("docs", "default", "svc"), store.load("docs", "default", "rex")
    assert svc is not None and rex is not None
    # rex's tokens have expired and cannot be renewed: rex has tokens, unusable
    store.save("docs", "default", "rex", rex.model_copy(update={"expires_at": 1.0}))
    servers.admin("revoke", "rex")
    async with brokered_host(tmp_path, host, {"DOCS_SHARED": svc.access_token}) as b:
        async with b.turn(b.context("mallory")) as t:
            assert await t.names() == ["docs.leak", "docs.note", "docs.whoami"], "\n".join(
                t.upstreams.report()
            )
            got = await t.call("docs.whoami", {"path": "m"})
        assert structured(got).get("subject") == "svc", text_of(got)
        assert [r.served_by for r in b.records() if r.served_by] == ["docs:shared"]
        async with b.turn(b.context("rex")) as t:  # not replaced by the shared credential
            assert await t.names() == []
            assert "refused to refresh" in "\n".join(t.upstreams.report())


async def test_a_refresh_cancelled_once_sent_keeps_the_rotated_refresh_token(
    tmp_path: Path, servers: Servers
) -> None:
    """The authorization server rotates the refresh token when it takes the request: a
    caller cancelled before the answer arrived (its call's deadline, the turn closing) lost
    the new one, the stored one was spent, and the principal had to sign in again. The
    refresh now finishes and is kept whatever the caller does."""
    from sharedos.harness.hostconfig import load_host_config
    from sharedos.upstream.oauth import TokenSource

    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "rota"))).rc == 0
    config = load_host_config(host)
    upstream = config.upstream["docs"]
    opener = store_opener(config.tokens, {}, config.base_dir)
    before = open_store(tmp_path).load("docs", "default", "rota")
    assert before is not None
    open_store(tmp_path).save(
        "docs", "default", "rota", before.model_copy(update={"expires_at": 1.0})
    )
    servers.admin("slow-refresh", "rota", seconds="1.5")
    source = TokenSource(upstream, "default", "rota", opener, {})
    with anyio.move_on_after(0.3) as waited:  # the caller gives up while the server answers
        await source.current()
    assert waited.cancel_called  # the deadline passed while the server answered
    kept = open_store(tmp_path).load("docs", "default", "rota")
    assert kept is not None and kept.refresh_token != before.refresh_token
    # the next run renews with the rotated token: no new sign-in needed
    fresh = TokenSource(upstream, "default", "rota", opener, {})
    kept_expired = kept.model_copy(update={"expires_at": 1.0})
    open_store(tmp_path).save("docs", "default", "rota", kept_expired)
    assert await fresh.current() is not None, fresh.problem


async def test_an_unending_refresh_answer_is_not_read_whole(
    tmp_path: Path, servers: Servers
) -> None:
    """The authorization server is the upstream's to name (its protected-resource metadata),
    so it is as little trusted as the upstream, whose answers are bounded while they are
    read. A refresh answered with 96 MiB of one string was read whole into memory (a
    larger one exhausts the broker's, every principal's turns with it), whatever its size."""
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "una"))).rc == 0
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("una")) as t:
        assert (await t.call("docs.whoami", {"path": "a"})).is_error is False
        servers.admin("garble", "una", answer="@stream:96")
        refused = await t.call("docs.whoami", {"path": "b"})
    assert structured(refused)["reason"] == "upstream_unauthorized", text_of(refused)
    with anyio.fail_after(60):  # the server logs what it sent once the client hangs up
        while not [e for e in read_log(servers.as_log) if e["event"] == "streamed"]:
            await anyio.sleep(0.05)
    [streamed] = [e for e in read_log(servers.as_log) if e["event"] == "streamed"]
    assert streamed["user"] == "una" and streamed["bytes"] < 8 << 20, streamed


async def test_an_unending_sign_in_answer_is_not_read_whole(
    tmp_path: Path, servers: Servers
) -> None:
    """The refresh, exchange, registration and revocation requests read an authorization
    server's answers bounded (1 MiB, 20 s in all); ``sharedos upstream login`` did not: the
    SDK's flow read the code exchange's answer whole, so an answer of 96 MiB that never
    makes a token response was read to its end (a larger one exhausts the machine's
    memory, a trickle never ends). The sign-in fails, and reads little of it."""
    host = write_host(tmp_path, servers)
    servers.admin("garble-code", "-", answer="@stream:96")
    done = await anyio.to_thread.run_sync(lambda: login(host, "ulla"))
    assert done.rc != 0 and "larger than" in done.err, done.err
    assert not open_store(tmp_path).principals("docs")
    with anyio.fail_after(60):  # the server logs what it sent once the client hangs up
        while not [e for e in read_log(servers.as_log) if e.get("user") == "code"]:
            await anyio.sleep(0.05)
    [streamed] = [e for e in read_log(servers.as_log) if e.get("user") == "code"]
    assert streamed["bytes"] < 8 << 20, streamed


def test_a_hostile_sign_in_answer_cannot_write_control_sequences_to_the_terminal(
    tmp_path: Path, servers: Servers
) -> None:
    """The redirect back to ``sharedos upstream login`` is the authorization server's to
    write. Its ``error`` went to the operator's terminal as it came: escape sequences
    that clear the screen, retitle the window or print a fake "signed in" line."""
    host = write_host(tmp_path, servers)
    proc = subprocess.Popen(
        [
            *(SHAREDOS, "upstream", "login", "docs", "--host-config", str(host)),
            *("--principal", "vic", "--no-browser", "--wait", "60"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    url = ""
    for line in proc.stderr:
        found = re.search(r"(http://127\.0\.0\.1:\d+/authorize\S+)", line)
        if found:
            url = found.group(1)
            break
    assert url
    query = parse_qs(urlsplit(url).query)
    hostile = "access_denied\x1b[2J\x1b]0;pwned\x07\rsigned in: vic"
    back = httpx2.get(
        query["redirect_uri"][0],
        params={"error": hostile, "state": query["state"][0]},
        trust_env=False,
    )
    assert back.status_code == 200
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    said = out + err
    assert "did not authorize 'vic'" in said, said
    assert not [c for c in said if ord(c) < 32 and c != "\n"], repr(said)


def test_a_client_secret_that_cannot_be_read_fails_the_sign_in_in_one_sentence(
    tmp_path: Path, servers: Servers
) -> None:
    """``oauth.client_secret`` names a host variable that is not set: the sign-in ended in
    a Python traceback (``CredentialError`` escaped the command), not the one sentence the
    operator is promised."""
    host = write_host(
        tmp_path,
        servers,
        oauth_extra=f'client_id = "{CLIENT_ID}"\nclient_secret = {{ env = "UNSET_DOCS_SECRET" }}\n',
    )
    done = subprocess.run(
        [
            *(SHAREDOS, "upstream", "login", "docs", "--host-config", str(host)),
            *("--principal", "walt", "--no-browser", "--wait", "5"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "UNSET_DOCS_SECRET"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and "UNSET_DOCS_SECRET" in done.stderr


async def test_a_registration_answered_with_no_client_fails_that_upstream_only(
    tmp_path: Path, servers: Servers
) -> None:
    """Token exchange registers a client first (RFC 7591). A registration answered with a
    JSON array raised ValueError out of ``dict(...)``, past the broker's ``OAuthError``
    handling: the whole turn failed, every other upstream and tool with it."""
    host = write_host(
        tmp_path, servers, oauth_extra='subject_tokens = { dave = { env = "DAVE_SUBJECT" } }\n'
    )
    servers.admin("garble-registration", "dave", answer='["not", "a", "client"]')
    async with brokered_host(tmp_path, host, {"DAVE_SUBJECT": SUBJECT_TOKEN}) as b:
        async with b.turn(b.context("dave")) as t:
            assert await t.names() == []
            report = "\n".join(t.upstreams.report())
        assert "answered no client" in report, report
        # the next turn registers again, and the exchange goes through
        async with b.turn(b.context("dave")) as t:
            got = await t.call("docs.whoami", {"path": "a"})
        assert got.is_error is False and structured(got)["subject"] == "dave"


async def test_a_renewed_token_that_cannot_be_stored_still_serves_the_turn(
    tmp_path: Path, servers: Servers, tmpfs: MountFn, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, a refresh whose new tokens could not be written (the token store's disk
    full) raised the OSError out of the broker: the turn never opened (a traceback from
    ``sharedos run``), though the authorization server had rotated the refresh token and
    the new tokens, the only good ones left, were in hand. Now they serve this host, and
    the host says once that they were not stored and what to run."""
    (tmp_path / "store").symlink_to(tmpfs("256k"))
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "fran"))).rc == 0
    store = open_store(tmp_path)
    rec = store.load("docs", "default", "fran")
    assert rec is not None
    store.save("docs", "default", "fran", rec.model_copy(update={"expires_at": 1.0}))
    fill(tmp_path / "store")
    with caplog.at_level(logging.WARNING, logger="sharedos.upstream"):
        async with brokered_host(tmp_path, host) as b, b.turn(b.context("fran")) as t:
            for path in ("a", "b"):
                result = await t.call("docs.whoami", {"path": path})
                assert structured(result).get("subject") == "fran", text_of(result)
    assert servers.issued("fran") == ["authorization_code", "refresh_token"]  # once, kept
    (said,) = [r.getMessage() for r in caplog.records if "could not be stored" in r.getMessage()]
    assert "No space left on device" in said and "sharedos upstream login docs" in said
    assert PREFIX not in said


async def test_a_deeply_nested_token_endpoint_answer_fails_that_upstream_only(
    tmp_path: Path, servers: Servers
) -> None:
    """An authorization server answering a refresh with JSON nested a few thousand deep
    (a few KiB, well under ``MAX_ANSWER_BYTES``): ``json.loads`` raises ``RecursionError``,
    which is no ``ValueError``. It escaped the refresh out of the broker's listing: the
    whole turn failed, every other upstream and built-in tool with it. It is the same for
    a refused refresh (its error body is read for the ``error`` it names)."""
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "hal"))).rc == 0
    store = open_store(tmp_path)
    for status in ("200", "400"):
        rec = store.load("docs", "default", "hal")
        assert rec is not None
        store.save("docs", "default", "hal", rec.model_copy(update={"expires_at": 1.0}))
        servers.admin("garble", "hal", answer="[" * 5000, status=status)
        async with brokered_host(tmp_path, host) as b:
            async with b.turn(b.context("hal")) as t:  # renewed before its listing
                assert await t.names() == []
                report = "\n".join(t.upstreams.report())
            assert "no credential" in report, report
            async with b.turn(b.context("hal")) as t:  # the next refresh is answered well
                got = await t.call("docs.whoami", {"path": status})
            assert structured(got).get("subject") == "hal", text_of(got)


async def test_a_registered_client_that_is_no_client_information_fails_that_upstream_only(
    tmp_path: Path, servers: Servers
) -> None:
    """A registration answered with an object that has a ``client_id`` but is no RFC 7591
    client information (a redirect URI that is no URL, an auth method that is a number)
    was kept in the token store as the upstream's exchange client; the exchange then
    raised pydantic's ``ValidationError`` out of ``client_auth``, past the broker: the
    whole turn failed, and so did every later turn of every principal that exchanged,
    the bad client being kept. Now it is refused before it is kept."""
    host = write_host(
        tmp_path, servers, oauth_extra='subject_tokens = { dave = { env = "DAVE_SUBJECT" } }\n'
    )
    for answer in (
        '{"client_id": "c1", "redirect_uris": ["not a url"]}',
        '{"client_id": "c2", "token_endpoint_auth_method": 5}',
    ):
        servers.admin("garble-registration", "dave", answer=answer)
        async with brokered_host(tmp_path, host, {"DAVE_SUBJECT": SUBJECT_TOKEN}) as b:
            async with b.turn(b.context("dave")) as t:
                assert await t.names() == []
                report = "\n".join(t.upstreams.report())
            assert "answered no client" in report, report
            # nothing was kept: the next turn registers again, and the exchange goes through
            async with b.turn(b.context("dave")) as t:
                got = await t.call("docs.whoami", {"path": "a"})
            assert got.is_error is False and structured(got)["subject"] == "dave", text_of(got)
        open_store(tmp_path).delete("docs", "default", "dave")
        open_store(tmp_path).delete_secret("docs", "sharedos-oauth-client")


def _outside_address() -> str | None:
    """An address of this machine that is not loopback (plain HTTP to it crosses a network)."""
    import ipaddress
    import socket

    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        address = str(s.getsockname()[0])
        if not ipaddress.ip_address(address).is_loopback:
            return address
    return None


@contextlib.contextmanager
def plain_http_authorization_server(
    outside: str, *, only_authorize: bool = False
) -> Iterator[tuple[str, list[str]]]:
    """An upstream on 127.0.0.1 whose protected-resource metadata names an authorization
    server on this machine's outside address over plain ``http://`` (as a hostile or
    careless upstream may): metadata, registration and a token endpoint. Yields the
    upstream's URL and every request it got (host and path), in order. ``only_authorize``:
    only its authorization endpoint (where the browser signs in) is named so."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            seen.append(f"{self.headers.get('Host')}{self.path}")
            loop = f"http://127.0.0.1:{port}"
            away = f"http://{outside}:{port}"
            signin = away
            if only_authorize:
                away = loop
            if self.path.startswith("/.well-known/oauth-protected-resource"):
                self._send(200, {"resource": f"{loop}/mcp", "authorization_servers": [away]})
            elif self.path.startswith("/.well-known/oauth-authorization-server"):
                self._send(
                    200,
                    {
                        "issuer": away,
                        "authorization_endpoint": f"{signin}/authorize",
                        "token_endpoint": f"{away}/token",
                        "registration_endpoint": f"{away}/register",
                        "response_types_supported": ["code"],
                        "grant_types_supported": [
                            "authorization_code",
                            "urn:ietf:params:oauth:grant-type:token-exchange",
                        ],
                    },
                )
            else:
                self._send(404, {})

        def do_POST(self) -> None:
            seen.append(f"{self.headers.get('Host')}{self.path}")
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/mcp":
                hint = f'Bearer resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
                self._send(401, {}, {"WWW-Authenticate": hint})
            elif self.path == "/register":
                self._send(201, {"client_id": "c-plain", "client_secret": "plain-client-secret-1"})
            elif self.path == "/token":
                self._send(400, {"error": "invalid_grant", "error_description": body.decode()})
            else:
                self._send(404, {})

    server = ThreadingHTTPServer(("0.0.0.0", 0), Handler)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/mcp", seen
    finally:
        server.shutdown()
        server.server_close()


async def test_no_secret_is_sent_to_an_authorization_server_over_plain_http(
    tmp_path: Path,
) -> None:
    """OAuth 2.1 (and RFC 8414, RFC 6750) send tokens and client secrets only over TLS.
    The authorization server is the upstream's to name, in its metadata: one named as
    ``http://`` on another host got dave's host-provided subject token (an identity
    provider's token, good elsewhere too) and the client secret in clear text across the
    network. Now an authorization server's endpoint must be ``https://`` (or on this
    machine): nothing is sent, and the report says why."""
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address but loopback")
    with plain_http_authorization_server(outside) as (url, seen):
        host = tmp_path / "host.toml"
        key = tmp_path / "token.key"
        key.write_text(generate_key() + "\n", encoding="utf-8")
        key.chmod(0o600)
        host.write_text(
            f"""[tokens]
path = "store"
key = {{ file = "token.key" }}

[upstream.docs]
url = "{url}"
pinning = "off"

[upstream.docs.oauth]
subject_tokens = {{ dave = {{ env = "DAVE_SUBJECT" }} }}
""",
            encoding="utf-8",
        )
        env = {"DAVE_SUBJECT": SUBJECT_TOKEN}
        async with brokered_host(tmp_path, host, env) as b, b.turn(b.context("dave")) as t:
            assert await t.names() == []
            report = "\n".join(t.upstreams.report())
        # the sign-in, run by the SDK, goes no further than the metadata's address either
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [
                    *(SHAREDOS, "upstream", "login", "docs", "--host-config", str(host)),
                    *("--principal", "erin", "--no-browser", "--wait", "5"),
                ],
                capture_output=True,
                text=True,
                timeout=60,
                env={k: v for k, v in os.environ.items() if k != "SHAREDOS_TOKEN_KEY"},
            )
        )
    away = [s for s in seen if s.startswith(f"{outside}:")]
    assert away == [], away  # not one request left this machine in clear
    assert "https" in report and SUBJECT_TOKEN not in report, report
    assert done.returncode == 1, done.stdout + done.stderr
    assert "https" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "/authorize" not in done.stderr, done.stderr


async def test_a_refusal_the_upstream_words_can_neither_leak_the_token_nor_inject_a_command(
    tmp_path: Path,
) -> None:
    """An upstream refusing a call words its ``WWW-Authenticate`` header itself. Its
    ``error`` went into the failure unscrubbed: an upstream that put there the bearer the
    request carried had rita's token relayed to the harness and kept in the evidence.
    Its 403 ``scope`` went unquoted into the command the failure tells the operator to
    run (``sharedos upstream login ... --scope docs; touch /tmp/pwned #``): pasted, it
    runs the upstream's shell command. Now the text is scrubbed, and the scope quoted."""
    from sharedos.upstream.tokenstore import TokenRecord

    token = f"{PREFIX}-rita-4c1d9e0f7a2b"
    port = free_port()
    host = tmp_path / "host.toml"
    key = tmp_path / "token.key"
    key.write_text(generate_key() + "\n", encoding="utf-8")
    key.chmod(0o600)
    host.write_text(
        f"""[tokens]
path = "store"
key = {{ file = "token.key" }}

[upstream.docs]
url = "http://127.0.0.1:{port}/mcp"
pinning = "off"
protocol = "legacy"

[upstream.docs.oauth]
""",
        encoding="utf-8",
    )
    open_store(tmp_path).save(
        "docs",
        "default",
        "rita",
        TokenRecord(access_token=token, obtained_via="authorization_code", obtained_at=1.0),
    )
    rules = """
namespace docs
requirement docs.scoped { action read; resource "doc:{args.path}" }
requirement docs.echo   { action read; resource "doc:{args.path}" }
permit read on "doc:*"
toolpolicy run { mode open
  managed docs.* }
"""
    server = [PY, str(DATA / "hostile_http_server.py"), str(port), "--mode", "refuse-call"]
    with http_process(server, port):
        async with brokered_host(tmp_path, host, rules=rules) as b:
            async with b.turn(b.context("rita")) as t:
                scoped = await t.call("docs.scoped", {"path": "a"})
                echoed = await t.call("docs.echo", {"path": "a"})
            records = b.records(t.context.turn_id)
    for result in (scoped, echoed):
        assert structured(result)["reason"] == "upstream_unauthorized", text_of(result)
    said = text_of(echoed)
    assert token not in said and "rita" in said, said
    scan = SecretScan(token)
    scan.text("the refused calls", text_of(scoped) + said)
    scan.text("the evidence", (tmp_path / "evidence.sqlite").read_bytes())
    assert [str(r.reason) for r in records] == ["upstream_unauthorized"] * 2
    scan.assert_clean()
    (command,) = re.findall(r"`(sharedos upstream login [^`]*)`", text_of(scoped))
    import shlex

    words = list(shlex.shlex(command, posix=True, punctuation_chars=True))
    assert words[:3] == ["sharedos", "upstream", "login"], words
    assert not {";", "&", "|", "&&", "||", "#"} & set(words), words  # one command, no more


async def test_a_renewed_token_the_upstream_echoes_in_its_refusal_is_not_relayed(
    tmp_path: Path, servers: Servers
) -> None:
    """After a 401 SharedOS renews the token and retries; an upstream that refuses the
    retry too, wording its ``WWW-Authenticate`` ``error`` as the bearer it got, named the
    token renewed a moment before: no scrubber held it yet where the failure was made."""
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "ned"))).rc == 0
    port = free_port()
    text = host.read_text(encoding="utf-8").replace(servers.url, f"http://127.0.0.1:{port}/mcp")
    host.write_text(text.replace('pinning = "off"', 'pinning = "off"\nprotocol = "legacy"'))
    rules = """
namespace docs
requirement docs.scoped { action read; resource "doc:{args.path}" }
requirement docs.echo   { action read; resource "doc:{args.path}" }
permit read on "doc:*"
toolpolicy run { mode open
  managed docs.* }
"""
    server = [PY, str(DATA / "hostile_http_server.py"), str(port), "--mode", "refuse-call"]
    with http_process(server, port):
        async with brokered_host(tmp_path, host, rules=rules) as b:
            async with b.turn(b.context("ned")) as t:
                echoed = await t.call("docs.echo", {"path": "a"})
            records = b.records(t.context.turn_id)
    assert servers.issued("ned") == ["authorization_code", "refresh_token"]
    assert structured(echoed)["reason"] == "upstream_unauthorized", text_of(echoed)
    tokens = [t.access_token for t in [open_store(tmp_path).load("docs", "default", "ned")] if t]
    assert tokens
    scan = SecretScan(*tokens)
    scan.text("the refused call", text_of(echoed))
    scan.text("the evidence", (tmp_path / "evidence.sqlite").read_bytes())
    scan.assert_clean()
    assert [str(r.reason) for r in records] == ["upstream_unauthorized"]
    assert PREFIX not in text_of(echoed), text_of(echoed)


async def test_a_refused_refresh_that_names_the_expired_access_token_leaks_nothing(
    tmp_path: Path, servers: Servers
) -> None:
    """A refused refresh's ``error_description`` is the authorization server's text, and
    was scrubbed only of what the refresh request carried (the refresh token, the client's
    secret): a server naming the expired access token it had issued (``token ... has
    expired``) had that token printed in the turn report."""
    host = write_host(tmp_path, servers)
    assert (await anyio.to_thread.run_sync(lambda: login(host, "ivy"))).rc == 0
    store = open_store(tmp_path)
    rec = store.load("docs", "default", "ivy")
    assert rec is not None
    store.save("docs", "default", "ivy", rec.model_copy(update={"expires_at": 1.0}))
    said = {"error": "invalid_grant", "error_description": f"{rec.access_token} has expired"}
    servers.admin("garble", "ivy", answer=json.dumps(said), status="400")
    async with brokered_host(tmp_path, host) as b, b.turn(b.context("ivy")) as t:
        assert await t.names() == []
        report = "\n".join(t.upstreams.report())
    assert "invalid_grant" in report and "has expired" in report, report
    scan = SecretScan(rec.access_token)
    scan.text("the turn report", report)
    scan.assert_clean()


def test_the_sign_in_address_is_never_plain_http_to_another_machine(tmp_path: Path) -> None:
    """The authorization endpoint is where a person types their password (in a browser
    ``login`` opens, or the address it prints): the metadata naming it as plain
    ``http://`` on another host had ``login`` print and open it."""
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address but loopback")
    with plain_http_authorization_server(outside, only_authorize=True) as (url, _seen):
        host = tmp_path / "host.toml"
        key = tmp_path / "token.key"
        key.write_text(generate_key() + "\n", encoding="utf-8")
        key.chmod(0o600)
        host.write_text(
            f'[tokens]\npath = "store"\nkey = {{ file = "token.key" }}\n\n'
            f'[upstream.docs]\nurl = "{url}"\npinning = "off"\n\n[upstream.docs.oauth]\n',
            encoding="utf-8",
        )
        done = subprocess.run(
            [
                *(SHAREDOS, "upstream", "login", "docs", "--host-config", str(host)),
                *("--principal", "erin", "--no-browser", "--wait", "5"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{outside}:" in done.stderr and "https" in done.stderr, done.stderr
    assert "open this address" not in done.stdout + done.stderr, done.stdout + done.stderr


async def test_a_sign_out_elsewhere_is_not_undone_by_a_running_hosts_refresh(
    tmp_path: Path,
) -> None:
    """``sharedos upstream logout`` removes a principal's tokens from the store (revoking
    them where the server offers it; RFC 7009 is optional). A running host that held the
    tokens renewed them at the next expiry with the refresh token it had, and saved them
    back: the sign-out was undone, the tokens in the store again for every later run.
    Tokens another process renewed are taken from the store; tokens it removed must be
    taken as removed too."""
    as_port, rs_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    as_argv = [PY, str(SERVERS), "as", "--port", str(as_port), "--log", str(tmp_path / "as.log")]
    as_argv += ["--token-prefix", PREFIX, "--no-revocation"]
    rs_argv = [PY, str(SERVERS), "rs", "--port", str(rs_port), "--issuer", issuer]
    rs_argv += ["--log", str(tmp_path / "rs.log")]
    with http_process(as_argv, as_port), http_process(rs_argv, rs_port):
        servers = Servers(
            issuer, f"http://127.0.0.1:{rs_port}/mcp", tmp_path / "as.log", tmp_path / "rs.log"
        )
        host = write_host(tmp_path, servers)
        assert (await anyio.to_thread.run_sync(lambda: login(host, "kim"))).rc == 0
        async with brokered_host(tmp_path, host) as b:
            async with b.turn(b.context("kim")) as t:
                first = await t.call("docs.whoami", {"path": "a"})
            assert structured(first).get("subject") == "kim", text_of(first)
            argv = [SHAREDOS, "upstream", "logout", "docs", "--host-config", str(host)]
            out = subprocess.run(
                [*argv, "--principal", "kim"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0 and "not revoked" in out.stdout + out.stderr, out
            servers.admin("expire", "kim")  # the access token this host holds runs out
            async with b.turn(b.context("kim")) as t:
                names = await t.names()
                report = "\n".join(t.upstreams.report())
        assert open_store(tmp_path).load("docs", "default", "kim") is None  # still signed out
        assert servers.issued("kim") == ["authorization_code"], servers.issued("kim")
        assert names == [], names
        assert "sharedos upstream login docs" in report, report

"""``sharedos run`` records a host credential a harness passes back into a tool call.

docs/harnesses.md: env values are the host's credentials; "whatever a harness
later passes back into a tool call or prints is scrubbed of them"
(``HostConfig.secret_values``); docs/kernel.md: the host's ``host_secrets``
are scrubbed from every record field. ``sharedos run`` scrubs the harness's
streamed output of them, but builds its ``RuntimeHost`` without
``host_secrets``: the evidence keeps the credential verbatim.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.planted import SecretScan, plant
from tests.timing import bound
from tests.upstream.conftest import PY

SHAREDOS = str(Path(PY).parent / "sharedos")

RULES = """namespace files
requirement files.read  { action read;  resource path(args.path) }
requirement files.write { action write; resource path(args.path) }
permit read, write on "/public/**"
toolpolicy run {
 mode strict
 managed files.*
 harness_local "shell"
}
"""


def _claude_or_skip() -> None:
    from sharedos.harness.tools import default_command

    claude = default_command("claude-code")[0]
    if shutil.which(claude) is None and not Path(claude).exists():
        pytest.skip("Claude Code is not installed: bash scripts/install-tools.sh")


def _run_writing(
    tmp_path: Path,
    host_text: str,
    rules_text: str,
    content: str,
    env: dict[str, str],
    *extra: str,
    call: dict[str, Any] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``sharedos run`` of Claude Code whose scripted model writes ``content`` to
    ``/public/out.txt``; (the finished run, its evidence database)."""
    host = tmp_path / "host.toml"
    host.write_text(host_text, encoding="utf-8")
    rules = tmp_path / "rules.sos"
    rules.write_text(rules_text, encoding="utf-8")
    sandbox = tmp_path / "sandbox"
    (sandbox / "public").mkdir(parents=True)
    plan = tmp_path / "plan.json"
    if call is None:
        call = {"tool": "files.write", "arguments": {"path": "/public/out.txt", "content": content}}
    plan.write_text(json.dumps([call]), encoding="utf-8")
    db = tmp_path / "evidence.sqlite"
    proc = subprocess.run(
        [
            SHAREDOS,
            "run",
            "--host-config",
            str(host),
            "--harness",
            "claude-code",
            "--rules",
            str(rules),
            "--policy",
            "run",
            "--principal",
            "bob",
            "--sandbox",
            str(sandbox),
            "--evidence",
            str(db),
            "--plan",
            str(plan),
            "--workdir",
            str(tmp_path / "work"),
            "--timeout",
            "180",
            *extra,
            "do it",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
        cwd=tmp_path,
    )
    return proc, db


@pytest.mark.harness("claude-code")
def test_a_harness_credential_passed_into_a_tool_call_is_not_recorded(tmp_path: Path) -> None:
    _claude_or_skip()
    secret = plant("vendor")
    proc, db = _run_writing(
        tmp_path,
        '[harness.claude-code]\n[harness.claude-code.env]\nVENDOR_API_KEY = "${HUNT_VENDOR_KEY}"\n',
        RULES,
        f"key={secret}",
        {"HUNT_VENDOR_KEY": secret},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 allowed and succeeded" in proc.stderr, proc.stderr[-3000:]
    scan = SecretScan(secret)
    scan.text("sharedos run stdout", proc.stdout)
    scan.text("sharedos run stderr", proc.stderr)
    scan.evidence(db)  # `sharedos evidence export` and the raw database bytes
    scan.assert_clean()


@pytest.mark.harness("claude-code")
def test_the_json_document_holds_no_credential_passed_into_a_tool_call(tmp_path: Path) -> None:
    """The records and the answer were scrubbed, but ``--json``'s ``harness.issued`` (the
    scripted model's calls, their arguments as sent) carried the credential verbatim."""
    _claude_or_skip()
    secret = plant("vendor")
    proc, _db = _run_writing(
        tmp_path,
        '[harness.claude-code]\n[harness.claude-code.env]\nVENDOR_API_KEY = "${HUNT_VENDOR_KEY}"\n',
        RULES,
        f"key={secret}",
        {"HUNT_VENDOR_KEY": secret},
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # still one JSON document
    assert doc["harness"]["issued"][0]["arguments"]["content"] == "key=[redacted]"
    scan = SecretScan(secret)
    scan.text("sharedos run --json stdout", proc.stdout)
    scan.json_value("sharedos run --json", doc)
    scan.text("sharedos run stderr", proc.stderr)
    scan.assert_clean()


@pytest.mark.harness("claude-code")
def test_an_upstream_credential_passed_into_another_tool_is_not_recorded(tmp_path: Path) -> None:
    """The run scrubs the harness's output of every upstream's credential, but its
    records kept one verbatim when the model passed it into a call of another tool
    (``files.write`` here): the host's secrets held the harness env values only. The
    credential and the evidence store's password are the run's secrets too."""
    from tests.upstream.conftest import FIXTURE

    _claude_or_skip()
    secret = plant("upstream")
    proc, db = _run_writing(
        tmp_path,
        "[harness.claude-code]\n"
        "[upstream.fx]\n"
        f"command = {json.dumps(PY)}\n"
        f"args = [{json.dumps(str(FIXTURE))}]\n"
        'pinning = "off"\n'
        "roots = []\n"
        "[upstream.fx.credentials]\n"
        'FIXTURE_TOKEN = { env = "HUNT_FIXTURE_TOKEN" }\n',
        RULES.replace("managed files.*", "managed files.*, fx.*"),
        f"token={secret}",
        {"HUNT_FIXTURE_TOKEN": secret},
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "upstream fx (fx.*):" in proc.stderr and "published" in proc.stderr, proc.stderr
    assert "1 allowed and succeeded" in proc.stderr, proc.stderr[-3000:]
    scan = SecretScan(secret)
    scan.text("sharedos run stderr", proc.stderr)
    scan.json_value("sharedos run --json attempts", json.loads(proc.stdout)["attempts"])
    scan.evidence(db)  # `sharedos evidence export` and the raw database bytes
    scan.assert_clean()


@pytest.mark.harness("claude-code")
def test_secrets_passed_into_an_upstream_that_logs_its_calls_stay_off_the_terminal(
    tmp_path: Path,
) -> None:
    """An upstream's stderr is relayed to the operator's terminal scrubbed of its own
    credentials only: a model that passed another upstream's credential and a harness's
    key into a call of an upstream that logs its requests (many do, on stderr) had both
    printed by ``sharedos run``, whose records and harness output were scrubbed of them."""
    from tests.upstream.conftest import FIXTURE

    _claude_or_skip()
    credential, key = plant("upstream"), plant("vendor")
    upstream = '[upstream.{0}]\ncommand = {1}\nargs = [{2}]\npinning = "off"\nroots = []\n'
    fixture = (json.dumps(PY), json.dumps(str(FIXTURE)))
    proc, db = _run_writing(
        tmp_path,
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        'VENDOR_API_KEY = "${HUNT_VENDOR_KEY}"\n'
        + upstream.format("fx", *fixture)
        + '[upstream.fx.credentials]\nFIXTURE_TOKEN = { env = "HUNT_FIXTURE_TOKEN" }\n'
        + upstream.format("fy", *fixture),
        RULES.replace("managed files.*", "managed files.*, fy.*")
        + "namespace fy\nrequirement fy.leak { action read; resource path(args.path) }\n"
        + 'permit read on "/public/**"\n',
        "",
        {"HUNT_FIXTURE_TOKEN": credential, "HUNT_VENDOR_KEY": key},
        call={
            "tool": "fy.leak",
            "arguments": {"path": "/public/x", "how": "log", "note": f"{credential} {key}"},
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 allowed and succeeded" in proc.stderr, proc.stderr[-3000:]
    assert "upstream fy: request: leak" in proc.stderr, proc.stderr[-3000:]  # it was relayed
    scan = SecretScan(credential, key)
    scan.text("sharedos run stderr", proc.stderr)
    scan.evidence(db)
    scan.assert_clean()


def test_the_run_secrets_hold_the_evidence_store_password() -> None:
    """A password in the evidence store's location is a secret of the run like the others."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.harness.hostconfig import parse_host_config

    password = plant("dsn")
    config = parse_host_config("[harness.claude-code]\n", "host.toml")
    opts = {
        "host_config": config,
        "evidence_db": f"postgresql://host7:{password}@db.internal/evidence",
    }
    assert password in run_secrets(opts, SimpleNamespace(credentials={}), environ={})


def test_the_run_secrets_hold_the_store_password_libpq_finds_elsewhere(tmp_path: Path) -> None:
    """docs/evidence.md: the store's password belongs in PGPASSWORD or a .pgpass file, not
    in the location: kept there, it is a secret of the run all the same."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.harness.hostconfig import parse_host_config

    in_env, in_file, escaped = plant("pgpassword"), plant("pgpass"), plant("pgpass")
    passfile = tmp_path / "pgpass"
    passfile.write_text(
        f"# the host's\ndb.internal:5432:evidence:host7:{in_file}\n"
        f"*:*:*:other:{escaped[:10]}\\:{escaped[10:]}\n",
        encoding="utf-8",
    )
    passfile.chmod(0o600)
    config = parse_host_config("[harness.claude-code]\n", "host.toml")
    opts = {"host_config": config, "evidence_db": "postgresql://host7@db.internal/evidence"}
    found = run_secrets(
        opts,
        SimpleNamespace(credentials={}),
        environ={"PGPASSWORD": in_env, "PGPASSFILE": str(passfile)},
    )
    assert in_env in found
    assert in_file in found
    assert f"{escaped[:10]}:{escaped[10:]}" in found
    # ~/.pgpass when nothing names another file; a SQLite store has no password at all
    (tmp_path / ".pgpass").write_text(f"*:*:*:*:{in_file}\n", encoding="utf-8")
    assert in_file in run_secrets(
        opts, SimpleNamespace(credentials={}), environ={"HOME": str(tmp_path)}
    )
    opts["evidence_db"] = str(tmp_path / "evidence.sqlite")
    assert in_env not in run_secrets(
        opts, SimpleNamespace(credentials={}), environ={"PGPASSWORD": in_env}
    )


def test_the_run_secrets_hold_the_store_password_of_a_connection_service_file(
    tmp_path: Path,
) -> None:
    """libpq takes a store's password (or its password file) from the connection service
    file too (``service=`` or ``PGSERVICE``; ``PGSERVICEFILE`` or ``~/.pg_service.conf``,
    ``PGSYSCONFDIR/pg_service.conf``): kept there, it was no secret of the run, and a
    model that passed it into a call had it recorded verbatim."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.harness.hostconfig import parse_host_config

    in_service, in_its_passfile, in_system = plant("pgservice"), plant("pgpass"), plant("pgsys")
    passfile = tmp_path / "service-pgpass"
    passfile.write_text(f"*:*:*:*:{in_its_passfile}\n", encoding="utf-8")
    passfile.chmod(0o600)
    services = tmp_path / "pg_service.conf"
    services.write_text(
        "# the host's services\n"
        f"[evidence]\nhost=db.internal\ndbname=evidence\nuser=host7\npassword={in_service}\n"
        f"[other]\nhost=db.internal\npassfile={passfile}\n",
        encoding="utf-8",
    )
    services.chmod(0o600)
    config = parse_host_config("[harness.claude-code]\n", "host.toml")
    for location, environ in (
        ("postgresql:///?service=evidence", {"PGSERVICEFILE": str(services)}),
        ("postgresql:///", {"PGSERVICE": "evidence", "PGSERVICEFILE": str(services)}),
        ("service=other", {"PGSERVICEFILE": str(services)}),
    ):
        opts = {"host_config": config, "evidence_db": location}
        found = run_secrets(opts, SimpleNamespace(credentials={}), environ=environ)
        assert in_service in found, location
        assert in_its_passfile in found, location
    # the per-user file when nothing names another, and the system-wide one
    (tmp_path / ".pg_service.conf").write_text(f"[a]\npassword={in_service}\n", encoding="utf-8")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "pg_service.conf").write_text(
        f"[b]\npassword={in_system}\n", encoding="utf-8"
    )
    found = run_secrets(
        {"host_config": config, "evidence_db": "postgresql:///?service=a"},
        SimpleNamespace(credentials={}),
        environ={"HOME": str(tmp_path), "PGSYSCONFDIR": str(tmp_path / "etc")},
    )
    assert in_service in found and in_system in found


def _sign_key(path: Path) -> tuple[str, str]:
    """An Ed25519 evidence signing key written to ``path`` (0600): (its PEM text, the
    base64 body, the line a model that read the file would copy)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pem = (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode("ascii")
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(pem)
    body = "".join(line for line in pem.splitlines() if not line.startswith("-----"))
    return pem, body


@pytest.mark.harness("claude-code")
def test_the_evidence_signing_key_passed_into_a_tool_call_is_not_recorded(
    tmp_path: Path,
) -> None:
    """The host file's ``[evidence] sign_key`` is hidden from every sandbox, but its
    contents were no secret of the run: a model that had it (an open run's harness reads
    any file) and wrote it with files.write had the private key recorded verbatim in the
    evidence, in ``sharedos evidence export`` and in ``--json``'s attempts."""
    _claude_or_skip()
    pem, body = _sign_key(tmp_path / "sign.pem")
    proc, db = _run_writing(
        tmp_path,
        '[harness.claude-code]\n[evidence]\nsign_key = "sign.pem"\n',
        RULES,
        f"key={body}\n{pem}",
        {},
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 allowed and succeeded" in proc.stderr, proc.stderr[-3000:]
    scan = SecretScan(body)
    scan.text("sharedos run stderr", proc.stderr)
    scan.json_value("sharedos run --json attempts", json.loads(proc.stdout)["attempts"])
    scan.evidence(db)  # `sharedos evidence export` and the raw database bytes
    scan.assert_clean()


def test_the_run_secrets_hold_the_evidence_signing_key(tmp_path: Path) -> None:
    """The signing key's contents (the whole PEM, and its base64 body) are run secrets."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.harness.hostconfig import parse_host_config

    pem, body = _sign_key(tmp_path / "sign.pem")
    config = parse_host_config(
        '[harness.claude-code]\n[evidence]\nsign_key = "sign.pem"\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    secrets = run_secrets({"host_config": config}, SimpleNamespace(credentials={}), environ={})
    assert pem.strip() in secrets and body in secrets


@pytest.mark.parametrize("where", ["env", "file"])
def test_the_run_secrets_hold_the_token_store_key(tmp_path: Path, where: str) -> None:
    """The token store's key decrypts every principal's stored upstream tokens; it was no
    secret of the run, so a model that had it (an open run's harness reads any file) had
    it recorded as it passed it into a call."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.harness.hostconfig import parse_host_config
    from sharedos.upstream.tokenstore import generate_key

    key = generate_key()
    environ: dict[str, str] = {}
    if where == "env":
        environ["SHAREDOS_TOKEN_KEY"] = key
        text = "[harness.claude-code]\n"
    else:
        fd = os.open(tmp_path / "token.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(key + "\n")
        text = '[harness.claude-code]\n[tokens]\nkey = { file = "token.key" }\n'
    config = parse_host_config(text, str(tmp_path / "host.toml"), base_dir=tmp_path)
    secrets = run_secrets({"host_config": config}, SimpleNamespace(credentials={}), environ=environ)
    assert key in secrets


def test_a_key_file_that_is_a_pipe_does_not_hold_up_the_run_secrets(tmp_path: Path) -> None:
    """A key file the host reads for its secrets is read as every file an operator names
    (``sharedos.textfile``): a named pipe nobody writes to in the key's place reads as
    nothing, where a plain ``open`` waited for a writer forever."""
    import threading

    from sharedos.harness.hostconfig import parse_host_config

    os.mkfifo(tmp_path / "token.key")
    text = '[harness.claude-code]\n[tokens]\nkey = { file = "token.key" }\n'
    config = parse_host_config(text, str(tmp_path / "host.toml"), base_dir=tmp_path)
    found: list[tuple[str, ...]] = []
    reader = threading.Thread(target=lambda: found.append(config.key_secrets({})), daemon=True)
    reader.start()
    reader.join(bound(5))
    if reader.is_alive():  # release the blocked open, so the test process can end
        with open(tmp_path / "token.key", "wb"):
            pass
        pytest.fail("reading the key file waited for a writer")
    assert found == [()]


def test_the_run_secrets_hold_every_principals_upstream_credential(tmp_path: Path) -> None:
    """Alice's run held, among upstream credentials, only those serving her turn: bob's
    own credential for the same upstream (in the host's environment, as the host file
    names it), the ops group's (a file) and the operator's shared one were no secret of
    her run, so a model that had one (an open run's harness reads the host's files and
    the environment of its own user's processes) had another person's credential
    recorded verbatim in her evidence and printed on her terminal. Every credential the
    host file names and the run can read is a secret of every run."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.context import AccessContext
    from sharedos.harness.hostconfig import parse_host_config
    from sharedos.upstream.credentials import NoCredential, resolve_static, select

    alice, bob, ops, shared = plant("alice"), plant("bob"), plant("ops"), plant("shared")
    fd = os.open(tmp_path / "ops.token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(ops + "\n")
    config = parse_host_config(
        "[harness.claude-code]\n"
        "[upstream.fx]\n"
        f"command = {json.dumps(PY)}\n"
        'identity = "per-person-or-shared"\n'
        "[upstream.fx.credentials]\n"
        'FIXTURE_TOKEN = { env = "HUNT_SHARED" }\n'
        "[upstream.fx.principals.alice]\n"
        'FIXTURE_TOKEN = { env = "HUNT_ALICE" }\n'
        "[upstream.fx.principals.bob]\n"
        'FIXTURE_TOKEN = { env = "HUNT_BOB", prefix = "Bearer " }\n'
        "[upstream.fx.groups.ops]\n"
        'FIXTURE_TOKEN = { file = "ops.token" }\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    environ = {"HUNT_ALICE": alice, "HUNT_BOB": bob, "HUNT_SHARED": shared}
    upstream = config.upstream["fx"]
    binding = select(upstream, AccessContext(principal="alice"))
    assert not isinstance(binding, NoCredential)
    mine = resolve_static(upstream, binding, environ)
    turn = SimpleNamespace(credentials={"fx": mine})
    secrets = run_secrets({"host_config": config}, turn, environ=environ)
    assert alice in secrets
    missing = [
        name for name, v in (("bob", bob), ("ops", ops), ("shared", shared)) if v not in secrets
    ]
    assert missing == [], f"credentials that are no secret of alice's run: {missing}"


@pytest.mark.harness("claude-code")
def test_a_token_inside_a_json_credential_passed_alone_into_a_tool_call_is_not_recorded(
    tmp_path: Path,
) -> None:
    """End to end: a harness env value and another principal's credential that are JSON
    (``{"Authorization": "Bearer T"}``) had their token, passed alone into a call, printed
    by ``--json``, relayed on stderr and kept in the evidence export."""
    from tests.upstream.conftest import FIXTURE

    _claude_or_skip()
    harness, carol = plant("harnessjson"), plant("caroljson")
    headers = '{{"Authorization": "Bearer {0}", "Notion-Version": "2022-06-28"}}'
    proc, db = _run_writing(
        tmp_path,
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        'NOTION_HEADERS = "${HUNT_HARNESS_JSON}"\n'
        "[upstream.fx]\n"
        f"command = {json.dumps(PY)}\n"
        f"args = [{json.dumps(str(FIXTURE))}]\n"
        'pinning = "off"\nroots = []\nidentity = "per-person"\n'
        "[upstream.fx.principals.carol]\n"
        'OPENAPI_MCP_HEADERS = { env = "HUNT_CAROL_JSON" }\n',
        RULES,
        f"{harness} {carol}",
        {"HUNT_HARNESS_JSON": headers.format(harness), "HUNT_CAROL_JSON": headers.format(carol)},
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 allowed and succeeded" in proc.stderr, proc.stderr[-3000:]
    scan = SecretScan(harness, carol)
    scan.text("sharedos run --json stdout", proc.stdout)
    scan.text("sharedos run stderr", proc.stderr)
    scan.evidence(db)  # `sharedos evidence export` and the raw database bytes
    scan.assert_clean()


def test_the_run_secrets_hold_the_token_inside_every_json_credential(tmp_path: Path) -> None:
    """A token inside a JSON credential (Notion's ``OPENAPI_MCP_HEADERS``) is a secret on its
    own for the upstream serving the turn (``credential_parts``), but the run's other held
    secrets kept only the whole JSON value: another principal's JSON credential and a JSON
    value in a harness's env. A model that passed the token alone (the upstream's "API
    token is invalid: ntn_...") into a call had it recorded and printed verbatim."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.harness.hostconfig import parse_host_config

    bob, harness = plant("bobjson"), plant("harnessjson")
    headers = '{{"Authorization": "Bearer {0}", "Notion-Version": "2022-06-28"}}'
    config = parse_host_config(
        "[harness.claude-code]\n"
        "[harness.claude-code.env]\n"
        'NOTION_HEADERS = "${HUNT_HARNESS_JSON}"\n'
        "[upstream.notion]\n"
        f"command = {json.dumps(PY)}\n"
        'identity = "per-person"\n'
        "[upstream.notion.principals.bob]\n"
        'OPENAPI_MCP_HEADERS = { env = "HUNT_BOB_JSON" }\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    environ = {"HUNT_BOB_JSON": headers.format(bob), "HUNT_HARNESS_JSON": headers.format(harness)}
    secrets = run_secrets({"host_config": config}, SimpleNamespace(credentials={}), environ=environ)
    assert bob in secrets and harness in secrets
    assert "2022-06-28" not in secrets  # the other strings are not mangled


def test_the_run_secrets_hold_the_body_of_every_pem_credential(tmp_path: Path) -> None:
    """A PEM key the host holds bare (another principal's key file, a harness env value
    with its line breaks written ``\\n``) was a secret only armoured: its base64 body, or
    one line of it, passed alone into a call was recorded and printed verbatim."""
    from types import SimpleNamespace

    from sharedos.cli.run import run_secrets
    from sharedos.harness.hostconfig import parse_host_config
    from sharedos.redaction import Redactor

    def pem(tag: str) -> tuple[str, list[str]]:
        lines = [f"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC{tag}0line1", f"PLANTED{tag}0line2abcdefgh"]
        return "-----BEGIN PRIVATE KEY-----\n" + "\n".join(
            lines
        ) + "\n-----END PRIVATE KEY-----\n", lines

    (bob, bob_lines), (harness, harness_lines) = pem("bob"), pem("harness")
    fd = os.open(tmp_path / "bob.pem", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(bob)
    config = parse_host_config(
        "[harness.claude-code]\n"
        "[harness.claude-code.env]\n"
        'APP_KEY = "${HUNT_HARNESS_PEM}"\n'
        "[upstream.gh]\n"
        f"command = {json.dumps(PY)}\n"
        'identity = "per-person"\n'
        "[upstream.gh.principals.bob]\n"
        'GITHUB_PRIVATE_KEY = { file = "bob.pem" }\n',
        str(tmp_path / "host.toml"),
        base_dir=tmp_path,
    )
    environ = {"HUNT_HARNESS_PEM": harness.strip().replace("\n", "\\n")}
    secrets = run_secrets({"host_config": config}, SimpleNamespace(credentials={}), environ=environ)
    scrub = Redactor(secrets).scrub
    for lines in (bob_lines, harness_lines):
        assert "PLANTED" not in scrub("key " + "".join(lines) + " ok")
        assert "PLANTED" not in scrub(f"line: {lines[1]} ok")

"""Host configuration: parsing, positioned errors, secrets that never show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import (
    SCRIPTED_MODEL_NAME,
    HostConfigError,
    MissingHostVariable,
    load_host_config,
    parse_host_config,
)

REPO = Path(__file__).resolve().parents[2]


def test_shipped_examples_are_valid() -> None:
    offline = load_host_config(REPO / "tests/data/harness/host.offline.toml")
    assert sorted(offline.harness) == ["claude-code", "codex", "dsh", "pi", "pi-adapter"]
    assert all(h.declared_model == SCRIPTED_MODEL_NAME for h in offline.harness.values())
    assert offline.harness["pi-adapter"].mcp_support == "extension"
    assert offline.harness["pi-adapter"].mcp_extension == "pi-mcp-adapter"
    example = load_host_config(REPO / "docs/examples/host.toml")
    sonnet = example.get("claude-code-sonnet")
    assert sonnet.kind == "claude-code" and sonnet.provider == "host"
    assert sonnet.declared_model == "claude-sonnet-4-5"
    assert sonnet.args == ("--model", "claude-sonnet-4-5")


def problems(text: str) -> list[str]:
    with pytest.raises(HostConfigError) as err:
        parse_host_config(text, "host.toml")
    return err.value.problems


def test_errors_name_file_line_and_column() -> None:
    text = 'version = 1\n\n[harness.codex]\ntimeout_s = 30\ntransport = "tcp"\n'
    (p,) = problems(text)
    assert p.startswith("host.toml:5:1: harness.codex.transport:")
    assert "'http' or 'stdio'" in p


def test_the_policy_time_zone_is_checked_where_it_is_written() -> None:
    """Issue 23: the zone of context.now comes from the host file; a wrong one is positioned."""
    config = parse_host_config('[harness.codex]\n[policy]\ntime_zone = "Europe/Paris"\n')
    assert config.policy.time_zone == "Europe/Paris"
    assert parse_host_config("[harness.codex]\n").policy.time_zone == "UTC"
    (p,) = problems('version = 1\n[harness.codex]\n[policy]\ntime_zone = "Mars/Olympus"\n')
    assert p.startswith("host.toml:4:1: policy.time_zone:") and "Mars/Olympus" in p


def test_a_host_file_without_harnesses_is_still_a_hosts_store_policy_and_approvers() -> None:
    """``sharedos approvals --host-file`` and ``sharedos bundle verify --host-file`` read a
    host file for its store, policy and approvers; one with no ``[harness.<id>]`` table
    (README's fleet example) was refused as "nothing to launch"."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    fleet = readme[readme.index("# each host's configuration") :]
    fleet = fleet[: fleet.index("```")]
    config = parse_host_config(fleet.replace("/etc/sharedos/host-7.pem", "host-7.pem"), "h.toml")
    assert config.harness == {} and config.policy.bundle is not None
    approvers = parse_host_config(
        'version = 1\n[evidence]\nurl = "e.sqlite"\n'
        '[approvals.approvers.maya]\nroles = ["maintainer"]\n',
        "h.toml",
    )
    assert approvers.approvals.approvers["maya"].roles == ("maintainer",)
    (p,) = problems("version = 1\n")  # a file that configures nothing at all
    assert p == "host.toml:1:1: no [harness.<id>] table: nothing to launch"


def test_invalid_toml_is_positioned() -> None:
    (p,) = problems("version = 1\n[harness.codex\n")
    assert p.startswith("host.toml:2:") and "invalid TOML" in p


def test_every_problem_is_reported() -> None:
    text = (
        "version = 1\n"
        "[harness.mystery]\n"
        "transport = 'http'\n"
        "[harness.codex]\n"
        "bogus = 1\n"
        "[harness.codex.env]\n"
        "OPENAI_API_KEY = 3\n"
    )
    found = problems(text)
    assert any(p.startswith("host.toml:2:1: harness.mystery: 'kind' is required") for p in found)
    assert any("harness.codex.bogus" in p and p.startswith("host.toml:5:") for p in found)
    assert "host.toml:7:1: harness.codex.env.OPENAI_API_KEY: must be a string" in found


def test_a_model_that_is_not_declared_is_reported_beside_the_entrys_other_problems() -> None:
    """docs/harnesses.md: `sharedos host check` prints every problem at once. The check of
    provider against declared_model ran only once every other key of the entry was valid,
    so a bad transport hid it until the operator had fixed that and run the check again."""
    found = problems("[harness.codex]\nprovider = 'host'\ntransport = 'tcp'\ntimeout_s = -1\n")
    assert found == [
        "host.toml:1:1: harness.codex: provider 'host' needs declared_model: the model your "
        "env/args configure",
        "host.toml:3:1: harness.codex.transport: Input should be 'http' or 'stdio'",
        "host.toml:4:1: harness.codex.timeout_s: Input should be greater than 0",
    ]


def test_declared_model_must_tell_the_truth() -> None:
    (p,) = problems("[harness.codex]\ndeclared_model = 'gpt-5.5'\n")
    assert "would record a model that did not run" in p
    (q,) = problems("[harness.codex]\nprovider = 'host'\n")
    assert "needs declared_model" in q


def test_env_values_never_show_and_resolve_only_on_demand() -> None:
    cfg = parse_host_config(
        "[harness.claude-code]\nprovider = 'host'\ndeclared_model = 'm'\n"
        "[harness.claude-code.env]\nANTHROPIC_API_KEY = '${HOST_KEY}'\nLITERAL = 'sk-literal-secret'\n"
    ).get("claude-code")
    for text in (repr(cfg), str(cfg), repr(cfg.env), cfg.model_dump_json()):
        assert "sk-literal-secret" not in text
    assert cfg.env.redacted() == {"ANTHROPIC_API_KEY": "<redacted>", "LITERAL": "<redacted>"}
    resolved = cfg.env.resolve({"HOST_KEY": "sk-from-host"}, harness="claude-code")
    assert resolved == {"ANTHROPIC_API_KEY": "sk-from-host", "LITERAL": "sk-literal-secret"}
    with pytest.raises(MissingHostVariable, match=r"\$\{HOST_KEY\} is not set"):
        cfg.env.resolve({}, harness="claude-code")


def test_the_host_variables_an_env_value_is_built_from_are_secrets_too() -> None:
    """``held_secrets`` (what ``sharedos run`` scrubs from records and output, what
    conformance reports are scrubbed of) held "Bearer <key>" but not the key: a harness
    that passed the key alone into a call had it recorded and printed verbatim."""
    host = parse_host_config(
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        "AUTH = 'Bearer ${HOST_KEY}'\nPAIR = '${HOST_USER}:${HOST_PASS}'\nGONE = 'x ${UNSET}'\n"
    )
    env = {"HOST_KEY": "sk-from-host-0123", "HOST_USER": "alice", "HOST_PASS": "pw-from-host-4567"}
    values = host.secret_values(env)
    assert {"sk-from-host-0123", "pw-from-host-4567", "Bearer sk-from-host-0123"} <= set(values)
    assert "sk-from-host-0123" in host.held_secrets(env, location="")
    assert not any("UNSET" in v for v in values)  # an unset variable contributes nothing


def test_an_env_value_built_from_ordinary_host_variables_does_not_scrub_the_home_directory() -> (
    None
):
    """``PATH = "${HOME}/.local/bin:${PATH}"`` made the home directory (and PATH) secrets of
    the run: every path under it was "[redacted]" in the records, the answers and the
    reports, and an upstream tool whose description named it was held back as holding a
    credential of the host. A credential built into a value is still a secret alone."""
    from sharedos.redaction import Redactor

    host = parse_host_config(
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        "PATH = '${HOME}/.local/bin:${PATH}'\nCLAUDE_CONFIG_DIR = '${HOME}/.claude-work'\n"
        "LC_ALL = '${LC_CTYPE}'\nAUTH = 'Bearer ${HOST_KEY}'\n"
        "DB_PASSWORD = '${USER}-pw-from-host'\nMIXED = '${HOME}/${HOST_PASS}'\n"
    )
    env = {
        "HOME": "/home/alice-example",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "USER": "alice-example",
        "LC_CTYPE": "en_US.UTF-8",
        "HOST_KEY": "sk-from-host-0123",
        "HOST_PASS": "pw-from-host-4567",
    }
    values = set(host.held_secrets(env, location=""))
    assert not values & {env["HOME"], env["PATH"], env["USER"], env["LC_CTYPE"]}
    assert f"{env['HOME']}/.claude-work" not in values
    # the credentials, and a value whose entry is named as one, or built from one
    assert {"sk-from-host-0123", "Bearer sk-from-host-0123", "pw-from-host-4567"} <= values
    assert {"alice-example-pw-from-host", "/home/alice-example/pw-from-host-4567"} <= values
    scrub = Redactor(values)
    assert scrub.scrub("read /home/alice-example/proj/x.py") == "read /home/alice-example/proj/x.py"
    assert not scrub.find({"description": "Allowed directories: /home/alice-example/proj"})


@pytest.mark.parametrize(
    "entry",
    [
        'args = ["--proxy", "http://u:s3cret-pw@proxy:3128"]',
        'command = ["/bin/cli", "--db=postgresql://app:s3cret-pw@db/app"]',
        # a password the first check missed: one holding a '/' (base64), one in the query
        # (libpq's ?password= and ?sslpassword=, a ?token=), a libpq keyword string, an
        # assignment handed to env(1)
        'args = ["--db", "postgresql://app:s3cret/Zm9v+YmFy@db/app"]',
        'args = ["--db=postgresql://db/app?sslmode=require&password=s3cret-pw"]',
        'args = ["postgresql://app@db/app?sslpassword=s3cret-pw"]',
        'args = ["--url", "https://h.example/mcp?access_token=s3cret-pw"]',
        'args = ["--dsn", "host=db user=app password=s3cret-pw"]',
        'command = ["env", "PGPASSWORD=s3cret-pw", "/bin/cli"]',
        'args = ["--db-password=s3cret-pw"]',
        'args = ["-Djavax.net.ssl.keyStorePassword=s3cret-pw"]',
        # a credential option with its value as the next argument or after '=', a header
        # line, an env(1) assignment of a key or token
        'args = ["--api-key", "sk-s3cret-pw"]',
        'args = ["--password", "s3cret-pw"]',
        'args = ["--token=s3cret-pw"]',
        'args = ["--header", "Authorization: Bearer s3cret-pw"]',
        'args = ["-H", "X-Api-Key: s3cret-pw"]',
        'command = ["env", "ANTHROPIC_API_KEY=s3cret-pw", "/bin/cli"]',
        # a base64 key starting with '/' is no file's path (no base64 holds a '.')
        'args = ["--api-key", "/s3cretZm9vYmFy/QUJD+x"]',
        'args = ["--token=/s3cretZm9vYmFyQUJD"]',
    ],
)
def test_a_url_with_a_password_never_goes_on_a_harness_command_line(entry: str) -> None:
    """The harness's command line (bwrap's too) is every local user's to read, and an
    argument is no env value: nothing scrubbed the password from what the harness said."""
    with pytest.raises(HostConfigError, match="holds a URL with a password") as err:
        parse_host_config(f"[harness.claude-code]\n{entry}\n")
    assert "s3cret" not in str(err.value)
    # a URL without a password, or an address with an @ in its path, is no credential
    parse_host_config('[harness.claude-code]\nargs = ["https://u@h/x", "https://h/a@b"]\n')


@pytest.mark.parametrize(
    "arg",
    [
        "https://registry.example:8443/pkg@1.2/x",  # a port, then an '@' in the path
        "https://[::1]:8443/@scope/pkg@1.0",  # an IPv6 host, a port
        "git@github.com:org/repo.git",
        "ssh://deploy@host.example:2222/srv/repo",
        "@modelcontextprotocol/server-filesystem@latest",
        "https://h.example/search?q=a@b&page=2",
        "--password-file=/run/secrets/db",
        "PASSWORD_FILE=/run/secrets/db",
        "PWD=/srv/work",
        "--password=",
        # a credential's file or variable, an option whose last word is no credential
        "--private-key=/etc/keys/app.pem",
        "--token-file=/run/secrets/tok",
        "--max-tokens=4096",
        "--sort-key=name",
        "Content-Type: application/json",
        "Authorization: ${MCP_AUTH}",
        "--auth=none",
    ],
)
def test_an_argument_with_no_password_in_it_is_not_refused(arg: str) -> None:
    """What the password check must not take for one: a port before an '@' in a path, an
    scp-style or ssh target with a user and no password, an npm scope, a password file."""
    parse_host_config(f"[harness.claude-code]\nargs = [{json.dumps(arg)}]\n")


def test_an_option_whose_next_argument_is_no_credential_is_not_refused() -> None:
    parse_host_config(
        "[harness.claude-code]\nargs = ['--private-key', '/etc/keys/app.pem', '--max-tokens',"
        " '4096', '--secret-name', 'prod', '--password', '--model', 'x', '--token-env', 'T']\n"
    )


def test_a_host_variable_a_bundle_url_is_built_from_is_a_secret_of_the_host() -> None:
    """``bundle = "https://h/t/${BUNDLE_TOKEN}/policy.tar"`` kept the token out of the host
    file, but held_secrets had only the URL's password and credential query values: the
    token, in the path, was shown in every message naming the bundle and recorded."""
    host = parse_host_config(
        "[policy]\nbundle = 'https://bundles.example/t/${BUNDLE_TOKEN}/policy.tar'\n"
        "shadow = 'https://${SHADOW_HOST}/s/${SHADOW_TOKEN}?v=${USER}'\n"
    )
    env = {
        "BUNDLE_TOKEN": "bt-from-host-0123",
        "SHADOW_HOST": "shadow.example",
        "SHADOW_TOKEN": "st-from-host-4567",
        "USER": "operator-example",
    }
    values = set(host.held_secrets(env, location=""))
    assert {"bt-from-host-0123", "st-from-host-4567"} <= values
    assert "operator-example" not in values  # an ordinary variable is none
    assert "shadow.example" not in values  # nor a host: a server's name is no credential
    # a variable giving the whole URL: its credentials, not the URL (nor its host)
    whole = parse_host_config("[policy]\nbundle = '${BUNDLE_URL}'\n")
    url = "https://bundles.example/policy.tar?token=tk-from-host-89ab"
    assert set(whole.held_secrets({"BUNDLE_URL": url}, location="")) == {"tk-from-host-89ab"}


def test_a_relative_evidence_store_is_next_to_the_host_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like the bundle, its keys and its state: a host started from a directory someone
    else filled must not write (or, for the approvers' CLI, read) the evidence there."""
    etc = tmp_path / "etc"
    etc.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for url, want in (
        ("evidence.sqlite", etc / "evidence.sqlite"),
        ("sqlite:db/ev.sqlite", etc / "db" / "ev.sqlite"),
        ("sqlite:///var/ev.sqlite", Path("/var/ev.sqlite")),
    ):
        host = etc / "host.toml"
        host.write_text(f'[harness.codex]\n[evidence]\nurl = "{url}"\n')
        config = load_host_config(host)
        location = config.evidence_location()
        assert location is not None and location.endswith(str(want)), (url, location)
        assert str(want) in config.state_paths()  # hidden from every sandbox
    host.write_text('[harness.codex]\n[evidence]\nurl = "postgresql://u@db/evidence"\n')
    assert load_host_config(host).evidence_location() == "postgresql://u@db/evidence"
    host.write_text("[harness.codex]\n")
    assert load_host_config(host).evidence_location() is None


def test_an_evidence_store_path_reads_home_and_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/evidence.md: a SQLite [evidence] url is a path like the bundle, its keys and its
    state, ``${VAR}`` interpolated. Before, "~/ev.sqlite" was opened as a file named
    "~/ev.sqlite" ("cannot create evidence database ~/ev.sqlite") and "${STATE}/ev.sqlite"
    as a directory named "${STATE}" next to the host file."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SHAREDOS_TEST_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("SHAREDOS_TEST_UNSET", raising=False)
    host = tmp_path / "host.toml"
    for url, want in (
        ("~/ev.sqlite", tmp_path / "home" / "ev.sqlite"),
        ("${SHAREDOS_TEST_STATE}/ev.sqlite", tmp_path / "state" / "ev.sqlite"),
        ("sqlite:${SHAREDOS_TEST_STATE}/db.sqlite", tmp_path / "state" / "db.sqlite"),
    ):
        host.write_text(f'[harness.codex]\n[evidence]\nurl = "{url}"\n')
        config = load_host_config(host)
        assert config.evidence_location() == str(want), url
        assert str(want) in config.state_paths()
    host.write_text('[harness.codex]\n[evidence]\nurl = "${SHAREDOS_TEST_UNSET}/ev.sqlite"\n')
    config = load_host_config(host)
    with pytest.raises(HostConfigError, match=r"\[evidence\] url: \$\{SHAREDOS_TEST_UNSET\}"):
        config.evidence_location()
    assert config.state_paths()  # the rest is still known


@pytest.mark.parametrize("hid", ["../../tmp/escaped", "team/claude", ".hidden", "a b", "-x"])
def test_a_harness_id_is_no_path(hid: str) -> None:
    # the id names the harness's turn directory under the run directory: ``../`` in it put
    # the transcript outside the run directory (left behind when that was removed), a ``/``
    # ended the run in a traceback
    found = problems(f'version = 1\n[harness."{hid}"]\nkind = "claude-code"\n')
    assert len(found) == 1 and found[0].startswith("host.toml:2:1: ")
    assert "letters, digits" in found[0]


def test_a_harness_id_is_its_table_name() -> None:
    found = problems('[harness.claude-code]\nid = "other"\n')
    assert found == [
        "host.toml:2:1: harness.claude-code.id: the id is the table's name ([harness.ID]); "
        "leave id out"
    ]
    same = parse_host_config('[harness.claude-code]\nid = "claude-code"\n', "host.toml")
    assert same.get("claude-code").id == "claude-code"
    assert parse_host_config("[harness.claude-code_2]\nkind = 'codex'\n").get("claude-code_2")


def test_a_harness_command_under_home_is_under_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: ["~/bin/claude"] ran /etc/sharedos/~/bin/claude ("not installed", exit 4)
    from sharedos.harness.runtime import create_mcp_harness_runtime

    monkeypatch.setenv("HOME", "/home/op")
    text = '[harness.claude-code]\ncommand = ["~/node/bin/node", "~/cli.js", "~/x"]\n'
    cfg = parse_host_config(text, "h.toml", base_dir=Path("/etc/sharedos"))
    runtime = create_mcp_harness_runtime("claude-code", cfg)
    # the program and its script (the first two items), as every command of the file
    assert runtime.command == ("/home/op/node/bin/node", "/home/op/cli.js", "~/x")


def test_vendor_settings_are_the_ones_the_kind_reads() -> None:
    # before: a misspelt key ([harness.codex.vendor.confg]) or one of the wrong type
    # (config = 3, tool_search = "yes") was ignored without a word: the CLI ran without it
    text = (
        "[harness.codex.vendor]\nconfig = 3\n[harness.codex.vendor.confg]\nmodel = 'x'\n"
        "[harness.claude-code.vendor]\ntool_search = 'yes'\n"
        "[harness.dsh.vendor]\nx = 1\n"
        "[harness.pi-adapter.vendor]\nextension = '/opt/ext'\n[harness.pi-adapter.vendor.models]\n"
    )
    assert problems(text) == [
        "host.toml:2:1: harness.codex.vendor.config: must be a table",
        "host.toml:3:1: harness.codex.vendor.confg: unknown key for kind codex (known: config)",
        "host.toml:6:1: harness.claude-code.vendor.tool_search: must be true or false",
        "host.toml:8:1: harness.dsh.vendor.x: unknown key for kind dsh (known: none)",
    ]
    good = parse_host_config(
        "[harness.codex.vendor.config]\nmodel = 'x'\n[harness.claude-code.vendor]\n"
        "tool_search = true\n[harness.pi.vendor.models]\n[harness.tuned]\nkind = 'pi-adapter'\n"
        "vendor = { extension = '/opt/ext' }\n",
        "host.toml",
    )
    assert good.get("codex").vendor == {"config": {"model": "x"}}
    assert good.get("tuned").vendor == {"extension": "/opt/ext"}


def test_a_bundle_url_from_the_environment_is_no_state_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bundle = "${BUNDLE_URL}"`` is a URL (docs/evidence.md), no file of the host's to hide
    from a sandbox: it was taken for one because the host file does not spell it as a URL,
    so ``sharedos run --sandbox .`` was refused as holding
    "https://…?X-Amz-Signature=<the signature>", which the refusal printed whole."""
    from sharedos.tools.files import root_holds_state

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # the files root, apart from the host file
    monkeypatch.setenv("SHAREDOS_TEST_BUNDLE", "https://b.example/b.json?sig=sig-canary-0123")
    config_dir = tmp_path / "conf"
    config_dir.mkdir()
    for table in ('bundle = "${SHAREDOS_TEST_BUNDLE}"', 'shadow = "${SHAREDOS_TEST_BUNDLE}"'):
        host = config_dir / "host.toml"
        host.write_text(f"[harness.codex]\n[policy]\n{table}\n")
        paths = load_host_config(host).state_paths()
        assert not [p for p in paths if "canary" in p], paths
        assert root_holds_state(".", paths) is None


def test_a_bundle_urls_credential_is_a_secret_the_host_holds(tmp_path: Path) -> None:
    """``sharedos run`` keeps every secret the host holds by its file out of its records,
    answers and output (``held_secrets``), and the upstream commands hold back a tool
    definition holding one. A ``[policy] bundle`` or ``shadow`` URL's credential (its
    password, a presigned signature, a ``?token=``), written there or given by
    ``${VAR}``, was none of them: a model that learned it had it recorded verbatim."""
    host = tmp_path / "host.toml"
    host.write_text(
        "[harness.codex]\n[policy]\n"
        'bundle = "https://ops:pw-canary-0123@b.example/b.json?token=${SHAREDOS_TEST_TOKEN}"\n'
        'shadow = "${SHAREDOS_TEST_SHADOW}"\n'
        '[evidence]\notlp_endpoint = "https://otel:otlp-canary-0123@collector.example"\n'
    )
    env = {
        "SHAREDOS_TEST_TOKEN": "tok-canary-0123",
        "SHAREDOS_TEST_SHADOW": "https://s3.example/c.json?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Date=20261207T000000Z&X-Amz-Signature=sig-canary-0123#frag-canary-0123",
    }
    held = load_host_config(host).held_secrets(env)
    for secret in ("pw-canary", "tok-canary", "sig-canary", "frag-canary", "otlp-canary"):
        assert f"{secret}-0123" in held, (secret, held)
    # what is no credential stays out (it would be scrubbed from every record)
    assert "AWS4-HMAC-SHA256" not in held and "20261207T000000Z" not in held


def test_an_evidence_url_from_the_environment_is_read_as_a_url(tmp_path: Path) -> None:
    """``${VAR}`` in ``[evidence] url`` is interpolated before it is read as a URL or a path
    (as a bundle's location is): ``url = "${EVIDENCE_URL}"`` naming a PostgreSQL store was
    taken for a SQLite path beside the host file, named after the URL: ``approvals list``
    said "no evidence database at …/postgresql:/u:<password>@db/evidence", and the store's
    password was no secret of the run."""
    host = tmp_path / "host.toml"
    host.write_text('[harness.codex]\n[evidence]\nurl = "${SHAREDOS_TEST_EVIDENCE}"\n')
    url = "postgresql://u:pw-canary-0123@db.internal/evidence"
    config = load_host_config(host)
    env = {"SHAREDOS_TEST_EVIDENCE": url}
    assert config.evidence_location(env) == url
    assert "pw-canary-0123" in config.held_secrets(env)
    assert not [p for p in config.state_paths(env) if "canary" in p]
    env["SHAREDOS_TEST_EVIDENCE"] = "~/ev.sqlite"  # a path given whole still reads as one
    assert config.evidence_location(env) == str(Path("~/ev.sqlite").expanduser())


def test_a_value_of_the_wrong_toml_type_is_said_in_toml_terms() -> None:
    """A string where the host file takes a list (`command = "/path/to/claude"`, as an
    upstream's `command` is written) was refused as "Input should be a valid tuple" (the
    model's type), and an upstream's `args` string twice; each is one problem that says
    the file wants a TOML array."""
    text = (
        "version = 1\n"
        '[harness.dsh]\ncommand = "/opt/dsh"\n'
        '[policy]\nkeys = "k.pub"\n'
        '[confinement]\nreadonly = "/opt"\n'
        '[upstream.u]\ncommand = "x"\nargs = "-y"\n'
    )
    with pytest.raises(HostConfigError) as info:
        parse_host_config(text, "h.toml")
    assert info.value.problems == [
        'h.toml:3:1: harness.dsh.command: must be a list (a TOML array: ["…", "…"])',
        'h.toml:5:1: policy.keys: must be a list (a TOML array: ["…", "…"])',
        'h.toml:7:1: confinement.readonly: must be a list (a TOML array: ["…", "…"])',
        "h.toml:10:1: upstream.u.args: must be a list of strings",
    ]


@pytest.mark.parametrize(
    ("endpoint", "refused"),
    [
        ("http://otel:otlp-canary-0123@collector.example:4318", True),
        ("http://192.0.2.7:4318/?api-key=key-canary-0123", True),
        ("https://otel:otlp-canary-0123@collector.example:4318", False),
        ("http://otel:otlp-canary-0123@127.0.0.1:4318", False),
        ("http://collector.example:4318/?v=1", False),
    ],
)
def test_an_otlp_endpoint_carrying_a_credential_to_another_machine_is_https_only(
    tmp_path: Path, endpoint: str, refused: bool
) -> None:
    """The exporter sends an endpoint's ``user:password@`` as HTTP Basic credentials and its
    ``?api-key=`` with every export: over plain ``http://`` to another machine they crossed
    the network in clear, and the host file passed."""
    text = f'[harness.codex]\n[evidence]\notlp_endpoint = "{endpoint}"\n'
    if not refused:
        parse_host_config(text, "host.toml")
        return
    with pytest.raises(HostConfigError) as caught:
        parse_host_config(text, "host.toml")
    said = str(caught.value)
    assert "evidence.otlp_endpoint: an otlp_endpoint that carries a credential is https://" in said
    assert "canary" not in said, said


def test_a_problem_quoting_the_file_is_spelled_for_every_command_that_prints_it(
    tmp_path: Path,
) -> None:
    """A problem quotes the host file (here an unknown key), and ``sharedos run``,
    ``upstream`` and ``approvals`` printed it raw: a quoted key holding an OSC title and a
    line break retitled the terminal and printed a forged ``error:`` line of its own."""
    from click.testing import CliRunner

    from sharedos.cli.main import main

    host = tmp_path / "host.toml"
    host.write_text(
        '[upstream.y]\ncommand = "/bin/true"\n'
        '"k\\u001b]0;owned\\u0007\\nerror: none, all clear\\u202e" = 1\n',
        encoding="utf-8",
    )
    with pytest.raises(HostConfigError) as caught:
        load_host_config(host)
    (problem,) = caught.value.problems
    assert (
        "upstream.y.k\\x1b]0;owned\\x07\\x0aerror: none, all clear\\u202e: unknown key" in problem
    )
    for argv in (
        ["run", "--host-config", str(host), "--principal", "a", "--dry-run", "x"],
        ["upstream", "status", "--host-config", str(host)],
    ):
        out = CliRunner().invoke(main, argv)
        assert out.exit_code != 0, out.output
        assert not {"\x1b", "\x07", "\u202e"} & set(out.output), (argv[0], ascii(out.output))
        assert "\nerror: none" not in out.output, out.output


def test_a_credential_carried_in_an_lc_variable_is_a_secret() -> None:
    """sshd passes every LC_* on (AcceptEnv LANG LC_*), so LC_GITHUB_TOKEN is how a token
    reaches a remote shell; every LC_* was taken for a locale category, and
    ``X_HEADER = "Bearer ${LC_MY_TOKEN}"`` was scrubbed from nothing the run recorded."""
    host = parse_host_config(
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        "X_HEADER = 'Bearer ${LC_MY_TOKEN}'\nLC_ALL = '${LC_CTYPE}'\n"
    )
    env = {"LC_MY_TOKEN": "tok-from-ssh-0123", "LC_CTYPE": "en_US.UTF-8"}
    values = set(host.held_secrets(env, location=""))
    assert {"tok-from-ssh-0123", "Bearer tok-from-ssh-0123"} <= values
    assert "en_US.UTF-8" not in values  # a locale category is still an ordinary variable


def test_a_literal_written_beside_an_ordinary_variable_is_a_secret() -> None:
    """Only the path ordinary variables spell is no secret: a300171 took any value whose
    variables were all ordinary for one, and ``"x-api-key: <literal key> user=${USER}"``
    (a secret before, as every literal env value is) was scrubbed from nothing."""
    host = parse_host_config(
        "[harness.claude-code]\n[harness.claude-code.env]\n"
        "ANTHROPIC_CUSTOM_HEADERS = 'x-api-key: lit-key-0123 user=${USER}'\n"
        "EXTRA = 'lit-key-4567-${HOME}'\nPATH = '/opt/tool/bin:${HOME}/bin:${PATH}'\n"
        "CLAUDE_CONFIG_DIR = '${XDG_CONFIG_HOME}/claude'\n"
    )
    env = {"USER": "alice-example", "HOME": "/home/alice-example", "PATH": "/usr/bin:/bin"}
    env["XDG_CONFIG_HOME"] = "/home/alice-example/.config"
    values = set(host.held_secrets(env, location=""))
    assert values == {
        "x-api-key: lit-key-0123 user=alice-example",
        "lit-key-4567-/home/alice-example",
    }


def test_a_bundle_host_given_by_a_variable_is_no_secret() -> None:
    """``https://${POLICY_HOST}/policy.tar``: 1a7329e made the host a secret of the run, so
    every record, answer and message naming that server had "[redacted]" in it, and an
    upstream tool whose description named it was held back. A variable reaching past the
    host into the path or the user is still one."""
    host = parse_host_config(
        "[policy]\nbundle = 'https://${POLICY_HOST}:${POLICY_PORT}/t/${POLICY_TOKEN}/p.tar'\n"
        "shadow = 'https://${SHADOW_USER}@${SHADOW_LOC}/p.tar'\n"
    )
    env = {
        "POLICY_HOST": "policy.corp.example",
        "POLICY_PORT": "8443",
        "POLICY_TOKEN": "pt-from-host-0123",
        "SHADOW_USER": "deploy:sp-from-host-4567",
        "SHADOW_LOC": "shadow.example/t/st-from-host-89ab",
    }
    values = set(host.held_secrets(env, location=""))
    assert "policy.corp.example" not in values
    assert {"pt-from-host-0123", "deploy:sp-from-host-4567"} <= values
    assert "shadow.example/t/st-from-host-89ab" in values


def test_a_bundle_url_path_variable_is_masked_in_every_message_naming_the_url() -> None:
    """1a7329e made ``${BUNDLE_TOKEN}`` in a bundle URL's path a secret of the run's
    records, but the messages naming the URL were never scrubbed: ``sharedos run`` printed
    "cannot fetch the policy bundle: GET https://h/t/<token>/p.tar" and "shadow policy not
    loaded: https://h/t/<token>/p.tar", and the source's origin (kept in the bundle state
    file and every record of the release) carried it too."""
    from sharedos.bundles.shadow import load_shadow
    from sharedos.bundles.source import SourceError, open_source

    host = parse_host_config(
        "[policy]\nbundle = 'http://127.0.0.1:1/t/${BUNDLE_TOKEN}/p.tar'\n"
        "shadow = 'http://127.0.0.1:1/s/${BUNDLE_TOKEN}/p.tar'\n"
    )
    token = "bt-planted-0123"
    env = {"BUNDLE_TOKEN": token}
    source = open_source(host.bundle_location(env), host.bundle_hidden(environ=env))
    assert source.origin == "http://127.0.0.1:1/t/***/p.tar"
    with pytest.raises(SourceError) as err:
        source.fetch(None)
    assert token not in str(err.value) and "/t/***/p.tar" in str(err.value)
    line = load_shadow(*host.shadow_source(env)).line()
    assert token not in line and "http://127.0.0.1:1/s/***/p.tar" in line


def test_the_bundles_kept_copies_are_state_no_sandbox_shows(tmp_path: Path) -> None:
    """The release's kept copy (and the bytes waiting to replace it) is what a start whose
    source fails puts in force: state of the host, as the state file and its lock are."""
    host = tmp_path / "host.toml"
    host.write_text(
        '[harness.codex]\n[policy]\nbundle = "https://b.example/b.json"\nstate = "st/bundle.json"\n'
    )
    paths = load_host_config(host).state_paths()
    for name in ("bundle.json", "bundle.last-good.json", "bundle.next.last-good.json"):
        assert str(tmp_path / "st" / name) in paths, (name, paths)

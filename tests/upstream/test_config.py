"""Upstream configuration: validated with file:line:col, credentials by reference only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharedos.harness.hostconfig import HostConfigError, parse_host_config
from sharedos.redaction import Redactor
from sharedos.upstream.config import UpstreamConfig
from sharedos.upstream.definitions import Refusal, build_definition, raw_tool
from sharedos.upstream.secrets import CredentialError, resolve_credentials

GOOD = """\
[harness.claude-code]

[upstream.git]
command = "mcp-server-git"
args = ["--repository", "/srv/git"]
timeouts = { connect_s = 5, list_s = 3, call_s = 20 }
limits = { max_result_bytes = 65536, max_concurrency = 4 }

[upstream.gh]
namespace = "github"
url = "https://api.example.invalid/mcp"
[upstream.gh.credentials]
Authorization = { env = "GH_TOKEN", prefix = "Bearer " }
"""


def problems(text: str) -> list[str]:
    with pytest.raises(HostConfigError) as info:
        parse_host_config(text, "host.toml", base_dir=Path("/etc/sharedos"))
    return info.value.problems


def test_a_good_configuration_parses() -> None:
    config = parse_host_config(GOOD, "host.toml", base_dir=Path("/etc/sharedos"))
    git, gh = config.upstream["git"], config.upstream["gh"]
    assert (git.transport, git.namespace, git.args) == (
        "stdio",
        "git",
        ("--repository", "/srv/git"),
    )
    assert (git.timeouts.call_s, git.limits.max_concurrency) == (20, 4)
    assert (gh.transport, gh.namespace, gh.source) == ("http", "github", "upstream:gh")
    assert gh.credentials["Authorization"].env == "GH_TOKEN"
    assert "credentials from: GH_TOKEN" in gh.summary()
    assert config.harness  # harness tables unaffected


def test_an_upstream_only_file_is_valid() -> None:
    config = parse_host_config('[upstream.m]\ncommand = "x"\n', "h.toml")
    assert list(config.upstream) == ["m"] and config.harness == {}


def test_relative_commands_and_cwd_resolve_against_the_file() -> None:
    text = '[upstream.a]\ncommand = "bin/server"\ncwd = "work"\n'
    config = parse_host_config(text, "h.toml", base_dir=Path("/etc/sharedos"))
    assert config.upstream["a"].command == "/etc/sharedos/bin/server"
    assert config.upstream["a"].cwd == "/etc/sharedos/work"


def test_a_command_and_cwd_under_home_are_under_home(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: "~/bin/server" was /etc/sharedos/~/bin/server, and the upstream "could not be
    # reached: FileNotFoundError", a directory named "~" next to the host file
    monkeypatch.setenv("HOME", "/home/op")
    text = '[upstream.a]\ncommand = "~/bin/server"\ncwd = "~/work"\n'
    config = parse_host_config(text, "h.toml", base_dir=Path("/etc/sharedos"))
    assert config.upstream["a"].command == "/home/op/bin/server"
    assert config.upstream["a"].cwd == "/home/op/work"
    home = parse_host_config(
        '[upstream.a]\ncommand = "x"\ncwd = "~"\n', "h.toml", base_dir=Path("/e")
    )
    assert home.upstream["a"].cwd == "/home/op"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.credentials]\nTOKEN = "ghp_literal0123456789"\n',
            "host.toml:4:1: upstream.a.credentials.TOKEN: a literal value is not allowed",
        ),
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nGITHUB_TOKEN = "abc"\n',
            "host.toml:4:1: upstream.a.env.GITHUB_TOKEN: 'GITHUB_TOKEN' looks like a credential",
        ),
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nOPENAI_KEY = "sk-literal"\n',
            "host.toml:4:1: upstream.a.env.OPENAI_KEY: 'OPENAI_KEY' looks like a credential",
        ),
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nDB_PASS = "literal"\n',
            "host.toml:4:1: upstream.a.env.DB_PASS: 'DB_PASS' looks like a credential",
        ),
        (
            '[upstream.a]\nurl = "https://example.invalid/mcp"\nheaders = { X-Access-Key = "z" }\n',
            "host.toml:3:13: upstream.a.headers.X-Access-Key: 'X-Access-Key' looks like a credential",
        ),
        (
            '[upstream.a]\nurl = "https://example.invalid/mcp?key=AIzaLiteral"\n',
            "host.toml:2:1: upstream.a.url: query parameter 'key' looks like a credential",
        ),
        (
            '[upstream.a]\ncommand = "x"\nargs = ["--token", "${TOKEN}"]\n',
            "host.toml:3:1: upstream.a.args: arguments are passed as written: SharedOS "
            "expands no $VAR, and a value from the host environment is a credential that "
            "never goes on a command line; ${TOKEN} names no variable of the upstream's "
            "env or credentials",
        ),
        (
            # a password in a URL is a credential whatever the entry is named: on a command
            # line every local user reads it (ps), and nothing scrubs it from the upstream's
            # stderr or results
            '[upstream.a]\ncommand = "x"\nargs = ["--dsn=postgresql://app:s3cret-pw@db/app"]\n',
            "host.toml:3:1: upstream.a.args: an argument holds a URL with a password",
        ),
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nDATABASE_URL = "redis://:s3cret-pw@cache:6379"\n',
            "host.toml:4:1: upstream.a.env.DATABASE_URL: holds a URL with a password",
        ),
        (
            # ... one the first check missed: in the query, a '/' in it, a libpq keyword
            '[upstream.a]\ncommand = "x"\nargs = ["--dsn=postgresql://db/app?password=s3cret-pw"]\n',
            "host.toml:3:1: upstream.a.args: an argument holds a URL with a password",
        ),
        (
            '[upstream.a]\ncommand = "env"\nargs = ["PGPASSWORD=s3cret-pw", "server"]\n',
            "host.toml:3:1: upstream.a.args: an argument holds a URL with a password",
        ),
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nDSN = "host=db sslpassword=s3cret-pw"\n',
            "host.toml:4:1: upstream.a.env.DSN: holds a URL with a password",
        ),
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nDB = "postgresql://u:s3cret/Zm9v@db/a"\n',
            "host.toml:4:1: upstream.a.env.DB: holds a URL with a password",
        ),
        (
            '[upstream.a]\nurl = "https://example.invalid/mcp"\nheaders = { X-Upstream = "https://u:pw@x/" }\n',
            "host.toml:3:13: upstream.a.headers.X-Upstream: holds a URL with a password",
        ),
        (
            # a credential option or header: its value as the next argument or after '=',
            # an env(1) assignment, a header line (mcp-remote --header, curl -H)
            '[upstream.a]\ncommand = "npx"\nargs = ["-y", "ctx-mcp", "--api-key", "ck-s3cret-pw"]\n',
            "host.toml:3:1: upstream.a.args: an argument holds a URL with a password",
        ),
        (
            '[upstream.a]\ncommand = "x"\nargs = ["--header", "Authorization: Basic dTpwdw=="]\n',
            "host.toml:3:1: upstream.a.args: an argument holds a URL with a password",
        ),
        (
            # a shell expands the reference into its children's command lines
            '[upstream.a]\ncommand = "/bin/sh"\nargs = ["-c", "exec srv --token $TOKEN"]\n'
            '[upstream.a.credentials]\nTOKEN = { env = "T" }\n',
            "host.toml:3:1: upstream.a.args: a shell's arguments name no $VAR",
        ),
        (
            # ... and so does a shell a wrapper runs (timeout, nice, setsid run their
            # arguments as the program), and npx -c, which runs its string in a shell
            '[upstream.a]\ncommand = "timeout"\nargs = ["600", "/bin/sh", "-c", "srv $TOKEN"]\n'
            '[upstream.a.credentials]\nTOKEN = { env = "T" }\n',
            "host.toml:3:1: upstream.a.args: a shell's arguments name no $VAR",
        ),
        (
            '[upstream.a]\ncommand = "npx"\nargs = ["-y", "-p", "srv", "-c", "srv ${TOKEN}"]\n'
            '[upstream.a.credentials]\nTOKEN = { env = "T" }\n',
            "host.toml:3:1: upstream.a.args: a shell's arguments name no $VAR",
        ),
        (
            # a scheme and a literal token: not a reference for the program to expand
            '[upstream.a]\ncommand = "x"\nargs = ["--header", "Authorization:Bearer sk-s3cret-pw"]\n',
            "host.toml:3:1: upstream.a.args: an argument holds a URL with a password",
        ),
        (
            # a reference to a variable the upstream is given, with a shell-style default:
            # not one the program expands as SharedOS would be read to
            '[upstream.a]\ncommand = "x"\nargs = ["${TOKEN:-x}"]\n'
            '[upstream.a.credentials]\nTOKEN = { env = "T" }\n',
            "host.toml:3:1: upstream.a.args: arguments are passed as written",
        ),
        (
            '[upstream.a]\ncommand = "env"\nargs = ["GITHUB_TOKEN=ghp_s3cret", "server"]\n',
            "host.toml:3:1: upstream.a.args: an argument holds a URL with a password",
        ),
        (
            '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nOPTS = "--client-secret=s3cret-pw"\n',
            "host.toml:4:1: upstream.a.env.OPTS: holds a URL with a password",
        ),
        (
            '[upstream.a]\nurl = "https://user:pw@example.invalid/mcp"\n',
            "host.toml:2:1: upstream.a.url: must not carry user:password@",
        ),
        (
            '[upstream.a]\nurl = "https://example.invalid/mcp?api_key=zzz"\n',
            "host.toml:2:1: upstream.a.url: query parameter 'api_key' looks like a credential",
        ),
        (
            '[upstream.a]\nnamespace = "files"\ncommand = "x"\n',
            "host.toml:2:1: upstream.a.namespace: namespace 'files' is SharedOS's own",
        ),
        (
            '[upstream.a]\nnamespace = "g.x"\ncommand = "x"\n',
            "host.toml:2:1: upstream.a.namespace: a namespace is 1-64 characters",
        ),
        (
            '[upstream.a]\ncommand = "x"\nurl = "http://127.0.0.1:1/mcp"\n',
            "host.toml:1:1: upstream.a: give exactly one of command (stdio) or url",
        ),
        (
            '[upstream.a]\ncommand = "x"\ntimeouts = { call_s = -1 }\n',
            "host.toml:3:14: upstream.a.timeouts.call_s: Input should be greater than 0",
        ),
        (
            '[upstream.a]\ncommand = "x"\ncolour = "red"\n',
            "host.toml:3:1: upstream.a.colour: unknown key",
        ),
        (
            '[upstream.a]\ncommand = "x"\n\n[upstream.b]\nnamespace = "a"\ncommand = "y"\n',
            "host.toml:5:1: upstream.b.namespace: namespace 'a' is already used by upstream 'a'",
        ),
    ],
)
def test_problems_are_positioned_and_never_echo_values(text: str, expected: str) -> None:
    found = problems(text)
    assert any(p.startswith(expected) for p in found), found
    for secret in ("ghp_literal0123456789", "pw@", "zzz", "sk-literal", "AIzaLiteral", "s3cret"):
        assert not any(secret in p for p in found)


@pytest.mark.parametrize(
    "table",
    [
        '[upstream.a.credentials]\nAUTH_HEADER = { env = "REMOTE_AUTH" }\n',
        '[upstream.a.principals.alice]\nAUTH_HEADER = { env = "ALICE_AUTH" }\n',
        '[upstream.a.env]\nAUTH_HEADER = "none"\n',
    ],
    ids=["credentials", "per-person", "env"],
)
def test_an_argument_may_name_a_variable_the_upstream_is_given(table: str) -> None:
    """mcp-remote's documented way to send a header without putting it on its command
    line: the argument names the variable, the program expands it from its environment."""
    text = (
        '[upstream.a]\ncommand = "npx"\nargs = ["-y", "mcp-remote", '
        '"https://mcp.example.com/mcp", "--header", "Authorization:${AUTH_HEADER}", '
        '"--header", "X-Api-Key: Bearer $AUTH_HEADER"]\n' + table
    )
    config = parse_host_config(text, "host.toml", base_dir=Path("/etc/sharedos"))
    assert "Authorization:${AUTH_HEADER}" in config.upstream["a"].args  # as written
    assert problems(text.replace("${AUTH_HEADER}", "${OTHER}")) == [
        "host.toml:3:1: upstream.a.args: arguments are passed as written: SharedOS expands "
        "no $VAR, and a value from the host environment is a credential that never goes on a "
        "command line; ${OTHER} names no variable of the upstream's env or credentials. "
        "Declare the value under [upstream.a.credentials] (or env, for a plain value): the "
        "upstream gets it in its environment, and an argument may name it for the program "
        'to expand itself (mcp-remote\'s --header "Authorization:${AUTH_HEADER}")'
    ]


def test_every_bad_upstream_is_reported_not_only_the_first() -> None:
    text = (
        '[upstream.a]\ncommand = "x"\n[upstream.a.credentials]\nK = "v1"\n'
        '[upstream.b]\nurl = "ftp://x"\n'
    )
    found = problems(text)
    assert len([p for p in found if "upstream.a." in p]) == 1
    assert any("upstream.b.url" in p for p in found)


def test_credentials_resolve_from_the_environment_only() -> None:
    config = parse_host_config(GOOD, "host.toml").upstream["gh"]
    with pytest.raises(CredentialError) as info:
        resolve_credentials(config, {})
    assert "GH_TOKEN, which is not set" in str(info.value)
    with pytest.raises(CredentialError):
        resolve_credentials(config, {"GH_TOKEN": "short"})
    creds = resolve_credentials(config, {"GH_TOKEN": "a-long-enough-token"})
    assert creds.env() == {"Authorization": "Bearer a-long-enough-token"}
    assert "a-long-enough-token" in creds.secrets()  # the bare value is scrubbed too
    assert "a-long-enough-token" not in repr(creds)
    other = resolve_credentials(config, {"GH_TOKEN": "another-long-token"})
    assert other.fingerprint != creds.fingerprint  # pooled separately


def test_the_scrubber_removes_every_encoding() -> None:
    secret = 'tok"en\\with\nodd'
    scrub = Redactor([secret, "short"])
    import json

    for form in (secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]):
        assert scrub.scrub(f"a {form} b") == "a [redacted] b"
    assert scrub.scrub_json({secret: [secret, 1]}) == {"[redacted]": ["[redacted]", 1]}
    assert scrub.scrub("short stays") == "short stays"  # below the floor: never substring-scrubbed


def _config() -> UpstreamConfig:
    return parse_host_config('[upstream.u]\ncommand = "x"\n', "h.toml").upstream["u"]


async def _noop(args: object, hctx: object) -> None:
    return None


def test_a_non_object_schema_is_refused_naming_upstream_and_tool() -> None:
    raw = raw_tool({"name": "t", "description": "d", "inputSchema": {"type": "string"}})
    refused = build_definition(_config(), raw, _noop, {})
    assert isinstance(refused, Refusal)
    assert refused.describe().startswith("upstream 'u', tool 't':")
    assert 'root type must be "object"' in refused.reason


def test_plain_names_that_only_contain_key_or_pass_stay_plain() -> None:
    """The credential-name rule refuses what can only be a credential, not every word."""
    text = (
        '[upstream.a]\ncommand = "x"\n[upstream.a.env]\n'
        'KEYRING_BACKEND = "fail"\nPASSTHROUGH = "1"\nCOMPASS_DIR = "/srv"\n'
    )
    config = parse_host_config(text, "host.toml")
    assert set(config.upstream["a"].env) == {"KEYRING_BACKEND", "PASSTHROUGH", "COMPASS_DIR"}


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://docs.example.invalid/mcp", True),
        ("http://192.0.2.7:8080/mcp", True),
        ("https://docs.example.invalid/mcp", False),
        ("http://127.0.0.1:8080/mcp", False),
        ("http://localhost:8080/mcp", False),
        ("http://[::1]:8080/mcp", False),
    ],
)
def test_an_oauth_upstream_on_another_machine_is_reached_over_https_only(
    url: str, refused: bool
) -> None:
    """Each principal's bearer token rides every request to an OAuth upstream: over plain
    http:// to another machine it crossed the network in clear, and the host file passed."""
    text = f'[upstream.a]\nurl = "{url}"\nidentity = "per-person"\n[upstream.a.oauth]\n'
    if not refused:
        parse_host_config(text, "host.toml", base_dir=Path("/etc/sharedos"))
        return
    (said,) = problems(text)
    assert said.startswith("host.toml:2:1: upstream.a.url: an OAuth upstream is reached over"), said


def test_an_upstream_entrys_problems_are_all_reported_at_once() -> None:
    """`sharedos host check` reports every problem at once: a namespace refused, or a
    table giving neither command nor url, stopped the entry's check there, so its bad
    timeouts and pinning were said only after that was fixed and the check run again."""
    found = problems(
        '[upstream.a]\ntimeouts = { call_s = -1 }\npinning = "maybe"\n'
        '[upstream.b]\nnamespace = "files"\ncommand = "x"\nlimits = { max_tools = 0 }\n'
    )
    assert found == [
        "host.toml:1:1: upstream.a: give exactly one of command (stdio) or url (streamable HTTP)",
        "host.toml:2:14: upstream.a.timeouts.call_s: Input should be greater than 0",
        "host.toml:3:1: upstream.a.pinning: Input should be 'required' or 'off'",
        "host.toml:5:1: upstream.b.namespace: namespace 'files' is SharedOS's own; choose "
        "another for the upstream",
        "host.toml:7:12: upstream.b.limits.max_tools: Input should be greater than 0",
    ]


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://docs.example.invalid/mcp", True),
        ("http://192.0.2.7:8080/mcp", True),
        ("https://docs.example.invalid/mcp", False),
        ("http://127.0.0.1:8080/mcp", False),
        ("http://localhost:8080/mcp", False),
        ("http://[::1]:8080/mcp", False),
    ],
)
@pytest.mark.parametrize(
    "credentials",
    [
        '[upstream.a.credentials]\nAuthorization = { env = "DOCS_TOKEN", prefix = "Bearer " }\n',
        'identity = "per-person"\n[upstream.a.principals.alice]\nX-Api-Key = { env = "ALICE_KEY" }\n',
        'identity = "per-person"\n[upstream.a.groups.ops]\nX-Api-Key = { store = "ops-key" }\n',
    ],
)
def test_an_upstream_given_credentials_on_another_machine_is_reached_over_https_only(
    url: str, refused: bool, credentials: str
) -> None:
    """A static credential (shared, a principal's, a group's) is a header sent with every
    request to the upstream: over plain http:// to another machine it crossed the network
    in clear, and the host file passed (only an OAuth upstream's url was checked)."""
    text = f'[upstream.a]\nurl = "{url}"\n{credentials}'
    if not refused:
        parse_host_config(text, "host.toml", base_dir=Path("/etc/sharedos"))
        return
    (said,) = problems(text)
    assert said.startswith("host.toml:2:1: upstream.a.url: an upstream given credentials"), said


def test_an_upstream_with_no_credential_may_be_plain_http_elsewhere() -> None:
    parse_host_config('[upstream.a]\nurl = "http://docs.example.invalid/mcp"\n', "host.toml")


def test_an_env_setting_named_like_a_credential_whose_value_cannot_be_one_is_plain() -> None:
    """MAX_TOKENS = "4096", AUTH_MODE = "none", GOOGLE_APPLICATION_CREDENTIALS = "/srv/sa.json"
    were refused as credentials, and the message's way out (move it to credentials) was
    none: a credential under eight characters is refused there, and a path became a secret
    scrubbed from every record. A value that can be a credential is still refused."""
    config = parse_host_config(
        '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nMAX_TOKENS = "4096"\n'
        'AUTH_MODE = "none"\nSESSION_TIMEOUT_S = "30"\n'
        'GOOGLE_APPLICATION_CREDENTIALS = "/srv/keys/sa.json"\nSSL_KEY_FILE = "~/tls/key.pem"\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert config.upstream["a"].env["MAX_TOKENS"] == "4096"
    for value in ("sk-literal-0123", "12345678", "none-of-it"):
        found = problems(f'[upstream.a]\ncommand = "x"\n[upstream.a.env]\nAPI_KEY = "{value}"\n')
        assert found and "looks like a credential" in found[0], value


def test_a_credential_inside_a_json_env_value_is_refused() -> None:
    """Notion's documented OPENAPI_MCP_HEADERS = '{"Authorization": "Bearer ntn_..."}' (and
    any JSON or dict value with "api_key": "...") passed sharedos host check as a plain env
    value: the token was no secret of the run, scrubbed from nothing the upstream said. A
    JSON value with no credential in it, or one naming where the credential is (a file), is plain."""
    headers = '{"Authorization": "Bearer ntn_PLANTED0secret11", "Notion-Version": "2022-06-28"}'
    for value in (headers, '{"api_key":"PLANTED0secret11"}', "{'client_secret': 'PLANTED0s11'}"):
        toml = json.dumps(value)  # a TOML basic string
        found = problems(f'[upstream.a]\ncommand = "x"\n[upstream.a.env]\nCFG = {toml}\n')
        assert found and "holds a URL with a password" in found[0], value
        assert "[upstream.a.credentials]" in found[0]
    plain = (
        '{"Notion-Version": "2022-06-28", "max_tokens": 4096, "token_type": "bearer", '
        '"api_key": null, "auth_token": "", "password_file": "/run/pw"}'
    )
    config = parse_host_config(
        f"[upstream.a]\ncommand = \"x\"\n[upstream.a.env]\nCFG = '{plain}'\n",
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert config.upstream["a"].env["CFG"] == plain


def test_a_base64_credential_starting_with_a_slash_is_no_path() -> None:
    """A base64 key may start with / (/Zm9v...): API_KEY = "/Zm9v..." in env and
    args = ["--api-key", "/Zm9v..."] passed as a file's path, the key no secret of the run.
    A path a credential's own name is given is one with a . (no base64 has one); a setting
    named as where a credential is keeps any path."""
    key = "/Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5/QUJD"
    found = problems(f'[upstream.a]\ncommand = "x"\n[upstream.a.env]\nAPI_KEY = "{key}"\n')
    assert found and "looks like a credential" in found[0]
    for args in (f'["--api-key", "{key}"]', f'["--token={key}"]'):
        found = problems(f'[upstream.a]\ncommand = "x"\nargs = {args}\n')
        assert found and "credential option" in found[0], args
    config = parse_host_config(
        '[upstream.a]\ncommand = "x"\nargs = ["--private-key", "/etc/tls/key.pem"]\n'
        '[upstream.a.env]\nPRIVATE_KEY = "~/.ssh/id_ed25519"\n'
        'GOOGLE_APPLICATION_CREDENTIALS = "/run/secrets/sa"\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert config.upstream["a"].env["PRIVATE_KEY"] == "~/.ssh/id_ed25519"


def test_a_credential_option_given_a_file_that_exists_is_a_path(tmp_path: Path) -> None:
    """A container's secret file has no dot (/run/secrets/pk): given to --private-key it
    was refused as the key itself; a file that exists there is its path (a base64 key is
    no file on the host)."""
    secret = tmp_path / "pk"
    secret.write_text("not read by the check")
    config = parse_host_config(
        f'[upstream.a]\ncommand = "x"\nargs = ["--private-key", "{secret}"]\n'
        f'[upstream.a.env]\nPRIVATE_KEY = "{secret}"\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert config.upstream["a"].env["PRIVATE_KEY"] == str(secret)
    found = problems(f'[upstream.a]\ncommand = "x"\nargs = ["--api-key", "{secret}-gone"]\n')
    assert found and "credential option" in found[0]


def test_a_short_setting_that_only_mentions_a_credential_is_plain() -> None:
    """AUTH_TYPE = "oauth", SESSION_TTL = "30m" were refused as credentials and the
    message's way out was none (credentials refuses a value under eight characters). A
    short value under a name that says it is the credential itself is still refused."""
    config = parse_host_config(
        '[upstream.a]\ncommand = "x"\n[upstream.a.env]\nAUTH_TYPE = "oauth"\n'
        'SESSION_TTL = "30m"\nTOKEN_LIMIT = "100k"\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert config.upstream["a"].env["AUTH_TYPE"] == "oauth"
    for name in ("DB_PASSWORD", "API_KEY", "GITHUB_TOKEN", "CLIENT_SECRET", "DB_PASS"):
        found = problems(f'[upstream.a]\ncommand = "x"\n[upstream.a.env]\n{name} = "hunter2"\n')
        assert found and "looks like a credential" in found[0], name


def test_a_setting_that_describes_a_credential_is_plain() -> None:
    """AUTH_PROVIDER = "keycloak", SECRETS_MANAGER_REGION = "eu-west-1", AUTH_HEADER_NAME =
    "X-Api-Key", CREDENTIALS_PROFILE = "production" were refused as credentials (eight
    characters or more under a name that mentions one): moved to credentials as the message
    said, "eu-west-1" was scrubbed from every answer as a secret. A name ending in a word
    that describes a credential is plain, unless its value is written like a token."""
    plain = {
        "AUTH_PROVIDER": "keycloak",
        "SECRETS_MANAGER_REGION": "eu-west-1",
        "AUTH_HEADER_NAME": "X-Api-Key",
        "CREDENTIALS_PROFILE": "production",
        "TOKEN_TYPE": "urn:ietf:params:oauth:token-type:jwt",
    }
    table = "".join(f'{name} = "{value}"\n' for name, value in plain.items())
    config = parse_host_config(
        f'[upstream.a]\ncommand = "x"\n[upstream.a.env]\n{table}',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert dict(config.upstream["a"].env) == plain
    for value in (
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "sk-live-0123456789abcd",
        "Bearer sk-live-0123456789abcd",  # a header's value, scheme and token
    ):
        found = problems(
            f'[upstream.a]\ncommand = "x"\n[upstream.a.env]\nAUTH_SCHEME = "{value}"\n'
        )
        assert found and "looks like a credential" in found[0], value


def test_a_token_inside_a_json_credential_is_scrubbed_on_its_own() -> None:
    """Notion's headers, given as the refusal says (OPENAPI_MCP_HEADERS under credentials),
    were scrubbed only whole: an upstream saying "invalid token ntn_..." showed the token.
    The strings under credential keys, and the token after Bearer, are secrets too; the
    other strings in the value are not."""
    config = parse_host_config(
        '[upstream.a]\ncommand = "x"\n[upstream.a.credentials]\n'
        'OPENAPI_MCP_HEADERS = { env = "NOTION_HEADERS" }\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    ).upstream["a"]
    value = json.dumps(
        {"Authorization": "Bearer ntn_PLANTED0secret11", "Notion-Version": "2022-06-28"}
    )
    creds = resolve_credentials(config, {"NOTION_HEADERS": value})
    scrub = Redactor(creds.secrets())
    said = "401: API token is invalid: ntn_PLANTED0secret11 (version 2022-06-28)"
    assert scrub.scrub(said) == "401: API token is invalid: [redacted] (version 2022-06-28)"


def test_a_url_under_a_name_that_only_mentions_a_credential_is_plain() -> None:
    """An OAuth server's or a secret manager's address (``OAUTH_TOKEN_URL``,
    ``AUTH_ISSUER_URL``, ``SECRETS_ENDPOINT``) was refused as a credential: moved to
    credentials, as the message said, it was scrubbed from every record and answer. A URL
    that carries no credential (no user information, no query value named as one) under
    a name that does not say it is the credential itself is plain; one that carries a
    credential, or sits under a name that says it is one, is still refused."""
    config = parse_host_config(
        '[upstream.a]\ncommand = "x"\n[upstream.a.env]\n'
        'OAUTH_TOKEN_URL = "https://login.example.com/oauth2/token"\n'
        'AUTH_ISSUER_URL = "https://login.example.com/realms/corp"\n'
        'SECRETS_ENDPOINT = "http://127.0.0.1:8200/v1/secret"\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert config.upstream["a"].env["OAUTH_TOKEN_URL"] == "https://login.example.com/oauth2/token"
    for line in (
        'AUTH_SERVER_URL = "https://admin:hunter2-pw@login.example.com/"',
        'TOKEN_URL = "https://login.example.com/t?access_token=abcdefgh12345678"',
        'API_KEY = "https://login.example.com/oauth2/token"',
    ):
        found = problems(f'[upstream.a]\ncommand = "x"\n[upstream.a.env]\n{line}\n')
        assert found and "credential" in found[0], line


def test_a_key_inside_a_json_credential_is_scrubbed_by_its_body_not_its_armour() -> None:
    """A service account's JSON given under credentials (its ``private_key`` a PEM): the
    "token after Bearer" of that PEM was its armour's last word, ``KEY-----``, made a
    secret that mangled every public key an upstream answered ("-----END PUBLIC
    [redacted]"), while the key's base64 body, said without the armour, was no secret."""
    config = parse_host_config(
        '[upstream.a]\ncommand = "x"\n[upstream.a.credentials]\n'
        'GOOGLE_SERVICE_ACCOUNT_JSON = { env = "SA_JSON" }\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    ).upstream["a"]
    lines = [
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
        "PLANTED0keybody0line2abcdefgh",
    ]
    pem = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END PRIVATE KEY-----\n"
    value = json.dumps({"type": "service_account", "private_key": pem, "client_id": "1234"})
    scrub = Redactor(resolve_credentials(config, {"SA_JSON": value}).secrets())
    public = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----"
    assert scrub.scrub(public) == public
    assert "PLANTED0keybody" not in scrub.scrub("key: " + "".join(lines))
    assert "PLANTED0keybody" not in scrub.scrub(lines[1])


def test_a_pem_credential_given_bare_is_scrubbed_by_its_body() -> None:
    """A PEM key given as the whole credential (a GitHub App's ``GITHUB_PRIVATE_KEY``), with
    real line breaks or with ``\\n`` written out (one env value, a ``.env`` line): only the
    armoured text was a secret, so the key's body said without the armour, or one line of
    it (``head -3 key.pem`` through a shell tool), was recorded and relayed verbatim. A
    header line every encrypted key shares is no part of it."""
    config = parse_host_config(
        '[upstream.a]\ncommand = "x"\n[upstream.a.credentials]\n'
        'GITHUB_PRIVATE_KEY = { env = "GH_APP_KEY" }\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    ).upstream["a"]
    lines = [
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
        "PLANTED0keybody0line2abcdefgh",
        "PLANTED1keybody0line3abcdefgh",
    ]
    armoured = (
        "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\n"
        + "\n".join(lines)
        + "\n-----END RSA PRIVATE KEY-----"
    )
    for value in (armoured + "\n", armoured.replace("\n", "\\n")):
        scrub = Redactor(resolve_credentials(config, {"GH_APP_KEY": value}).secrets())
        assert "PLANTED" not in scrub.scrub("key: " + "".join(lines) + " (base64)")
        assert "PLANTED" not in scrub.scrub(f"$ head -3 key.pem\n{lines[1]}\n{lines[2]}\n$ ls")
        assert "PLANTED" not in scrub.scrub(armoured.replace("\n", "\r\n") + "\nok")
        assert scrub.scrub("Proc-Type: 4,ENCRYPTED") == "Proc-Type: 4,ENCRYPTED"


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("timeout", ["3600", "sh", "-c", "exec srv --token $TOKEN"]),
        ("uv", ["run", "bash", "-c", "srv --header 'Authorization: ${TOKEN}'"]),
        ("python3", ["-c", "import os; os.system('srv --token $TOKEN')"]),
        ("node", ["-e", "require('child_process').execSync('srv ${TOKEN}')"]),
        ("npx", ["-c", "srv --token $TOKEN"]),
        ("/usr/bin/rbash", ["-c", "srv --token $TOKEN"]),
        ("tcsh", ["-c", "srv --token $TOKEN"]),
    ],
    ids=["timeout-sh", "uv-run-bash", "python-c", "node-e", "npx-c", "rbash", "tcsh"],
)
def test_a_reference_inside_a_script_is_refused_whatever_runs_it(
    command: str, args: list[str]
) -> None:
    """A reference inside other text is a script's: whatever runs it (a shell after
    ``timeout`` or ``uv run``, ``python -c``'s os.system, ``npx -c``) expands it onto the
    command line of the program it starts, which every local user reads; only a whole value
    (``${TOKEN}``, ``--token=${TOKEN}``, ``Authorization: Bearer ${TOKEN}``) is the
    program's own template."""
    text = (
        f"[upstream.a]\ncommand = {json.dumps(command)}\nargs = {json.dumps(args)}\n"
        '[upstream.a.credentials]\nTOKEN = { env = "T" }\n'
    )
    found = problems(text)
    assert len(found) == 1 and found[0].startswith("host.toml:3:1: upstream.a.args: ")
    whole = ["${TOKEN}", "--token=${TOKEN}", "Authorization: Bearer ${TOKEN}", "bearer $TOKEN"]
    config = parse_host_config(
        f'[upstream.a]\ncommand = "srv"\nargs = {json.dumps(whole)}\n'
        '[upstream.a.credentials]\nTOKEN = { env = "T" }\n',
        "host.toml",
        base_dir=Path("/etc/sharedos"),
    )
    assert list(config.upstream["a"].args) == whole


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("bash", ["-c", "exec srv --api-key sk-s3cret-pw-0123"]),
        ("timeout", ["600", "sh", "-c", "srv --api-key $(op read op://vault/srv/key)"]),
        ("sh", ["-c", 'srv --token="$(cat /run/secrets/srv)"']),
        ("bash", ["-c", "srv --password `pass show db`"]),
        ("npx", ["-y", "-p", "srv", "-c", "srv --client-secret $(cat ~/.srv)"]),
        ("python3", ["-c", "import os; os.system('srv --api-key sk-s3cret-pw-0123')"]),
    ],
    ids=["literal", "op-read", "option-equals", "backticks", "npx-c", "python-c"],
)
def test_a_credential_option_in_a_script_is_refused(command: str, args: list[str]) -> None:
    """A script is a command line of its own: ``bash -c 'srv --api-key K'`` (or ``python
    -c``'s os.system) puts K on its interpreter's command line and ``srv``'s, and in a
    shell so does ``$(op read ...)`` or ``$(cat file)`` after a credential option, the
    shell filling in the command's output. Only ``--api-key=K`` was seen inside the one
    argument that holds the script: these were accepted, and ``/proc/PID/cmdline`` of
    ``srv`` showed the key to every local user."""
    text = f"[upstream.a]\ncommand = {json.dumps(command)}\nargs = {json.dumps(args)}\n"
    found = problems(text)
    assert len(found) == 1
    assert found[0].startswith("host.toml:3:1: upstream.a.args: an argument holds a URL")
    assert "in a script too" in found[0]
    assert "s3cret" not in found[0] and "op://vault" not in found[0]


@pytest.mark.parametrize(
    "script",
    [
        # the command's output goes into srv's environment, never on a command line
        "GITHUB_TOKEN=$(op read op://vault/gh/token) exec npx -y srv",
        'export API_KEY="$(cat ~/.srv-key)"; exec srv',
        "cd $(dirname $0) && exec node srv.js --port 8080",
        "exec srv --token-file ~/.srv-token --private-key /etc/tls/srv.pem",
    ],
)
def test_a_script_that_puts_no_credential_on_a_command_line_is_accepted(
    script: str,
) -> None:
    """What a shell sets in its child's environment, and a file's path after a credential
    option, put no credential on a command line."""
    text = f'[upstream.a]\ncommand = "sh"\nargs = ["-c", {json.dumps(script)}]\n'
    config = parse_host_config(text, "host.toml", base_dir=Path("/etc/sharedos"))
    assert list(config.upstream["a"].args) == ["-c", script]

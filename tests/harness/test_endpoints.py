"""A model endpoint that refuses connections is named in the refusal, never shown if secret."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sharedos.harness.adapters.base import Launch
from sharedos.harness.endpoints import ModelEndpointRefused, check_model_endpoints


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: refuses connections


def _refusal(launch: Launch) -> str:
    with pytest.raises(ModelEndpointRefused) as err:
        check_model_endpoints("cc", launch, skip=())
    return str(err.value)


def test_an_endpoint_from_the_host_files_env_is_named_by_its_variable(tmp_path: Path) -> None:
    """Every env value of the host file is a secret, so the URL itself never shows: the
    message read "its model endpoint [redacted] refuses connections", naming nothing the
    operator could look for. It names the variable and the address probed."""
    port = _closed_port()
    for url in (f"http://127.0.0.1:{port}/", f"http://op:tok-7f3a9c2e1b@localhost:{port}/v1"):
        env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-operator-0123456789"}
        said = _refusal(Launch([], env, tmp_path, secret_values=tuple(env.values())))
        assert f"its model endpoint ANTHROPIC_BASE_URL (at 127.0.0.1:{port}) refuses" in said
        assert "[redacted]" not in said and url not in said and "tok-7f3a9c2e1b" not in said


def test_an_endpoint_that_is_no_secret_is_shown_as_written(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/"
    said = _refusal(Launch([], {"OPENAI_BASE_URL": url}, tmp_path))
    assert f"its model endpoint {url} refuses connections" in said


def test_an_endpoint_written_from_vendor_keeps_its_credentials_out_of_the_refusal(
    tmp_path: Path,
) -> None:
    """A ``base_url`` the adapter wrote from ``vendor`` (Codex's config.toml, Pi's models.json)
    is no env value, so it is no secret of the launch: the refusal printed it as written,
    a password in its user information, an ``?api-key=`` and a fragment included."""
    port = _closed_port()
    url = f"http://op:pw-7f3a9c2e1b@127.0.0.1:{port}/v1?api-key=key-5d2e8a1c4f&v=2#sig-9b1c3d5e7f"
    config = tmp_path / "config.toml"
    config.write_text(f'[model_providers.p]\nbase_url = "{url}"\n', encoding="utf-8")
    models = tmp_path / "models.json"
    models.write_text('{"providers": {"p": {"baseUrl": "' + url + '"}}}', encoding="utf-8")
    for path in (config, models):
        said = _refusal(Launch([], {}, tmp_path, files=[path]))
        for secret in ("pw-7f3a9c2e1b", "key-5d2e8a1c4f", "sig-9b1c3d5e7f"):
            assert secret not in said, said
        assert f"its model endpoint http://op:***@127.0.0.1:{port}/v1?api-key=***&v=***" in said

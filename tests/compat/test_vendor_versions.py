"""The compat modules run only on the vendor versions they were written for.

If one of these fails, a dependency moved: re-read ``sharedos/compat/<vendor>.py``
against the new release (every private attribute it touches), then update
its ``WRITTEN_FOR`` and the exact pin in ``pyproject.toml`` together.
"""

from __future__ import annotations

import importlib
import re
from importlib import metadata
from pathlib import Path

import pytest

from sharedos.compat import VendorVersionError, require_version

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("module", "distribution"), [("mcp_sdk", "mcp"), ("uvicorn", "uvicorn")])
def test_installed_version_is_the_one_the_compat_module_was_written_for(
    module: str, distribution: str
) -> None:
    compat = importlib.import_module(f"sharedos.compat.{module}")
    installed = metadata.version(distribution)
    assert installed == compat.WRITTEN_FOR, (
        f"sharedos.compat.{module} was written for {distribution} {compat.WRITTEN_FOR}, "
        f"{installed} is installed: re-check its private reaches before moving the pin"
    )


@pytest.mark.parametrize(("module", "distribution"), [("mcp_sdk", "mcp"), ("uvicorn", "uvicorn")])
def test_pyproject_pins_exactly_what_compat_was_written_for(module: str, distribution: str) -> None:
    compat = importlib.import_module(f"sharedos.compat.{module}")
    text = (REPO / "pyproject.toml").read_text()
    pins = re.findall(rf'"{distribution}==([^"]+)"', text)
    assert pins == [compat.WRITTEN_FOR]


def test_another_version_is_refused_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata, "version", lambda name: "99.0.0")
    with pytest.raises(VendorVersionError, match=r"uvicorn 99\.0\.0 is installed"):
        require_version("uvicorn", "0.55.0", "sharedos.compat.uvicorn")


def test_a_missing_distribution_is_refused_loudly() -> None:
    with pytest.raises(VendorVersionError, match="not installed"):
        require_version("sharedos-no-such-distribution", "1.0", "sharedos.compat.x")


def test_the_private_state_compat_relies_on_is_there() -> None:
    """Each reach, checked on the installed vendor code (a rename fails here, not in a turn)."""
    from mcp.server.streamable_http import StreamableHTTPServerTransport
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from sharedos.compat import mcp_sdk, uvicorn

    assert mcp_sdk.WRITTEN_FOR and uvicorn.WRITTEN_FOR
    assert hasattr(StreamableHTTPSessionManager, "_discard_session")
    assert "_server_instances" in StreamableHTTPSessionManager.__init__.__code__.co_names
    assert "idle_scope" in StreamableHTTPServerTransport.__init__.__code__.co_names
    for name in (
        "_unset_keepalive_if_required",
        "on_response_complete",
        "data_received",
        "shutdown",
    ):
        assert hasattr(H11Protocol, name), name
    assert "timeout_keep_alive_task" in H11Protocol.__init__.__code__.co_names


def test_request_streams_are_routed_only_where_the_bridge_asks() -> None:
    """The transport's POST branch builds its SSE response by the name the compat module
    replaces, with ``_run_sse_writer`` as its data sender; other callers get the SDK's."""
    import functools
    import inspect

    from mcp.server import streamable_http

    from sharedos.compat import mcp_sdk

    source = inspect.getsource(streamable_http.StreamableHTTPServerTransport._handle_post_request)
    assert "EventSourceResponse(" in source
    assert "self._run_sse_writer" in source
    mcp_sdk.route_request_streams()
    built: list[tuple[object, ...]] = []
    sender = functools.partial(
        streamable_http.StreamableHTTPServerTransport._run_sse_writer.__get__(object())
    )
    make = streamable_http.EventSourceResponse
    marker = mcp_sdk.REQUEST_STREAM.set(lambda *a: built.append(a) or "ours")
    try:
        assert make(content=iter(()), data_sender_callable=sender, headers={}) == "ours"
        other = make(content=iter(()), data_sender_callable=lambda: None, headers={})
    finally:
        mcp_sdk.REQUEST_STREAM.reset(marker)
    assert isinstance(other, mcp_sdk.SdkEventSourceResponse)
    assert isinstance(
        make(content=iter(()), data_sender_callable=sender), mcp_sdk.SdkEventSourceResponse
    )
    assert len(built) == 1

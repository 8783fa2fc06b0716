"""SystemIdentity: wire spelling, and the catalogHash comparison it makes possible."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import sharedos
from sharedos.identity import (
    ColumnKind,
    McpSupport,
    SystemIdentity,
    catalog_hash_mismatch,
)


def _ident(**kw: object) -> SystemIdentity:
    base: dict[str, object] = {
        "harness": "pi",
        "harness_version": "1.6.0",
        "column": ColumnKind.MCP,
        "declared_model": "anthropic/claude-sonnet (declared)",
        "mcp_support": McpSupport.EXTENSION,
        "mcp_extension": "pi-mcp-adapter",
        "catalog_hash": "a" * 64,
        "policy_bundle_hash": "b" * 64,
    }
    base.update(kw)
    return SystemIdentity.model_validate(base)


def test_wire_form_is_camel_case_and_complete() -> None:
    rec = _ident().as_record()
    assert rec == {
        "harness": "pi",
        "harnessVersion": "1.6.0",
        "column": "mcp",
        "declaredModel": "anthropic/claude-sonnet (declared)",
        "mcpSupport": "extension",
        "mcpExtension": "pi-mcp-adapter",
        "catalogHash": "a" * 64,
        "policyBundleHash": "b" * 64,
        "policyBundleRevision": None,
        "confinement": None,
        "sharedosVersion": sharedos.__version__,
    }
    assert SystemIdentity.model_validate(rec) == _ident()
    assert _ident().label() == "mcp: pi 1.6.0 via pi-mcp-adapter"


def test_unknown_fields_and_values_are_refused() -> None:
    with pytest.raises(ValidationError):
        _ident(mcp_support="sometimes")
    with pytest.raises(ValidationError):
        SystemIdentity.model_validate({**_ident().as_record(), "model": "x"})


def test_catalog_hash_mismatch_ignores_columns_without_a_catalogue() -> None:
    same = {"a": _ident(), "b": _ident(), "live": _ident(catalog_hash=None), "gone": None}
    assert catalog_hash_mismatch(same) is None
    differ = {**same, "c": _ident(catalog_hash="c" * 64)}
    assert catalog_hash_mismatch(differ) == {"a": "a" * 64, "b": "a" * 64, "c": "c" * 64}

"""The manifest: the shipped one covers the required rows; a malformed one gets positioned errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedos.conformance.manifest import (
    MANIFEST_PATH,
    ManifestError,
    load_manifest,
    parse_manifest,
)
from sharedos.outcomes import Outcome, ReasonCode


def test_shipped_manifest_covers_the_required_kernel_rows() -> None:
    m = load_manifest()
    expect = {r.id: (r.expect.outcome, r.expect.reason) for r in m.rows}
    assert expect["public-read-allowed"][0] is Outcome.SUCCEEDED
    assert expect["private-read-denied"] == (Outcome.DENIED, ReasonCode.FORBIDDEN)
    assert expect["private-read-admin-allowed"][0] is Outcome.SUCCEEDED
    assert expect["traversal-denied"] == (Outcome.DENIED, ReasonCode.FORBIDDEN)
    assert expect["write-outside-home-denied"][0] is Outcome.DENIED
    assert expect["not-in-run-policy"] == (Outcome.DENIED, ReasonCode.NOT_IN_RUN_POLICY)
    assert expect["unpublished-tool"] == (Outcome.DENIED, ReasonCode.TOOL_UNAVAILABLE)
    assert expect["invalid-arguments"] == (Outcome.FAILED, ReasonCode.INVALID_ARGUMENTS)
    assert expect["handler-failure"] == (Outcome.FAILED, ReasonCode.HANDLER_ERROR)
    names = {r.id: r.tool_name for r in m.rows}
    assert " " in names["malformed-name-space"]
    assert len(names["malformed-name-long"]) == 200
    assert not names["malformed-name-unicode"].isascii()
    assert m.rows[0].arguments == {"path": "/public/a.txt"}
    assert m.row("traversal-denied").arguments == {"path": "/public/../private/a.txt"}
    assert m.contexts[m.context_of(m.row("private-read-admin-allowed"))].roles == ("admin",)


def test_shipped_manifest_is_inside_the_package() -> None:
    # so that it ships in the wheel (hatch packages = ["sharedos"])
    assert MANIFEST_PATH.parent.name == "conformance"
    assert MANIFEST_PATH.parent.parent.name == "sharedos"


def test_reason_that_contradicts_the_outcome_is_positioned(conformance_data: Path) -> None:
    path = conformance_data / "bad-reason.toml"
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    msg = str(err.value)
    assert f"{path}:29:1:" in msg  # the line of `expect = ...` in the second row
    assert "rows[1] (id 'bad-row').expect" in msg
    assert "'handler_error' means failed, not denied" in msg
    assert "Traceback" not in msg


def test_unknown_context_is_named(conformance_data: Path) -> None:
    with pytest.raises(ManifestError, match="context 'mallory' is not defined"):
        load_manifest(conformance_data / "unknown-context.toml")


def test_strict_policy_without_local_tools_is_refused(conformance_data: Path) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifest(conformance_data / "strict-without-local.toml")
    assert "policies.p" in str(err.value)
    assert "names no harness_local tools" in str(err.value)
    assert "strict-without-local.toml:9:1:" in str(err.value)  # the [policies.p] table


def test_invalid_toml_has_line_and_column(conformance_data: Path) -> None:
    with pytest.raises(ManifestError, match=r"invalid TOML: .*line 2"):
        load_manifest(conformance_data / "not-toml.toml")


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_manifest(tmp_path / "nope.toml")


def test_duplicate_row_ids_are_refused() -> None:
    text = (
        Path(MANIFEST_PATH).read_text(encoding="utf-8")
        + '\n[[rows]]\nid = "public-read-allowed"\ntitle = "again"\ntool = "files.read"\n'
        'expect = { outcome = "succeeded" }\n'
    )
    with pytest.raises(ManifestError, match="row id 'public-read-allowed' is used twice"):
        parse_manifest(text, "dup.toml")

"""catalogHash: order independence, field participation, committed vectors."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from pydantic import SecretStr

from sharedos.catalog import (
    CATALOG_HASH_FIELDS,
    ToolDefinition,
    ToolRegistry,
    canonical_catalog_json,
    catalog_hash,
)

BASE: list[dict[str, Any]] = [
    {
        "name": "files.read",
        "description": "Read a file.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "max": {"type": "integer"}},
            "required": ["path"],
        },
        "outputSchema": {"type": "object", "properties": {"content": {"type": "string"}}},
        "annotations": {"readOnlyHint": True, "title": "Read"},
        "metadata": {"namespace": "files", "source": "builtin"},
    },
    {
        "name": "github.search",
        "description": "Search code.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "metadata": {"namespace": "github", "source": "brokered:github"},
    },
    {
        "name": "notion.search",
        "description": "Search pages.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "metadata": {"namespace": "notion", "source": "brokered:notion"},
    },
]


def tools(specs: list[dict[str, Any]]) -> list[ToolDefinition]:
    return [ToolDefinition.model_validate(s) for s in specs]


def reorder_keys(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: reorder_keys(v, rng) for k, v in items}
    if isinstance(value, list):
        return [reorder_keys(v, rng) for v in value]
    return value


def test_hash_is_sha256_of_rfc8785_of_sorted_published_tools() -> None:
    ts = tools(BASE)
    expected = rfc8785.dumps(sorted((t.published.wire() for t in ts), key=lambda w: w["name"]))
    assert canonical_catalog_json(ts) == expected
    assert catalog_hash(ts) == hashlib.sha256(expected).hexdigest()


@pytest.mark.parametrize("seed", range(5))
def test_independent_of_key_order_and_registration_order(seed: int) -> None:
    rng = random.Random(seed)
    reference = catalog_hash(tools(BASE))
    shuffled = [reorder_keys(copy.deepcopy(s), rng) for s in BASE]
    rng.shuffle(shuffled)
    registry = ToolRegistry()
    for spec in shuffled:
        registry.register(ToolDefinition.model_validate(spec))
    assert catalog_hash(registry.tools()) == reference
    assert catalog_hash(reversed(tools(BASE))) == reference


MUTATIONS = {
    "name": lambda s: s.update(name="files.read2"),
    "description": lambda s: s.update(description="Read a file!"),
    "inputSchema": lambda s: s["inputSchema"]["properties"]["path"].update(minLength=1),
    "outputSchema": lambda s: s["outputSchema"]["properties"].update(size={"type": "integer"}),
    "annotations": lambda s: s["annotations"].update(readOnlyHint=False),
    "metadata": lambda s: s["metadata"].update(source="other"),
}


def test_mutations_cover_every_participating_field() -> None:
    assert set(MUTATIONS) == set(CATALOG_HASH_FIELDS)


@pytest.mark.parametrize("field", sorted(MUTATIONS))
def test_changes_when_any_participating_field_changes(field: str) -> None:
    reference = catalog_hash(tools(BASE))
    specs = copy.deepcopy(BASE)
    MUTATIONS[field](specs[0])
    assert catalog_hash(tools(specs)) != reference


def test_adding_or_removing_an_optional_field_changes_it() -> None:
    reference = catalog_hash(tools(BASE))
    specs = copy.deepcopy(BASE)
    del specs[0]["annotations"]
    assert catalog_hash(tools(specs)) != reference
    specs = copy.deepcopy(BASE)
    del specs[0]["outputSchema"]
    assert catalog_hash(tools(specs)) != reference


def test_unchanged_by_the_authority_side_and_by_non_participating_things() -> None:
    reference = catalog_hash(tools(BASE))
    specs = copy.deepcopy(BASE)
    specs[0].update(
        requirement="files.read",
        grants=("g",),
        issuing_authority="idp",
        namespace_settings={"x": 1},
        credentials={"k": SecretStr("v")},
        handler=lambda a, h: None,
        secret_arguments=frozenset({"path"}),
    )
    assert catalog_hash(tools(specs)) == reference
    # Aliases, execution ids, runtime names and transports are not tool fields at
    # all: the definition refuses them, so they cannot take part.
    for key in ("executionId", "alias", "harnessAlias", "runtimeName", "transport"):
        spec = {**copy.deepcopy(BASE[1]), key: "x"}
        with pytest.raises(ValueError, match=key):
            ToolDefinition.model_validate(spec)


def test_namespaced_providers_are_two_tools() -> None:
    registry = ToolRegistry(tools(BASE))
    assert {"github.search", "notion.search"} <= {t.name for t in registry.tools()}
    hashes = {catalog_hash([t]) for t in registry.tools()}
    assert len(hashes) == 3


def test_a_duplicate_name_cannot_be_hashed() -> None:
    t = tools(BASE)[0]
    with pytest.raises(ValueError, match="twice"):
        catalog_hash([t, t])


def test_committed_vectors(test_data: Path) -> None:
    """Another implementation checks itself against this file; so do we."""
    doc = json.loads((test_data / "catalog" / "hash_vectors.json").read_text("utf-8"))
    assert len(doc["vectors"]) >= 4
    for vec in doc["vectors"]:
        canonical = vec["canonical_json"].encode("utf-8")
        assert hashlib.sha256(canonical).hexdigest() == vec["catalogHash"], vec["name"]
        ts = tools(vec["tools"])
        assert canonical_catalog_json(ts) == canonical, vec["name"]
        assert catalog_hash(ts) == vec["catalogHash"], vec["name"]
        # independent of our projection: JCS of the sorted wire input as written
        assert rfc8785.dumps(sorted(vec["tools"], key=lambda t: t["name"])) == canonical

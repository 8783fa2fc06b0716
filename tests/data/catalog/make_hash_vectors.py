"""Regenerate hash_vectors.json (only when CATALOG_HASH_FIELDS or the projection changes on purpose).

Run: .venv/bin/python tests/data/catalog/make_hash_vectors.py
The committed file is what another implementation checks itself against; a
change to it is a change to every catalogHash, so review the diff.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sharedos.catalog import ToolDefinition, canonical_catalog_json, catalog_hash

HERE = Path(__file__).resolve().parent

VECTORS = [
    {"name": "empty catalogue", "tools": []},
    {
        "name": "one tool, minimal",
        "tools": [
            {
                "name": "files.read",
                "description": "Read a text file.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
                "metadata": {"namespace": "files", "source": "sharedos.builtin"},
            }
        ],
    },
    {
        "name": "namespaced providers, unsorted input, annotations and outputSchema",
        "tools": [
            {
                "name": "notion.search",
                "description": "Search Notion pages.",
                "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}},
                "outputSchema": {"type": "object", "properties": {"hits": {"type": "array"}}},
                "annotations": {"readOnlyHint": True, "title": "Notion search"},
                "metadata": {"namespace": "notion", "source": "brokered:notion"},
            },
            {
                "name": "github.search",
                "description": "Search GitHub code.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "q": {"type": "string"},
                        "per_page": {"type": "integer", "maximum": 100},
                    },
                },
                "annotations": {"openWorldHint": True, "readOnlyHint": True},
                "metadata": {"namespace": "github", "source": "brokered:github"},
            },
        ],
    },
    {
        "name": "JCS corner cases: non-ASCII text, key order by UTF-16 code units, numbers",
        "tools": [
            {
                "name": "i18n.echo",
                "description": 'Écho — répète le texte 🙂 \u2028 tab\tquote" backslash\\',
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "\u20ac": {"type": "number", "minimum": 1e21, "maximum": 1e-7},
                        "\U0001f600": {"type": "number", "multipleOf": 0.1},
                        "z": {"type": "integer", "default": -0.0},
                        "a": {"type": "integer", "default": 9007199254740991},
                    },
                },
                "metadata": {"namespace": "i18n", "source": "test"},
            },
            {
                "name": "files_read",
                "description": "A different tool from files.read (its alias collides with it).",
                "inputSchema": {"type": "object"},
                "metadata": {"namespace": "files_read", "source": "test"},
            },
        ],
    },
]


def main() -> None:
    out = []
    for vec in VECTORS:
        tools = [ToolDefinition.model_validate(t) for t in vec["tools"]]
        canonical = canonical_catalog_json(tools)
        digest = catalog_hash(tools)
        assert digest == hashlib.sha256(canonical).hexdigest()
        out.append(
            {
                "name": vec["name"],
                "tools": vec["tools"],
                "canonical_json": canonical.decode("utf-8"),
                "catalogHash": digest,
            }
        )
    doc = {
        "description": (
            "catalogHash test vectors: catalogHash = SHA-256 hex of RFC 8785 canonical JSON of "
            "the published tools sorted by name (fields: name, description, inputSchema, "
            "outputSchema, annotations, metadata; absent optional fields omitted). "
            "canonical_json is the exact UTF-8 text hashed."
        ),
        "vectors": out,
    }
    (HERE / "hash_vectors.json").write_text(
        json.dumps(doc, indent=2, ensure_ascii=False) + "\n", "utf-8"
    )


if __name__ == "__main__":
    main()

"""The tool catalogue: definitions, the published projection, catalogHash, registry and providers."""

from sharedos.catalog.collisions import (
    NameCollision,
    ToolNameCollisionError,
    check_name_collisions,
    find_name_collisions,
)
from sharedos.catalog.definition import (
    CATALOG_HASH_FIELDS,
    PublishedToolDefinition,
    ToolAnnotations,
    ToolDefinition,
    ToolDefinitionError,
    ToolMetadata,
    default_namespace,
    normalize_object_schema,
)
from sharedos.catalog.hashing import canonical_catalog_json, catalog_hash
from sharedos.catalog.registry import (
    ContextToolProvider,
    RegistryView,
    ToolRegistrationError,
    ToolRegistry,
)

__all__ = [
    "CATALOG_HASH_FIELDS",
    "ContextToolProvider",
    "NameCollision",
    "PublishedToolDefinition",
    "RegistryView",
    "ToolAnnotations",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolMetadata",
    "ToolNameCollisionError",
    "ToolRegistrationError",
    "ToolRegistry",
    "canonical_catalog_json",
    "catalog_hash",
    "check_name_collisions",
    "default_namespace",
    "find_name_collisions",
    "normalize_object_schema",
]

"""The root of every exception SharedOS raises: ``SharedOSError``.

Catch ``SharedOSError`` to handle anything SharedOS itself raises and nothing
else. Each class also keeps the built-in base it had (``ValueError`` for bad
input, ``RuntimeError`` for a state the caller cannot fix, ``ImportError`` for a
vendor version), so older ``except ValueError`` handlers keep working. The
classes live beside the code that raises them; the tree (checked by
``tests/test_errors.py``, so it cannot go stale)::

    SharedOSError
    ├── InvalidToolName(ValueError)               sharedos.names
    ├── PortableNameCollision(ValueError)         sharedos.names
    ├── VendorVersionError(ImportError)           sharedos.compat
    │   └── LarkVersionError                      sharedos.compat.lark
    ├── SandboxError                              sharedos.pathwalk
    ├── UnreadableFile(OSError)                   sharedos.textfile
    ├── PolicyLanguageError                       sharedos.errors
    │   ├── PolicyError                           sharedos.policy.diagnostics
    │   ├── SyntaxProblem                         sharedos.policy.literals
    │   ├── FormatError                           sharedos.policy.formatter
    │   ├── EvalError                             sharedos.policy.functions
    │   ├── Unresolvable                          sharedos.policy.resolvers
    │   ├── UnresolvablePath(ValueError)          sharedos.policy.paths
    │   ├── PatternSyntaxError(ValueError)        sharedos.policy.patterns
    │   ├── SchemaError(ValueError)               sharedos.policy.schemas
    │   ├── SigningKeyError(ValueError)           sharedos.policy.signing
    │   ├── MalformedProgram(ValueError)          sharedos.policy.ir
    │   ├── NonFiniteNumber(ValueError)           sharedos.policy.jsonvalues
    │   ├── ClockError(ValueError)                sharedos.policy.clock
    │   └── BundleError(ValueError)               sharedos.policy.bundle
    ├── BundleDistributionError                   sharedos.errors
    │   ├── BundleRejected                        sharedos.bundles.verify
    │   ├── SourceError                           sharedos.bundles.source
    │   └── StateError(OSError)                   sharedos.bundles.state
    ├── EvidenceError                             sharedos.errors
    │   ├── EvidenceStoreError(RuntimeError)      sharedos.evidence.store
    │   │   ├── ApprovalTaken                     sharedos.evidence.approvals
    │   │   └── TurnNotFound                      sharedos.evidence.verify
    │   ├── ApprovalError(ValueError)             sharedos.evidence.approvals
    │   │   └── ApprovalPending                   sharedos.evidence.approvals
    │   ├── StaleHead                             sharedos.evidence.appender
    │   ├── CommitUnknown                         sharedos.evidence.appender
    │   ├── CheckpointTaken                       sharedos.evidence.checkpoint
    │   ├── NotReplayable                         sharedos.evidence.replay
    │   └── EvidenceUnavailable                   sharedos.kernel.recorder
    ├── CatalogError                              sharedos.errors
    │   ├── ToolDefinitionError(ValueError)       sharedos.catalog.definition
    │   ├── ToolRegistrationError(ValueError)     sharedos.catalog.registry
    │   ├── ToolNameCollisionError(ValueError)    sharedos.catalog.collisions
    │   └── ValidationTooCostly(RuntimeError)     sharedos.catalog.schemaregex
    ├── ConfinementError                          sharedos.errors
    │   ├── ConfinementUnavailable(RuntimeError)  sharedos.confine.detect
    │   │   └── SandboxSetupFailed                sharedos.confine.ports
    │   └── ManagedRootVisible(ValueError)        sharedos.confine.view
    ├── UpstreamError                             sharedos.errors
    │   ├── UpstreamConfigProblems(ValueError)    sharedos.upstream.config
    │   ├── CredentialError(ValueError)           sharedos.upstream.secrets
    │   ├── PinError(ValueError)                  sharedos.upstream.pins
    │   ├── TokenStoreError(ValueError)           sharedos.upstream.tokenstore
    │   ├── OAuthError                            sharedos.upstream.oauth
    │   ├── OversizedAnswer(HTTPError)            sharedos.upstream.oauth
    │   ├── InsecureEndpoint(HTTPError)           sharedos.upstream.oauth
    │   └── UpstreamFailure                       sharedos.upstream.connection
    ├── BridgeError                               sharedos.errors
    │   ├── BridgeStartError(RuntimeError)        sharedos.compat.uvicorn
    │   ├── TurnClosedError(RuntimeError)         sharedos.bridge.stdio
    │   ├── TurnFileError(ValueError)             sharedos.bridge.turnfile
    │   ├── RelayError(RuntimeError)              sharedos.bridge.relay_client
    │   ├── RelayProtocolError(ValueError)        sharedos.bridge.relay_wire
    │   └── InvalidCursor(ValueError)             sharedos.bridge.pages
    ├── HarnessError                              sharedos.errors
    │   ├── HostConfigError(ValueError)           sharedos.harness.hostconfig
    │   │   └── MissingHostVariable               sharedos.harness.hostconfig
    │   ├── DriverError(RuntimeError)             sharedos.harness.driver
    │   ├── HarnessUnavailable(RuntimeError)      sharedos.harness.adapters.base
    │   │   └── ModelEndpointRefused              sharedos.harness.endpoints
    │   └── ShapeError(ValueError)                sharedos.harness.shapes.neutral
    └── ConformanceError                          sharedos.errors
        ├── ManifestError(ValueError)             sharedos.conformance.manifest
        ├── ColumnUnavailableError(RuntimeError)  sharedos.conformance.runner
        └── FixtureError(RuntimeError)            sharedos.conformance.upstreams

The area classes (``PolicyLanguageError``, ``EvidenceError``, ``UpstreamError``,
``BridgeError``, ``HarnessError``, …) let a caller catch by area, httpx-style
(``except UpstreamError``), and are defined here, in the bottom layer, so any
module may raise under them; each class's built-in base (in brackets) is kept.
"""

from __future__ import annotations

__all__ = [
    "BridgeError",
    "BundleDistributionError",
    "CatalogError",
    "ConfinementError",
    "ConformanceError",
    "EvidenceError",
    "HarnessError",
    "PolicyLanguageError",
    "SharedOSError",
    "UpstreamError",
]


class SharedOSError(Exception):
    """Base class of every exception SharedOS defines."""


class PolicyLanguageError(SharedOSError):
    """The policy language and its compiled bundles (parse, check, compile, evaluate, sign)."""


class BundleDistributionError(SharedOSError):
    """Distributing policy bundles (sources, verification, the bundle state directory)."""


class EvidenceError(SharedOSError):
    """The evidence record: its stores, chain, checkpoints, and a record that cannot be written."""


class CatalogError(SharedOSError):
    """Tool definitions, their registration and their names."""


class ConfinementError(SharedOSError):
    """OS confinement (sandboxes for harnesses and upstreams)."""


class UpstreamError(SharedOSError):
    """Brokered upstream MCP servers (configuration, credentials, pins, connections)."""


class BridgeError(SharedOSError):
    """The MCP turn bridge (HTTP and stdio, the relay, the turn file)."""


class HarnessError(SharedOSError):
    """Harnesses (host configuration, the driver, adapters, wire shapes)."""


class ConformanceError(SharedOSError):
    """The conformance suite (manifest, columns, fixtures)."""

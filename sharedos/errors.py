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
    ├── BridgeStartError(RuntimeError)            sharedos.compat.uvicorn
    ├── policy: the language and its bundles
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
    ├── bundles: distribution
    │   ├── BundleRejected                        sharedos.bundles.verify
    │   ├── SourceError                           sharedos.bundles.source
    │   └── StateError(OSError)                   sharedos.bundles.state
    ├── evidence
    │   ├── EvidenceStoreError(RuntimeError)      sharedos.evidence.store
    │   ├── StaleHead                             sharedos.evidence.appender
    │   ├── CommitUnknown                         sharedos.evidence.appender
    │   └── CheckpointTaken                       sharedos.evidence.checkpoint
    ├── catalog
    │   ├── ToolDefinitionError(ValueError)       sharedos.catalog.definition
    │   ├── ToolRegistrationError(ValueError)     sharedos.catalog.registry
    │   └── ToolNameCollisionError(ValueError)    sharedos.catalog.collisions
    ├── confine: OS sandboxes
    │   ├── ConfinementUnavailable(RuntimeError)  sharedos.confine.detect
    │   │   └── SandboxSetupFailed                sharedos.confine.ports
    │   └── ManagedRootVisible(ValueError)        sharedos.confine.view
    ├── EvidenceUnavailable                       sharedos.kernel.recorder
    ├── SandboxError                              sharedos.pathwalk
    ├── upstream: brokered MCP servers
    │   ├── UpstreamConfigProblems(ValueError)    sharedos.upstream.config
    │   ├── CredentialError(ValueError)           sharedos.upstream.secrets
    │   ├── PinError(ValueError)                  sharedos.upstream.pins
    │   └── UpstreamFailure                       sharedos.upstream.connection
    ├── bridge
    │   ├── TurnClosedError(RuntimeError)         sharedos.bridge.stdio
    │   ├── TurnFileError(ValueError)             sharedos.bridge.turnfile
    │   ├── RelayError(RuntimeError)              sharedos.bridge.relay_client
    │   ├── RelayProtocolError(ValueError)        sharedos.bridge.relay_wire
    │   └── InvalidCursor(ValueError)             sharedos.bridge.pages
    ├── harness
    │   ├── HostConfigError(ValueError)           sharedos.harness.hostconfig
    │   │   └── MissingHostVariable               sharedos.harness.hostconfig
    │   ├── DriverError(RuntimeError)             sharedos.harness.driver
    │   ├── HarnessUnavailable(RuntimeError)      sharedos.harness.adapters.base
    │   │   └── ModelEndpointRefused              sharedos.harness.endpoints
    │   └── ShapeError(ValueError)                sharedos.harness.shapes.neutral
    └── conformance
        ├── ManifestError(ValueError)             sharedos.conformance.manifest
        ├── ColumnUnavailableError(RuntimeError)  sharedos.conformance.runner
        └── FixtureError(RuntimeError)            sharedos.conformance.upstreams

(The grouping lines — "policy", "evidence", … — are headings, not classes.)
"""

from __future__ import annotations

__all__ = ["SharedOSError"]


class SharedOSError(Exception):
    """Base class of every exception SharedOS defines."""

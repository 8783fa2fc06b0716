"""SystemIdentity: what produced a column of attempts, stamped on every record and report.

Shared vocabulary (ADR 0014, "SystemIdentity"): the harness and its real
version, the column kind, the declared model, how the harness reaches MCP, the
catalogHash it was served, the policy bundle hash and what confined the
harness (``Confinement``: mechanism, version, view digest, or plainly that
nothing did). The harness runtime
builds one per turn, the conformance columns carry one per column, the kernel
stores its wire form on every evidence record it writes for them.

The declared model is a string the host declares and SharedOS records; nothing
ever selects a model from it (ADR 0014: "SharedOS records one string per
column — the declared model — and selects nothing").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

import sharedos


class ColumnKind(StrEnum):
    """Which kind of column produced an attempt."""

    SCRIPTED = "scripted"
    LIVE = "live"
    MCP = "mcp"
    #: a programmatic MCP client (TypeScript SDK, MCP Inspector) making each row's call
    CLIENT = "client"


class McpSupport(StrEnum):
    """How the harness reaches an MCP server: its own client, a host-installed extension, or not at all."""

    NATIVE = "native"
    EXTENSION = "extension"
    NONE = "none"


class ConfinementState(StrEnum):
    """Whether the harness ran in an OS sandbox (docs/confinement.md)."""

    #: in a sandbox: the managed roots absent, the network limited to the bridge and model
    CONFINED = "confined"
    #: a strict run the operator started with ``--unconfined``: NOT confined
    UNCONFINED = "unconfined"
    #: an open run policy: not confined, by design
    OPEN = "open"


class Confinement(BaseModel):
    """What confined the harness of a turn (and, by id, each stdio upstream it could reach).

    ``mechanism``/``version`` name the sandbox (``bubblewrap`` 0.8.0);
    ``view_digest`` is the SHA-256 of what was visible and writable
    (``sharedos.confine.view``); ``network`` is ``loopback`` (only the bridge
    and the model endpoint), ``host`` or ``none``. ``upstreams`` maps an
    upstream id to ``confined <digest>`` or ``not confined: <why>``.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    state: ConfinementState
    mechanism: str | None = None
    version: str | None = None
    view_digest: str | None = None
    network: str | None = None
    note: str | None = None
    upstreams: dict[str, str] | None = None

    @property
    def confined(self) -> bool:
        """True when the harness ran in a sandbox."""
        return self.state is ConfinementState.CONFINED

    def label(self) -> str:
        """One plain line for reports: what confined the harness, or that nothing did."""
        if self.state is ConfinementState.CONFINED:
            digest = (self.view_digest or "")[:19]
            return (
                f"confined by {self.mechanism} {self.version} (view {digest}, "
                f"network {self.network})" + (f"; {self.note}" if self.note else "")
            )
        if self.state is ConfinementState.UNCONFINED:
            return "NOT CONFINED: strict run started with --unconfined"
        return "not confined (open run policy)"


class SystemIdentity(BaseModel):
    """Who/what produced a column: harness + version, column kind, declared model,
    MCP support, the catalogHash served and the policy bundle hash.

    Wire spelling is camelCase (``catalogHash``, ``mcpSupport``); Python names are snake_case.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    harness: str
    harness_version: str
    column: ColumnKind
    declared_model: str = Field(
        description="Recorded as declared by the host; never used to select anything."
    )
    mcp_support: McpSupport = McpSupport.NONE
    mcp_extension: str | None = None
    catalog_hash: str | None = None
    policy_bundle_hash: str | None = None
    #: the distributed bundle's revision (``sharedos.bundles``), when the policy came from one
    policy_bundle_revision: str | None = None
    #: True when that bundle was put in force from the copy the host kept of the last
    #: release it enforced (``sharedos.bundles.manager``: a start whose source failed);
    #: left out of the record otherwise
    policy_bundle_kept: bool | None = None
    #: the harness's OS sandbox (None: no harness process ran, e.g. a scripted column)
    confinement: Confinement | None = None
    sharedos_version: str = sharedos.__version__

    def as_record(self) -> dict[str, Any]:
        """The wire form (camelCase keys) passed to ``RuntimeHost.invoke_tool(identity=...)``."""
        record = self.model_dump(mode="json", by_alias=True)
        if record.get("policyBundleKept") is None:
            del record["policyBundleKept"]  # records of a bundle fetched are as they were
        return record

    def label(self) -> str:
        """A short human label, e.g. ``scripted: responses 0.1.0``."""
        ext = f" via {self.mcp_extension}" if self.mcp_extension else ""
        confined = f", {self.confinement.label()}" if self.confinement is not None else ""
        return f"{self.column.value}: {self.harness} {self.harness_version}{ext}{confined}"


def catalog_hash_mismatch(
    identities: dict[str, SystemIdentity | None],
) -> dict[str, str | None] | None:
    """Return column id -> catalogHash when the columns were not given the same catalogue, else None.

    Columns without a catalogue (``catalog_hash is None``, e.g. a live column or one
    that could not run) do not take part: they had no catalogue to differ on.
    """
    hashes = {
        col: ident.catalog_hash
        for col, ident in identities.items()
        if ident is not None and ident.catalog_hash is not None
    }
    if len(set(hashes.values())) > 1:
        return dict(hashes)
    return None

"""HarnessDriver: SharedOS in the model provider's seat, owning the turn loop (scripted column).

The driver plays the harness: it offers the turn's catalogue as the vendor's
tool definitions, sends each request to a model endpoint as wire JSON, decodes
the tool calls of the response, runs every call through the real
``RuntimeHost.invoke_tool`` (so the kernel re-authorizes it and the evidence
store records it), and sends the results back in the vendor's shape until the
model stops calling tools. Everything crosses as serialised JSON text, both
ways, so a translation that loses or renames anything shows up.

``ScriptedModel`` is the model endpoint of the scripted column: it reads the
tools a request offers, issues a planned list of calls in the vendor's shape
(a tool the request did not offer is spelled as a model guessing it would be),
and records the results exactly as it decoded them from the wire.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sharedos.errors import HarnessError
from sharedos.harness.shapes.neutral import Call, Result, ToolSpec, Turn, WireShape, dumps
from sharedos.kernel import AccessContext, RuntimeHost, ToolCall, ToolResult, TurnCatalog
from sharedos.toolpolicy import ToolPolicy


class ModelEndpoint(Protocol):
    """A model provider as the driver sees it: wire JSON text in, wire JSON text out."""

    def respond(self, request_text: str) -> str:
        """Answer one request (the vendor's request body) with one response body."""
        ...


@dataclass(frozen=True)
class PlannedCall:
    """One call the scripted model will make: raw tool string, arguments, the call id it mints."""

    key: str
    call_id: str
    tool: str
    arguments: dict[str, Any]


@dataclass
class ScriptedModel:
    """A model endpoint that issues ``plan`` in batches of ``batch`` calls, then ends the turn."""

    shape: WireShape
    plan: Sequence[PlannedCall]
    model_name: str
    batch: int = 3
    #: results exactly as decoded from the wire, by call id
    seen: dict[str, Result] = field(default_factory=dict)
    #: canonical names of the tools the requests offered
    offered: set[str] = field(default_factory=set)
    #: call id -> the tool name as spelled on the wire
    wire_names: dict[str, str] = field(default_factory=dict)
    _cursor: int = 0
    _seq: int = 0

    def respond(self, request_text: str) -> str:
        """Read the request (offered tools, results of earlier calls); emit the next calls."""
        request = json.loads(request_text)
        tools_wire, history = self.shape.request_from_wire(request)
        specs: list[ToolSpec] = self.shape.tools_from_wire(tools_wire)
        self.offered.update(t.name for t in specs)
        for result in self.shape.results_from_wire(history):
            self.seen[result.call_id] = result
        self._seq += 1
        chunk = self.plan[self._cursor : self._cursor + self.batch]
        self._cursor += len(chunk)
        if not chunk:
            turn = Turn((), f"Done: issued {len(self.plan)} planned call(s).")
        else:
            calls = []
            for planned in chunk:
                self.wire_names[planned.call_id] = self.shape.wire_tool_name(planned.tool)
                calls.append(Call(planned.call_id, planned.tool, dict(planned.arguments)))
            turn = Turn(tuple(calls))
        return dumps(self.shape.turn_wire(turn, model=self.model_name, seq=self._seq))


@dataclass(frozen=True)
class DriverExchange:
    """One executed call: what the kernel returned and what was sent back on the wire."""

    call: Call
    result: ToolResult
    sent: Result


@dataclass
class DriverTurn:
    """What one driven turn produced."""

    exchanges: list[DriverExchange] = field(default_factory=list)
    steps: int = 0
    final_text: str = ""
    transcript: list[dict[str, Any]] = field(default_factory=list)


class DriverError(HarnessError, RuntimeError):
    """The turn loop could not complete (step budget exhausted, bad wire JSON)."""


class HarnessDriver:
    """Drives one vendor shape's turn loop against the real kernel."""

    def __init__(
        self,
        shape: WireShape,
        host: RuntimeHost,
        *,
        declared_model: str,
        identity: Mapping[str, Any] | None = None,
        max_steps: int = 64,
    ) -> None:
        self.shape = shape
        self.host = host
        self.declared_model = declared_model
        self.identity = dict(identity) if identity else None
        self.max_steps = max_steps
        #: the exchanges of the current/last turn (kept when a turn breaks off)
        self.last_exchanges: list[DriverExchange] = []

    async def run_turn(
        self,
        model: ModelEndpoint,
        context: AccessContext,
        tool_policy: ToolPolicy,
        catalog: TurnCatalog,
        prompt: str,
    ) -> DriverTurn:
        """Run one turn: offer ``catalog``, execute every call through the kernel, until the model stops.

        Each call reaches ``RuntimeHost.invoke_tool`` with the raw tool string the
        wire carried (decoded from the vendor's escape when it is one), the turn's
        catalogue, the column identity and the wire name as a diagnostic.
        """
        shape = self.shape
        specs = [ToolSpec(t.name, t.description, dict(t.input_schema)) for t in catalog.tools]
        tools_wire = shape.tools_wire(specs)
        history = shape.opening(prompt)
        turn = DriverTurn()
        self.last_exchanges = turn.exchanges
        for _ in range(self.max_steps):
            request = shape.request_wire(
                model=self.declared_model, tools=tools_wire, history=history
            )
            response = json.loads(model.respond(dumps(request)))
            turn.steps += 1
            decoded = shape.turn_from_wire(response)
            history = history + shape.history_from_response(response)
            if not decoded.calls:
                turn.final_text = decoded.text
                turn.transcript = history
                return turn
            results: list[Result] = []
            names: dict[str, str] = {}
            for call in decoded.calls:
                tool_result = await self.host.invoke_tool(
                    ToolCall(
                        call_id=call.call_id,
                        tool=call.name,
                        arguments=call.arguments,
                        turn_id=context.turn_id,
                    ),
                    context,
                    tool_policy,
                    catalog=catalog,
                    diagnostics={
                        "column": "scripted",
                        "shape": shape.name,
                        "wireName": shape.wire_tool_name(call.name),
                    },
                    identity=self.identity,
                )
                sent = Result(
                    call.call_id,
                    tuple(tool_result.content),
                    tool_result.is_error if shape.carries_error_flag else None,
                )
                results.append(sent)
                names[call.call_id] = call.name
                turn.exchanges.append(DriverExchange(call, tool_result, sent))
            history = history + shape.results_wire(results, names)
        raise DriverError(
            f"{shape.label}: the model was still calling tools after {self.max_steps} steps"
        )
